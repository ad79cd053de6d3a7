#include "plan/runreport.h"

#include "ir/error.h"

namespace tapestry::plan {

namespace {

using nlohmann::json;

// A field of the wrong type is a malformed line; a missing one reads as its
// default (an older writer, or a field this run has no value for).
struct MalformedField {
    std::string field, problem;
};

template <typename T>
void get(const json &j, const char *key, T &into)
{
    const auto it = j.find(key);
    if (it == j.end() || it->is_null())
        return;
    try {
        into = it->get<T>();
    } catch (const json::exception &) {
        throw MalformedField{key, std::string("has the wrong type (") + it->type_name() + ")"};
    }
}

json collectivesJson(const CollectiveBreakdown &c)
{
    json j = json::object();
    for (const auto &[kind, t] : c)
        j[kind] = {{"calls", t.calls}, {"bytes", t.bytes}, {"seconds", t.seconds}};
    return j;
}

CollectiveBreakdown collectivesFrom(const json &j, const char *key)
{
    CollectiveBreakdown c;
    const auto it = j.find(key);
    if (it == j.end())
        return c;
    if (!it->is_object())
        throw MalformedField{key, "is not an object"};
    for (const auto &[kind, e] : it->items()) {
        if (!e.is_object())
            throw MalformedField{key, "entry '" + kind + "' is not an object"};
        CollectiveTotals t;
        get(e, "calls", t.calls);
        get(e, "bytes", t.bytes);
        get(e, "seconds", t.seconds);
        c[kind] = t;
    }
    return c;
}

void figuresInto(json &j, const StepFigures &f)
{
    j["step_time_s"] = f.stepTime;
    j["forward_s"] = f.forward;
    j["backward_s"] = f.backward;
    j["update_s"] = f.update;
    j["comm_s"] = f.comm;
    j["gemm_s"] = f.gemm;
    j["other_kernels_s"] = f.otherKernels;
    j["kernels_s"] = f.kernelSeconds;
    j["collectives"] = collectivesJson(f.collectives);
    j["tokens_per_s"] = f.tokensPerSecond;
    j["gflops_per_rank"] = f.gflopsPerRank;
    j["gemm_gflops_per_rank"] = f.gemmGflopsPerRank;
}

StepFigures figuresFrom(const json &j)
{
    StepFigures f;
    get(j, "step_time_s", f.stepTime);
    get(j, "forward_s", f.forward);
    get(j, "backward_s", f.backward);
    get(j, "update_s", f.update);
    get(j, "comm_s", f.comm);
    get(j, "gemm_s", f.gemm);
    get(j, "other_kernels_s", f.otherKernels);
    get(j, "kernels_s", f.kernelSeconds);
    f.collectives = collectivesFrom(j, "collectives");
    get(j, "tokens_per_s", f.tokensPerSecond);
    get(j, "gflops_per_rank", f.gflopsPerRank);
    get(j, "gemm_gflops_per_rank", f.gemmGflopsPerRank);
    return f;
}

json toJsonOf(const ReportHello &h)
{
    json j{{"event", "hello"}, {"schema", h.schema}, {"program", h.program}, {"ranks", h.ranks}};
    if (h.token)
        j["token"] = *h.token;
    return j;
}

json toJsonOf(const ReportMemory &m)
{
    return {{"parameters", m.parameters},
            {"gradients", m.gradients},
            {"optimizer", m.optimizer},
            {"activations", m.activations},
            {"total", m.total()}};
}

json toJsonOf(const ReportStart &s)
{
    json gemms = json::array();
    for (const GemmShape &g : s.gemmsPerStepPerRank)
        gemms.push_back(
            {{"trans_a", g.transA}, {"trans_b", g.transB}, {"m", g.m}, {"n", g.n}, {"k", g.k}, {"calls", g.calls}});
    json predicted = json::object();
    for (const auto &[kind, seconds] : s.predicted.collectiveSeconds)
        predicted[kind] = seconds;
    return {{"event", "start"},
            {"model", s.model},
            {"plan", s.plan},
            {"method", s.method},
            {"mesh", s.mesh},
            {"ranks", s.ranks},
            {"objective", s.objective},
            {"tokens_per_step", s.tokensPerStep},
            {"flops_per_step_per_rank", s.flopsPerStepPerRank},
            {"gemms_per_step_per_rank", gemms},
            {"arena_bytes_per_rank", s.arenaBytesPerRank},
            {"plan_all_reduces", s.planAllReduces},
            {"predicted_step_time_s", s.predicted.stepTime},
            {"predicted_compute_s", s.predicted.compute},
            {"predicted_gemm_s", s.predicted.gemm},
            {"predicted_other_kernels_s", s.predicted.otherKernels},
            {"predicted_kernels_s", s.predicted.kernelSeconds},
            {"predicted_comm_s", s.predicted.comm},
            {"predicted_collectives_s", predicted},
            {"mesh_profile", s.predicted.meshProfile},
            {"backend", s.backend},
            {"device", s.device},
            {"precision", s.precision},
            {"techniques", s.techniques},
            {"predicted_memory_per_rank", toJsonOf(s.predictedMemory)},
            {"plan_memory_bytes_per_rank", s.planMemoryBytes}};
}

json toJsonOf(const ReportStep &s)
{
    json j{{"event", "step"}, {"step", s.step}, {"steps", s.steps}, {"loss", s.loss}};
    figuresInto(j, s.figures);
    return j;
}

json toJsonOf(const ReportSummary &s)
{
    json j{{"event", "summary"}, {"model", s.model}, {"plan", s.plan}, {"mesh", s.mesh}, {"ranks", s.ranks},
           {"steps", s.steps}, {"first_loss", s.firstLoss}, {"last_loss", s.lastLoss}};
    figuresInto(j, s.mean);
    j["predicted_step_time_s"] = s.predictedStepTime;
    j["mesh_profile"] = s.meshProfile;
    j["predicted_over_measured"] = s.predictedOverMeasured;
    j["backend"] = s.backend;
    j["device"] = s.device;
    j["precision"] = s.precision;
    j["tflops_per_rank"] = s.tflopsPerRank;
    j["device_peak_tflops"] = s.devicePeakTflops;
    j["fraction_of_peak"] = s.fractionOfPeak;
    if (const auto &v = s.verification)
        j["verification"] = {{"passed", v->passed},
                             {"max_relative_error", v->maxRelativeError},
                             {"where", v->where},
                             {"tolerance", v->tolerance},
                             {"tensors_compared", v->tensorsCompared},
                             {"loss", v->loss},
                             {"reference_loss", v->referenceLoss}};
    j["memory_per_rank"] = toJsonOf(s.memory);
    j["peak_memory_bytes_per_rank"] = s.peakMemoryBytes;
    j["predicted_memory_bytes_per_rank"] = s.predictedMemoryBytes;
    j["memory_predicted_over_measured"] = s.memoryPredictedOverMeasured;
    if (const auto &p = s.pipeline) {
        json stages = json::array();
        for (const auto &stage : p->stages) {
            json slots = json::array();
            for (const auto &slot : stage)
                slots.push_back({{"backward", slot.backward},
                                 {"micro_batch", slot.microBatch},
                                 {"chunk", slot.chunk},
                                 {"start_s", slot.start},
                                 {"end_s", slot.end}});
            stages.push_back(std::move(slots));
        }
        j["pipeline"] = {{"stages", std::move(stages)},
                         {"bubble_fraction", p->bubbleFraction},
                         {"predicted_bubble_fraction", p->predictedBubbleFraction}};
    }
    return j;
}

json toJsonOf(const ReportCalibration &c)
{
    return {{"event", "calibration"}, {"file", c.file}, {"profile", c.profile}};
}

json toJsonOf(const ReportError &e)
{
    return {{"event", "error"}, {"message", e.message}};
}

ReportHello helloFrom(const json &j)
{
    ReportHello h;
    h.schema = 0;  // a hello without a schema is refused below
    get(j, "schema", h.schema);
    get(j, "program", h.program);
    get(j, "ranks", h.ranks);
    if (j.contains("token")) {
        std::string token;
        get(j, "token", token);
        h.token = token;
    }
    return h;
}

ReportMemory memoryFrom(const json &j, const char *field)
{
    ReportMemory m;
    const auto it = j.find(field);
    if (it == j.end())
        return m;
    if (!it->is_object())
        throw MalformedField{field, "is not an object"};
    get(*it, "parameters", m.parameters);
    get(*it, "gradients", m.gradients);
    get(*it, "optimizer", m.optimizer);
    get(*it, "activations", m.activations);
    return m;
}

ReportStart startFrom(const json &j)
{
    ReportStart s;
    get(j, "model", s.model);
    get(j, "plan", s.plan);
    get(j, "method", s.method);
    get(j, "mesh", s.mesh);
    get(j, "ranks", s.ranks);
    get(j, "objective", s.objective);
    get(j, "tokens_per_step", s.tokensPerStep);
    get(j, "flops_per_step_per_rank", s.flopsPerStepPerRank);
    if (const auto it = j.find("gemms_per_step_per_rank"); it != j.end()) {
        if (!it->is_array())
            throw MalformedField{"gemms_per_step_per_rank", "is not an array"};
        for (const json &e : *it) {
            if (!e.is_object())
                throw MalformedField{"gemms_per_step_per_rank", "has an entry that is not an object"};
            GemmShape g;
            get(e, "trans_a", g.transA);
            get(e, "trans_b", g.transB);
            get(e, "m", g.m);
            get(e, "n", g.n);
            get(e, "k", g.k);
            get(e, "calls", g.calls);
            s.gemmsPerStepPerRank.push_back(g);
        }
    }
    get(j, "arena_bytes_per_rank", s.arenaBytesPerRank);
    get(j, "plan_all_reduces", s.planAllReduces);
    get(j, "predicted_step_time_s", s.predicted.stepTime);
    get(j, "predicted_compute_s", s.predicted.compute);
    get(j, "predicted_gemm_s", s.predicted.gemm);
    get(j, "predicted_other_kernels_s", s.predicted.otherKernels);
    get(j, "predicted_kernels_s", s.predicted.kernelSeconds);
    get(j, "predicted_comm_s", s.predicted.comm);
    get(j, "predicted_collectives_s", s.predicted.collectiveSeconds);
    get(j, "mesh_profile", s.predicted.meshProfile);
    get(j, "backend", s.backend);
    get(j, "device", s.device);
    get(j, "precision", s.precision);
    get(j, "techniques", s.techniques);
    s.predictedMemory = memoryFrom(j, "predicted_memory_per_rank");
    get(j, "plan_memory_bytes_per_rank", s.planMemoryBytes);
    return s;
}

ReportStep stepFrom(const json &j)
{
    ReportStep s;
    get(j, "step", s.step);
    get(j, "steps", s.steps);
    get(j, "loss", s.loss);
    s.figures = figuresFrom(j);
    return s;
}

ReportSummary summaryFrom(const json &j)
{
    ReportSummary s;
    get(j, "model", s.model);
    get(j, "plan", s.plan);
    get(j, "mesh", s.mesh);
    get(j, "ranks", s.ranks);
    get(j, "steps", s.steps);
    get(j, "first_loss", s.firstLoss);
    get(j, "last_loss", s.lastLoss);
    s.mean = figuresFrom(j);
    get(j, "predicted_step_time_s", s.predictedStepTime);
    get(j, "mesh_profile", s.meshProfile);
    get(j, "predicted_over_measured", s.predictedOverMeasured);
    get(j, "backend", s.backend);
    get(j, "device", s.device);
    get(j, "precision", s.precision);
    get(j, "tflops_per_rank", s.tflopsPerRank);
    get(j, "device_peak_tflops", s.devicePeakTflops);
    get(j, "fraction_of_peak", s.fractionOfPeak);
    if (const auto it = j.find("verification"); it != j.end()) {
        if (!it->is_object())
            throw MalformedField{"verification", "is not an object"};
        ReportVerification v;
        get(*it, "passed", v.passed);
        get(*it, "max_relative_error", v.maxRelativeError);
        get(*it, "where", v.where);
        get(*it, "tolerance", v.tolerance);
        get(*it, "tensors_compared", v.tensorsCompared);
        get(*it, "loss", v.loss);
        get(*it, "reference_loss", v.referenceLoss);
        s.verification = v;
    }
    s.memory = memoryFrom(j, "memory_per_rank");
    get(j, "peak_memory_bytes_per_rank", s.peakMemoryBytes);
    get(j, "predicted_memory_bytes_per_rank", s.predictedMemoryBytes);
    get(j, "memory_predicted_over_measured", s.memoryPredictedOverMeasured);
    if (const auto it = j.find("pipeline"); it != j.end() && it->is_object()) {
        ReportPipeline p;
        get(*it, "bubble_fraction", p.bubbleFraction);
        get(*it, "predicted_bubble_fraction", p.predictedBubbleFraction);
        if (const auto stages = it->find("stages"); stages != it->end() && stages->is_array())
            for (const auto &stage : *stages) {
                p.stages.emplace_back();
                if (!stage.is_array())
                    continue;
                for (const auto &slot : stage) {
                    if (!slot.is_object())
                        continue;
                    ReportPipelineSlot r;
                    get(slot, "backward", r.backward);
                    get(slot, "micro_batch", r.microBatch);
                    get(slot, "chunk", r.chunk);
                    get(slot, "start_s", r.start);
                    get(slot, "end_s", r.end);
                    p.stages.back().push_back(r);
                }
            }
        s.pipeline = std::move(p);
    }
    return s;
}

} // namespace

json toJson(const ReportEvent &event)
{
    return std::visit([](const auto &e) { return toJsonOf(e); }, event);
}

std::string reportLine(const ReportEvent &event)
{
    return toJson(event).dump();
}

RunReportReader::RunReportReader(std::string source) : m_source(std::move(source)) {}

std::optional<ReportEvent> RunReportReader::read(std::string_view line)
{
    if (line.find_first_not_of(" \t\r\n") == std::string_view::npos) {
        ++m_line;
        return std::nullopt;
    }
    const json j = json::parse(line.begin(), line.end(), nullptr, false);
    if (j.is_discarded()) {
        ++m_line;
        throw TapestryError(Error{m_source, "line " + std::to_string(m_line), "not a JSON object"});
    }
    return read(j);
}

std::optional<ReportEvent> RunReportReader::read(const nlohmann::json &j)
{
    const std::string where = "line " + std::to_string(++m_line);
    if (!j.is_object())
        throw TapestryError(Error{m_source, where, "not a JSON object"});
    const auto event = j.find("event");
    if (event == j.end() || !event->is_string())
        throw TapestryError(Error{m_source, where, "no \"event\" field"});
    const std::string name = event->get<std::string>();
    try {
        if (name == "hello") {
            ReportHello h = helloFrom(j);
            if (h.schema != kRunReportSchema)
                throw TapestryError(Error{m_source, where,
                                          "report schema " + std::to_string(h.schema) +
                                              " is not one this reader knows (schema " +
                                              std::to_string(kRunReportSchema) + ")"});
            return h;
        }
        if (name == "start")
            return startFrom(j);
        if (name == "step")
            return stepFrom(j);
        if (name == "summary")
            return summaryFrom(j);
        if (name == "calibration") {
            ReportCalibration c;
            get(j, "file", c.file);
            if (const auto it = j.find("profile"); it != j.end())
                c.profile = *it;
            return c;
        }
        if (name == "error") {
            ReportError e;
            get(j, "message", e.message);
            return e;
        }
    } catch (const MalformedField &f) {
        throw TapestryError(Error{m_source, where, name + " field '" + f.field + "' " + f.problem});
    }
    return std::nullopt;
}

} // namespace tapestry::plan
