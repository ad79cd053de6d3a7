// Differential test of the plan search: generated models, meshes, memory
// limits and pins; on each, tap's plan is held to exact's (within 1%, where
// exact proves its optimum), to every reference plan that applies, to its
// own least-communication plan and, with pins, to the pinned input.
// TAPESTRY_SEARCHDIFF_SEED and TAPESTRY_SEARCHDIFF_CASES choose other cases;
// TAPESTRY_SEARCHDIFF_FROM starts the stream further on (to replay one case).
// A failure names the case and the tapestry-cli commands that replay it.
#include "searchcases.h"
#include "searchdiff.h"

#include <QtTest>

#include <map>
#include <set>
#include <string>

using namespace tapestry;

namespace {

std::uint64_t fromEnvironment(const char *name, std::uint64_t fallback)
{
    bool ok = false;
    const auto value = qEnvironmentVariable(name).toULongLong(&ok);
    return ok ? value : fallback;
}

const std::uint64_t kSeed = fromEnvironment("TAPESTRY_SEARCHDIFF_SEED", 20250601);
const std::size_t kFrom = fromEnvironment("TAPESTRY_SEARCHDIFF_FROM", 0);
const std::size_t kCases = fromEnvironment("TAPESTRY_SEARCHDIFF_CASES", 300);
constexpr std::uint64_t kDefaultSeed = 20250601;

// The gaps the search still has on the default stream (seed 20250601,
// cases 0-299): per case, the comparisons that fail there. What they have
// in common is in core/search/README.md, "Known gaps". A case failing a
// comparison not listed here (or with an error) fails the test, so the
// suite guards every case that holds against regressions while these are
// open; a listed comparison that now holds is reported, for the list to
// shrink with the search's fixes. Exact's comparisons bind only where it
// proved its optimum within its time limit, so a slower machine may see
// fewer of them fail, never more.
const std::map<std::size_t, std::set<std::string>> kKnownGaps = {
#include "searchdiff_known_gaps.inc"
};

// "tap/exact", "keep-pins", "tap/reference megatron-sp", ...
std::string gapKey(const searchdiff::Comparison &x)
{
    std::string key(searchdiff::toString(x.check));
    if (x.check == searchdiff::Check::Reference)
        key += " " + x.against;
    return key;
}

} // namespace

class TestSearchDiff : public QObject {
    Q_OBJECT

private slots:
    void tapHoldsAgainstExactReferencesAndPins_data()
    {
        QTest::addColumn<int>("index");
        for (std::size_t i = kFrom; i < kFrom + kCases; ++i) {
            auto c = searchdiff::generateCase(kSeed, i);
            QTest::newRow(c.describe().c_str()) << static_cast<int>(i);
            m_cases.emplace(i, std::move(c));
        }
    }
    void tapHoldsAgainstExactReferencesAndPins()
    {
        QFETCH(int, index);
        const auto &c = m_cases.at(static_cast<std::size_t>(index));
        const auto r = searchdiff::runCase(c, m_options);
        ++m_run;
        m_seconds += r.seconds;
        if (!r.exactProblem.empty()) {
            ++m_exactProblems;
            qInfo("%s: exact is no yardstick here: %s", c.describe().c_str(), r.exactProblem.c_str());
        }
        for (const auto &x : r.comparisons)
            if (!x.passed && x.binding)
                ++m_failed[std::string(searchdiff::toString(x.check)) + " (" +
                           (x.check == searchdiff::Check::Reference ? x.against : c.family) + ")"];
        if (!r.errors.empty())
            ++m_failed["error (" + c.family + ")"];
        std::set<std::string> failing;
        for (const auto &x : r.comparisons)
            if (!x.passed && x.binding)
                failing.insert(gapKey(x));
        const auto known = kSeed == kDefaultSeed ? kKnownGaps.find(static_cast<std::size_t>(index)) : kKnownGaps.end();
        if (known != kKnownGaps.end()) {
            for (const auto &key : known->second)
                if (!failing.count(key))
                    qInfo("case %d: known gap %s now holds; take it off tests/searchdiff_known_gaps.inc", index,
                          key.c_str());
        }
        for (const auto &key : failing)
            qInfo("gap: {%d, {\"%s\"}},", index, key.c_str());
        if (r.passed())
            return;
        if (r.errors.empty() && known != kKnownGaps.end() &&
            std::all_of(failing.begin(), failing.end(), [&](const std::string &k) { return known->second.count(k); })) {
            ++m_known;
            return;
        }
        const QString dir = QDir::tempPath() + QStringLiteral("/tapestry-searchdiff/seed-%1/case-%2").arg(kSeed).arg(index);
        const std::string replay = searchdiff::replayCommands(c, r, m_options, dir.toStdString(), TAPESTRY_CLI);
        const std::string message = "seed " + std::to_string(kSeed) + "\n" + r.failures() +
                                    "replay (or TAPESTRY_SEARCHDIFF_FROM=" + std::to_string(index) +
                                    " TAPESTRY_SEARCHDIFF_CASES=1):\n" + replay;
        QFAIL(message.c_str());
    }

    void cleanupTestCase()
    {
        qInfo("%zu cases in %.1f s; exact no yardstick on %zu; %zu with known gaps only", m_run, m_seconds,
              m_exactProblems, m_known);
        for (const auto &[kind, n] : m_failed)
            qInfo("failed %s: %zu", kind.c_str(), n);
    }

private:
    searchdiff::RunOptions m_options;
    std::map<std::size_t, searchdiff::SearchCase> m_cases;
    std::size_t m_run = 0, m_exactProblems = 0, m_known = 0;
    double m_seconds = 0;
    std::map<std::string, std::size_t> m_failed;
};

QTEST_GUILESS_MAIN(TestSearchDiff)
#include "tst_searchdiff.moc"
