#pragma once

#include "cost/activationmemory.h"
#include "cost/chargerules.h"
#include "cost/costoptions.h"
#include "cost/plancoster.h"
#include "cost/plancost.h"
#include "ir/graph.h"
#include "passes/coarsegraph.h"
#include "search/activationlayout.h"
#include "search/segment.h"
#include "sharding/mesh.h"
#include "sharding/propagation.h"
#include "sharding/shardingspec.h"
#include "sharding/strategy.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace tapestry::search {

// The ways a segment may store the partial sums its ops produce (row-
// parallel matmuls' outputs), searched as a choice of each subgraph class:
// all-reduced to replicas, or reduce-scattered over the sequence (Megatron's
// sequence parallelism).
inline constexpr sharding::PartialResolution kPartialWays[] = {sharding::PartialResolution::Replicate,
                                                               sharding::PartialResolution::ShardSequence};

// One segment under one choice of weights and boundary specs, costed for a
// single copy.
struct SegmentCost {
    // compute + communication + optimizer update, s, the backward pass'
    // compute and communication weighted as SegmentCoster::setBackwardWeights says
    double time = 0;
    double comm = 0;             // s
    // The backward pass' compute and communication within them, s,
    // unweighted: what CostOptions::overlap runs side by side.
    double backwardCompute = 0, backwardComm = 0;
    std::int64_t memory = 0;     // model states and activations per device, bytes
    std::int64_t parameterMemory = 0;
    cost::PlanCost breakdown;    // by op and collective, for explanations
};

// A choice of a segment's weights kept by SegmentCoster::searchWeights,
// costed as evaluate() costs it.
struct WeightChoice {
    double time = 0;
    double comm = 0;
    std::int64_t memory = 0;
    // Per weight of the segment, the index of its spec in Segment::choices;
    // then per Segment::stored tensor, how it is stored (0: as produced).
    std::vector<std::uint16_t> choice;
};

// The specs `choice` picks from each weight's choices.
std::vector<sharding::ShardingSpec> chosenSpecs(const Segment &segment, const std::vector<std::uint16_t> &choice);
// The Segment::stored tensors `choice` stores otherwise than as produced,
// with their specs: what evaluate() takes in its boundary to store them so.
std::vector<std::pair<ir::TensorId, sharding::ShardingSpec>> storedSpecs(const Segment &segment,
                                                                        const std::vector<std::uint16_t> &choice);
// The number of choices of a segment's weights, tied weights counted once,
// times the ways of storing its Segment::stored tensors; the largest int64
// when it is larger.
std::int64_t comboCount(const Segment &segment);
// Choice `combo` (0 <= combo < comboCount) in mixed radix over the untied
// weights, the first least significant, then the stored tensors; tied
// weights take their leader's.
std::vector<std::uint16_t> comboChoice(const Segment &segment, std::int64_t combo);

// Costs segments against one working copy of the graph's specs, so that an
// evaluation touches only the segment's tensors and takes time in
// proportion to the segment, not the graph: that is what keeps the search
// flat in layer count.
class SegmentCoster {
public:
    SegmentCoster(const ir::Graph &graph, const sharding::Mesh &mesh, const cost::CostOptions &options);
    // The same with what `derived` (a whole plan's coster of the graph, on
    // `mesh` with `options`) derived from the graph taken, not derived again.
    SegmentCoster(const ir::Graph &graph, const sharding::Mesh &mesh, const cost::CostOptions &options,
                  const cost::PlanCoster &derived);

    // Propagates specs through `segment` from `boundary` (the stored specs
    // of its inputs and of those outputs whose spec the caller fixes) and
    // `weights` (one spec per segment weight), derives its small
    // parameters, and costs it. The resulting specs stay readable through
    // spec() until the next call.
    SegmentCost evaluate(const Segment &segment, const std::map<ir::TensorId, sharding::ShardingSpec> &boundary,
                         const std::vector<sharding::ShardingSpec> &weights, bool withBreakdown = false);
    // The choices of the segment's weights, with `boundary` as evaluate()
    // takes it, that can be part of a fastest or least-communication plan:
    // every choice whose weight memory fits `weightCapacity` and that no
    // other beats in time or communication together with memory. Found by a
    // dynamic program over the segment's ops in topological order, whose
    // state is the specs of the tensors still to be read (plus the reshards
    // already charged for them), so that weights read by different ops are
    // chosen independently once their activations agree; an op's own costs
    // are memoised by its input specs across calls. With `linkSpecs`: one
    // answer per stored spec of output `link` (which no op here may read;
    // `boundary` leaves it out), else one answer. `readLater`: weights a
    // later segment reads again (a tied embedding), whose plans are kept
    // apart by the weights' specs rather than pruned against each other.
    std::vector<std::vector<WeightChoice>> searchWeights(
        const Segment &segment, const std::map<ir::TensorId, sharding::ShardingSpec> &boundary,
        std::int64_t weightCapacity, ir::TensorId link = {}, const std::vector<sharding::ShardingSpec> &linkSpecs = {},
        const std::vector<ir::TensorId> &readLater = {});
    // Which tensors a gradient flows into: cost::gradientFlow (variant 0)
    // or another variant added here. A class's representative is costed
    // for its copies, so an input of it that the copies' counterparts
    // take a gradient through (the first layer reads the model's input,
    // which takes none, the others the layer before) is costed as theirs.
    // Costs memoised across calls are kept apart by variant.
    int addGradientFlow(std::vector<bool> flow)
    {
        if (m_flows.empty())
            m_flows.push_back(m_flow);
        m_flows.push_back(std::move(flow));
        return static_cast<int>(m_flows.size() - 1);
    }
    void useGradientFlow(int variant)
    {
        if (variant == m_flowVariant)
            return;
        m_flow = m_flows[static_cast<std::size_t>(variant)];
        m_flowVariant = variant;
    }
    // The weights of the backward pass' compute and of its communication
    // in the time searchWeights and evaluate() give (1 and 1 by default:
    // a step's compute plus its communication, as without overlap). With
    // CostOptions::overlap a step takes the larger of the two, not their
    // sum, and no sum of per-block times says which plan is faster; tap
    // searches again with one of them weighted down and keeps the plan
    // the whole step prefers (tapSearch). Set before the first search or
    // evaluation: memoised costs are kept with the weights they had.
    void setBackwardWeights(double compute, double comm)
    {
        m_backwardCompute = compute;
        m_backwardComm = comm;
    }
    // Whether memory can decide between plans (default). When the caller
    // knows every plan fits, searchWeights keeps per state only the fastest
    // and the least-communication partial plan (ties: less memory, then
    // the first found), which finds the same fastest and least-communication
    // plans from far smaller fronts.
    void setMemoryBinds(bool binds) { m_memoryBinds = binds; }
    bool memoryBinds() const { return m_memoryBinds; }
    // Whether searchWeights drops partials that states having paid for
    // more reshards dominate (default; SearchOptions::dropDominatedCharges).
    void setDropDominatedCharges(bool drop) { m_dropDominatedCharges = drop; }
    // Whether searchWeights runs a mixture's experts as the first one,
    // counted once per expert (default; SearchOptions::repeatsOnce).
    void setRepeatsOnce(bool once) { m_repeatsOnce = once; }
    // Polled before each op searchWeights extends (from whichever thread
    // the coster runs on, so it must be safe to call from any): when it
    // answers true the search stops with a TapestryError saying so.
    void setCancelled(std::function<bool()> cancelled) { m_cancelled = std::move(cancelled); }
    // How the partial sums ops produce inside a segment are stored (all-
    // reduced, or reduce-scattered over the sequence as Megatron's sequence
    // parallelism does); outputs the boundary fixes are stored as fixed.
    // partialsStored() tells whether any evaluation since the last
    // setPartialResolution stored one, that is whether another resolution
    // could cost anything differently.
    void setPartialResolution(sharding::PartialResolution partial)
    {
        m_partial = partial;
        m_partialsStored = false;
    }
    bool partialsStored() const { return m_partialsStored; }
    // For a caller that answers a search from what an earlier one found:
    // that search stored a partial sum.
    void notePartialsStored() { m_partialsStored = true; }
    // Parameter bytes per device of `weights` alone: a lower bound of the
    // segment's memory, checked before costing.
    std::int64_t weightMemory(const Segment &segment, const std::vector<sharding::ShardingSpec> &weights) const;

    const sharding::ShardingSpec &spec(ir::TensorId t) const { return m_specs[t.index()]; }
    // A coster for another thread: this one's settings, working specs and
    // caches, searchWeights' memo of its own (empty), its counts at zero.
    SegmentCoster fork() const
    {
        SegmentCoster copy(*this);
        copy.m_memo.reset();
        copy.m_evaluations = copy.m_peakStates = copy.m_capacitySkips = 0;
        copy.m_partialsStored = false;
        return copy;
    }
    std::size_t evaluations() const { return m_evaluations; }
    // The most states searchWeights held after one op, over every call.
    std::size_t peakStates() const { return m_peakStates; }
    // Partial plans searchWeights dropped for weights over the capacity it
    // was given: a faster plan may have been among them.
    std::size_t capacitySkips() const { return m_capacitySkips; }

private:
    // Whether the graph has a transformer layer (m_attention), and the
    // widths of each (m_widths).
    void findAttention();
    // cost::transformerLayer for the score Softmax `softmax` under m_specs.
    std::optional<cost::TransformerLayerShape> layerOf(ir::OpId softmax, bool sequenceParallel) const;
    std::vector<cost::LayerWidths> m_widths;  // by op id: cost::layerWidths of a Softmax

    const ir::Graph &m_graph;
    const sharding::Mesh &m_mesh;
    cost::CostOptions m_options;
    std::vector<bool> m_flow;
    // The variants of m_flow (addGradientFlow): [0] the graph's own, kept
    // once another is added; m_flowVariant names the one in m_flow.
    std::vector<std::vector<bool>> m_flows;
    int m_flowVariant = 0;
    bool m_attention = false;  // activations by Korthikanti's formula (else saved tensors)
    std::vector<std::uint8_t> m_roles;  // by op id: cost::recomputeRoles()
    std::vector<cost::Recompute> m_modes;  // by op id: cost::recomputeModes()
    std::vector<double> m_shares;       // by op id: cost::layerShares()
    std::vector<double> m_parameterShares;  // by tensor id: cost::parameterShares()
    double m_backwardCompute = 1, m_backwardComm = 1;  // setBackwardWeights
    // A parameter charge's seconds with its backward collectives weighted.
    double weightedSeconds(const cost::ParameterCharge &charge) const
    {
        return charge.seconds() - (1 - m_backwardComm) * charge.zeroBackward;
    }
    bool m_memoryBinds = true;
    std::function<bool()> m_cancelled;
    bool m_dropDominatedCharges = true;
    bool m_repeatsOnce = true;
    sharding::PartialResolution m_partial = sharding::PartialResolution::Replicate;
    bool m_partialsStored = false;
    std::vector<sharding::ShardingSpec> m_specs;

    // One op's costs given its stored input specs, for searchWeights.
    // Only what the search reads of it (an op's strategy, with its
    // collectives and rule, is many allocations, kept once per outcome).
    struct OpOutcome {
        // Per input, the specs interned (see intern()) for the search's
        // state, side by side: a hit reads them together.
        struct Input {
            std::int32_t stored = 0;    // with the small parameters it decides
            std::int32_t need = 0;      // what the op computes on
            std::int32_t gradient = 0;  // what its gradient comes out as
            bool data = false;          // false for shape operands and the like
            // Stored as `stored`: its reshard to `need`, and its gradient's
            // back (s, once each).
            double needSeconds = 0, gradientSeconds = 0;
            double gradientForward = 0;  // of gradientSeconds, ZeRO's gather in the forward pass
        };
        struct Output {
            std::int32_t stored = 0;
            bool partial = false;  // the strategy produces a partial sum
        };
        std::vector<Input> inputs;
        std::vector<Output> outputs;
        sharding::ShardingSpec firstInput;  // stored, with the small parameters it decides
        double time = 0;  // compute, its internal collectives, its outputs' reshards (both passes; weighted)
        double comm = 0;
        bool flows = false;
        bool partialsStored = false;  // an output not fixed was produced as a partial sum
        // The charges of the small parameters this op decides: model-state
        // bytes per device, optimizer and ZeRO seconds.
        double derivedBytes = 0, derivedSeconds = 0;
        double recomputeComm = 0;  // its forward collectives run again in the backward pass, times
    };
    // Interned input specs, which of them are small parameters this op
    // decides, interned fixed output specs (-1: stored as produced).
    const OpOutcome &opOutcome(ir::OpId id, const std::vector<std::int32_t> &inputs, const std::vector<bool> &pending,
                               const std::vector<std::int32_t> &fixed);
    double reshardTime(ir::TensorId t, std::int32_t from, std::int32_t to);
    // Of a weight gradient's reshard from interned `from` to the gradient
    // spec of interned `stored`, what ZeRO runs in the forward pass
    // (cost::zeroForwardSeconds).
    double zeroForward(ir::TensorId t, std::int32_t from, std::int32_t stored);
    // An activation's bytes kept for the backward pass, stored as the interned `spec`.
    std::int64_t savedBytes(ir::TensorId t, std::int32_t spec) const;
    // Specs as small integers, so that the search's states compare and copy
    // as plain numbers; gradientId() is the interned gradientSpec().
    std::int32_t intern(const sharding::ShardingSpec &spec);
    // The op's sharding rule, derived once.
    const std::optional<sharding::DimMap> &ruleOf(ir::OpId op);
    std::map<ir::OpId, std::optional<sharding::DimMap>> m_rules;
    std::int32_t gradientId(std::int32_t spec);
    // By op, then opOutcome()'s arguments: one table per op, its keys
    // (of one length) back to back in one array and compared in place, not
    // each in an allocation of its own that a hit first had to reach. The
    // outcomes stay where they are as they grow (a deque), found through
    // an open-addressing index of (hash, entry + 1) slots, 0 empty, at
    // most half full.
    struct OutcomeEntry {
        std::uint32_t key;  // its key's offset in the table's keys
        OpOutcome outcome;
    };
    struct OutcomeTable {
        std::deque<OutcomeEntry> entries;
        std::vector<std::pair<std::size_t, std::uint32_t>> index;
        std::vector<std::int32_t> keys;  // each of one op's keys is as long
    };
    std::vector<OutcomeTable> m_outcomes;  // by op id
    // By op, its interned input specs and which small parameters it
    // decides: its strategy, and its inputs with those parameters as it
    // decides them. Outcomes differ further by the outputs the search
    // fixes, which do not change the strategy: T5 on a 3D mesh resolves
    // one strategy for every 6 outcomes.
    struct Resolved {
        sharding::OpStrategy strategy;
        std::vector<sharding::ShardingSpec> stored;
    };
    struct IntsHash {
        std::size_t operator()(const std::vector<std::int32_t> &v) const noexcept;
    };
    std::unordered_map<std::vector<std::int32_t>, Resolved, IntsHash> m_resolved;
    std::vector<std::int32_t> m_resolvedKey;  // reused
    std::vector<std::int32_t> m_outcomeKey;  // reused: most lookups are hits and allocate nothing
    struct ReshardKey {
        std::int32_t tensor, from, to;
        friend bool operator==(const ReshardKey &, const ReshardKey &) = default;
    };
    struct ReshardHash {
        std::size_t operator()(const ReshardKey &k) const noexcept
        {
            std::uint64_t h = static_cast<std::uint32_t>(k.tensor);
            h = h * 0x9E3779B97F4A7C15ull ^ static_cast<std::uint32_t>(k.from);
            h = h * 0x9E3779B97F4A7C15ull ^ static_cast<std::uint32_t>(k.to);
            return static_cast<std::size_t>(h ^ (h >> 29));
        }
    };
    std::unordered_map<ReshardKey, double, ReshardHash> m_reshards;
    std::map<sharding::ShardingSpec, std::int32_t> m_specIds;
    std::vector<sharding::ShardingSpec> m_interned;
    std::vector<std::int32_t> m_gradientIds;  // -1 until asked
    // searchWeights' per-tensor scratch, valid where m_readStamp is the call's.
    std::vector<std::uint32_t> m_readStamp;
    std::vector<std::size_t> m_lastRead;
    std::vector<bool> m_saved;
    std::vector<std::int32_t> m_weightOf;  // the weight's index in the segment, or below 0
    std::uint32_t m_stamp = 0;
    std::size_t m_evaluations = 0;
    std::size_t m_peakStates = 0;
    std::size_t m_capacitySkips = 0;
    // What searchWeights keeps across calls: the fronts after a segment's
    // ops that see nothing of a call but what they read from outside, by
    // those specs, and the choices its partial plans made (segmentcost.cpp).
    struct Memo;
    std::shared_ptr<Memo> m_memo;
};

// Splits `ops` (topological order) into blocks at residual-stream tensors:
// an Add's output, or a norm's output an Add reads (post-norm layers), read
// by two or more ops, that is the only tensor written before it and read
// after it.
std::vector<std::vector<ir::OpId>> splitAtResidualCuts(const ir::Graph &graph, const std::vector<ir::OpId> &ops);

// A segment of `ops` with its weights, derived parameters, boundary tensors
// and weight choices on `mesh`.
Segment makeSegment(const ir::Graph &graph, const sharding::Mesh &mesh, std::string name, int classIndex,
                    int instances, std::vector<ir::OpId> ops);
// Fills segment.stored: every tensor one node of `coarse` writes and
// another reads inside the segment may be stored in each of `layouts`, as
// exact may store it. A segment with nested repeats (tied weights) keeps
// its inner outputs as the strategy rules store them.
// Adds to segment.stored the graph inputs it reads (token ids, labels),
// each stored replicated (choice 0, as the boundary must give it) or in
// any other of `layouts`, chosen where it is first read at no cost: the
// data comes in the layout the plan stores it in. Only for inputs no
// other segment reads; with `only`, only for those it names, which the
// boundary gives in a class's layout: they may be stored replicated too.
void allowInputLayouts(Segment &segment, const ir::Graph &graph, const sharding::Mesh &mesh,
                       const std::vector<ActivationLayout> &layouts, const std::vector<ir::TensorId> *only = nullptr);
// The bound on the states of `segment`'s per-op search, summed over its
// ops in the order the search takes them: the product of the choices each
// live tensor's spec may vary with (weights, Segment::stored tensors).
double searchStateBound(const ir::Graph &graph, const Segment &segment);
void allowStoredLayouts(Segment &segment, const ir::Graph &graph, const passes::CoarseGraph &coarse,
                        const sharding::Mesh &mesh, const std::vector<ActivationLayout> &layouts);

} // namespace tapestry::search
