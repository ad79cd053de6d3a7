#include "passes/coarsen.h"

#include "passes/graphindex.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace tapestry::passes {

namespace {

using ir::OpId;
using ir::TensorId;

// What the grouping rules need to know of an op type, as bits: each op's type
// is looked up once, and every rule after that is a bit test.
enum Category : std::uint32_t {
    kNorm = 1u << 0,
    kMatMul = 1u << 1,
    kConv = 1u << 2,
    kLoss = 1u << 3,
    kLayout = 1u << 4,     // shapes and moves data without computing: joins the node that makes its input
    kPointwise = 1u << 5,
    kNormPiece = 1u << 6,  // an op of a decomposed LayerNorm / RMSNorm
    kScore = 1u << 7,      // between the scores MatMul and the Softmax: scale, mask, casts
    kShapeOnly = 1u << 8,  // depends on a tensor's shape but not its values
    kReduceMean = 1u << 9,
    kSoftmax = 1u << 10,
    kGather = 1u << 11,
    kPow = 1u << 12,
    kMul = 1u << 13,
    kCast = 1u << 14,
    kRoot = 1u << 15,         // Sqrt, Rsqrt, Reciprocal: what makes a mean a norm
    kPassThrough = 1u << 16,  // Dropout, Cast, Identity between the probabilities and the context MatMul
};

const std::unordered_map<std::string_view, std::uint32_t> &categories()
{
    static const auto table = [] {
        std::unordered_map<std::string_view, std::uint32_t> t;
        auto add = [&t](std::uint32_t bits, std::initializer_list<std::string_view> types) {
            for (auto type : types)
                t[type] |= bits;
        };
        add(kNorm, {"LayerNormalization", "LayerNorm", "RMSNorm", "RMSNormalization",
                    "SimplifiedLayerNormalization", "SkipLayerNormalization",
                    "SkipSimplifiedLayerNormalization", "BatchNormalization", "GroupNormalization",
                    "InstanceNormalization", "LpNormalization"});
        add(kMatMul, {"MatMul", "Gemm", "MatMulInteger", "FusedMatMul", "Einsum"});
        add(kConv, {"Conv", "ConvTranspose", "ConvInteger"});
        add(kLoss, {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "CrossEntropyLoss",
                    "CrossEntropy"});
        add(kLayout, {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Cast",
                      "Dropout", "Split", "Slice", "Expand", "Concat", "Gather", "Tile", "Pad",
                      "CastLike"});
        add(kPointwise, {"Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Rsqrt", "Reciprocal", "Neg",
                         "Exp", "Log", "Abs", "Where", "Max", "Min", "Clip", "Erf", "Relu", "Gelu",
                         "FastGelu", "BiasGelu", "QuickGelu", "Tanh", "Sigmoid", "Silu", "Swish",
                         "Elu", "LeakyRelu", "HardSigmoid", "HardSwish", "Softplus", "Mish",
                         "Softmax", "LogSoftmax", "Sum", "Mean", "ReduceMean", "ReduceSum",
                         "ReduceMax", "GlobalAveragePool", "Equal", "Less", "Greater", "Not", "And",
                         "Or"});
        add(kNormPiece, {"ReduceMean", "Sub", "Pow", "Add", "Sqrt", "Rsqrt", "Reciprocal", "Div",
                         "Mul", "Cast"});
        add(kScore, {"Add", "Sub", "Mul", "Div", "Where", "Cast", "Max", "Min", "Clip"});
        add(kShapeOnly, {"Shape", "Size"});
        add(kReduceMean, {"ReduceMean"});
        add(kSoftmax, {"Softmax"});
        add(kGather, {"Gather"});
        add(kPow, {"Pow"});
        add(kMul, {"Mul"});
        add(kCast, {"Cast"});
        add(kRoot, {"Sqrt", "Rsqrt", "Reciprocal"});
        add(kPassThrough, {"Dropout", "Cast", "Identity"});
        return t;
    }();
    return table;
}

// The live inputs of an op (those computed from graph inputs): how many, and
// the first two, which is all the pattern rules look at.
struct Live {
    int count = 0;
    TensorId first, second;
};

class Coarsener {
public:
    explicit Coarsener(const ir::GraphArrays &graph) : m_index(graph), m_order(m_index.order())
    {
        m_index.requireKnownTensors();
        const std::size_t n = m_index.opCount();
        const auto &table = categories();
        for (std::string_view type : m_index.typeNames()) {
            auto it = table.find(type);
            m_typeCategory.push_back(it == table.end() ? 0 : it->second);
        }
        m_group.assign(n, -1);
        m_next.assign(n, OpId());
        markConstants();
    }

    CoarseGraph run()
    {
        for (OpId op : m_order)
            if (unplaced(op) && is(op, kNorm))
                newGroup(NodeKind::Norm, op);
        for (OpId op : m_order)
            if (unplaced(op) && is(op, kReduceMean))
                findDecomposedNorm(op);
        for (OpId op : m_order)
            if (unplaced(op) && is(op, kSoftmax))
                findAttention(op);
        for (OpId op : m_order)
            if (unplaced(op))
                placeForward(op);
        mergeLayoutGroups();
        placeConstants();
        return build();
    }

private:
    // A group's ops form a list threaded through m_next, so growing a group
    // allocates nothing.
    struct Group {
        NodeKind kind;
        OpId anchor;
        OpId first, last;
        bool layoutOnly = false;  // made only of layout ops with no compute to join
        int mergedInto = -1;
    };

    bool is(OpId op, std::uint32_t category) const
    {
        return (m_typeCategory[m_index.type(op)] & category) != 0;
    }
    bool assigned(OpId op) const { return m_group[op.index()] >= 0; }
    // Not yet in a group and computed from graph inputs.
    bool unplaced(OpId op) const { return !m_constant[op.index()] && !assigned(op); }

    // An op is constant when its result does not depend on the values of a
    // graph input: it reads only parameters, other constants, or shapes.
    void markConstants()
    {
        m_constant.assign(m_index.opCount(), false);
        for (OpId op : m_order) {
            bool constant = true;
            if (!is(op, kShapeOnly))
                for (TensorId t : m_index.inputs(op))
                    if (t.valid() && !isConstantTensor(t))
                        constant = false;
            m_constant[op.index()] = constant;
        }
    }

    bool isConstantTensor(TensorId t) const
    {
        if (m_index.isConstant(t))
            return true;
        const OpId producer = m_index.producer(t);
        return producer.valid() && m_constant[producer.index()];
    }

    Live liveInputs(OpId op) const
    {
        Live live;
        for (TensorId t : m_index.inputs(op)) {
            if (!t.valid() || isConstantTensor(t))
                continue;
            if (live.count == 0)
                live.first = t;
            else if (live.count == 1)
                live.second = t;
            ++live.count;
        }
        return live;
    }

    int newGroup(NodeKind kind, OpId anchor)
    {
        const int g = static_cast<int>(m_groups.size());
        m_groups.push_back(Group{kind, anchor, anchor, anchor});
        m_group[anchor.index()] = g;
        return g;
    }

    void join(int g, OpId op)
    {
        Group &group = m_groups[static_cast<std::size_t>(g)];
        m_next[group.last.index()] = op;
        group.last = op;
        m_group[op.index()] = g;
        // A run of layout ops that computes becomes a pointwise node.
        if (group.layoutOnly && !is(op, kLayout)) {
            group.layoutOnly = false;
            group.kind = NodeKind::Elementwise;
        }
    }

    // Marks for the closure walks, reset by bumping the stamp.
    bool markOp(OpId op) { return std::exchange(m_opMark[op.index()], m_stamp) != m_stamp; }
    bool tensorMarked(TensorId t) const { return m_tensorMark[t.index()] == m_stamp; }

    // x -> ReduceMean/Sub/Pow/Add/Sqrt/Div/Mul -> y: the closure of norm pieces
    // whose live inputs are the norm's input or the closure's own results.
    void findDecomposedNorm(OpId reduce)
    {
        const Live live = liveInputs(reduce);
        if (live.count != 1)
            return;
        // RMSNorm reduces x², LayerNorm's variance reduces (x - mean)²: step
        // back over the square (and a cast) to the normalised tensor.
        TensorId root = live.first;
        for (int step = 0; step < 2; ++step) {
            OpId p = m_index.producer(root);
            if (!p.valid() || !unplaced(p))
                break;
            const Live pl = liveInputs(p);
            const bool square = (is(p, kPow) && pl.count == 1) ||
                                (is(p, kMul) && pl.count == 2 && pl.first == pl.second) ||
                                (is(p, kCast) && pl.count == 1);
            if (!square)
                break;
            root = pl.first;
        }
        if (m_opMark.empty()) {
            m_opMark.assign(m_index.opCount(), 0);
            m_tensorMark.assign(m_index.tensorCount(), 0);
        }
        ++m_stamp;
        m_tensorMark[root.index()] = m_stamp;
        std::vector<OpId> members;
        std::priority_queue<std::pair<int, OpId>, std::vector<std::pair<int, OpId>>, std::greater<>>
            queue;
        auto pushConsumers = [&](TensorId t) {
            for (OpId c : m_index.consumers(t))
                if (markOp(c))
                    queue.emplace(m_index.rank(c), c);
        };
        pushConsumers(root);
        while (!queue.empty()) {
            OpId op = queue.top().second;
            queue.pop();
            if (!unplaced(op) || !is(op, kNormPiece))
                continue;
            bool fits = true;
            for (TensorId t : m_index.inputs(op))
                fits = fits && (!t.valid() || isConstantTensor(t) || tensorMarked(t));
            if (!fits)
                continue;
            members.push_back(op);
            for (TensorId t : m_index.outputs(op)) {
                if (!t.valid())
                    continue;
                m_tensorMark[t.index()] = m_stamp;
                pushConsumers(t);
            }
        }
        bool reduces = false, normalises = false;
        for (OpId op : members) {
            reduces = reduces || is(op, kReduceMean);
            normalises = normalises || is(op, kRoot);
        }
        if (reduces && normalises && members.size() >= 3)
            newGroupOf(NodeKind::Norm, reduce, members);
    }

    void newGroupOf(NodeKind kind, OpId anchor, const std::vector<OpId> &ops)
    {
        const int g = static_cast<int>(m_groups.size());
        m_groups.push_back(Group{kind, anchor, ops.front(), ops.front()});
        m_group[ops.front().index()] = g;
        for (std::size_t i = 1; i < ops.size(); ++i)
            join(g, ops[i]);
    }

    // Walks back from the Softmax over scale and mask ops to a MatMul of two
    // live tensors (the scores); the path is appended to `path`.
    bool findScores(TensorId t, int depth, std::vector<OpId> &path) const
    {
        OpId p = m_index.producer(t);
        if (!p.valid() || !unplaced(p))
            return false;
        if (is(p, kMatMul)) {
            if (liveInputs(p).count != 2)
                return false;
            path.push_back(p);
            return true;
        }
        if (depth == 0 || !is(p, kScore))
            return false;
        path.push_back(p);
        for (TensorId in : m_index.inputs(p))
            if (in.valid() && !isConstantTensor(in) && findScores(in, depth - 1, path))
                return true;
        path.pop_back();
        return false;
    }

    void findAttention(OpId softmax)
    {
        const Live live = liveInputs(softmax);
        if (live.count != 1)
            return;
        std::vector<OpId> members;
        if (!findScores(live.first, 6, members))
            return;
        members.push_back(softmax);
        TensorId probs = m_index.outputs(softmax).empty() ? TensorId() : m_index.outputs(softmax)[0];
        for (int step = 0; step < 4 && probs.valid(); ++step) {
            const auto &consumers = m_index.consumers(probs);
            if (consumers.size() != 1 || assigned(consumers[0]))
                return;
            OpId c = consumers[0];
            if (is(c, kMatMul) && liveInputs(c).count == 2 && m_index.inputs(c)[0] == probs) {
                members.push_back(c);
                newGroupOf(NodeKind::Attention, softmax, members);
                return;
            }
            if (!is(c, kPassThrough))
                return;
            members.push_back(c);
            probs = m_index.outputs(c).empty() ? TensorId() : m_index.outputs(c)[0];
        }
    }

    // The node its live inputs come from, when they all come from one.
    int singleSource(OpId op) const
    {
        int source = -1;
        for (TensorId t : m_index.inputs(op)) {
            if (!t.valid() || isConstantTensor(t))
                continue;
            OpId p = m_index.producer(t);
            if (!p.valid() || !assigned(p))
                return -1;
            int g = root(m_group[p.index()]);
            if (source >= 0 && g != source)
                return -1;
            source = g;
        }
        return source;
    }

    int root(int g) const
    {
        while (m_groups[static_cast<std::size_t>(g)].mergedInto >= 0)
            g = m_groups[static_cast<std::size_t>(g)].mergedInto;
        return g;
    }

    void placeForward(OpId op)
    {
        const auto inputs = m_index.inputs(op);
        if (is(op, kMatMul)) {
            const bool weighted = static_cast<std::size_t>(liveInputs(op).count) < inputs.size();
            newGroup(weighted ? NodeKind::Linear : NodeKind::MatMul, op);
            return;
        }
        if (is(op, kConv)) {
            newGroup(NodeKind::Conv, op);
            return;
        }
        if (is(op, kLoss)) {
            newGroup(NodeKind::Loss, op);
            return;
        }
        if (is(op, kGather) && !inputs.empty() && inputs[0].valid() && isConstantTensor(inputs[0])) {
            newGroup(NodeKind::Embedding, op);
            return;
        }
        const bool layout = is(op, kLayout);
        if (layout || is(op, kPointwise)) {
            const int source = singleSource(op);
            if (source >= 0 && m_groups[static_cast<std::size_t>(source)].kind != NodeKind::Norm) {
                join(source, op);
                return;
            }
        }
        const int g = newGroup(layout                  ? NodeKind::Other
                               : is(op, kPointwise) ? NodeKind::Elementwise
                                                       : NodeKind::Other,
                               op);
        m_groups[static_cast<std::size_t>(g)].layoutOnly = layout;
    }

    // A run of reshapes or transposes after a norm or a graph input reads
    // better as part of the node that consumes it (the next Linear).
    void mergeLayoutGroups()
    {
        for (std::size_t gi = m_groups.size(); gi-- > 0;) {
            Group &g = m_groups[gi];
            if (!g.layoutOnly)
                continue;
            bool allLayout = true;
            for (OpId op = g.first; op.valid(); op = m_next[op.index()])
                allLayout = allLayout && is(op, kLayout);
            if (!allLayout)
                continue;
            int target = -1;
            bool single = true;
            for (OpId op = g.first; op.valid(); op = m_next[op.index()])
                for (TensorId t : m_index.outputs(op)) {
                    if (!t.valid())
                        continue;
                    if (m_index.role(t) == ir::Role::Output)
                        single = false;
                    for (OpId c : m_index.consumers(t)) {
                        if (!assigned(c))
                            continue;
                        int cg = root(m_group[c.index()]);
                        if (cg == static_cast<int>(gi))
                            continue;
                        if (target >= 0 && cg != target)
                            single = false;
                        target = cg;
                    }
                }
            if (!single || target < 0 || m_groups[static_cast<std::size_t>(target)].kind == NodeKind::Norm)
                continue;
            g.mergedInto = target;
        }
    }

    // Constants join the node of their first reader, walking back so that a
    // chain of constants follows the node its last link feeds.
    void placeConstants()
    {
        for (auto it = m_order.rbegin(); it != m_order.rend(); ++it) {
            OpId op = *it;
            if (!m_constant[op.index()])
                continue;
            OpId first;
            for (TensorId t : m_index.outputs(op)) {
                if (!t.valid())
                    continue;
                for (OpId c : m_index.consumers(t))
                    if (assigned(c) && (!first.valid() || m_index.rank(c) < m_index.rank(first)))
                        first = c;
            }
            if (first.valid())
                m_group[op.index()] = root(m_group[first.index()]);
            else
                newGroup(NodeKind::Other, op);
        }
    }

    CoarseGraph build()
    {
        // Ops of merged groups move to their target; nodes are numbered in
        // the order of their first op so ids follow the graph's flow, which
        // is the order in which a walk over m_order first meets each group.
        // Members are laid out group by group in one array (a counting
        // sort), each group's in topological order.
        std::vector<std::size_t> start(m_groups.size() + 1, 0);
        std::vector<std::size_t> groups;
        for (OpId op : m_order) {
            const auto g = static_cast<std::size_t>(root(m_group[op.index()]));
            m_group[op.index()] = static_cast<int>(g);
            if (start[g + 1]++ == 0)
                groups.push_back(g);
        }
        for (std::size_t g = 0; g < m_groups.size(); ++g)
            start[g + 1] += start[g];
        std::vector<OpId> members(m_order.size());
        for (OpId op : m_order)
            members[start[static_cast<std::size_t>(m_group[op.index()])]++] = op;
        CoarseGraph coarse;
        coarse.reserve(groups.size(), members.size());
        for (std::size_t g : groups) {
            const OpId anchor = m_groups[g].anchor;
            const std::size_t end = start[g], begin = g == 0 ? 0 : start[g - 1];
            coarse.addNode(m_groups[g].kind, scopeOf(m_index.name(anchor)), anchor,
                           std::span<const OpId>(members.data() + begin, end - begin));
        }
        coarse.connect(std::move(m_index));  // the last use of the index here
        return coarse;
    }

    GraphIndex m_index;
    const std::vector<OpId> &m_order;
    std::vector<std::uint32_t> m_typeCategory;  // by GraphIndex type number
    std::vector<bool> m_constant;
    std::vector<int> m_group;
    std::vector<OpId> m_next;  // the next op of the same group, in joining order
    std::vector<Group> m_groups;
    std::vector<std::uint32_t> m_opMark, m_tensorMark;
    std::uint32_t m_stamp = 0;
};

} // namespace

CoarseGraph Coarsen::run(const ir::GraphArrays &graph) const
{
    if (m_repeats == Repeats::Stamp) {
        if (const auto run = findRepeatRun(graph, m_minCopies)) {
            auto reduction = std::make_shared<CoarseReduction>(graph, *run);
            reduction->coarse = this->run(reduction->reduced.arrays());  // which may stamp another run
            if (auto stamped = CoarseGraph::stamped(graph, std::move(reduction)))
                return std::move(*stamped);
        }
    }
    return Coarsener(graph).run();
}

} // namespace tapestry::passes
