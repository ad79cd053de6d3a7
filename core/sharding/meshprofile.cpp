#include "sharding/meshprofile.h"
#include "sharding/collective.h"
#include "sharding/shardingspec.h"

#include "io/files.h"
#include "io/jsonmodel.h"
#include "ir/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>

namespace tapestry::sharding {

namespace {

using nlohmann::json;

// Reads typed fields of a JSON object, naming the JSON path on any problem.
class Reader {
public:
    Reader(const std::string &input) : m_input(input) {}

    const json &field(const json &obj, const std::string &path, const std::string &key) const
    {
        if (!obj.is_object())
            fail(path, "expected an object");
        auto it = obj.find(key);
        if (it == obj.end())
            fail(path + "." + key, "missing");
        return *it;
    }
    std::string string(const json &obj, const std::string &path, const std::string &key) const
    {
        const json &v = field(obj, path, key);
        if (!v.is_string())
            fail(path + "." + key, "expected a string");
        return v.get<std::string>();
    }
    double positive(const json &obj, const std::string &path, const std::string &key) const
    {
        const json &v = field(obj, path, key);
        if (!v.is_number() || v.get<double>() <= 0)
            fail(path + "." + key, "expected a positive number");
        return v.get<double>();
    }
    [[noreturn]] void fail(const std::string &path, const std::string &problem) const
    {
        throw TapestryError(Error{m_input, path, problem});
    }

private:
    std::string m_input;
};

LinkProfile readLink(const Reader &r, const json &obj, const std::string &path)
{
    LinkProfile link;
    link.name = r.string(obj, path, "name");
    link.bandwidth = r.positive(obj, path, "bandwidth_bytes_per_s");
    link.latency = r.positive(obj, path, "latency_s");
    if (obj.contains("by_kind")) {
        const json &kinds = obj.at("by_kind");
        if (!kinds.is_object())
            r.fail(path + ".by_kind", "expected an object of collective kind: {bandwidth_bytes_per_s, latency_s}");
        for (const auto &[kind, fit] : kinds.items()) {
            if (!collectiveKindFromString(kind))
                r.fail(path + ".by_kind." + kind, "unknown collective kind");
            link.byKind[kind] = {r.positive(fit, path + ".by_kind." + kind, "bandwidth_bytes_per_s"),
                                 r.positive(fit, path + ".by_kind." + kind, "latency_s")};
        }
    }
    return link;
}

} // namespace

Mesh MeshProfile::mesh(const std::vector<int> &sizes, const std::vector<std::string> &names) const
{
    if (sizes.empty())
        throw TapestryError(Error{"--mesh", {}, "a mesh needs at least one axis"});
    if (sizes.size() > kMaxMeshAxes)
        throw TapestryError(Error{"--mesh", {}, "a mesh has at most " + std::to_string(kMaxMeshAxes) + " axes, got " +
                                                    std::to_string(sizes.size())});
    if (auto problem = meshSizesProblem(sizes))
        throw TapestryError(Error{"--mesh", {}, *problem});
    if (names.size() != sizes.size())
        throw TapestryError(Error{"--axes", {}, std::to_string(names.size()) + " axis name(s) for a mesh of " +
                                                    std::to_string(sizes.size()) + " axes"});
    std::set<std::string> seen;
    for (const auto &n : names)
        if (n.empty() || !seen.insert(n).second)
            throw TapestryError(Error{"--axes", {}, "axis names must be distinct and non-empty"});
    Mesh m;
    m.device = device;
    m.profile = name;
    long long inner = 1;
    std::vector<MeshAxis> reversed;
    for (std::size_t i = sizes.size(); i-- > 0;) {
        inner *= sizes[i];
        reversed.push_back({names[i], sizes[i], inner <= intraNodeDevices ? intraNode : interNode});
    }
    m.axes.assign(reversed.rbegin(), reversed.rend());
    return m;
}

MeshProfile readMeshProfileJson(const std::string &text, const std::string &input)
{
    const Reader r(input);
    json doc;
    try {
        doc = json::parse(text);
    } catch (const json::exception &e) {  // a syntax error, or a number past a double's range (1e999)
        r.fail("", std::string("not valid JSON: ") + e.what());
    }
    if (!doc.is_object())
        r.fail("$", "expected an object");
    if (r.string(doc, "$", "format") != "tapestry.mesh-profile")
        r.fail("$.format", "expected \"tapestry.mesh-profile\"");
    const json &version = r.field(doc, "$", "version");
    // Compared as 64 bits: as an int, 4294967297 would pass for 1.
    if (!version.is_number_integer() || version.get<std::int64_t>() != 1)
        r.fail("$.version", "unsupported version (this build reads version 1)");
    MeshProfile p;
    p.name = r.string(doc, "$", "name");
    p.description = r.string(doc, "$", "description");
    const json &intra = r.field(doc, "$", "intra_node_devices");
    if (!intra.is_number_integer() || intra.get<std::int64_t>() <= 0 || intra.get<std::int64_t>() > kMaxMeshDevices)
        r.fail("$.intra_node_devices", "expected a positive integer of at most " + std::to_string(kMaxMeshDevices));
    p.intraNodeDevices = intra.get<int>();
    const json &device = r.field(doc, "$", "device");
    p.device.name = r.string(device, "$.device", "name");
    const json &memory = r.field(device, "$.device", "memory_bytes");
    if (!memory.is_number_integer() || memory.get<long long>() <= 0)
        r.fail("$.device.memory_bytes", "expected a positive integer");
    p.device.memoryBytes = memory.get<std::int64_t>();
    p.device.achievableFraction = r.positive(device, "$.device", "achievable_fraction");
    if (p.device.achievableFraction > 1)
        r.fail("$.device.achievable_fraction", "expected a fraction in (0, 1]");
    const json &peaks = r.field(device, "$.device", "peak_flops");
    if (!peaks.is_object() || peaks.empty())
        r.fail("$.device.peak_flops", "expected an object of dtype: FLOP/s");
    for (const auto &[dtype, value] : peaks.items()) {
        if (!ir::dtypeFromString(dtype))
            r.fail("$.device.peak_flops." + dtype, "unknown dtype");
        p.device.peakFlops[dtype] = r.positive(peaks, "$.device.peak_flops", dtype);
    }
    if (!p.device.peakFlops.count("float32"))
        r.fail("$.device.peak_flops", "needs a float32 entry (used for dtypes without one)");
    // The roofline's other two figures, optional (profiles written before
    // them charge ops by FLOPs alone).
    if (device.contains("memory_bandwidth_bytes_per_s"))
        p.device.memoryBandwidth = r.positive(device, "$.device", "memory_bandwidth_bytes_per_s");
    if (device.contains("kernel_launch_s")) {
        const json &launch = device.at("kernel_launch_s");
        if (!launch.is_number() || launch.get<double>() < 0 || launch.get<double>() > 1)
            r.fail("$.device.kernel_launch_s", "expected seconds from 0 to 1");
        p.device.kernelLaunch = launch.get<double>();
    }
    if (device.contains("kernel_bandwidth_bytes_per_s")) {
        const json &families = device.at("kernel_bandwidth_bytes_per_s");
        if (!families.is_object())
            r.fail("$.device.kernel_bandwidth_bytes_per_s", "expected an object of kernel family: bytes/s");
        for (const auto &[family, value] : families.items()) {
            if (!knownKernelFamily(family))
                r.fail("$.device.kernel_bandwidth_bytes_per_s." + family, "unknown kernel family");
            p.device.kernelBandwidth[family] = r.positive(families, "$.device.kernel_bandwidth_bytes_per_s", family);
        }
    }
    if (device.contains("gemm_efficiency")) {
        const json &table = device.at("gemm_efficiency");
        if (!table.is_array())
            r.fail("$.device.gemm_efficiency", "expected an array of [FLOPs of one GEMM call, fraction of peak]");
        for (const json &point : table) {
            if (!point.is_array() || point.size() != 2 || !point[0].is_number() || !point[1].is_number())
                r.fail("$.device.gemm_efficiency", "expected an array of [FLOPs of one GEMM call, fraction of peak]");
            p.device.gemmEfficiency.push_back({point[0].get<double>(), point[1].get<double>()});
        }
        if (auto problem = gemmEfficiencyProblem(p.device.gemmEfficiency))
            r.fail("$.device.gemm_efficiency", *problem);
    }
    const json &links = r.field(doc, "$", "links");
    p.intraNode = readLink(r, r.field(links, "$.links", "intra_node"), "$.links.intra_node");
    p.interNode = readLink(r, r.field(links, "$.links", "inter_node"), "$.links.inter_node");
    return p;
}

MeshProfile loadMeshProfileFile(const std::string &path)
{
    return readMeshProfileJson(io::readFile(path), path);
}

std::string meshProfileDirectory()
{
    if (const char *env = std::getenv("TAPESTRY_MESH_DIR"); env && *env)
        return env;
    if (std::filesystem::is_directory(TAPESTRY_MESH_SOURCE_DIR))
        return TAPESTRY_MESH_SOURCE_DIR;
    return TAPESTRY_MESH_INSTALL_DIR;
}

std::string userMeshProfileDirectory()
{
    if (const char *data = std::getenv("XDG_DATA_HOME"); data && *data)
        return (std::filesystem::path(data) / "tapestry" / "meshes").string();
    const char *home = std::getenv("HOME");
    return (std::filesystem::path(home && *home ? home : ".") / ".local" / "share" / "tapestry" / "meshes").string();
}

std::vector<std::string> meshProfileNames()
{
    std::set<std::string> names;
    for (const auto &dir : {meshProfileDirectory(), userMeshProfileDirectory()}) {
        std::error_code ec;
        for (const auto &entry : std::filesystem::directory_iterator(dir, ec))
            if (entry.path().extension() == ".json")
                names.insert(entry.path().stem().string());
    }
    return {names.begin(), names.end()};
}

std::string writeMeshProfileJson(const MeshProfile &p)
{
    auto link = [](const LinkProfile &l) {
        json j{{"name", l.name}, {"bandwidth_bytes_per_s", l.bandwidth}, {"latency_s", l.latency}};
        for (const auto &[kind, fit] : l.byKind)
            j["by_kind"][kind] = {{"bandwidth_bytes_per_s", fit.bandwidth}, {"latency_s", fit.latency}};
        return j;
    };
    json peaks = json::object();
    for (const auto &[dtype, flops] : p.device.peakFlops)
        peaks[dtype] = flops;
    json device{{"name", p.device.name},
                {"memory_bytes", p.device.memoryBytes},
                {"peak_flops", peaks},
                {"achievable_fraction", p.device.achievableFraction}};
    if (p.device.memoryBandwidth > 0)
        device["memory_bandwidth_bytes_per_s"] = p.device.memoryBandwidth;
    if (p.device.kernelLaunch > 0)
        device["kernel_launch_s"] = p.device.kernelLaunch;
    for (const auto &[family, bandwidth] : p.device.kernelBandwidth)
        device["kernel_bandwidth_bytes_per_s"][family] = bandwidth;
    if (!p.device.gemmEfficiency.empty()) {
        json table = json::array();
        for (const auto &point : p.device.gemmEfficiency)
            table.push_back({point.flops, point.fraction});
        device["gemm_efficiency"] = table;
    }
    const json doc{{"format", "tapestry.mesh-profile"},
                   {"version", 1},
                   {"name", p.name},
                   {"description", p.description},
                   {"intra_node_devices", p.intraNodeDevices},
                   {"device", device},
                   {"links", {{"intra_node", link(p.intraNode)}, {"inter_node", link(p.interNode)}}}};
    return doc.dump(2) + "\n";
}

MeshProfile findMeshProfile(const std::string &nameOrPath)
{
    const bool isPath = nameOrPath.find('/') != std::string::npos ||
                        (nameOrPath.size() > 5 && nameOrPath.ends_with(".json"));
    if (isPath)
        return loadMeshProfileFile(nameOrPath);
    auto path = std::filesystem::path(meshProfileDirectory()) / (nameOrPath + ".json");
    if (!std::filesystem::exists(path))
        path = std::filesystem::path(userMeshProfileDirectory()) / (nameOrPath + ".json");
    if (!std::filesystem::exists(path)) {
        std::string known;
        for (const auto &n : meshProfileNames())
            known += (known.empty() ? "" : ", ") + n;
        throw TapestryError(Error{"--mesh-profile", {}, "unknown mesh profile '" + nameOrPath +
                                                            "' (known: " + known + "; or give a .json file)"});
    }
    return loadMeshProfileFile(path.string());
}

} // namespace tapestry::sharding
