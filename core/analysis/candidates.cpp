#include "analysis/candidates.h"

#include "ir/error.h"
#include "search/segmentcost.h"

#include <algorithm>
#include <limits>
#include <map>

namespace tapestry::analysis {

using sharding::ShardingSpec;

namespace {

// The specs the rest of the plan holds at a segment's edges: the tensors it
// reads from outside and the ones it writes for others (a graph output is
// stored as produced).
std::map<ir::TensorId, ShardingSpec> heldBoundary(const ir::Graph &graph, const search::Segment &segment,
                                                  const std::vector<ShardingSpec> &specs)
{
    std::map<ir::TensorId, ShardingSpec> boundary;
    for (auto t : segment.inputs)
        if (std::find(segment.weights.begin(), segment.weights.end(), t) == segment.weights.end() &&
            std::find(segment.derived.begin(), segment.derived.end(), t) == segment.derived.end())
            boundary[t] = specs[t.index()];
    for (auto t : segment.outputs)
        if (graph.tensor(t).role != ir::Role::Output)
            boundary[t] = specs[t.index()];
    return boundary;
}

std::vector<ShardingSpec> weightSpecs(const search::Segment &segment, const std::vector<ShardingSpec> &specs)
{
    std::vector<ShardingSpec> out;
    for (auto w : segment.weights)
        out.push_back(specs[w.index()]);
    return out;
}

const passes::SubgraphClass &classAt(const passes::SubgraphClasses &classes, std::size_t classIndex)
{
    if (classIndex >= classes.classes.size())
        throw TapestryError(Error{"class " + std::to_string(classIndex), {}, "no such subgraph class"});
    return classes.classes[classIndex];
}

search::Segment classSegment(const ir::Graph &graph, const plan::Plan &plan, const passes::SubgraphClass &cls,
                     std::size_t classIndex, std::vector<ir::OpId> ops, const std::string &name)
{
    return search::makeSegment(graph, plan.mesh, name, static_cast<int>(classIndex), static_cast<int>(cls.instances.size()),
                       std::move(ops));
}

// The way the plan stores `part`'s partial sums: the first under which its
// weights derive the plan's specs for what the part writes inside.
sharding::PartialResolution heldWay(const ir::Graph &graph, search::SegmentCoster &coster,
                                    const search::Segment &part, const std::map<ir::TensorId, ShardingSpec> &boundary,
                                    const std::vector<ShardingSpec> &weights, const std::vector<ShardingSpec> &specs)
{
    for (auto way : search::kPartialWays) {
        coster.setPartialResolution(way);
        coster.evaluate(part, boundary, weights);
        bool same = true;
        for (ir::OpId id : part.ops)
            for (ir::TensorId t : graph.op(id).outputs)
                same = same && (boundary.count(t) || coster.spec(t) == specs[t.index()]);
        if (same)
            return way;
    }
    return search::kPartialWays[0];
}

} // namespace

std::map<ir::TensorId, ir::TensorId> counterparts(const ir::Graph &graph, const passes::SubgraphClasses &classes,
                                                  std::size_t classIndex, std::size_t instance)
{
    const auto &cls = classAt(classes, classIndex);
    const auto &rep = cls.instances[cls.representative];
    const auto &inst = cls.instances.at(instance);
    std::map<ir::TensorId, ir::TensorId> same;
    for (std::size_t k = 0; k < rep.ops.size() && k < inst.ops.size(); ++k) {
        const ir::Op &a = graph.op(rep.ops[k]), &b = graph.op(inst.ops[k]);
        for (std::size_t i = 0; i < a.inputs.size() && i < b.inputs.size(); ++i)
            same.emplace(a.inputs[i], b.inputs[i]);
        for (std::size_t o = 0; o < a.outputs.size() && o < b.outputs.size(); ++o)
            same.emplace(a.outputs[o], b.outputs[o]);
    }
    return same;
}

ClassCandidates classCandidates(const ir::Graph &graph, const passes::SubgraphClasses &classes,
                                const plan::Plan &plan, std::size_t classIndex, std::size_t limit,
                                std::int64_t maxCombinations)
{
    const auto &cls = classAt(classes, classIndex);
    const auto &rep = cls.instances[cls.representative];
    const auto specs = plan::planSpecs(plan, graph, plan.model.source);
    const search::Segment whole = classSegment(graph, plan, cls, classIndex, rep.ops, rep.scope);

    ClassCandidates out;
    std::vector<search::Segment> parts;
    if (search::comboCount(whole) <= maxCombinations) {
        parts.push_back(whole);
    } else {
        out.perBlock = true;
        const auto blocks = search::splitAtResidualCuts(graph, rep.ops);
        for (std::size_t b = 0; b < blocks.size(); ++b)
            parts.push_back(classSegment(graph, plan, cls, classIndex, blocks[b],
                                         rep.scope + " [" + std::to_string(b + 1) + "]"));
    }

    search::SegmentCoster coster(graph, plan.mesh, plan.costOptions);
    const double n = static_cast<double>(cls.instances.size());
    const std::int64_t capacity =
        plan.mesh.device.memoryBytes > 0 ? plan.mesh.device.memoryBytes : std::numeric_limits<std::int64_t>::max();
    const auto present = weightSpecs(whole, specs);
    std::vector<ClassCandidate> all;
    std::vector<search::SegmentCost> heldCost;
    std::vector<sharding::PartialResolution> heldWays;
    std::int64_t heldMemory = 0;
    double heldTime = 0;
    for (const search::Segment &part : parts) {
        const auto boundary = heldBoundary(graph, part, specs);
        heldWays.push_back(heldWay(graph, coster, part, boundary, weightSpecs(part, specs), specs));
        coster.setPartialResolution(heldWays.back());
        heldCost.push_back(coster.evaluate(part, boundary, weightSpecs(part, specs)));
        heldMemory += heldCost.back().memory;
        heldTime += heldCost.back().time;
    }
    for (std::size_t p = 0; p < parts.size(); ++p) {
        const search::Segment &part = parts[p];
        const auto boundary = heldBoundary(graph, part, specs);
        const auto held = weightSpecs(part, specs);
        const double othersTime = (heldTime - heldCost[p].time) * n;
        const std::int64_t othersMemory = heldMemory - heldCost[p].memory;
        const std::int64_t restMemory = plan.cost.memory.total() - heldMemory * static_cast<std::int64_t>(n);
        // Every choice, tied weights alike, and the held one even where the
        // plan chose tied weights apart.
        const std::int64_t count = search::comboCount(part);
        if (count > 10 * maxCombinations)
            throw TapestryError(Error{part.name, {}, std::to_string(count) + " choices of " +
                                                         std::to_string(part.weights.size()) +
                                                         " weights in one block are too many to list"});
        auto consider = [&](const std::vector<ShardingSpec> &weights) {
            // The plan's choice as the plan has it; another in its faster
            // way of storing partial sums, as tap would search it.
            ClassCandidate c;
            c.chosen = weights == held;
            search::SegmentCost cost;
            bool costed = false;
            for (auto way : search::kPartialWays) {
                if (c.chosen && way != heldWays[p])
                    continue;
                coster.setPartialResolution(way);
                search::SegmentCost next = coster.evaluate(part, boundary, weights);
                if (!costed || next.time < cost.time) {
                    cost = std::move(next);
                    c.partials = way;
                }
                costed = true;
                if (!c.chosen && !coster.partialsStored())
                    break;  // no partial sum stored: the other way costs the same
            }
            ++out.enumerated;
            // The whole class' weights: this part's choice, the others as held.
            for (std::size_t w = 0; w < whole.weights.size(); ++w) {
                ShardingSpec spec = present[w];
                const auto it = std::find(part.weights.begin(), part.weights.end(), whole.weights[w]);
                if (it != part.weights.end())
                    spec = weights[static_cast<std::size_t>(it - part.weights.begin())];
                c.weights.emplace_back(graph.tensor(whole.weights[w]).name, spec);
            }
            c.time = cost.time * n;
            c.comm = cost.comm * n;
            c.compute = c.time - c.comm;
            c.memory = (cost.memory + othersMemory) * static_cast<std::int64_t>(n);
            c.planMemory = restMemory + c.memory;
            c.fits = c.planMemory <= capacity;
            c.perBlock = out.perBlock;
            // Per block, the class' time counts the other blocks as held.
            c.time += othersTime;
            c.compute += othersTime;
            all.push_back(std::move(c));
            return all.back().chosen;
        };
        bool heldListed = false;
        for (std::int64_t combo = 0; combo < count; ++combo)
            heldListed = consider(search::chosenSpecs(part, search::comboChoice(part, combo))) || heldListed;
        if (!heldListed)
            consider(held);
    }
    // One entry per distinct choice (per block the held choice repeats).
    std::stable_sort(all.begin(), all.end(), [](const ClassCandidate &a, const ClassCandidate &b) {
        return a.time < b.time;
    });
    std::vector<ClassCandidate> unique;
    bool chosenListed = false;
    for (auto &c : all) {
        const bool seen = std::any_of(unique.begin(), unique.end(),
                                      [&](const ClassCandidate &u) { return u.weights == c.weights; });
        if (seen)
            continue;
        if (unique.size() >= limit && !(c.chosen && !chosenListed))
            continue;
        chosenListed = chosenListed || c.chosen;
        unique.push_back(std::move(c));
    }
    out.candidates = std::move(unique);
    return out;
}

plan::Plan applyCandidate(const ir::Graph &graph, const passes::SubgraphClasses &classes, const plan::Plan &plan,
                          std::size_t classIndex, const ClassCandidate &candidate)
{
    const auto &cls = classAt(classes, classIndex);
    const auto &rep = cls.instances[cls.representative];
    const auto specs = plan::planSpecs(plan, graph, plan.model.source);
    const search::Segment whole = classSegment(graph, plan, cls, classIndex, rep.ops, rep.scope);
    std::vector<ShardingSpec> weights;
    for (auto w : whole.weights) {
        const auto &name = graph.tensor(w).name;
        const auto it = std::find_if(candidate.weights.begin(), candidate.weights.end(),
                                     [&](const auto &p) { return p.first == name; });
        if (it == candidate.weights.end())
            throw TapestryError(Error{name, {}, "the candidate does not choose this weight of its class"});
        weights.push_back(it->second);
    }
    // Cost it as it was ranked: the class whole, or block by block with the
    // tensors between blocks held as the plan has them.
    std::vector<search::Segment> parts;
    if (candidate.perBlock)
        for (auto &ops : search::splitAtResidualCuts(graph, rep.ops))
            parts.push_back(classSegment(graph, plan, cls, classIndex, std::move(ops), rep.scope));
    else
        parts.push_back(whole);
    search::SegmentCoster coster(graph, plan.mesh, plan.costOptions);
    std::map<ir::TensorId, ShardingSpec> chosen;  // the representative's tensors
    for (const search::Segment &part : parts) {
        const auto boundary = heldBoundary(graph, part, specs);
        std::vector<ShardingSpec> partWeights;
        for (auto w : part.weights)
            partWeights.push_back(
                weights[static_cast<std::size_t>(std::find(whole.weights.begin(), whole.weights.end(), w) -
                                                 whole.weights.begin())]);
        // The part whose weights the candidate changes takes its way, the
        // others keep the plan's.
        const auto held = weightSpecs(part, specs);
        coster.setPartialResolution(partWeights != held ? candidate.partials
                                                        : heldWay(graph, coster, part, boundary, held, specs));
        coster.evaluate(part, boundary, partWeights);
        for (ir::OpId id : part.ops) {
            const ir::Op &op = graph.op(id);
            for (const auto *list : {&op.inputs, &op.outputs})
                for (auto t : *list)
                    if (!boundary.count(t))
                        chosen[t] = coster.spec(t);
        }
    }

    plan::Plan out = plan;
    for (std::size_t i = 0; i < cls.instances.size(); ++i) {
        const auto same = counterparts(graph, classes, classIndex, i);
        for (const auto &[t, spec] : chosen) {
            const auto it = same.find(t);
            if (it == same.end())
                continue;
            const bool weight = std::find(whole.weights.begin(), whole.weights.end(), t) != whole.weights.end();
            auto &tp = out.specs[graph.tensor(it->second).name];
            tp.spec = spec;
            tp.source = weight ? plan::SpecSource::Override : plan::SpecSource::Search;
        }
    }
    plan::recostPlan(out, graph, plan.model.source);
    return out;
}

} // namespace tapestry::analysis
