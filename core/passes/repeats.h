#pragma once

#include "ir/graph.h"
#include "ir/ids.h"

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace tapestry::passes {

// How a pass treats a run of like copies: analyse a few of them and stamp
// the result onto the rest, or walk every op (the reference the stamped
// result equals).
enum class Repeats { Stamp, Walk };

// A run of identical copies of a block laid end to end in the op ids: the
// layers of a transformer stack. Copy k holds ops [begin + k·period,
// begin + (k+1)·period), and each op of copy k+1 is the op `period` ids
// before it, moved by one copy: the same type, attributes and tensor forms,
// reading the same slot of the moved producer (or the very same tensor, for
// what every copy shares: a mask, a graph input, tied weights), and its own
// copy of each parameter. Nothing reads a copy's tensors from more than one
// copy later, and what follows the run reads only its last three copies.
//
// Such a run is analysed on its first four and last three copies alone
// (ReducedGraph), and what the analysis finds on copy 3 is stamped onto
// every copy between: TAP's point that the work follows the unique blocks,
// not their repeats.
//
// Why that is what walking every op finds: coarsening decides an op's node
// from its own kind and what is within a few ops of it (its producers'
// nodes, its readers, a norm's or an attention core's closure), and each
// copy reads only itself and the copy before. In the reduced graph copy 3
// has interior copies on both sides, as every stamped copy has, so it is
// decided as they are. A node reaching from the template into another copy
// would break that, and the stamping then refuses and the graph is walked.
// Pruning compares scopes structurally, and copies are structurally equal by
// construction; only how many of them there are differs, which is why it is
// stamped only while seven copies already count as repeated. Tests compare
// the stamped and walked results node for node and instance for instance.
struct RepeatRun {
    std::int32_t begin = 0;
    std::int32_t period = 0;
    std::int32_t copies = 0;
    // Each copy is exactly one scope of the op names ("transformer/h.7"), a
    // numbered sibling of the others, and no op outside the run sits in the
    // scope of a copy between the kept ones: then pruning, which reads
    // scopes, may run on the reduced graph too.
    bool scopesAligned = false;

    std::int32_t end() const { return begin + period * copies; }
};

// The longest run in `graph` with at least `minCopies` copies (no fewer
// than ReducedGraph::kKept + 1), checked op by op as above; none when the
// graph has none, or when its ids are not in a topological order.
std::optional<RepeatRun> findRepeatRun(const ir::GraphArrays &graph, std::int32_t minCopies);
std::optional<RepeatRun> findRepeatRun(const ir::GraphArrays &graph);  // ReducedGraph::kMinCopies
inline std::optional<RepeatRun> findRepeatRun(const ir::Graph &graph) { return findRepeatRun(graph.arrays()); }

// The graph with a run's middle copies taken out: ops before the run, copies
// 0..3, copies K-3..K-1 (copy K-3 reading copy 3 where it read copy K-4),
// and ops after the run. Ops keep their ids up to the end of copy 3 (the
// template) and move down by (K-7)·period after it; tensors are renumbered
// in the order of their ids. Only the arrays the passes read are built
// (ir::GraphArrays), with no per-op records.
class ReducedGraph {
public:
    static constexpr std::int32_t kHead = 4;  // copies kept at the start; the last of them is the template
    static constexpr std::int32_t kTail = 3;  // copies kept at the end
    static constexpr std::int32_t kKept = kHead + kTail;
    static constexpr std::int32_t kTemplate = kHead - 1;
    // Fewer copies are walked: reducing the graph and stamping cost more
    // than walking the copies it saves until a run is some three times the
    // copies kept. Coarsen + prune of a GPT-2 stack, walked and stamped:
    // 12 layers 70 and 91 us, 16 layers 91 and 99, 20 layers 112 and 107,
    // 24 layers 135 and 115, 48 layers 268 and 162.
    static constexpr std::int32_t kMinCopies = 3 * kKept;

    ReducedGraph(const ir::GraphArrays &graph, const RepeatRun &run);

    const ir::GraphArrays &arrays() const { return m_arrays; }
    const RepeatRun &run() const { return m_run; }

    // Where a reduced op lies: before or in copies 0..2 (kept as they are),
    // in the template copy, or in the last copies or after the run (moved).
    enum class Part { Head, Template, Tail };
    Part partOf(ir::OpId reduced) const;
    std::int32_t templateBegin() const { return m_run.begin + kTemplate * m_run.period; }
    std::int32_t templateEnd() const { return templateBegin() + m_run.period; }
    // Copies stamped from the template, the template's own included:
    // kTemplate .. copies - kTail - 1.
    std::int32_t stampedCopies() const { return m_run.copies - kKept + 1; }
    // Op ids move by this between the reduced graph's tail and the graph's.
    std::int32_t tailShift() const { return (m_run.copies - kKept) * m_run.period; }

    // The graph's op for a reduced op outside the template; for a template
    // op, its copy `copy` (kTemplate .. copies - kTail - 1).
    ir::OpId opOf(ir::OpId reduced) const;
    ir::OpId opOf(ir::OpId reduced, std::int32_t copy) const
    {
        return ir::OpId(reduced.value + (copy - kTemplate) * m_run.period);
    }
    // The graph's tensor for a reduced tensor; for one the template owns
    // (made there or in the copy before, or a parameter of its own), its
    // counterpart in copy `copy`. `arrays` is the graph's.
    ir::TensorId tensorOf(ir::TensorId reduced) const { return m_tensorOf[reduced.index()]; }
    ir::TensorId tensorOf(ir::TensorId reduced, std::int32_t copy, const ir::GraphArrays::View &arrays) const
    {
        const Locator &l = m_locator[reduced.index()];
        if (l.op < 0 || copy == kTemplate)
            return m_tensorOf[reduced.index()];
        const ir::OpId o(l.op + (copy - kTemplate) * m_run.period);
        return l.output ? arrays.outputs(o)[static_cast<std::size_t>(l.slot)]
                        : arrays.inputs(o)[static_cast<std::size_t>(l.slot)];
    }
    // The graph's tensor for a reduced tensor as the tail reads it: what
    // the template makes is, for the tail, made by the last stamped copy.
    ir::TensorId tailTensorOf(ir::TensorId reduced, const ir::GraphArrays::View &arrays) const
    {
        const Locator &l = m_locator[reduced.index()];
        if (l.op >= templateBegin() && l.output)
            return tensorOf(reduced, m_run.copies - kTail - 1, arrays);
        return m_tensorOf[reduced.index()];
    }

private:
    // Where a template-owned tensor is found in every copy: the slot of the
    // op (a template op, or one of the copy before) that writes or reads it.
    struct Locator {
        std::int32_t op = -1;  // graph op id in copy kTemplate (or kTemplate - 1); -1: shared by all copies
        std::int32_t slot = 0;
        bool output = false;
    };

    RepeatRun m_run;
    ir::GraphArrays m_arrays;
    std::vector<ir::TensorId> m_tensorOf;
    std::vector<Locator> m_locator;  // by reduced tensor
};

} // namespace tapestry::passes
