#include "cli/planreport.h"

#include "ir/error.h"
#include "sharding/meshprofile.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

namespace tapestry::cli {

namespace {

std::string seconds(double s)
{
    char buf[32];
    if (s >= 1)
        std::snprintf(buf, sizeof buf, "%.3f s", s);
    else if (s >= 1e-3)
        std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
    else
        std::snprintf(buf, sizeof buf, "%.3f us", s * 1e6);
    return buf;
}

std::string bytes(double n)
{
    char buf[32];
    if (n >= 1024.0 * 1024 * 1024)
        std::snprintf(buf, sizeof buf, "%.2f GiB", n / (1024.0 * 1024 * 1024));
    else if (n >= 1024.0 * 1024)
        std::snprintf(buf, sizeof buf, "%.2f MiB", n / (1024.0 * 1024));
    else if (n >= 1024.0)
        std::snprintf(buf, sizeof buf, "%.1f KiB", n / 1024.0);
    else
        std::snprintf(buf, sizeof buf, "%.0f B", n);
    return buf;
}

std::string rate(double bytesPerSecond)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f GB/s", bytesPerSecond / 1e9);
    return buf;
}

std::string percent(double part, double whole)
{
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.0f%%", whole > 0 ? 100.0 * part / whole : 0.0);
    return buf;
}

} // namespace

std::vector<OptionSpec> meshOptions()
{
    return {
        {"--mesh", "SHAPE", "device mesh: 8, 2x8, 4x2, or with axis names: '2x2x2 (dp, tp, sp)' (required)"},
        {"--axes", "A,B", "axis names (default: 1D model; 2D data,model; 3D and 4D: required); given names "
                          "(data, model, sequence) are roles the plan searches keep each axis to"},
        {"--mesh-profile", "NAME|FILE", "machine profile: dgx-h100 (default), dgx-h200, dgx-a100, pcie-8x, cpu-loopback, "
                                        "or a tapestry.mesh-profile .json"},
        {"--memory-gib", "G", "device memory in GiB, overriding the profile's"},
    };
}

sharding::Mesh meshFromArgs(const Args &args)
{
    auto shape = args.value("--mesh");
    if (!shape)
        throw TapestryError(Error{"--mesh", {}, "is required (8, 2x8, 4x2, ...)"});
    const auto text = sharding::parseMeshText(*shape);
    const auto &sizes = text.sizes;
    std::vector<std::string> names = text.names;
    if (auto axes = args.value("--axes")) {
        if (!names.empty())
            throw TapestryError(Error{"--axes", {}, "the mesh '" + *shape + "' names its axes already"});
        std::string cur;
        for (char c : *axes + ",") {
            if (c == ',') {
                names.push_back(cur);
                cur.clear();
            } else {
                cur += c;
            }
        }
    } else if (names.empty()) {
        names = sharding::defaultAxisNames(sizes.size());
    }
    const auto profile =
        sharding::findMeshProfile(args.value("--mesh-profile").value_or(sharding::kDefaultMeshProfile));
    sharding::Mesh mesh = profile.mesh(sizes, names);
    if (auto bytes = memoryFromArgs(args))
        mesh.device.memoryBytes = *bytes;
    return mesh;
}

std::optional<std::int64_t> memoryFromArgs(const Args &args)
{
    const auto gib = args.value("--memory-gib");
    if (!gib)
        return std::nullopt;
    double g = 0;
    std::size_t used = 0;
    try {
        g = std::stod(*gib, &used);
    } catch (const std::exception &) {
        used = 0;
    }
    if (used != gib->size() || !std::isfinite(g) || g <= 0)
        throw TapestryError(Error{"--memory-gib", {}, "expects a positive number of GiB, got '" + *gib + "'"});
    return std::llround(g * 1024.0 * 1024.0 * 1024.0);
}

bool axisNamesGiven(const Args &args)
{
    if (args.value("--axes"))
        return true;
    const auto shape = args.value("--mesh");
    return shape && !sharding::parseMeshText(*shape).names.empty();
}

nlohmann::ordered_json planReportJson(const plan::Plan &p)
{
    using Json = nlohmann::ordered_json;
    const auto &c = p.cost;
    Json axes = Json::array();
    for (std::size_t i = 0; i < p.mesh.axes.size(); ++i) {
        const auto &a = p.mesh.axes[i];
        Json axis{{"name", a.name}, {"size", a.size}};
        if (i < p.axisCarries.size()) {
            const auto &carries = p.axisCarries[i];
            axis["carries"] = carries.toString();
            axis["matches_name"] = plan::carriesMatchName(carries, a.name);
            axis["weight_share"] = carries.weightShare;
            axis["batch_share"] = carries.batchShare;
            axis["sequence_share"] = carries.sequenceShare;
        }
        axis["link"] = a.link.name;
        axis["bandwidth_bytes_per_s"] = a.link.bandwidth;
        axis["latency_s"] = a.link.latency;
        axes.push_back(std::move(axis));
    }
    Json collectives = Json::object();
    for (const auto &[kind, t] : c.byCollective)
        collectives[kind] = Json{{"count", t.collectives}, {"comm_bytes", t.commBytes}, {"comm_s", t.comm}};
    Json phases = Json::object();
    for (const auto &[phase, t] : c.byPhase)
        phases[phase] = Json{{"compute_s", t.compute}, {"comm_s", t.comm}, {"comm_bytes", t.commBytes}};
    Json top = Json::array();
    for (const auto &[op, t] : c.topOps(5))
        top.push_back(Json{{"op", op}, {"compute_s", t.compute}, {"comm_s", t.comm}, {"comm_bytes", t.commBytes}});
    std::vector<std::string> warnings = p.searchWarnings;
    warnings.insert(warnings.end(), c.warnings.begin(), c.warnings.end());
    Json report = Json{{"model", p.model.source},
                {"fingerprint", p.model.fingerprint},
                {"method", p.method},
                {"sequence_parallel", p.sequenceParallel},
                {"mesh", Json{{"profile", p.mesh.profile},
                              {"devices", p.mesh.deviceCount()},
                              {"axes_constrained", p.axesConstrained},
                              {"axes", axes}}},
                {"step_time_s", c.stepTime},
                {"compute_s", c.compute},
                {"comm_s", c.comm},
                {"comm_bytes", c.commBytes},
                {"memory_per_device_bytes", c.memory.total()},
                {"memory_capacity_bytes", c.memoryCapacity},
                {"fits_memory", c.fitsMemory},
                {"memory",
                 Json{{"parameters", c.memory.parameters},
                      {"gradients", c.memory.gradients},
                      {"optimizer", c.memory.optimizer},
                      {"activations", c.memory.activations},
                      {"activation_model", c.memory.activationModel}}},
                {"techniques",
                 Json{{"flash_attention", p.costOptions.techniques.flashAttention},
                      {"recompute", cost::toString(p.costOptions.techniques.recompute)},
                      {"zero_stage", p.costOptions.techniques.zeroStage},
                      {"micro_batches", p.costOptions.techniques.microBatches}}},
                {"by_phase", phases},
                {"by_collective", collectives},
                {"top_ops", top},
                {"warnings", warnings}};
    if (const auto &pp = p.pipeline)
        report["pipeline"] = Json{{"stages", pp->stages},
                                  {"schedule", cost::toString(pp->schedule)},
                                  {"virtual_stages", pp->virtualStages},
                                  {"cuts", pp->cuts},
                                  {"layers", pp->layers},
                                  {"link", pp->link.name},
                                  {"step_time_s", pp->stepTime},
                                  {"bubble_fraction", pp->bubbleFraction},
                                  {"memory_per_device_bytes", pp->memoryPerDevice},
                                  {"fits_memory", pp->fitsMemory}};
    return report;
}

void printPlanReport(const plan::Plan &p, std::ostream &out, const std::vector<std::string> &reasons)
{
    const auto &c = p.cost;
    int split = 0;
    for (const auto &[name, entry] : p.specs)
        split += entry.spec.isReplicated() ? 0 : 1;
    out << "model         " << p.model.source << " (" << p.model.name << ", " << p.model.fingerprint << ")\n";
    out << "mesh          " << p.mesh.toString() << ", " << p.mesh.deviceCount() << " x " << p.mesh.device.name
        << " [" << p.mesh.profile << "]\n";
    std::vector<std::string> misnamed;
    for (std::size_t i = 0; i < p.mesh.axes.size(); ++i) {
        const auto &a = p.mesh.axes[i];
        const std::string head = "  axis " + a.name + " (" + std::to_string(a.size) + ")";
        out << head << std::string(head.size() < 18 ? 18 - head.size() : 1, ' ');
        if (i < p.axisCarries.size()) {
            const std::string carries = "carries " + p.axisCarries[i].toString();
            out << carries << std::string(carries.size() < 24 ? 24 - carries.size() : 1, ' ');
            if (!plan::carriesMatchName(p.axisCarries[i], a.name))
                misnamed.push_back(a.name + " carries " + p.axisCarries[i].toString());
        }
        out << a.link.name << ", " << rate(a.link.bandwidth) << ", " << seconds(a.link.latency) << " per step\n";
    }
    if (p.axesConstrained) {
        out << "  axis names given: the search kept each axis to the role its name asks for\n";
    } else if (!misnamed.empty()) {
        std::string list;
        for (const auto &m : misnamed)
            list += (list.empty() ? "" : ", ") + m;
        out << "  axis names are not constraints here: " << list << " (--axes makes them constraints)\n";
    }
    out << "plan          " << p.method << (p.sequenceParallel ? " with sequence parallelism" : "") << ": "
        << split << " of " << p.specs.size() << " tensors split\n";
    if (const auto &pp = p.pipeline) {
        std::string cuts;
        for (int cut : pp->cuts)
            cuts += (cuts.empty() ? "" : ", ") + std::to_string(cut);
        out << "pipeline      " << pp->stages << " stages of the mesh above (" << pp->stages * p.mesh.deviceCount()
            << " devices), " << cost::toString(pp->schedule)
            << (pp->virtualStages > 1 ? " of " + std::to_string(pp->virtualStages) + " chunks per stage" : "") << ", "
            << p.costOptions.techniques.microBatches << " micro-batches, over " << pp->link.name << "\n";
        out << "  step time   " << seconds(pp->stepTime) << ", bubble " << percent(pp->bubbleFraction, 1.0)
            << "; memory " << bytes(static_cast<double>(pp->memoryPerDevice)) << " on the fullest stage"
            << (pp->fitsMemory ? " (fits)" : " -- DOES NOT FIT") << "\n";
        out << "  cuts        before layers " << cuts << " of " << pp->layers << "\n";
        out << "  (the figures below are one stage's plan over the whole model)\n";
    }
    out << "\n";
    out << "step time     " << seconds(c.stepTime) << "\n";
    out << "  compute     " << seconds(c.compute) << " (" << percent(c.compute, c.compute + c.comm) << ")\n";
    out << "  comm        " << seconds(c.comm) << " (" << percent(c.comm, c.compute + c.comm) << "), "
        << bytes(static_cast<double>(c.commBytes)) << " sent per device\n";
    out << "memory        " << bytes(static_cast<double>(c.memory.total())) << " per device of "
        << bytes(static_cast<double>(c.memoryCapacity))
        << (p.pipeline ? " for the whole model; a stage holds its share (pipeline, above)"
            : c.fitsMemory ? " (fits)"
                           : " -- DOES NOT FIT")
        << "\n";
    out << "  parameters  " << bytes(static_cast<double>(c.memory.parameters)) << ", gradients "
        << bytes(static_cast<double>(c.memory.gradients)) << ", optimizer "
        << bytes(static_cast<double>(c.memory.optimizer)) << ", activations "
        << bytes(static_cast<double>(c.memory.activations)) << " (" << c.memory.activationModel << ")\n";
    out << "techniques    " << cost::describe(p.costOptions.techniques) << "\n";
    for (const auto &r : reasons)
        out << "  " << r << "\n";
    out << "\n";

    char line[256];
    std::snprintf(line, sizeof line, "  %-12s %10s %10s %12s %12s\n", "phase", "compute", "comm", "collectives",
                  "sent");
    out << "by phase\n" << line;
    for (const auto &[phase, t] : c.byPhase) {
        std::snprintf(line, sizeof line, "  %-12s %10s %10s %12d %12s\n", phase.c_str(), seconds(t.compute).c_str(),
                      seconds(t.comm).c_str(), t.collectives, bytes(static_cast<double>(t.commBytes)).c_str());
        out << line;
    }
    if (!c.byCollective.empty()) {
        out << "\nby collective\n";
        std::snprintf(line, sizeof line, "  %-16s %6s %12s %10s\n", "kind", "count", "sent", "time");
        out << line;
        for (const auto &[kind, t] : c.byCollective) {
            std::snprintf(line, sizeof line, "  %-16s %6d %12s %10s\n", kind.c_str(), t.collectives,
                          bytes(static_cast<double>(t.commBytes)).c_str(), seconds(t.comm).c_str());
            out << line;
        }
    }
    out << "\ncostliest ops\n";
    std::snprintf(line, sizeof line, "  %-48s %10s %10s %10s\n", "op", "compute", "comm", "total");
    out << line;
    for (const auto &[op, t] : c.topOps(5)) {
        std::string name = op.size() > 48 ? "..." + op.substr(op.size() - 45) : op;
        std::snprintf(line, sizeof line, "  %-48s %10s %10s %10s\n", name.c_str(), seconds(t.compute).c_str(),
                      seconds(t.comm).c_str(), seconds(t.total()).c_str());
        out << line;
    }
    if (!p.searchWarnings.empty() || !c.warnings.empty()) {
        out << "\nwarnings\n";
        for (const auto &w : p.searchWarnings)
            out << "  " << w << "\n";
        for (const auto &w : c.warnings)
            out << "  " << w << "\n";
    }
}

void printSearchReport(const search::SearchResult &r, double loadSeconds, std::ostream &out)
{
    const auto &s = r.stats;
    out << "\nsearch        " << s.algorithm << ": " << seconds(s.seconds) << " (model load and prune "
        << seconds(loadSeconds) << "), " << s.plansEvaluated << " plans evaluated, " << s.classes
        << (s.classes == 1 ? " class, " : " classes, ") << s.segments << " segments"
        << (s.peakStates > 0 ? ", at most " + std::to_string(s.peakStates) + " states" : std::string())
        << (s.techniquesTried > 1 ? ", " + std::to_string(s.techniquesTried) + " settings of the memory techniques"
                                  : std::string())
        << (s.optimal ? "" : ", stopped at the time limit")
        << (s.layoutsExhaustive ? "" : ", class layouts improved one class at a time") << "\n";
    for (const auto &line : s.copiesApart)
        out << "copies apart  " << line << "\n";
    const auto &c = r.leastCommunication.cost;
    out << "least comm    step time " << seconds(c.stepTime) << ", comm " << seconds(c.comm) << ", "
        << bytes(static_cast<double>(c.commBytes)) << " sent per device, memory "
        << bytes(static_cast<double>(c.memory.total())) << " per device\n";
}

void addSearchReport(nlohmann::ordered_json &report, const search::SearchResult &r, double loadSeconds)
{
    using Json = nlohmann::ordered_json;
    const auto &s = r.stats;
    report["search"] = Json{{"algorithm", s.algorithm},
                            {"seconds", s.seconds},
                            {"load_seconds", loadSeconds},
                            {"plans_evaluated", s.plansEvaluated},
                            {"classes", s.classes},
                            {"segments", s.segments},
                            {"peak_states", s.peakStates},
                            {"technique_settings", s.techniquesTried},
                            {"optimal", s.optimal},
                            {"layouts_exhaustive", s.layoutsExhaustive},
                            {"copies_apart", s.copiesApart}};
    const auto &c = r.leastCommunication.cost;
    report["least_communication"] = Json{{"step_time_s", c.stepTime},
                                         {"compute_s", c.compute},
                                         {"comm_s", c.comm},
                                         {"comm_bytes", c.commBytes},
                                         {"memory_per_device_bytes", c.memory.total()},
                                         {"fits_memory", c.fitsMemory}};
}

ProgressBar::ProgressBar(std::string label)
    : m_label(std::move(label)), m_terminal(isatty(STDERR_FILENO) != 0), m_start(std::chrono::steady_clock::now())
{
}

ProgressBar::~ProgressBar()
{
    finish();
}

void ProgressBar::update(std::size_t done, std::size_t total)
{
    if (!m_terminal)
        return;
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - m_start).count();
    // Quick searches draw nothing; slow ones redraw at most ten times a second.
    if (elapsed < 1.0 || (m_drawn && now - m_lastDraw < std::chrono::milliseconds(100) && done < total))
        return;
    constexpr int width = 30;
    const double fraction = total > 0 ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total)) : 0;
    const int filled = static_cast<int>(fraction * width);
    char line[160];
    std::snprintf(line, sizeof line, "\r\033[K%s [%s%s] %zu/%zu  %.1f s", m_label.c_str(),
                  std::string(static_cast<std::size_t>(filled), '#').c_str(),
                  std::string(static_cast<std::size_t>(width - filled), ' ').c_str(), done, total, elapsed);
    std::cerr << line << std::flush;
    m_drawn = true;
    m_lastDraw = now;
}

void ProgressBar::finish()
{
    if (m_drawn)
        std::cerr << "\r\033[K" << std::flush;
    m_drawn = false;
}

} // namespace tapestry::cli
