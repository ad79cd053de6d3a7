#include "analysis/pinpropagation.h"

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tapestry::analysis {

std::map<std::string, sharding::ShardingSpec> pinsOf(const plan::Plan &plan)
{
    std::map<std::string, sharding::ShardingSpec> pins;
    for (const auto &[name, tensor] : plan.specs)
        if (tensor.source == plan::SpecSource::Override)
            pins[name] = tensor.spec;
    return pins;
}

void pinAcrossClass(plan::Plan &plan, const ir::Graph &graph, const passes::SubgraphClasses &classes,
                    const std::string &tensor, const sharding::ShardingSpec &spec,
                    const std::map<std::string, sharding::ShardingSpec> &changes, bool wholeClass)
{
    // The pinned tensor is an override; what follows from it (a bias, the
    // activations of its node) stays the search's to re-derive.
    std::string pinnedName = tensor;
    auto apply = [&](const std::string &name, const sharding::ShardingSpec &s) {
        plan.specs[name] =
            plan::TensorPlan{s, name == pinnedName ? plan::SpecSource::Override : plan::SpecSource::Search};
    };
    for (const auto &[name, s] : changes)
        apply(name, s);
    apply(tensor, spec);
    if (!wholeClass)
        return;
    const auto t = graph.findTensor(tensor);
    if (!t)
        return;
    for (const auto &cls : classes.classes) {
        std::size_t home = cls.instances.size();
        for (std::size_t i = 0; i < cls.instances.size(); ++i)
            for (auto p : cls.instances[i].parameters)
                if (p == *t)
                    home = i;
        if (home == cls.instances.size())
            continue;
        const auto &ops = cls.instances[home].ops;
        std::vector<std::pair<ir::TensorId, sharding::ShardingSpec>> moved;
        for (const auto &[name, s] : changes)
            if (auto id = graph.findTensor(name))
                moved.emplace_back(*id, s);
        std::unordered_map<std::int32_t, ir::TensorId> counterpart;  // by tensor id of the home instance
        for (std::size_t j = 0; j < cls.instances.size(); ++j) {
            if (j == home || cls.instances[j].ops.size() != ops.size())
                continue;
            counterpart.clear();
            for (std::size_t k = 0; k < ops.size(); ++k) {
                const auto &a = graph.op(ops[k]);
                const auto &b = graph.op(cls.instances[j].ops[k]);
                for (std::size_t x = 0; x < a.inputs.size() && x < b.inputs.size(); ++x)
                    counterpart.emplace(a.inputs[x].value, b.inputs[x]);
                for (std::size_t x = 0; x < a.outputs.size() && x < b.outputs.size(); ++x)
                    counterpart.emplace(a.outputs[x].value, b.outputs[x]);
            }
            if (auto it = counterpart.find(t->value); it != counterpart.end())
                pinnedName = graph.tensor(it->second).name;
            for (const auto &[id, s] : moved)
                if (auto it = counterpart.find(id.value); it != counterpart.end())
                    apply(graph.tensor(it->second).name, s);
        }
        break;
    }
}

} // namespace tapestry::analysis
