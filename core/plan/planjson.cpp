#include "plan/planjson.h"

#include "io/files.h"
#include "io/jsonmodel.h"
#include "ir/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <string_view>

namespace tapestry::plan {

namespace {

using Json = nlohmann::ordered_json;

// Bounds on a plan's per-parameter cost options: fp64 Adam with fp64 master
// weights keeps 32 bytes a parameter; anything past these is not a setting.
constexpr double kMostBytesPerParameter = 1024;
constexpr double kMostFlopsPerParameter = 1e6;

Json linkJson(const sharding::LinkProfile &l)
{
    Json j{{"name", l.name}, {"bandwidth_bytes_per_s", l.bandwidth}, {"latency_s", l.latency}};
    for (const auto &[kind, fit] : l.byKind)
        j["by_kind"][kind] = Json{{"bandwidth_bytes_per_s", fit.bandwidth}, {"latency_s", fit.latency}};
    return j;
}

// One entry per line: long sections stay readable and diff well. The
// entries (a spec per tensor, every collective, the per-op breakdown: tens
// of thousands on a deep model) are written straight into the text, as
// Json::dump() would write them: a Json value per entry cost an allocation
// per member and most of the time of writing a plan (and an ordered_json
// object, which finds each key by a linear search, made it quadratic).
class EntryWriter {
public:
    explicit EntryWriter(std::string &out) : m_out(out) {}

    void string(const std::string &s)
    {
        // Json escapes quotes, backslashes and control characters and checks
        // UTF-8: anything but plain printable ASCII goes through it.
        const bool plain = std::all_of(s.begin(), s.end(), [](char c) {
            return c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
        });
        if (!plain) {
            m_out += Json(s).dump();
            return;
        }
        m_out += '"';
        m_out += s;
        m_out += '"';
    }
    void integer(std::int64_t v)
    {
        char buf[24];
        const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
        m_out.append(buf, static_cast<std::size_t>(end - buf));
    }
    // Json's own shortest round-trip form (Grisu2), null where not finite.
    void number(double v)
    {
        if (!std::isfinite(v)) {
            m_out += "null";
            return;
        }
        char buf[64];
        const char *end = nlohmann::detail::to_chars(buf, buf + sizeof buf, v);
        m_out.append(buf, static_cast<std::size_t>(end - buf));
    }
    // "key": with the key as Json writes it, no space after the colon (as
    // in an entry written by dump()).
    void key(const char *name)
    {
        m_out += '"';
        m_out += name;
        m_out += "\":";
    }
    void raw(std::string_view text) { m_out += text; }

    // An object written member by member: open(), field() for each (commas
    // between them), close().
    void open()
    {
        m_out += '{';
        m_first = true;
    }
    void close() { m_out += '}'; }
    void field(const char *name, const std::string &value) { next(name); string(value); }
    void field(const char *name, std::string_view value) { next(name); string(std::string(value)); }
    void field(const char *name, std::int64_t value) { next(name); integer(value); }
    void field(const char *name, int value) { next(name); integer(value); }
    void field(const char *name, double value) { next(name); number(value); }

private:
    void next(const char *name)
    {
        if (!m_first)
            m_out += ',';
        m_first = false;
        key(name);
    }

    std::string &m_out;
    bool m_first = true;
};

// `write(entry, w)` for each entry, one a line, as linesObject and
// linesArray lay them out; `name(entry)` gives an object member's key.
template <typename Range, typename Name, typename Write>
void writeLinesObject(std::string &out, const Range &entries, const std::string &indent, Name name, Write write)
{
    if (entries.empty()) {
        out += "{}";
        return;
    }
    EntryWriter w(out);
    out += "{\n";
    std::size_t i = 0;
    for (const auto &entry : entries) {
        out += indent;
        out += "  ";
        w.string(name(entry));
        out += ": ";
        write(entry, w);
        out += ++i < entries.size() ? ",\n" : "\n";
    }
    out += indent;
    out += '}';
}

template <typename Range, typename Write>
void writeLinesArray(std::string &out, const Range &entries, const std::string &indent, Write write)
{
    if (entries.empty()) {
        out += "[]";
        return;
    }
    EntryWriter w(out);
    out += "[\n";
    std::size_t i = 0;
    for (const auto &entry : entries) {
        out += indent;
        out += "  ";
        write(entry, w);
        out += ++i < entries.size() ? ",\n" : "\n";
    }
    out += indent;
    out += ']';
}

void writeTotals(const cost::CostTotals &t, EntryWriter &w)
{
    w.open();
    w.field("flops", t.flops);
    w.field("compute_s", t.compute);
    w.field("comm_s", t.comm);
    w.field("comm_bytes", t.commBytes);
    w.field("collectives", t.collectives);
    w.close();
}

// Typed access to the parsed document, naming the JSON path on any problem.
class Reader {
public:
    explicit Reader(std::string input) : m_input(std::move(input)) {}

    [[noreturn]] void fail(const std::string &path, const std::string &problem) const
    {
        throw TapestryError(Error{m_input, path, problem});
    }
    const nlohmann::json &at(const nlohmann::json &obj, const std::string &path, const std::string &key) const
    {
        if (!obj.is_object())
            fail(path, "expected an object");
        auto it = obj.find(key);
        if (it == obj.end())
            fail(path + "." + key, "missing");
        return *it;
    }
    std::string string(const nlohmann::json &obj, const std::string &path, const std::string &key) const
    {
        const auto &v = at(obj, path, key);
        if (!v.is_string())
            fail(path + "." + key, "expected a string");
        return v.get<std::string>();
    }
    double number(const nlohmann::json &obj, const std::string &path, const std::string &key) const
    {
        const auto &v = at(obj, path, key);
        if (!v.is_number())
            fail(path + "." + key, "expected a number");
        return v.get<double>();
    }
    std::int64_t integer(const nlohmann::json &obj, const std::string &path, const std::string &key) const
    {
        const auto &v = at(obj, path, key);
        if (!v.is_number_integer())
            fail(path + "." + key, "expected an integer");
        if (v.is_number_unsigned() &&
            v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
            fail(path + "." + key, "integer overflows 64 bits");
        return v.get<std::int64_t>();
    }
    // A byte count, a size or a rate: not negative (and, for a number, at
    // most `most`).
    std::int64_t count(const nlohmann::json &obj, const std::string &path, const std::string &key) const
    {
        const std::int64_t n = integer(obj, path, key);
        if (n < 0)
            fail(path + "." + key, "is negative (" + std::to_string(n) + ")");
        return n;
    }
    double amount(const nlohmann::json &obj, const std::string &path, const std::string &key, double most) const
    {
        const double x = number(obj, path, key);
        if (!(x >= 0) || x > most)
            fail(path + "." + key, "expected a number from 0 to " + nlohmann::json(most).dump() + ", got " +
                                       nlohmann::json(x).dump());
        return x;
    }
    bool boolean(const nlohmann::json &obj, const std::string &path, const std::string &key) const
    {
        const auto &v = at(obj, path, key);
        if (!v.is_boolean())
            fail(path + "." + key, "expected true or false");
        return v.get<bool>();
    }
    const nlohmann::json &array(const nlohmann::json &obj, const std::string &path, const std::string &key) const
    {
        const auto &v = at(obj, path, key);
        if (!v.is_array())
            fail(path + "." + key, "expected an array");
        return v;
    }
    const nlohmann::json &object(const nlohmann::json &obj, const std::string &path, const std::string &key) const
    {
        const auto &v = at(obj, path, key);
        if (!v.is_object())
            fail(path + "." + key, "expected an object");
        return v;
    }
    std::vector<std::string> strings(const nlohmann::json &obj, const std::string &path, const std::string &key) const
    {
        std::vector<std::string> out;
        const auto &arr = array(obj, path, key);
        for (std::size_t i = 0; i < arr.size(); ++i) {
            if (!arr[i].is_string())
                fail(path + "." + key + "[" + std::to_string(i) + "]", "expected a string");
            out.push_back(arr[i].get<std::string>());
        }
        return out;
    }

private:
    std::string m_input;
};

sharding::LinkProfile readLink(const Reader &r, const nlohmann::json &obj, const std::string &path)
{
    sharding::LinkProfile link{r.string(obj, path, "name"), r.number(obj, path, "bandwidth_bytes_per_s"),
                               r.number(obj, path, "latency_s"), {}};
    if (obj.contains("by_kind"))
        for (const auto &[kind, fit] : r.object(obj, path, "by_kind").items()) {
            if (!sharding::collectiveKindFromString(kind))
                r.fail(path + ".by_kind." + kind, "unknown collective kind");
            const std::string at = path + ".by_kind." + kind;
            link.byKind[kind] = {r.number(fit, at, "bandwidth_bytes_per_s"), r.number(fit, at, "latency_s")};
            if (!(link.byKind[kind].bandwidth > 0))
                r.fail(at + ".bandwidth_bytes_per_s", "expected a positive number");
        }
    return link;
}

cost::CostTotals readTotals(const Reader &r, const nlohmann::json &obj, const std::string &path)
{
    cost::CostTotals t;
    t.flops = r.number(obj, path, "flops");
    t.compute = r.number(obj, path, "compute_s");
    t.comm = r.number(obj, path, "comm_s");
    t.commBytes = r.integer(obj, path, "comm_bytes");
    t.collectives = static_cast<int>(r.integer(obj, path, "collectives"));
    return t;
}

std::map<std::string, cost::CostTotals> readTotalsMap(const Reader &r, const nlohmann::json &obj,
                                                      const std::string &path, const std::string &key)
{
    std::map<std::string, cost::CostTotals> out;
    const auto &m = r.object(obj, path, key);
    for (const auto &[name, value] : m.items())
        out[name] = readTotals(r, value, path + "." + key + "[" + Json(name).dump() + "]");
    return out;
}

} // namespace

std::string writePlanJson(const Plan &plan)
{
    Json model{{"source", plan.model.source},
               {"name", plan.model.name},
               {"fingerprint", plan.model.fingerprint},
               {"ops", plan.model.ops},
               {"tensors", plan.model.tensors}};
    Json axes = Json::array();
    for (std::size_t i = 0; i < plan.mesh.axes.size(); ++i) {
        const auto &a = plan.mesh.axes[i];
        Json axis{{"name", a.name}, {"size", a.size}, {"link", linkJson(a.link)}};
        if (i < plan.axisCarries.size())
            axis["carries"] = plan.axisCarries[i].toString();
        axes.push_back(std::move(axis));
    }
    const auto &d = plan.mesh.device;
    Json peaks = Json::object();
    for (const auto &[dtype, flops] : d.peakFlops)
        peaks[dtype] = flops;
    Json device{{"name", d.name},
                {"memory_bytes", d.memoryBytes},
                {"peak_flops", peaks},
                {"achievable_fraction", d.achievableFraction}};
    if (d.memoryBandwidth > 0)
        device["memory_bandwidth_bytes_per_s"] = d.memoryBandwidth;
    if (d.kernelLaunch > 0)
        device["kernel_launch_s"] = d.kernelLaunch;
    for (const auto &[family, bandwidth] : d.kernelBandwidth)
        device["kernel_bandwidth_bytes_per_s"][family] = bandwidth;
    if (!d.gemmEfficiency.empty()) {
        Json table = Json::array();
        for (const auto &point : d.gemmEfficiency)
            table.push_back({point.flops, point.fraction});
        device["gemm_efficiency"] = table;
    }
    Json mesh{{"profile", plan.mesh.profile},
              {"axes", axes},
              {"axes_constrained", plan.axesConstrained},
              {"device", device}};
    Json search{{"method", plan.method},
                {"sequence_parallel", plan.sequenceParallel},
                {"warnings", plan.searchWarnings}};
    const auto &o = plan.costOptions;
    Json costOptions{{"parameter_bytes", o.parameterBytes},
                     {"gradient_bytes", o.gradientBytes},
                     {"optimizer_bytes", o.optimizerBytes},
                     {"optimizer_flops_per_parameter", o.optimizerFlopsPerParameter},
                     {"host_bandwidth_bytes_per_s", o.hostBandwidth},
                     {"host_optimizer_parameters_per_s", o.hostOptimizerParametersPerSecond},
                     {"overlap", o.overlap}};
    const auto &t = o.techniques;
    Json recomputeLayers = Json::object();
    for (const auto &[kind, mode] : t.recomputeLayers)
        recomputeLayers[kind] = cost::toString(mode);
    Json techniques{{"flash_attention", t.flashAttention},
                    {"recompute", cost::toString(t.recompute)},
                    {"recompute_layers", recomputeLayers},
                    {"zero_stage", t.zeroStage},
                    {"micro_batches", t.microBatches},
                    {"offload_optimizer", t.offloadOptimizer}};
    if (t.zeroAxes)
        techniques["zero_axes"] = *t.zeroAxes;
    const auto &pc = plan.cost;
    Json summary{{"step_time_s", pc.stepTime},
                 {"compute_s", pc.compute},
                 {"comm_s", pc.comm},
                 {"comm_bytes", pc.commBytes},
                 {"memory_per_device_bytes", pc.memory.total()},
                 {"memory_capacity_bytes", pc.memoryCapacity},
                 {"fits_memory", pc.fitsMemory},
                 {"memory",
                  Json{{"parameters", pc.memory.parameters},
                       {"gradients", pc.memory.gradients},
                       {"optimizer", pc.memory.optimizer},
                       {"activations", pc.memory.activations},
                       {"activation_model", pc.memory.activationModel}}}};
    auto byKey = [](const auto &entry) -> const std::string & { return entry.first; };
    auto totals = [](const auto &entry, EntryWriter &w) { writeTotals(entry.second, w); };

    std::string s;
    // About 100 bytes a spec, 260 a collective and 150 an op's totals on a
    // GPT (longer names take more), with room: a string that outgrows its
    // reserve is copied whole into one twice its size.
    s.reserve(4096 + 128 * plan.specs.size() + 320 * pc.collectives.size() + 192 * pc.byOp.size());
    s += "{\n";
    s += "  \"format\": \"tapestry.plan\",\n  \"version\": 2,\n";
    s += "  \"model\": " + model.dump() + ",\n";
    s += "  \"mesh\": " + mesh.dump() + ",\n";
    s += "  \"search\": " + search.dump() + ",\n";
    s += "  \"cost_options\": " + costOptions.dump() + ",\n";
    s += "  \"techniques\": " + techniques.dump() + ",\n";
    if (const auto &pp = plan.pipeline) {
        Json pipeline{{"stages", pp->stages},
                      {"schedule", cost::toString(pp->schedule)},
                      {"virtual_stages", pp->virtualStages},
                      {"layers", pp->layers},
                      {"cuts", pp->cuts},
                      {"link", linkJson(pp->link)},
                      {"step_time_s", pp->stepTime},
                      {"bubble_fraction", pp->bubbleFraction},
                      {"memory_per_device_bytes", pp->memoryPerDevice},
                      {"fits_memory", pp->fitsMemory}};
        s += "  \"pipeline\": " + pipeline.dump() + ",\n";
    }
    s += "  \"specs\": ";
    writeLinesObject(s, plan.specs, "  ", byKey, [](const auto &entry, EntryWriter &w) {
        w.raw("{");
        w.key("placements");
        w.raw("[");
        const auto &placements = entry.second.spec.placements;
        for (std::size_t i = 0; i < placements.size(); ++i) {
            w.raw(i ? "," : "");
            w.string(placements[i].toString());
        }
        w.raw("],");
        w.key("source");
        w.string(std::string(toString(entry.second.source)));
        w.raw("}");
    });
    s += ",\n";
    s += "  \"cost\": " + summary.dump() + ",\n";
    s += "  \"collectives\": ";
    writeLinesArray(s, pc.collectives, "  ", [](const cost::CollectiveCost &c, EntryWriter &w) {
        w.open();
        w.field("op", c.op);
        w.field("tensor", c.tensor);
        w.field("kind", sharding::toString(c.kind));
        w.field("axis", c.axis);
        w.field("phase", cost::toString(c.phase));
        w.field("bytes", c.bytes);
        w.field("wire_bytes", c.wireBytes);
        w.field("time_s", c.time);
        w.field("reason", c.reason);
        w.close();
    });
    s += ",\n";
    s += "  \"breakdown\": {\n";
    s += "    \"by_phase\": ";
    writeLinesObject(s, pc.byPhase, "    ", byKey, totals);
    s += ",\n    \"by_collective\": ";
    writeLinesObject(s, pc.byCollective, "    ", byKey, totals);
    s += ",\n    \"by_op\": ";
    writeLinesObject(s, pc.byOp, "    ", byKey, totals);
    s += "\n  },\n";
    s += "  \"warnings\": ";
    writeLinesArray(s, pc.warnings, "  ", [](const std::string &warning, EntryWriter &w) { w.string(warning); });
    s += "\n}\n";
    return s;
}

Plan readPlanJson(const std::string &text, const std::string &input)
{
    const Reader r(input);
    nlohmann::json doc;
    try {
        doc = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception &e) {  // a syntax error, or a number past a double's range (1e999)
        r.fail("", std::string("not valid JSON: ") + e.what());
    }
    if (!doc.is_object())
        r.fail("$", "expected an object");
    if (r.string(doc, "$", "format") != "tapestry.plan")
        r.fail("$.format", "expected \"tapestry.plan\"");
    const auto version = r.integer(doc, "$", "version");
    if (version != 1 && version != 2)
        r.fail("$.version", "unsupported version (this build reads versions 1 and 2)");
    Plan p;

    const auto &model = r.object(doc, "$", "model");
    p.model.source = r.string(model, "$.model", "source");
    p.model.name = r.string(model, "$.model", "name");
    p.model.fingerprint = r.string(model, "$.model", "fingerprint");
    p.model.ops = r.integer(model, "$.model", "ops");
    p.model.tensors = r.integer(model, "$.model", "tensors");

    const auto &mesh = r.object(doc, "$", "mesh");
    p.mesh.profile = r.string(mesh, "$.mesh", "profile");
    const auto &axes = r.array(mesh, "$.mesh", "axes");
    if (axes.empty())
        r.fail("$.mesh.axes", "a mesh needs at least one axis");
    if (axes.size() > sharding::kMaxMeshAxes)
        r.fail("$.mesh.axes", "a mesh has at most " + std::to_string(sharding::kMaxMeshAxes) + " axes");
    for (std::size_t i = 0; i < axes.size(); ++i) {
        const std::string path = "$.mesh.axes[" + std::to_string(i) + "]";
        sharding::MeshAxis a;
        a.name = r.string(axes[i], path, "name");
        const auto size = r.integer(axes[i], path, "size");
        if (size <= 0 || size > 1'000'000)
            r.fail(path + ".size", "expected a positive axis size");
        a.size = static_cast<int>(size);
        a.link = readLink(r, r.object(axes[i], path, "link"), path + ".link");
        if (a.link.bandwidth <= 0 || a.link.latency < 0)
            r.fail(path + ".link", "bandwidth must be positive and latency not negative");
        if (p.mesh.axisIndex(a.name))
            r.fail(path + ".name", "axis '" + a.name + "' appears twice");
        p.mesh.axes.push_back(a);
        // Plans written before axes said what they carry have no "carries".
        if (axes[i].is_object() && axes[i].contains("carries")) {
            const std::string carries = r.string(axes[i], path, "carries");
            const auto c = AxisCarries::fromString(carries);
            if (!c)
                r.fail(path + ".carries", "expected data, tensor, sequence, a combination such as tensor+sequence, "
                                          "or replicated, got '" + carries + "'");
            p.axisCarries.push_back(*c);
        }
    }
    if (!p.axisCarries.empty() && p.axisCarries.size() != p.mesh.axes.size())
        r.fail("$.mesh.axes", "some axes say what they carry and some do not");
    if (auto problem = sharding::meshSizesProblem(p.mesh.shape()))
        r.fail("$.mesh.axes", *problem);
    if (mesh.contains("axes_constrained"))
        p.axesConstrained = r.boolean(mesh, "$.mesh", "axes_constrained");
    const auto &device = r.object(mesh, "$.mesh", "device");
    p.mesh.device.name = r.string(device, "$.mesh.device", "name");
    p.mesh.device.memoryBytes = r.count(device, "$.mesh.device", "memory_bytes");
    p.mesh.device.achievableFraction = r.amount(device, "$.mesh.device", "achievable_fraction", 1.0);
    if (device.contains("memory_bandwidth_bytes_per_s"))
        p.mesh.device.memoryBandwidth =
            r.amount(device, "$.mesh.device", "memory_bandwidth_bytes_per_s", std::numeric_limits<double>::max());
    if (device.contains("kernel_launch_s"))
        p.mesh.device.kernelLaunch = r.amount(device, "$.mesh.device", "kernel_launch_s", 1.0);
    if (device.contains("kernel_bandwidth_bytes_per_s")) {
        const std::string at = "$.mesh.device.kernel_bandwidth_bytes_per_s";
        const auto &families = r.object(device, "$.mesh.device", "kernel_bandwidth_bytes_per_s");
        for (const auto &[family, value] : families.items()) {
            if (!sharding::knownKernelFamily(family))
                r.fail(at + "." + family, "unknown kernel family");
            const double bandwidth = r.amount(families, at, family, std::numeric_limits<double>::max());
            if (!(bandwidth > 0))
                r.fail(at + "." + family, "expected a positive number");
            p.mesh.device.kernelBandwidth[family] = bandwidth;
        }
    }
    if (device.contains("gemm_efficiency")) {
        const auto &table = device.at("gemm_efficiency");
        const char *expected = "expected an array of [FLOPs of one GEMM call, fraction of peak]";
        if (!table.is_array())
            r.fail("$.mesh.device.gemm_efficiency", expected);
        for (const auto &point : table) {
            if (!point.is_array() || point.size() != 2 || !point[0].is_number() || !point[1].is_number())
                r.fail("$.mesh.device.gemm_efficiency", expected);
            p.mesh.device.gemmEfficiency.push_back({point[0].get<double>(), point[1].get<double>()});
        }
        if (auto problem = sharding::gemmEfficiencyProblem(p.mesh.device.gemmEfficiency))
            r.fail("$.mesh.device.gemm_efficiency", *problem);
    }
    for (const auto &[dtype, value] : r.object(device, "$.mesh.device", "peak_flops").items()) {
        if (!value.is_number() || !(value.get<double>() > 0))
            r.fail("$.mesh.device.peak_flops." + dtype, "expected a positive number");
        p.mesh.device.peakFlops[dtype] = value.get<double>();
    }

    const auto &search = r.object(doc, "$", "search");
    p.method = r.string(search, "$.search", "method");
    p.sequenceParallel = r.boolean(search, "$.search", "sequence_parallel");
    p.searchWarnings = r.strings(search, "$.search", "warnings");

    const auto &options = r.object(doc, "$", "cost_options");
    p.costOptions.parameterBytes = r.amount(options, "$.cost_options", "parameter_bytes", kMostBytesPerParameter);
    p.costOptions.gradientBytes = r.amount(options, "$.cost_options", "gradient_bytes", kMostBytesPerParameter);
    p.costOptions.optimizerBytes = r.amount(options, "$.cost_options", "optimizer_bytes", kMostBytesPerParameter);
    p.costOptions.optimizerFlopsPerParameter =
        r.amount(options, "$.cost_options", "optimizer_flops_per_parameter", kMostFlopsPerParameter);
    p.costOptions.overlap = r.boolean(options, "$.cost_options", "overlap");
    // Written since the optimizer could be offloaded; older files keep the defaults.
    if (options.contains("host_bandwidth_bytes_per_s"))
        p.costOptions.hostBandwidth = r.number(options, "$.cost_options", "host_bandwidth_bytes_per_s");
    if (options.contains("host_optimizer_parameters_per_s"))
        p.costOptions.hostOptimizerParametersPerSecond =
            r.number(options, "$.cost_options", "host_optimizer_parameters_per_s");
    // Version 1 plans predate the memory techniques: they use none.
    if (version >= 2) {
        const auto &t = r.object(doc, "$", "techniques");
        auto &techniques = p.costOptions.techniques;
        techniques.flashAttention = r.boolean(t, "$.techniques", "flash_attention");
        const std::string recompute = r.string(t, "$.techniques", "recompute");
        if (auto mode = cost::recomputeFromString(recompute))
            techniques.recompute = *mode;
        else
            r.fail("$.techniques.recompute", "expected none, selective or full, got \"" + recompute + "\"");
        if (t.contains("recompute_layers")) {
            const auto &layers = r.object(t, "$.techniques", "recompute_layers");
            for (const auto &[kind, mode] : layers.items()) {
                const std::string path = "$.techniques.recompute_layers[" + Json(kind).dump() + "]";
                if (!mode.is_string())
                    r.fail(path, "expected none, selective or full");
                const auto m = cost::recomputeFromString(mode.get<std::string>());
                if (!m)
                    r.fail(path, "expected none, selective or full, got " + mode.dump());
                techniques.recomputeLayers[kind] = *m;
            }
        }
        const auto stage = r.integer(t, "$.techniques", "zero_stage");
        if (stage < 0 || stage > 3)
            r.fail("$.techniques.zero_stage", "expected 0 to 3, got " + std::to_string(stage));
        techniques.zeroStage = static_cast<int>(stage);
        const auto micro = r.integer(t, "$.techniques", "micro_batches");
        if (micro < 1 || micro > (1 << 20))
            r.fail("$.techniques.micro_batches", "expected 1 to 1048576, got " + std::to_string(micro));
        techniques.microBatches = static_cast<int>(micro);
        if (t.contains("offload_optimizer"))
            techniques.offloadOptimizer = r.boolean(t, "$.techniques", "offload_optimizer");
        if (t.contains("zero_axes")) {
            techniques.zeroAxes = r.strings(t, "$.techniques", "zero_axes");
            for (const auto &name : *techniques.zeroAxes)
                if (std::none_of(p.mesh.axes.begin(), p.mesh.axes.end(), [&](const auto &a) { return a.name == name; }))
                    r.fail("$.techniques.zero_axes", "'" + name + "' is not an axis of the mesh");
        }
    }

    if (doc.contains("pipeline")) {
        const auto &pj = r.object(doc, "$", "pipeline");
        PlanPipeline pp;
        const auto stages = r.integer(pj, "$.pipeline", "stages");
        if (stages < 1 || stages > sharding::kMaxMeshDevices)
            r.fail("$.pipeline.stages", "expected 1 or more stages, got " + std::to_string(stages));
        pp.stages = static_cast<int>(stages);
        const std::string schedule = r.string(pj, "$.pipeline", "schedule");
        const auto known = cost::scheduleFromString(schedule);
        if (!known)
            r.fail("$.pipeline.schedule", "expected gpipe, 1f1b or interleaved, got \"" + schedule + "\"");
        pp.schedule = *known;
        const auto chunks = r.integer(pj, "$.pipeline", "virtual_stages");
        if (chunks < 1 || (chunks > 1 && pp.schedule != cost::Schedule::Interleaved) || chunks > 1024)
            r.fail("$.pipeline.virtual_stages", "expected 1, or more for the interleaved schedule, got " +
                                                    std::to_string(chunks));
        pp.virtualStages = static_cast<int>(chunks);
        const auto layers = r.count(pj, "$.pipeline", "layers");
        if (layers < 1 || layers > (1 << 20))
            r.fail("$.pipeline.layers", "expected 1 to 1048576 layers, got " + std::to_string(layers));
        pp.layers = static_cast<int>(layers);
        const auto &cuts = r.array(pj, "$.pipeline", "cuts");
        for (std::size_t i = 0; i < cuts.size(); ++i) {
            if (!cuts[i].is_number_integer() || cuts[i].get<std::int64_t>() < 1 ||
                cuts[i].get<std::int64_t>() >= pp.layers)
                r.fail("$.pipeline.cuts[" + std::to_string(i) + "]",
                       "expected a layer index from 1 to " + std::to_string(pp.layers - 1));
            pp.cuts.push_back(static_cast<int>(cuts[i].get<std::int64_t>()));
        }
        const auto wanted = static_cast<std::size_t>(pp.stages) * static_cast<std::size_t>(pp.virtualStages) - 1;
        bool rising = true;
        for (std::size_t i = 0; i < pp.cuts.size(); ++i)
            rising = rising && pp.cuts[i] > (i ? pp.cuts[i - 1] : 0) && pp.cuts[i] < pp.layers;
        if (pp.cuts.size() != wanted || !rising)
            r.fail("$.pipeline.cuts", std::to_string(wanted) + " rising layer indices from 1 to " +
                                          std::to_string(pp.layers - 1) + " expected for " + std::to_string(pp.stages) +
                                          " stages of " + std::to_string(pp.virtualStages) + " chunk(s)");
        pp.link = readLink(r, r.object(pj, "$.pipeline", "link"), "$.pipeline.link");
        pp.stepTime = r.number(pj, "$.pipeline", "step_time_s");
        pp.bubbleFraction = r.number(pj, "$.pipeline", "bubble_fraction");
        pp.memoryPerDevice = r.count(pj, "$.pipeline", "memory_per_device_bytes");
        pp.fitsMemory = r.boolean(pj, "$.pipeline", "fits_memory");
        p.pipeline = std::move(pp);
    }

    for (const auto &[name, entry] : r.object(doc, "$", "specs").items()) {
        const std::string path = "$.specs[" + Json(name).dump() + "]";
        TensorPlan tp;
        const auto placements = r.strings(entry, path, "placements");
        if (placements.size() > sharding::kMaxMeshAxes)
            r.fail(path + ".placements", "tensor '" + name + "': " + std::to_string(placements.size()) +
                                             " placements for a mesh of " + std::to_string(p.mesh.axes.size()) +
                                             " axes");
        for (std::size_t i = 0; i < placements.size(); ++i) {
            auto pl = sharding::Placement::fromString(placements[i]);
            if (!pl)
                r.fail(path + ".placements[" + std::to_string(i) + "]",
                       "tensor '" + name + "': expected Replicate(), Shard(DIM) or Partial(), got '" + placements[i] +
                           "'");
            tp.spec.placements.push_back(*pl);
        }
        const std::string source = r.string(entry, path, "source");
        auto src = specSourceFromString(source);
        if (!src)
            r.fail(path + ".source", "expected search, override or reference, got '" + source + "'");
        tp.source = *src;
        p.specs[name] = tp;
    }

    const auto &summary = r.object(doc, "$", "cost");
    auto &pc = p.cost;
    pc.stepTime = r.number(summary, "$.cost", "step_time_s");
    pc.compute = r.number(summary, "$.cost", "compute_s");
    pc.comm = r.number(summary, "$.cost", "comm_s");
    pc.commBytes = r.integer(summary, "$.cost", "comm_bytes");
    pc.memoryCapacity = r.integer(summary, "$.cost", "memory_capacity_bytes");
    pc.fitsMemory = r.boolean(summary, "$.cost", "fits_memory");
    const auto &memory = r.object(summary, "$.cost", "memory");
    pc.memory.parameters = r.integer(memory, "$.cost.memory", "parameters");
    pc.memory.gradients = r.integer(memory, "$.cost.memory", "gradients");
    pc.memory.optimizer = r.integer(memory, "$.cost.memory", "optimizer");
    pc.memory.activations = r.integer(memory, "$.cost.memory", "activations");
    pc.memory.activationModel = r.string(memory, "$.cost.memory", "activation_model");
    if (r.integer(summary, "$.cost", "memory_per_device_bytes") != pc.memory.total())
        r.fail("$.cost.memory_per_device_bytes", "differs from the sum of $.cost.memory");

    const auto &collectives = r.array(doc, "$", "collectives");
    for (std::size_t i = 0; i < collectives.size(); ++i) {
        const std::string path = "$.collectives[" + std::to_string(i) + "]";
        const auto &c = collectives[i];
        cost::CollectiveCost cc;
        cc.op = r.string(c, path, "op");
        cc.tensor = r.string(c, path, "tensor");
        const std::string kind = r.string(c, path, "kind");
        auto k = sharding::collectiveKindFromString(kind);
        if (!k)
            r.fail(path + ".kind", "unknown collective '" + kind + "'");
        cc.kind = *k;
        cc.axis = r.string(c, path, "axis");
        const std::string phase = r.string(c, path, "phase");
        auto ph = cost::phaseFromString(phase);
        if (!ph)
            r.fail(path + ".phase", "expected forward, backward or optimizer, got '" + phase + "'");
        cc.phase = *ph;
        cc.bytes = r.integer(c, path, "bytes");
        cc.wireBytes = r.integer(c, path, "wire_bytes");
        cc.time = r.number(c, path, "time_s");
        cc.reason = r.string(c, path, "reason");
        pc.collectives.push_back(cc);
    }
    const auto &breakdown = r.object(doc, "$", "breakdown");
    pc.byPhase = readTotalsMap(r, breakdown, "$.breakdown", "by_phase");
    pc.byCollective = readTotalsMap(r, breakdown, "$.breakdown", "by_collective");
    pc.byOp = readTotalsMap(r, breakdown, "$.breakdown", "by_op");
    pc.warnings = r.strings(doc, "$", "warnings");
    return p;
}

Plan readPlanFile(const std::string &path)
{
    return readPlanJson(io::readFile(path), path);
}

void writePlanFile(const std::string &path, const Plan &plan)
{
    io::writeOutputFile(path, writePlanJson(plan));
}

} // namespace tapestry::plan
