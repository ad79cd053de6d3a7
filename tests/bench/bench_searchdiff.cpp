// The differential test of the plan search at scale: thousands of generated
// cases (tests/searchcases.h), each checked as tst_searchdiff checks them.
// Prints the counts, the worst tap/exact gaps and tap/reference gaps with
// their cases and the tapestry-cli commands that replay them, the cases
// where exact was no yardstick, the failures grouped by kind, and timing.
// Arguments: [--seed S] [--cases N] [--from K] [--time-limit SECONDS]
//            [--top K] [--replay-dir DIR] [--list-failures] [--techniques]
// --techniques: each case with memory techniques drawn at random, the same
// for tap, exact and the reference plans.
// Exits 1 when a case failed, 0 otherwise.
#include "search/techniquesearch.h"
#include "searchcases.h"
#include "searchdiff.h"

#include "ir/error.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace tapestry;

namespace {

// Case `index` of the seed; with `techniques`, the memory techniques drawn
// for it (the same for tap, exact and the reference plans).
searchdiff::SearchCase caseAt(std::uint64_t seed, std::size_t index, bool techniques)
{
    auto c = searchdiff::generateCase(seed, index);
    if (!techniques)
        return c;
    std::mt19937_64 rng(seed ^ (0x9E3779B97F4A7C15ull * (index + 1)));
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); };
    c.techniques.flashAttention = pick(2) == 1;
    c.techniques.recompute = static_cast<cost::Recompute>(pick(3));
    c.techniques.zeroStage = pick(4);
    const std::int64_t batch = search::modelBatch(c.graph);
    c.techniques.microBatches = batch > 1 && batch % 2 == 0 && pick(2) == 1 ? 2 : 1;
    return c;
}


struct Outcome {
    std::size_t index = 0;
    std::string description, family, memory;
    int meshRank = 1;
    searchdiff::CaseResult result;
};

std::string meshKind(int rank)
{
    return std::to_string(rank) + "D";
}

// Each line of `text`, its leading blanks replaced by `prefix`.
void printLines(const std::string &text, const char *prefix)
{
    std::size_t start = 0;
    while (start < text.size()) {
        auto end = text.find('\n', start);
        if (end == std::string::npos)
            end = text.size();
        const auto first = text.find_first_not_of(' ', start);
        if (first < end)
            std::printf("%s%s\n", prefix, text.substr(first, end - first).c_str());
        start = end + 1;
    }
}

// The case, what is said of it, and the commands that replay it.
void printCase(const Outcome &o, const std::string &what, std::uint64_t seed, bool techniques,
               const searchdiff::RunOptions &options,
               const std::string &replayDir)
{
    std::printf("  %s\n", o.description.c_str());
    printLines(what, "      ");
    const auto c = caseAt(seed, o.index, techniques);
    const std::string dir = replayDir + "/seed-" + std::to_string(seed) + "/case-" + std::to_string(o.index);
    printLines(searchdiff::replayCommands(c, o.result, options, dir), "    $ ");
}

} // namespace

int main(int argc, char **argv)
{
    std::uint64_t seed = 20250601;
    std::size_t cases = 2000, from = 0, top = 10;
    searchdiff::RunOptions options;
    std::string replayDir = "/tmp/tapestry-searchdiff-bench";
    bool listFailures = false;
    bool techniques = false;
    for (int i = 1; i < argc; ++i) {
        const std::string key = argv[i];
        if (key == "--list-failures") {
            listFailures = true;
            continue;
        }
        if (key == "--techniques") {
            techniques = true;
            continue;
        }
        if (i + 1 == argc) {
            std::fprintf(stderr, "bench_searchdiff: %s needs a value\n", key.c_str());
            return 2;
        }
        const std::string value = argv[++i];
        if (key == "--seed")
            seed = std::stoull(value);
        else if (key == "--cases")
            cases = std::stoull(value);
        else if (key == "--from")
            from = std::stoull(value);
        else if (key == "--time-limit")
            options.exactTimeLimitSeconds = std::stod(value);
        else if (key == "--top")
            top = std::stoull(value);
        else if (key == "--replay-dir")
            replayDir = value;
        else {
            std::fprintf(stderr, "bench_searchdiff: unknown option %s\n", key.c_str());
            return 2;
        }
    }

    const auto start = std::chrono::steady_clock::now();
    std::vector<Outcome> outcomes;
    for (std::size_t i = from; i < from + cases; ++i) {
        Outcome o;
        o.index = i;
        try {
            const auto c = caseAt(seed, i, techniques);
            o.description = c.describe();
            o.family = c.family;
            o.memory = std::string(searchdiff::toString(c.memory));
            o.meshRank = c.mesh.rank();
            o.result = searchdiff::runCase(c, options);
        } catch (const TapestryError &e) {
            o.result.errors.push_back(std::string("generating the case: ") + e.what());
        }
        outcomes.push_back(std::move(o));
        if ((i - from + 1) % 100 == 0)
            std::fprintf(stderr, "%zu cases, %.0f s\n", i - from + 1,
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    std::printf("bench_searchdiff: seed %llu, cases %zu..%zu, exact time limit %g s, tolerance %g%%\n\n",
                static_cast<unsigned long long>(seed), from, from + cases - 1, options.exactTimeLimitSeconds,
                100 * options.exactTolerance);

    std::map<std::string, std::size_t> families, meshes, memories, pins;
    for (const auto &o : outcomes) {
        ++families[o.family];
        ++meshes[meshKind(o.meshRank)];
        ++memories[o.memory];
        ++pins[o.result.pinnedInput ? "pinned" : "unpinned"];
    }
    auto printCounts = [](const char *title, const std::map<std::string, std::size_t> &m) {
        std::printf("%-12s", title);
        for (const auto &[k, n] : m)
            std::printf(" %s %zu,", k.c_str(), n);
        std::printf("\n");
    };
    printCounts("families:", families);
    printCounts("meshes:", meshes);
    printCounts("memory:", memories);
    printCounts("pins:", pins);

    // tap against exact, where exact proved its optimum.
    std::vector<std::pair<const Outcome *, const searchdiff::Comparison *>> exactGaps, referenceGaps;
    std::size_t proved = 0, equal = 0, within = 0, beyond = 0, tapBetter = 0;
    std::vector<const Outcome *> noYardstick;
    for (const auto &o : outcomes) {
        if (!o.result.exactProblem.empty())
            noYardstick.push_back(&o);
        for (const auto &x : o.result.comparisons) {
            if (x.check == searchdiff::Check::Reference)
                referenceGaps.push_back({&o, &x});
            if (x.check != searchdiff::Check::Exact || !x.binding)
                continue;
            ++proved;
            exactGaps.push_back({&o, &x});
            if (x.passed && !x.gap.memory && std::abs(x.gap.value) <= 1e-9)
                ++equal;
            else if (!x.passed)
                ++beyond;
            else if (x.gap.value > 0)
                ++within;
            else
                ++tapBetter;
        }
    }
    auto byGap = [](const auto &a, const auto &b) { return searchdiff::worseGap(a.second->gap, b.second->gap); };
    std::stable_sort(exactGaps.begin(), exactGaps.end(), byGap);
    std::stable_sort(referenceGaps.begin(), referenceGaps.end(), byGap);

    // Tap can beat exact: exact's program overcounts some reshards and
    // memory, and when nothing fits it minimises memory alone.
    std::printf("\ntap against exact: %zu cases where exact proved its optimum; tap equal on %zu, worse within %g%% on "
                "%zu, worse beyond on %zu, better on %zu\n",
                proved, equal, 100 * options.exactTolerance, within, beyond, tapBetter);
    if (!exactGaps.empty())
        std::printf("worst tap/exact gap: %s\n", exactGaps.front().second->gap.toString().c_str());
    for (const auto &[o, x] : exactGaps)
        if (!x->gap.memory) {
            std::printf("worst tap/exact gap in step time, overshoots equal: %s\n", x->gap.toString().c_str());
            break;
        }
    std::printf("worst %zu tap/exact gaps:\n", std::min(top, exactGaps.size()));
    for (std::size_t k = 0; k < top && k < exactGaps.size(); ++k)
        printCase(*exactGaps[k].first, exactGaps[k].second->detail, seed, techniques, options, replayDir);

    // Where tap's search around the pins found nothing better than the
    // pinned input, --keep-pins keeps that plan: how often, by where the pins came from.
    std::map<std::string, std::pair<std::size_t, std::size_t>> keptByBase;  // kept, pinned
    for (const auto &o : outcomes)
        if (o.result.pinnedInput) {
            auto &[kept, pinned] = keptByBase[o.result.pinBase];
            ++pinned;
            kept += o.result.pinnedInputKept ? 1 : 0;
        }
    std::printf("\nkeep-pins kept the pinned input (the search around the pins found nothing better):");
    for (const auto &[base, counts] : keptByBase)
        std::printf(" from %s %zu of %zu;", base.c_str(), counts.first, counts.second);
    std::printf("\n");

    std::printf("\nexact no yardstick on %zu cases:\n", noYardstick.size());
    std::map<std::string, std::size_t> reasons;
    for (const auto *o : noYardstick) {
        const auto &p = o->result.exactProblem;
        ++reasons[p.find("time limit") != std::string::npos       ? "time limit"
                  : p.find("too many strategies") != std::string::npos ? "too many strategies for a node"
                                                                       : p];
    }
    for (const auto &[reason, n] : reasons)
        std::printf("  %zu: %s\n", n, reason.c_str());
    for (std::size_t k = 0; k < top && k < noYardstick.size(); ++k)
        std::printf("  %s\n    %s\n", noYardstick[k]->description.c_str(), noYardstick[k]->result.exactProblem.c_str());

    std::map<std::string, std::size_t> referenceFailures;
    for (const auto &[o, x] : referenceGaps)
        if (!x->passed)
            ++referenceFailures[x->against];
    std::printf("\ntap against the reference plans: %zu comparisons, failed:", referenceGaps.size());
    for (const auto &[name, n] : referenceFailures)
        std::printf(" %s %zu,", name.c_str(), n);
    std::printf("\nworst %zu tap/reference gaps:\n", std::min(top, referenceGaps.size()));
    for (std::size_t k = 0; k < top && k < referenceGaps.size(); ++k)
        printCase(*referenceGaps[k].first, referenceGaps[k].second->detail, seed, techniques, options, replayDir);

    // Failures by kind: per check, how they spread over memory limits,
    // meshes and model families, with a case of each memory limit.
    struct Spread {
        std::size_t total = 0;
        std::map<std::string, std::size_t> memory, mesh, family;
        std::vector<const Outcome *> examples;
    };
    std::map<std::string, Spread> kinds;
    std::size_t failedCases = 0;
    for (const auto &o : outcomes) {
        if (o.result.passed())
            continue;
        ++failedCases;
        auto count = [&](const std::string &kind) {
            auto &spread = kinds[kind];
            ++spread.total;
            ++spread.memory[o.memory];
            ++spread.mesh[meshKind(o.meshRank)];
            ++spread.family[o.family];
            if (std::none_of(spread.examples.begin(), spread.examples.end(),
                             [&](const Outcome *e) { return e->memory == o.memory; }))
                spread.examples.push_back(&o);
        };
        for (const auto &x : o.result.comparisons) {
            if (x.passed || !x.binding)
                continue;
            std::string kind(searchdiff::toString(x.check));
            if (x.check == searchdiff::Check::Exact)
                kind += x.gap.memory ? " (memory)" : " (step time)";
            if (x.check == searchdiff::Check::Reference)
                kind += " " + x.against;
            count(kind);
        }
        if (!o.result.errors.empty())
            count("error");
    }
    std::printf("\nfailed cases: %zu of %zu\n", failedCases, outcomes.size());
    for (const auto &[kind, spread] : kinds) {
        std::printf("\n%s: %zu\n", kind.c_str(), spread.total);
        printCounts("  memory:", spread.memory);
        printCounts("  mesh:", spread.mesh);
        printCounts("  family:", spread.family);
        for (const auto *o : spread.examples)
            printCase(*o, o->result.failures(), seed, techniques, options, replayDir);
    }
    if (listFailures) {
        std::printf("\nevery failed case:\n");
        for (const auto &o : outcomes)
            if (!o.result.passed())
                std::printf("%s\n%s", o.description.c_str(), o.result.failures().c_str());
    }

    double tapSeconds = 0, exactSeconds = 0;
    std::vector<const Outcome *> slowest;
    for (const auto &o : outcomes) {
        tapSeconds += o.result.tapSeconds;
        exactSeconds += o.result.exactSeconds;
        slowest.push_back(&o);
    }
    std::sort(slowest.begin(), slowest.end(),
              [](const Outcome *a, const Outcome *b) { return a->result.seconds > b->result.seconds; });
    std::printf("\ntiming: %.1f s for %zu cases (%.3f s a case); tap %.1f s, exact %.1f s\nslowest:\n", wall,
                outcomes.size(), wall / static_cast<double>(std::max<std::size_t>(1, outcomes.size())), tapSeconds,
                exactSeconds);
    for (std::size_t k = 0; k < 5 && k < slowest.size(); ++k)
        std::printf("  %.2f s (tap %.2f s, exact %.2f s)  %s\n", slowest[k]->result.seconds,
                    slowest[k]->result.tapSeconds, slowest[k]->result.exactSeconds, slowest[k]->description.c_str());
    return failedCases == 0 ? 0 : 1;
}
