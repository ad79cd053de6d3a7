#pragma once

#include "cli/command.h"
#include "plan/plan.h"
#include "search/searchresult.h"
#include "sharding/mesh.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <vector>

namespace tapestry::cli {

// --mesh SHAPE [--axes a,b] [--mesh-profile NAME|FILE] [--memory-gib G] as a mesh.
sharding::Mesh meshFromArgs(const Args &args);
// --memory-gib G in bytes, where given; throws TapestryError naming the
// option on anything but a positive number.
std::optional<std::int64_t> memoryFromArgs(const Args &args);
// Whether the user named the mesh's axes (--axes, or names in --mesh's
// parentheses) rather than taking the defaults: only given names constrain
// the search to the roles they ask for.
bool axisNamesGiven(const Args &args);
std::vector<OptionSpec> meshOptions();

// The readable summary of a costed plan: step time, compute/communication
// split, memory per device against capacity, collectives by kind, the five
// costliest ops, warnings; the memory techniques it uses, each with its
// line of `reasons` (search::techniqueReasons) when given.
void printPlanReport(const plan::Plan &plan, std::ostream &out, const std::vector<std::string> &reasons = {});
// The same as one JSON object.
nlohmann::ordered_json planReportJson(const plan::Plan &plan);

// What a search did and the least-communication plan it found beside the
// fastest, as text after printPlanReport and as the `search` and
// `least_communication` members of the JSON report. `loadSeconds` covers
// loading, coarsening and pruning the model; the stats' seconds the search.
void printSearchReport(const search::SearchResult &result, double loadSeconds, std::ostream &out);
void addSearchReport(nlohmann::ordered_json &report, const search::SearchResult &result, double loadSeconds);

// A progress bar with counts on stderr for searches that outlast a second;
// nothing at all when stderr is not a terminal, so logs and pipes stay clean.
class ProgressBar {
public:
    explicit ProgressBar(std::string label);
    ~ProgressBar();
    ProgressBar(const ProgressBar &) = delete;
    ProgressBar &operator=(const ProgressBar &) = delete;

    void update(std::size_t done, std::size_t total);
    // Clears the bar's line, if one was drawn.
    void finish();

private:
    std::string m_label;
    bool m_terminal;
    bool m_drawn = false;
    std::chrono::steady_clock::time_point m_start, m_lastDraw;
};

} // namespace tapestry::cli
