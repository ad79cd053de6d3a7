#include "analysis/plandiff.h"

#include "ir/error.h"
#include "passes/coarsen.h"
#include "passes/prune.h"

#include <set>

namespace tapestry::analysis {

void checkSameModel(const plan::Plan &a, const plan::Plan &b, const std::string &inputA, const std::string &inputB)
{
    if (a.model.fingerprint != b.model.fingerprint)
        throw TapestryError(Error{inputB, "model.fingerprint",
                                  "the plans were made for different models: '" + a.model.source + "' (" +
                                      a.model.fingerprint + ") in " + inputA + ", '" + b.model.source + "' (" +
                                      b.model.fingerprint + ") here"});
}

PlanDiff diffPlans(const ir::Graph &graph, const plan::Plan &a, const plan::Plan &b, const std::string &inputA,
                   const std::string &inputB)
{
    checkSameModel(a, b, inputA, inputB);
    plan::Plan costedA = a, costedB = b;
    plan::recostPlan(costedA, graph, inputA);
    plan::recostPlan(costedB, graph, inputB);

    PlanDiff diff;
    diff.techniquesA = a.costOptions.techniques;
    diff.techniquesB = b.costOptions.techniques;
    std::set<std::string> names;
    for (const auto *p : {&a, &b})
        for (const auto &[name, entry] : p->specs)
            names.insert(name);
    for (const auto &name : names) {
        const auto &sa = a.specs.at(name).spec, &sb = b.specs.at(name).spec;  // both validated: every tensor
        if (sa != sb)
            diff.specs.push_back({name, sa, sb});
    }

    const cost::PlanCost &ca = costedA.cost, &cb = costedB.cost;
    diff.stepTimeA = ca.stepTime;
    diff.stepTimeB = cb.stepTime;
    diff.stepTimeDelta = cb.stepTime - ca.stepTime;
    diff.commDelta = cb.comm - ca.comm;
    diff.computeDelta = cb.compute - ca.compute;
    diff.memoryDelta = cb.memory.total() - ca.memory.total();

    // Classes name themselves by their first instance and its count.
    const auto classes = passes::Prune().run(graph, passes::Coarsen().run(graph));
    std::map<std::string, std::string> classOf;
    for (const auto &cls : classes.classes) {
        const std::string name = cls.instances.front().scope + " x" + std::to_string(cls.instances.size());
        for (const auto &instance : cls.instances)
            for (ir::OpId op : instance.ops)
                classOf[graph.op(op).name] = name;
    }
    const std::string outside = "(outside classes)";
    for (const auto &[name, totals] : cost::aggregate(ca.byOp, classOf, outside))
        diff.byClass[name].a = totals;
    for (const auto &[name, totals] : cost::aggregate(cb.byOp, classOf, outside))
        diff.byClass[name].b = totals;
    for (const auto &[kind, totals] : ca.byCollective)
        diff.byCollective[kind].a = totals;
    for (const auto &[kind, totals] : cb.byCollective)
        diff.byCollective[kind].b = totals;
    return diff;
}

} // namespace tapestry::analysis
