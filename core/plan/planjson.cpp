#include "plan/planjson.h"

#include "io/jsonmodel.h"
#include "ir/error.h"

#include <nlohmann/json.hpp>

namespace tapestry::plan {

namespace {

using Json = nlohmann::ordered_json;

Json linkJson(const sharding::LinkProfile &l)
{
    return Json{{"name", l.name}, {"bandwidth_bytes_per_s", l.bandwidth}, {"latency_s", l.latency}};
}

Json totalsJson(const cost::CostTotals &t)
{
    return Json{{"flops", t.flops},       {"compute_s", t.compute},         {"comm_s", t.comm},
                {"comm_bytes", t.commBytes}, {"collectives", t.collectives}};
}

// One entry per line: long sections stay readable and diff well.
// An object's members in the order they are written. Built as a list: an
// ordered_json object finds each key it is given by a linear search, which
// made writing a plan of thousands of tensors quadratic (the studio writes
// one on every edit, to autosave it).
using Members = std::vector<std::pair<std::string, Json>>;

std::string linesObject(const Members &members, const std::string &indent)
{
    if (members.empty())
        return "{}";
    std::string s = "{\n";
    for (std::size_t i = 0; i < members.size(); ++i) {
        s += indent + "  " + Json(members[i].first).dump() + ": " + members[i].second.dump();
        s += i + 1 < members.size() ? ",\n" : "\n";
    }
    return s + indent + "}";
}

std::string linesArray(const Json &arr, const std::string &indent)
{
    if (arr.empty())
        return "[]";
    std::string s = "[\n";
    for (std::size_t i = 0; i < arr.size(); ++i)
        s += indent + "  " + arr[i].dump() + (i + 1 < arr.size() ? ",\n" : "\n");
    return s + indent + "]";
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
        return v.get<std::int64_t>();
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
    return {r.string(obj, path, "name"), r.number(obj, path, "bandwidth_bytes_per_s"), r.number(obj, path, "latency_s")};
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
    Json mesh{{"profile", plan.mesh.profile},
              {"axes", axes},
              {"axes_constrained", plan.axesConstrained},
              {"device",
               Json{{"name", d.name},
                    {"memory_bytes", d.memoryBytes},
                    {"peak_flops", peaks},
                    {"achievable_fraction", d.achievableFraction}}}};
    Json search{{"method", plan.method},
                {"sequence_parallel", plan.sequenceParallel},
                {"warnings", plan.searchWarnings}};
    const auto &o = plan.costOptions;
    Json costOptions{{"parameter_bytes", o.parameterBytes},
                     {"gradient_bytes", o.gradientBytes},
                     {"optimizer_bytes", o.optimizerBytes},
                     {"optimizer_flops_per_parameter", o.optimizerFlopsPerParameter},
                     {"overlap", o.overlap}};
    Members specs;
    specs.reserve(plan.specs.size());
    for (const auto &[name, entry] : plan.specs) {
        Json placements = Json::array();
        for (const auto &p : entry.spec.placements)
            placements.push_back(p.toString());
        specs.emplace_back(name, Json{{"placements", placements}, {"source", std::string(toString(entry.source))}});
    }
    Json collectives = Json::array();
    for (const auto &c : plan.cost.collectives)
        collectives.push_back(Json{{"op", c.op},
                                   {"tensor", c.tensor},
                                   {"kind", std::string(sharding::toString(c.kind))},
                                   {"axis", c.axis},
                                   {"phase", std::string(cost::toString(c.phase))},
                                   {"bytes", c.bytes},
                                   {"wire_bytes", c.wireBytes},
                                   {"time_s", c.time},
                                   {"reason", c.reason}});
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
    auto totalsMap = [](const std::map<std::string, cost::CostTotals> &m) {
        Members members;
        members.reserve(m.size());
        for (const auto &[k, v] : m)
            members.emplace_back(k, totalsJson(v));
        return members;
    };

    std::string s = "{\n";
    s += "  \"format\": \"tapestry.plan\",\n  \"version\": 1,\n";
    s += "  \"model\": " + model.dump() + ",\n";
    s += "  \"mesh\": " + mesh.dump() + ",\n";
    s += "  \"search\": " + search.dump() + ",\n";
    s += "  \"cost_options\": " + costOptions.dump() + ",\n";
    s += "  \"specs\": " + linesObject(specs, "  ") + ",\n";
    s += "  \"cost\": " + summary.dump() + ",\n";
    s += "  \"collectives\": " + linesArray(collectives, "  ") + ",\n";
    s += "  \"breakdown\": {\n";
    s += "    \"by_phase\": " + linesObject(totalsMap(pc.byPhase), "    ") + ",\n";
    s += "    \"by_collective\": " + linesObject(totalsMap(pc.byCollective), "    ") + ",\n";
    s += "    \"by_op\": " + linesObject(totalsMap(pc.byOp), "    ") + "\n";
    s += "  },\n";
    s += "  \"warnings\": " + linesArray(Json(pc.warnings), "  ") + "\n";
    s += "}\n";
    return s;
}

Plan readPlanJson(const std::string &text, const std::string &input)
{
    const Reader r(input);
    nlohmann::json doc;
    try {
        doc = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error &e) {
        r.fail("", std::string("not valid JSON: ") + e.what());
    }
    if (!doc.is_object())
        r.fail("$", "expected an object");
    if (r.string(doc, "$", "format") != "tapestry.plan")
        r.fail("$.format", "expected \"tapestry.plan\"");
    if (r.integer(doc, "$", "version") != 1)
        r.fail("$.version", "unsupported version (this build reads version 1)");
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
    if (mesh.contains("axes_constrained"))
        p.axesConstrained = r.boolean(mesh, "$.mesh", "axes_constrained");
    const auto &device = r.object(mesh, "$.mesh", "device");
    p.mesh.device.name = r.string(device, "$.mesh.device", "name");
    p.mesh.device.memoryBytes = r.integer(device, "$.mesh.device", "memory_bytes");
    p.mesh.device.achievableFraction = r.number(device, "$.mesh.device", "achievable_fraction");
    for (const auto &[dtype, value] : r.object(device, "$.mesh.device", "peak_flops").items()) {
        if (!value.is_number())
            r.fail("$.mesh.device.peak_flops." + dtype, "expected a number");
        p.mesh.device.peakFlops[dtype] = value.get<double>();
    }

    const auto &search = r.object(doc, "$", "search");
    p.method = r.string(search, "$.search", "method");
    p.sequenceParallel = r.boolean(search, "$.search", "sequence_parallel");
    p.searchWarnings = r.strings(search, "$.search", "warnings");

    const auto &options = r.object(doc, "$", "cost_options");
    p.costOptions.parameterBytes = r.number(options, "$.cost_options", "parameter_bytes");
    p.costOptions.gradientBytes = r.number(options, "$.cost_options", "gradient_bytes");
    p.costOptions.optimizerBytes = r.number(options, "$.cost_options", "optimizer_bytes");
    p.costOptions.optimizerFlopsPerParameter = r.number(options, "$.cost_options", "optimizer_flops_per_parameter");
    p.costOptions.overlap = r.boolean(options, "$.cost_options", "overlap");

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
    io::writeFileAtomically(path, writePlanJson(plan));
}

} // namespace tapestry::plan
