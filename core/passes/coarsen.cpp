#include "passes/coarsen.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <set>
#include <string>

namespace tapestry::passes {

namespace {

using ir::OpId;
using ir::TensorId;

const std::set<std::string, std::less<>> kNormTypes = {
    "LayerNormalization", "LayerNorm", "RMSNorm", "RMSNormalization", "SimplifiedLayerNormalization",
    "SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "BatchNormalization",
    "GroupNormalization", "InstanceNormalization", "LpNormalization"};
const std::set<std::string, std::less<>> kMatMulTypes = {"MatMul", "Gemm", "MatMulInteger",
                                                         "FusedMatMul"};
const std::set<std::string, std::less<>> kConvTypes = {"Conv", "ConvTranspose", "ConvInteger"};
const std::set<std::string, std::less<>> kLossTypes = {
    "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "CrossEntropyLoss", "CrossEntropy"};
// Shapes and moves data without computing: joins the node that makes its input.
const std::set<std::string, std::less<>> kLayoutTypes = {
    "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Cast", "Dropout",
    "Split", "Slice", "Expand", "Concat", "Gather", "Tile", "Pad", "CastLike"};
const std::set<std::string, std::less<>> kPointwiseTypes = {
    "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Rsqrt", "Reciprocal", "Neg", "Exp", "Log", "Abs",
    "Where", "Max", "Min", "Clip", "Erf", "Relu", "Gelu", "FastGelu", "BiasGelu", "QuickGelu",
    "Tanh", "Sigmoid", "Silu", "Swish", "Elu", "LeakyRelu", "HardSigmoid", "HardSwish",
    "Softplus", "Mish", "Softmax", "LogSoftmax", "Sum", "Mean", "ReduceMean", "ReduceSum",
    "ReduceMax", "GlobalAveragePool", "Equal", "Less", "Greater", "Not", "And", "Or"};
// Ops of a decomposed LayerNorm / RMSNorm.
const std::set<std::string, std::less<>> kNormPieceTypes = {
    "ReduceMean", "Sub", "Pow", "Add", "Sqrt", "Rsqrt", "Reciprocal", "Div", "Mul", "Cast"};
// Ops between the scores MatMul and the Softmax: scale, mask, casts.
const std::set<std::string, std::less<>> kScoreTypes = {"Add", "Sub", "Mul", "Div", "Where",
                                                        "Cast", "Max", "Min", "Clip"};
// Ops that depend on a tensor's shape but not its values.
const std::set<std::string, std::less<>> kShapeOnlyTypes = {"Shape", "Size"};

class Coarsener {
public:
    explicit Coarsener(const ir::Graph &graph) : m_graph(graph)
    {
        m_order = orderOps();
        m_rank.assign(graph.opCount(), 0);
        for (std::size_t i = 0; i < m_order.size(); ++i)
            m_rank[m_order[i].index()] = static_cast<int>(i);
        m_group.assign(graph.opCount(), -1);
        markConstants();
    }

    CoarseGraph run()
    {
        for (OpId op : m_order)
            if (!m_constant[op.index()] && !assigned(op) && kNormTypes.count(type(op)))
                newGroup(NodeKind::Norm, op, {op});
        for (OpId op : m_order)
            if (!m_constant[op.index()] && !assigned(op) && type(op) == "ReduceMean")
                findDecomposedNorm(op);
        for (OpId op : m_order)
            if (!m_constant[op.index()] && !assigned(op) && type(op) == "Softmax")
                findAttention(op);
        for (OpId op : m_order)
            if (!m_constant[op.index()] && !assigned(op))
                placeForward(op);
        mergeLayoutGroups();
        placeConstants();
        return build();
    }

private:
    struct Group {
        NodeKind kind;
        OpId anchor;
        std::vector<OpId> ops;
        bool layoutOnly = false;  // made only of layout ops with no compute to join
        int mergedInto = -1;
    };

    const std::string &type(OpId op) const { return m_graph.op(op).type; }
    bool assigned(OpId op) const { return m_group[op.index()] >= 0; }

    std::vector<OpId> orderOps() const
    {
        if (auto order = m_graph.topologicalOrder())
            return *order;
        std::vector<OpId> ids;
        for (std::size_t i = 0; i < m_graph.opCount(); ++i)
            ids.emplace_back(static_cast<std::int32_t>(i));
        return ids;
    }

    // An op is constant when its result does not depend on the values of a
    // graph input: it reads only parameters, other constants, or shapes.
    void markConstants()
    {
        m_constant.assign(m_graph.opCount(), false);
        for (OpId op : m_order) {
            const ir::Op &o = m_graph.op(op);
            bool constant = true;
            if (!kShapeOnlyTypes.count(o.type))
                for (TensorId t : o.inputs)
                    if (t.valid() && !isConstantTensor(t))
                        constant = false;
            m_constant[op.index()] = constant;
        }
    }

    bool isConstantTensor(TensorId t) const
    {
        const ir::Tensor &tensor = m_graph.tensor(t);
        if (tensor.role == ir::Role::Parameter)
            return true;
        return tensor.producer.valid() && m_constant[tensor.producer.index()];
    }

    // Inputs that carry values computed from graph inputs.
    std::vector<TensorId> liveInputs(OpId op) const
    {
        std::vector<TensorId> live;
        for (TensorId t : m_graph.op(op).inputs)
            if (t.valid() && !isConstantTensor(t))
                live.push_back(t);
        return live;
    }

    int newGroup(NodeKind kind, OpId anchor, const std::vector<OpId> &ops)
    {
        const int g = static_cast<int>(m_groups.size());
        m_groups.push_back(Group{kind, anchor, ops});
        for (OpId op : ops)
            m_group[op.index()] = g;
        return g;
    }

    void join(int g, OpId op)
    {
        Group &group = m_groups[static_cast<std::size_t>(g)];
        group.ops.push_back(op);
        m_group[op.index()] = g;
        // A run of layout ops that computes becomes a pointwise node.
        if (group.layoutOnly && !kLayoutTypes.count(type(op))) {
            group.layoutOnly = false;
            group.kind = NodeKind::Elementwise;
        }
    }

    // x -> ReduceMean/Sub/Pow/Add/Sqrt/Div/Mul -> y: the closure of norm pieces
    // whose live inputs are the norm's input or the closure's own results.
    void findDecomposedNorm(OpId reduce)
    {
        auto live = liveInputs(reduce);
        if (live.size() != 1)
            return;
        // RMSNorm reduces x², LayerNorm's variance reduces (x - mean)²: step
        // back over the square (and a cast) to the normalised tensor.
        TensorId root = live[0];
        for (int step = 0; step < 2; ++step) {
            OpId p = m_graph.tensor(root).producer;
            if (!p.valid() || assigned(p) || m_constant[p.index()])
                break;
            const auto &t = type(p);
            auto pl = liveInputs(p);
            bool square = (t == "Pow" && pl.size() == 1) ||
                          (t == "Mul" && pl.size() == 2 && pl[0] == pl[1]) ||
                          (t == "Cast" && pl.size() == 1);
            if (!square)
                break;
            root = pl[0];
        }
        std::set<TensorId> inside = {root};
        std::vector<OpId> members;
        std::priority_queue<std::pair<int, OpId>, std::vector<std::pair<int, OpId>>, std::greater<>>
            queue;
        std::set<OpId> queued;
        auto pushConsumers = [&](TensorId t) {
            for (OpId c : m_graph.tensor(t).consumers)
                if (queued.insert(c).second)
                    queue.emplace(m_rank[c.index()], c);
        };
        pushConsumers(root);
        while (!queue.empty()) {
            OpId op = queue.top().second;
            queue.pop();
            if (assigned(op) || m_constant[op.index()] || !kNormPieceTypes.count(type(op)))
                continue;
            bool fits = true;
            for (TensorId t : liveInputs(op))
                fits = fits && inside.count(t);
            if (!fits)
                continue;
            members.push_back(op);
            for (TensorId t : m_graph.op(op).outputs) {
                if (!t.valid())
                    continue;
                inside.insert(t);
                pushConsumers(t);
            }
        }
        bool reduces = false, normalises = false;
        for (OpId op : members) {
            reduces = reduces || type(op) == "ReduceMean";
            normalises = normalises || type(op) == "Sqrt" || type(op) == "Rsqrt" ||
                         type(op) == "Reciprocal";
        }
        if (reduces && normalises && members.size() >= 3)
            newGroup(NodeKind::Norm, reduce, members);
    }

    // Walks back from the Softmax over scale and mask ops to a MatMul of two
    // live tensors (the scores); the path is appended to `path`.
    bool findScores(TensorId t, int depth, std::vector<OpId> &path) const
    {
        OpId p = m_graph.tensor(t).producer;
        if (!p.valid() || assigned(p) || m_constant[p.index()])
            return false;
        if (kMatMulTypes.count(type(p))) {
            if (liveInputs(p).size() != 2)
                return false;
            path.push_back(p);
            return true;
        }
        if (depth == 0 || !kScoreTypes.count(type(p)))
            return false;
        path.push_back(p);
        for (TensorId in : liveInputs(p))
            if (findScores(in, depth - 1, path))
                return true;
        path.pop_back();
        return false;
    }

    void findAttention(OpId softmax)
    {
        auto live = liveInputs(softmax);
        if (live.size() != 1)
            return;
        std::vector<OpId> members;
        if (!findScores(live[0], 6, members))
            return;
        members.push_back(softmax);
        TensorId probs = m_graph.op(softmax).outputs.empty() ? TensorId()
                                                             : m_graph.op(softmax).outputs[0];
        for (int step = 0; step < 4 && probs.valid(); ++step) {
            const auto &consumers = m_graph.tensor(probs).consumers;
            if (consumers.size() != 1 || assigned(consumers[0]))
                return;
            OpId c = consumers[0];
            const auto &t = type(c);
            if (kMatMulTypes.count(t) && liveInputs(c).size() == 2 &&
                m_graph.op(c).inputs[0] == probs) {
                members.push_back(c);
                newGroup(NodeKind::Attention, softmax, members);
                return;
            }
            if (t != "Dropout" && t != "Cast" && t != "Identity")
                return;
            members.push_back(c);
            probs = m_graph.op(c).outputs.empty() ? TensorId() : m_graph.op(c).outputs[0];
        }
    }

    // The node its live inputs come from, when they all come from one.
    int singleSource(OpId op) const
    {
        int source = -1;
        for (TensorId t : liveInputs(op)) {
            OpId p = m_graph.tensor(t).producer;
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
        const auto &t = type(op);
        const ir::Op &o = m_graph.op(op);
        if (kMatMulTypes.count(t)) {
            newGroup(liveInputs(op).size() < o.inputs.size() ? NodeKind::Linear : NodeKind::MatMul,
                     op, {op});
            return;
        }
        if (kConvTypes.count(t)) {
            newGroup(NodeKind::Conv, op, {op});
            return;
        }
        if (kLossTypes.count(t)) {
            newGroup(NodeKind::Loss, op, {op});
            return;
        }
        if (t == "Gather" && !o.inputs.empty() && o.inputs[0].valid() &&
            isConstantTensor(o.inputs[0])) {
            newGroup(NodeKind::Embedding, op, {op});
            return;
        }
        const bool layout = kLayoutTypes.count(t) > 0;
        if (layout || kPointwiseTypes.count(t)) {
            const int source = singleSource(op);
            if (source >= 0 && m_groups[static_cast<std::size_t>(source)].kind != NodeKind::Norm) {
                join(source, op);
                return;
            }
        }
        const int g = newGroup(layout                     ? NodeKind::Other
                               : kPointwiseTypes.count(t) ? NodeKind::Elementwise
                                                          : NodeKind::Other,
                               op, {op});
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
            for (OpId op : g.ops)
                allLayout = allLayout && kLayoutTypes.count(type(op)) > 0;
            if (!allLayout)
                continue;
            int target = -1;
            bool single = true;
            for (OpId op : g.ops)
                for (TensorId t : m_graph.op(op).outputs) {
                    if (!t.valid())
                        continue;
                    if (m_graph.tensor(t).role == ir::Role::Output)
                        single = false;
                    for (OpId c : m_graph.tensor(t).consumers) {
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
            for (TensorId t : m_graph.op(op).outputs) {
                if (!t.valid())
                    continue;
                for (OpId c : m_graph.tensor(t).consumers)
                    if (assigned(c) && (!first.valid() || m_rank[c.index()] < m_rank[first.index()]))
                        first = c;
            }
            if (first.valid())
                m_group[op.index()] = root(m_group[first.index()]);
            else
                newGroup(NodeKind::Other, op, {op});
        }
    }

    CoarseGraph build() const
    {
        // Ops of merged groups move to their target; nodes are numbered in
        // the order of their first op so ids follow the graph's flow.
        std::vector<std::vector<OpId>> members(m_groups.size());
        for (OpId op : m_order)
            members[static_cast<std::size_t>(root(m_group[op.index()]))].push_back(op);
        std::vector<std::size_t> groups;
        for (std::size_t g = 0; g < m_groups.size(); ++g)
            if (!members[g].empty())
                groups.push_back(g);
        std::sort(groups.begin(), groups.end(), [&](std::size_t a, std::size_t b) {
            return m_rank[members[a].front().index()] < m_rank[members[b].front().index()];
        });
        CoarseGraph coarse;
        for (std::size_t g : groups) {
            const Group &group = m_groups[g];
            OpId anchor = group.anchor;
            coarse.addNode(group.kind, scopeOf(m_graph.op(anchor).name), anchor, members[g]);
        }
        coarse.connect(m_graph);
        return coarse;
    }

    static std::string scopeOf(const std::string &opName)
    {
        const auto slash = opName.rfind('/');
        return slash == std::string::npos || slash == 0 ? opName : opName.substr(0, slash);
    }

    const ir::Graph &m_graph;
    std::vector<OpId> m_order;
    std::vector<int> m_rank;
    std::vector<bool> m_constant;
    std::vector<int> m_group;
    std::vector<Group> m_groups;
};

} // namespace

CoarseGraph Coarsen::run(const ir::Graph &graph) const
{
    return Coarsener(graph).run();
}

} // namespace tapestry::passes
