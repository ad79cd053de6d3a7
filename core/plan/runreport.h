#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tapestry::plan {

// The report of a plan run (tapestry-exec --report, executor/REPORT.md):
// JSON lines, one event each. tapestry-exec writes these records, the
// studio's executor panel and `tapestry-cli run` read them back, all through
// the functions below, so that a field is named in one place.

// The report's schema. A change that removes or renames a field, or changes
// its meaning, raises it; new fields and events do not (readers skip what
// they do not know).
inline constexpr int kRunReportSchema = 1;

// Collective time of one kind ("all_reduce", "all_gather", "reduce_scatter",
// "all_to_all"): calls, bytes and seconds, per step (means in a summary).
struct CollectiveTotals {
    double calls = 0, bytes = 0, seconds = 0;
    bool operator==(const CollectiveTotals &) const = default;
};
using CollectiveBreakdown = std::map<std::string, CollectiveTotals>;

struct GemmShape {
    bool transA = false, transB = false;
    std::int64_t m = 0, n = 0, k = 0, calls = 0;
    bool operator==(const GemmShape &) const = default;
};

// First line: who writes and in which schema.
struct ReportHello {
    int schema = kRunReportSchema;
    std::string program = "tapestry-exec";
    int ranks = 0;
    std::optional<std::string> token;  // TCP only
    bool operator==(const ReportHello &) const = default;
};

// What the cost model predicts for one step of the plan on a mesh profile.
struct ReportPrediction {
    std::string meshProfile;
    double stepTime = 0, compute = 0, comm = 0;
    // compute split as the executor times it: inside GEMMs, in the other
    // kernels (elementwise, norms, softmax, the optimizer's update)
    double gemm = 0, otherKernels = 0;
    std::map<std::string, double> collectiveSeconds;  // by kind ("all_reduce")
    // compute by the kind of kernel the executor times it as ("gemm",
    // "transpose", "activation", "softmax", "normalization", "other": the
    // memory-bound families sharding::kernelFamily names, and the rest)
    std::map<std::string, double> kernelSeconds;
    bool operator==(const ReportPrediction &) const = default;
};

// Bytes per rank: model states and activations. Predicted: the cost
// model's figures (cost::MemoryCost); measured: what a rank's arena holds,
// activations being the rest of it at its high-water mark.
struct ReportMemory {
    std::int64_t parameters = 0, gradients = 0, optimizer = 0, activations = 0;
    std::int64_t total() const { return parameters + gradients + optimizer + activations; }
    bool operator==(const ReportMemory &) const = default;
};

// A plan run, once the ranks built their shards.
struct ReportStart {
    std::string model, plan, method, mesh;
    int ranks = 0;
    std::string objective;  // "loss", "sum_of_squares"
    std::int64_t tokensPerStep = 0;
    double flopsPerStepPerRank = 0;
    std::vector<GemmShape> gemmsPerStepPerRank;
    std::int64_t arenaBytesPerRank = 0;
    int planAllReduces = 0;
    ReportPrediction predicted;
    std::string backend, device, precision;
    std::string techniques;            // the plan's memory techniques, "none" without any
    ReportMemory predictedMemory;      // per rank, as the executor holds tensors (float32)
    std::int64_t planMemoryBytes = 0;  // per rank, the plan file's own figure (cost.memory)
    bool operator==(const ReportStart &) const = default;
};

// Where a step's time went: one measured step, or the means of a run.
struct StepFigures {
    double stepTime = 0, forward = 0, backward = 0, update = 0;
    double comm = 0, gemm = 0, otherKernels = 0;
    CollectiveBreakdown collectives;
    double tokensPerSecond = 0, gflopsPerRank = 0, gemmGflopsPerRank = 0;
    std::map<std::string, double> kernelSeconds;  // by kernel kind, as ReportPrediction's
    bool operator==(const StepFigures &) const = default;
};

struct ReportStep {
    int step = 0, steps = 0;  // 1-based; steps measured
    double loss = 0;
    StepFigures figures;
    bool operator==(const ReportStep &) const = default;
};

struct ReportVerification {
    bool passed = false;
    double maxRelativeError = 0;
    std::string where;
    double tolerance = 0;
    int tensorsCompared = 0;
    double loss = 0, referenceLoss = 0;
    bool operator==(const ReportVerification &) const = default;
};

// A pipeline's last measured step as its stages ran it: per stage (rank),
// its forwards and backwards in order, seconds from the step's start on
// that rank; and the share of the step the stages waited for each other.
struct ReportPipelineSlot {
    bool backward = false;
    int microBatch = 0;
    int chunk = 0;  // of the stage's chunks (interleaved)
    double start = 0, end = 0;
    bool operator==(const ReportPipelineSlot &) const = default;
};
struct ReportPipeline {
    std::vector<std::vector<ReportPipelineSlot>> stages;
    double bubbleFraction = 0, predictedBubbleFraction = 0;
    bool operator==(const ReportPipeline &) const = default;
};

// Last line of a run: means over the measured steps.
struct ReportSummary {
    std::string model, plan, mesh;
    int ranks = 0, steps = 0;
    double firstLoss = 0, lastLoss = 0;
    StepFigures mean;
    double predictedStepTime = 0;
    std::string meshProfile;
    double predictedOverMeasured = 0;
    std::string backend, device, precision;
    double tflopsPerRank = 0, devicePeakTflops = 0, fractionOfPeak = 0;
    std::optional<ReportVerification> verification;
    // The rank with the highest peak: its measured memory, and the
    // prediction's total over it.
    ReportMemory memory;
    std::int64_t peakMemoryBytes = 0, predictedMemoryBytes = 0;
    double memoryPredictedOverMeasured = 0;
    std::optional<ReportPipeline> pipeline;  // a pipelined plan's run
    bool operator==(const ReportSummary &) const = default;
};

// --calibrate with --report: where the mesh profile went, and the profile.
struct ReportCalibration {
    std::string file;
    nlohmann::json profile;
    bool operator==(const ReportCalibration &) const = default;
};

// A set-up error sent before the job exits (TCP only).
struct ReportError {
    std::string message;
    bool operator==(const ReportError &) const = default;
};

using ReportEvent =
    std::variant<ReportHello, ReportStart, ReportStep, ReportSummary, ReportCalibration, ReportError>;

// The event as its JSON object, with its "event" field.
nlohmann::json toJson(const ReportEvent &event);
// One line of the report, without the newline.
std::string reportLine(const ReportEvent &event);

// Reads a report line by line. Lines of events it does not know, and blank
// lines, give nothing. Throws TapestryError naming `source` and the line
// number for a line that is not a JSON object, an event field of the wrong
// type, or a hello whose schema this reader does not know.
class RunReportReader {
public:
    explicit RunReportReader(std::string source);
    std::optional<ReportEvent> read(std::string_view line);
    // The event of one line, as read() gives it, from a JSON object already
    // parsed (the studio's report server parses lines to check the hello).
    std::optional<ReportEvent> read(const nlohmann::json &object);
    int lines() const { return m_line; }

private:
    std::string m_source;
    int m_line = 0;
};

} // namespace tapestry::plan
