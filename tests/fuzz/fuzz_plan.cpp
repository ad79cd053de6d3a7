// libFuzzer target for the plan reader and the checks a plan meets before it
// is used: any bytes must give a plan or one TapestryError, never a crash, a
// hang, a leak or another exception. A plan it accepts must write and read
// back to the same text. A plan made for one of two small fixed models (the
// seeds' models: zoo:mlp and a one-layer GPT-2) is then checked against it
// and costed again on its own mesh, as the CLI and the studio do before
// using a plan from a file, and the result must write and read back too.
#include "io/zoo/zoo.h"
#include "ir/error.h"
#include "plan/fingerprint.h"
#include "plan/plan.h"
#include "plan/planjson.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using namespace tapestry;

struct Model {
    ir::Graph graph;
    std::string fingerprint;
};

const std::vector<Model> &models()
{
    static const std::vector<Model> all = [] {
        std::vector<Model> m;
        for (const char *spec : {"mlp", "gpt2?layers=1&hidden=64&heads=4&vocab=128&positions=16&seq=16&batch=4"}) {
            auto graph = io::zoo::build(spec);
            auto fingerprint = plan::modelFingerprint(graph);
            m.push_back({std::move(graph), std::move(fingerprint)});
        }
        return m;
    }();
    return all;
}

// writePlanJson(readPlanJson(text)) == text for a text the writer wrote.
void checkReadsBack(const plan::Plan &p, const char *what)
{
    const std::string written = plan::writePlanJson(p);
    if (plan::writePlanJson(plan::readPlanJson(written, what)) != written) {
        std::fprintf(stderr, "fuzz_plan: %s reads back to another text\n", what);
        std::abort();
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    const std::string text(reinterpret_cast<const char *>(data), size);
    plan::Plan p;
    try {
        p = plan::readPlanJson(text, "fuzz.plan");
    } catch (const TapestryError &) {
        return 0;
    }
    // Outside the try: a plan read that cannot be read back once written is
    // a finding, reported by libFuzzer as an uncaught exception.
    checkReadsBack(p, "the plan as read");
    const Model *model = &models().front();
    for (const auto &m : models())
        if (m.fingerprint == p.model.fingerprint)
            model = &m;
    try {
        plan::recostPlan(p, model->graph, "fuzz.plan");
    } catch (const TapestryError &) {
        return 0;
    }
    checkReadsBack(p, "the plan costed again");
    return 0;
}
