#include "io/onnx/fusedprojections.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <unordered_map>

namespace tapestry::io::onnximport {

namespace {

// A consumer of the fused product and, per output, the part it takes.
struct PartTaker {
    ir::OpId op;
    std::vector<int> parts;  // per output of the op
};

struct Match {
    ir::OpId matmul;
    std::optional<ir::OpId> add;  // the bias's
    ir::TensorId weight;
    std::optional<ir::TensorId> bias;
    ir::TensorId product;  // the matmul's output, or the add's
    std::int64_t parts = 0, width = 0;  // k and m
    std::vector<PartTaker> takers;
};

bool onlyReadBy(const ir::Tensor &t, ir::OpId op)
{
    return t.consumers.size() == 1 && t.consumers[0] == op;
}

// The part a Slice of the product's last dim takes, or -1.
int slicedPart(const ir::Graph &g, const ir::Op &op, std::int64_t width, std::int64_t parts)
{
    if (op.inputs.size() != 1 || op.outputs.size() != 1)
        return -1;
    const auto &shape = g.tensor(op.inputs[0]).shape;
    const auto rank = static_cast<std::int64_t>(shape.size());
    const std::int64_t n = shape.back();
    const auto starts = ir::intsAttr(op.attributes, "starts"), ends = ir::intsAttr(op.attributes, "ends");
    const auto axes = ir::intsAttr(op.attributes, "axes");
    const auto steps = ir::intsAttr(op.attributes, "steps");
    if (!starts || !ends || starts->size() != 1 || ends->size() != 1)
        return -1;
    const std::int64_t axis = axes ? (axes->size() == 1 ? (*axes)[0] : rank) : 0;
    if (axis != -1 && axis != rank - 1)
        return -1;
    if (steps && (steps->size() != 1 || (*steps)[0] != 1))
        return -1;
    auto clamp = [n](std::int64_t v) { return std::clamp(v < 0 ? v + n : v, std::int64_t{0}, n); };
    const std::int64_t begin = clamp((*starts)[0]), end = clamp((*ends)[0]);
    if (end - begin != width || begin % width != 0 || begin / width >= parts)
        return -1;
    return static_cast<int>(begin / width);
}

// The parts a Split of the product's last dim takes, one per output, or none.
std::vector<int> splitParts(const ir::Graph &g, const ir::Op &op, std::int64_t width)
{
    if (op.inputs.empty() || op.outputs.empty())
        return {};
    const auto &shape = g.tensor(op.inputs[0]).shape;
    const auto rank = static_cast<std::int64_t>(shape.size());
    const std::int64_t axis = ir::intAttr(op.attributes, "axis").value_or(0);
    if (axis != -1 && axis != rank - 1)
        return {};
    std::vector<int> parts;
    std::int64_t offset = 0;
    for (auto out : op.outputs) {
        const auto &s = g.tensor(out).shape;
        if (s.size() != shape.size() || s.back() != width)
            return {};
        parts.push_back(static_cast<int>(offset / width));
        offset += width;
    }
    if (offset != shape.back())
        return {};
    return parts;
}

std::optional<Match> matchAt(const ir::Graph &g, ir::OpId id)
{
    const ir::Op &op = g.op(id);
    if (op.type != "MatMul" || !op.domain.empty() || op.inputs.size() != 2 || op.outputs.size() != 1)
        return std::nullopt;
    const ir::Tensor &x = g.tensor(op.inputs[0]), &w = g.tensor(op.inputs[1]);
    if (w.role != ir::Role::Parameter || w.shape.size() != 2 || !onlyReadBy(w, id) || x.shape.size() < 2 ||
        x.shape.back() != w.shape[0])
        return std::nullopt;
    Match m;
    m.matmul = id;
    m.weight = op.inputs[1];
    m.product = op.outputs[0];
    const std::int64_t n = w.shape[1];
    // The bias, added by an Add that reads nothing else.
    const ir::Tensor &y = g.tensor(m.product);
    if (y.role != ir::Role::Activation)
        return std::nullopt;
    if (y.consumers.size() == 1 && g.op(y.consumers[0]).type == "Add") {
        const ir::Op &add = g.op(y.consumers[0]);
        if (add.inputs.size() == 2 && add.outputs.size() == 1 && add.domain.empty()) {
            const ir::TensorId other = add.inputs[0] == m.product ? add.inputs[1] : add.inputs[0];
            const ir::Tensor &b = g.tensor(other);
            if (other != m.product && b.role == ir::Role::Parameter && b.shape == ir::Shape{n} &&
                onlyReadBy(b, y.consumers[0]) && g.tensor(add.outputs[0]).shape == y.shape) {
                m.add = y.consumers[0];
                m.bias = other;
                m.product = add.outputs[0];
            }
        }
    }
    const ir::Tensor &z = g.tensor(m.product);
    if (z.role != ir::Role::Activation || z.consumers.empty())
        return std::nullopt;
    // The part width: the first taker's.
    const ir::Op &first = g.op(z.consumers[0]);
    if (first.type != "Slice" && first.type != "Split")
        return std::nullopt;
    m.width = g.tensor(first.outputs.at(0)).shape.back();
    if (m.width <= 0 || n % m.width != 0 || n / m.width < 2)
        return std::nullopt;
    m.parts = n / m.width;
    std::vector<bool> taken(static_cast<std::size_t>(m.parts), false);
    for (auto c : z.consumers) {
        const ir::Op &taker = g.op(c);
        if (!taker.domain.empty() || taker.inputs.empty() || taker.inputs[0] != m.product)
            return std::nullopt;
        PartTaker t{c, {}};
        if (taker.type == "Slice") {
            const int part = slicedPart(g, taker, m.width, m.parts);
            if (part < 0)
                return std::nullopt;
            t.parts.push_back(part);
        } else if (taker.type == "Split") {
            t.parts = splitParts(g, taker, m.width);
            if (t.parts.empty())
                return std::nullopt;
        } else {
            return std::nullopt;
        }
        for (int part : t.parts)
            taken[static_cast<std::size_t>(part)] = true;
        if (std::find_if(m.takers.begin(), m.takers.end(), [&](const PartTaker &p) { return p.op == c; }) ==
            m.takers.end())
            m.takers.push_back(std::move(t));
    }
    if (std::find(taken.begin(), taken.end(), false) != taken.end())
        return std::nullopt;
    return m;
}

} // namespace

ir::Graph stackFusedProjections(const ir::Graph &graph, std::vector<StackedProjection> *stacked)
{
    std::vector<Match> matches;
    for (std::size_t i = 0; i < graph.opCount(); ++i)
        if (auto m = matchAt(graph, ir::OpId(static_cast<std::int32_t>(i))))
            matches.push_back(std::move(*m));
    if (matches.empty())
        return graph;

    // Tensors whose shapes change, and the ops replaced or emitted anew.
    std::unordered_map<std::size_t, ir::Shape> reshaped;
    std::unordered_map<std::size_t, const Match *> byMatmul, byLast;  // by the op the parts follow
    std::vector<bool> dropped(graph.opCount(), false);
    for (const auto &m : matches) {
        const ir::Shape &xs = graph.tensor(graph.op(m.matmul).inputs[0]).shape;
        const std::int64_t in = xs.back(), rows = xs[xs.size() - 2];
        ir::Shape y(xs.begin(), xs.end() - 2);
        y.insert(y.end(), {m.parts, rows, m.width});
        reshaped[graph.op(m.matmul).outputs[0].index()] = y;
        reshaped[m.product.index()] = y;
        reshaped[m.weight.index()] = {m.parts, in, m.width};
        if (m.bias)
            reshaped[m.bias->index()] = {m.parts, 1, m.width};
        byMatmul[m.matmul.index()] = &m;
        byLast[(m.add ? *m.add : m.matmul).index()] = &m;
        for (const auto &t : m.takers)
            dropped[t.op.index()] = true;
        if (stacked)
            stacked->push_back({graph.tensor(m.weight).name, static_cast<int>(m.parts)});
    }

    ir::Graph out;
    out.name = graph.name;
    for (const auto &t : graph.tensors()) {
        const std::size_t i = static_cast<std::size_t>(&t - graph.tensors().data());
        auto it = reshaped.find(i);
        out.addTensor(t.name, it == reshaped.end() ? t.shape : it->second, t.dtype, t.role);
    }
    auto copy = [&](const ir::Op &op) {
        auto id = out.addOp(op.type, op.name, op.inputs, op.outputs, op.attributes);
        if (!op.domain.empty())
            out.setDomain(id, op.domain);
    };
    for (std::size_t i = 0; i < graph.opCount(); ++i) {
        const ir::Op &op = graph.op(ir::OpId(static_cast<std::int32_t>(i)));
        if (dropped[i])
            continue;
        if (auto it = byMatmul.find(i); it != byMatmul.end()) {
            // The input gains a dim of 1 before its rows, to broadcast
            // against the parts: [..., t, in] -> [..., 1, t, in].
            const ir::Tensor &x = graph.tensor(op.inputs[0]);
            ir::Shape xs = x.shape;
            xs.insert(xs.end() - 2, 1);
            const auto x1 = out.addTensor(op.name + "_stacked_input", xs, x.dtype, ir::Role::Activation);
            out.addOp("Reshape", op.name + "_stack", {op.inputs[0]}, {x1}, {{"shape", xs}});
            out.addOp(op.type, op.name, {x1, op.inputs[1]}, op.outputs, op.attributes);
        } else {
            copy(op);
        }
        auto last = byLast.find(i);
        if (last == byLast.end())
            continue;
        // The parts: one split along the dim of k, each reshaped to what
        // its slice gave.
        const Match &m = *last->second;
        const ir::Tensor &z = graph.tensor(m.product);
        const ir::Shape &zs = reshaped.at(m.product.index());
        const auto axis = static_cast<std::int64_t>(zs.size()) - 3;
        ir::Shape partShape = zs;
        partShape[static_cast<std::size_t>(axis)] = 1;
        std::vector<ir::TensorId> parts;
        for (std::int64_t p = 0; p < m.parts; ++p)
            parts.push_back(out.addTensor(z.name + "_part" + std::to_string(p), partShape, z.dtype, ir::Role::Activation));
        const std::string base = graph.op(m.takers.front().op).name;
        out.addOp("Split", base + "_parts", {m.product}, parts,
                  {{"axis", axis}, {"split", std::vector<std::int64_t>(static_cast<std::size_t>(m.parts), 1)}});
        for (const auto &t : m.takers) {
            const ir::Op &taker = graph.op(t.op);
            for (std::size_t o = 0; o < t.parts.size(); ++o) {
                const auto target = taker.outputs[o];
                const ir::Shape &ts = graph.tensor(target).shape;
                out.addOp("Reshape", taker.name + (taker.outputs.size() > 1 ? "_" + std::to_string(o) : ""),
                          {parts[static_cast<std::size_t>(t.parts[o])]}, {target}, {{"shape", ts}});
            }
        }
    }
    return out;
}

} // namespace tapestry::io::onnximport
