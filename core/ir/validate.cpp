#include "ir/validate.h"

#include "ir/sizes.h"

#include <algorithm>
#include <functional>
#include <unordered_set>

namespace tapestry::ir {

std::string shapeToString(const Shape &shape)
{
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i)
            s += ", ";
        s += std::to_string(shape[i]);
    }
    return s + "]";
}

std::optional<Shape> broadcastShapes(const Shape &a, const Shape &b)
{
    const std::size_t rank = std::max(a.size(), b.size());
    Shape out(rank);
    for (std::size_t i = 0; i < rank; ++i) {
        const std::int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
        const std::int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
        if (da != db && da != 1 && db != 1)
            return std::nullopt;
        out[i] = da == 1 ? db : da;
    }
    return out;
}

namespace {

bool isElementwise(const std::string &type)
{
    static const std::unordered_set<std::string> kTypes{
        "Add", "Sub", "Mul", "Div", "Pow", "Relu", "Gelu", "Silu", "Tanh", "Sigmoid", "Erf",
        "Neg", "Sqrt", "Exp", "Dropout", "Identity", "Cast", "Where", "Max", "Min", "Abs",
        "Reciprocal", "FastGelu", "LeakyRelu", "Clip", "Softplus", "HardSigmoid", "HardSwish"};
    return kTypes.count(type) > 0;
}

std::int64_t normaliseAxis(std::int64_t axis, std::size_t rank)
{
    return axis < 0 ? axis + static_cast<std::int64_t>(rank) : axis;
}

std::string mismatch(const std::string &what, const Shape &expected, const Shape &got)
{
    return what + " has shape " + shapeToString(got) + ", expected " + shapeToString(expected);
}

std::optional<std::string> checkMatMul(const Shape &a, const Shape &b, const Shape &y)
{
    if (a.empty() || b.empty())
        return "MatMul inputs must have rank >= 1";
    Shape a2 = a, b2 = b;
    if (a2.size() == 1)
        a2.insert(a2.begin(), 1);
    if (b2.size() == 1)
        b2.push_back(1);
    const std::int64_t k1 = a2.back(), k2 = b2[b2.size() - 2];
    if (k1 != k2)
        return "MatMul contracting dims differ: " + shapeToString(a) + " x " + shapeToString(b);
    Shape batchA(a2.begin(), a2.end() - 2), batchB(b2.begin(), b2.end() - 2);
    auto batch = broadcastShapes(batchA, batchB);
    if (!batch)
        return "MatMul batch dims do not broadcast: " + shapeToString(a) + " x " +
               shapeToString(b);
    Shape expected = *batch;
    if (a.size() > 1)
        expected.push_back(a2[a2.size() - 2]);
    if (b.size() > 1)
        expected.push_back(b2.back());
    if (expected != y)
        return mismatch("output", expected, y);
    return std::nullopt;
}

} // namespace

std::optional<std::string> checkShapes(const Graph &graph, OpId id)
{
    const Op &op = graph.op(id);
    auto in = [&](std::size_t i) -> const Shape & { return graph.tensor(op.inputs[i]).shape; };
    auto out = [&](std::size_t i) -> const Shape & { return graph.tensor(op.outputs[i]).shape; };
    const std::size_t nIn = op.inputs.size(), nOut = op.outputs.size();
    auto needs = [&](std::size_t i, std::size_t o) -> std::optional<std::string> {
        if (nIn < i || nOut < o)
            return op.type + " needs " + std::to_string(i) + " input(s) and " + std::to_string(o) +
                   " output(s), has " + std::to_string(nIn) + " and " + std::to_string(nOut);
        return std::nullopt;
    };

    if (op.type == "MatMul") {
        if (auto e = needs(2, 1))
            return e;
        return checkMatMul(in(0), in(1), out(0));
    }
    if (op.type == "Gemm") {
        if (auto e = needs(2, 1))
            return e;
        if (in(0).size() != 2 || in(1).size() != 2)
            return std::string("Gemm inputs must be 2-D");
        const bool ta = intAttr(op.attributes, "transA").value_or(0) != 0;
        const bool tb = intAttr(op.attributes, "transB").value_or(0) != 0;
        const std::int64_t m = ta ? in(0)[1] : in(0)[0], k = ta ? in(0)[0] : in(0)[1];
        const std::int64_t k2 = tb ? in(1)[1] : in(1)[0], n = tb ? in(1)[0] : in(1)[1];
        if (k != k2)
            return "Gemm contracting dims differ: " + shapeToString(in(0)) + " x " +
                   shapeToString(in(1));
        if (nIn > 2 && !broadcastShapes(in(2), {m, n}))
            return "Gemm bias " + shapeToString(in(2)) + " does not broadcast to " +
                   shapeToString({m, n});
        if (out(0) != Shape{m, n})
            return mismatch("output", {m, n}, out(0));
        return std::nullopt;
    }
    if (isElementwise(op.type)) {
        if (auto e = needs(1, 1))
            return e;
        Shape s = in(0);
        const std::size_t operands = op.type == "Clip" || op.type == "Dropout" ? 1 : nIn;
        for (std::size_t i = 1; i < operands; ++i) {
            auto b = broadcastShapes(s, in(i));
            if (!b)
                return "inputs do not broadcast: " + shapeToString(s) + " and " +
                       shapeToString(in(i));
            s = *b;
        }
        if (out(0) != s)
            return mismatch("output", s, out(0));
        return std::nullopt;
    }
    if (op.type == "Reshape") {
        if (auto e = needs(1, 1))
            return e;
        std::int64_t a = 1, b = 1;
        for (auto d : in(0))
            a *= d;
        for (auto d : out(0))
            b *= d;
        if (a != b)
            return "Reshape from " + shapeToString(in(0)) + " to " + shapeToString(out(0)) +
                   " changes the element count";
        return std::nullopt;
    }
    if (op.type == "Transpose") {
        if (auto e = needs(1, 1))
            return e;
        const Shape &x = in(0);
        auto perm = intsAttr(op.attributes, "perm");
        std::vector<std::int64_t> p;
        if (perm) {
            p = *perm;
        } else {
            for (std::size_t i = 0; i < x.size(); ++i)
                p.push_back(static_cast<std::int64_t>(x.size() - 1 - i));
        }
        if (p.size() != x.size())
            return "Transpose perm has " + std::to_string(p.size()) + " entries for rank " +
                   std::to_string(x.size());
        Shape expected;
        for (auto i : p) {
            if (i < 0 || i >= static_cast<std::int64_t>(x.size()))
                return "Transpose perm entry " + std::to_string(i) + " out of range";
            expected.push_back(x[static_cast<std::size_t>(i)]);
        }
        if (expected != out(0))
            return mismatch("output", expected, out(0));
        return std::nullopt;
    }
    if (op.type == "Softmax" || op.type == "LogSoftmax") {
        if (auto e = needs(1, 1))
            return e;
        if (in(0) != out(0))
            return mismatch("output", in(0), out(0));
        const auto axis = normaliseAxis(intAttr(op.attributes, "axis").value_or(-1), in(0).size());
        if (axis < 0 || axis >= static_cast<std::int64_t>(in(0).size()))
            return "Softmax axis out of range for " + shapeToString(in(0));
        return std::nullopt;
    }
    if (op.type == "LayerNormalization" || op.type == "RMSNorm" ||
        op.type == "SimplifiedLayerNormalization") {
        if (auto e = needs(1, 1))
            return e;
        const Shape &x = in(0);
        if (out(0) != x)
            return mismatch("output", x, out(0));
        const auto axis = normaliseAxis(intAttr(op.attributes, "axis").value_or(-1), x.size());
        if (axis < 0 || axis >= static_cast<std::int64_t>(x.size()))
            return "normalisation axis out of range for " + shapeToString(x);
        const Shape normalised(x.begin() + axis, x.end());
        for (std::size_t i = 1; i < nIn; ++i)
            if (in(i) != normalised && !(in(i).size() == 1 && normalised.size() == 1 &&
                                         in(i)[0] == normalised[0]))
                return mismatch("scale/bias " + graph.tensor(op.inputs[i]).name, normalised,
                                in(i));
        return std::nullopt;
    }
    if (op.type == "Gather") {
        if (auto e = needs(2, 1))
            return e;
        const Shape &data = in(0), &idx = in(1);
        const auto axis = normaliseAxis(intAttr(op.attributes, "axis").value_or(0), data.size());
        if (axis < 0 || axis >= static_cast<std::int64_t>(data.size()))
            return "Gather axis out of range for " + shapeToString(data);
        Shape expected(data.begin(), data.begin() + axis);
        expected.insert(expected.end(), idx.begin(), idx.end());
        expected.insert(expected.end(), data.begin() + axis + 1, data.end());
        if (expected != out(0))
            return mismatch("output", expected, out(0));
        return std::nullopt;
    }
    if (op.type == "Concat") {
        if (auto e = needs(1, 1))
            return e;
        Shape expected = in(0);
        const auto axis = normaliseAxis(intAttr(op.attributes, "axis").value_or(0), expected.size());
        if (axis < 0 || axis >= static_cast<std::int64_t>(expected.size()))
            return "Concat axis out of range for " + shapeToString(expected);
        const auto ax = static_cast<std::size_t>(axis);
        for (std::size_t i = 1; i < nIn; ++i) {
            const Shape &s = in(i);
            if (s.size() != expected.size())
                return "Concat input " + graph.tensor(op.inputs[i]).name + " has rank " +
                       std::to_string(s.size()) + ", expected " + std::to_string(expected.size());
            for (std::size_t d = 0; d < s.size(); ++d)
                if (d != ax && s[d] != expected[d])
                    return "Concat input " + graph.tensor(op.inputs[i]).name + " has shape " +
                           shapeToString(s) + ", differs outside axis " + std::to_string(axis);
            expected[ax] += s[ax];
        }
        if (expected != out(0))
            return mismatch("output", expected, out(0));
        return std::nullopt;
    }
    if (op.type == "Split") {
        if (auto e = needs(1, 1))
            return e;
        const Shape &x = in(0);
        const auto axis = normaliseAxis(intAttr(op.attributes, "axis").value_or(0), x.size());
        if (axis < 0 || axis >= static_cast<std::int64_t>(x.size()))
            return "Split axis out of range for " + shapeToString(x);
        const auto ax = static_cast<std::size_t>(axis);
        std::int64_t total = 0;
        for (std::size_t o = 0; o < nOut; ++o) {
            const Shape &s = out(o);
            if (s.size() != x.size())
                return "Split output " + graph.tensor(op.outputs[o]).name + " has rank " +
                       std::to_string(s.size()) + ", expected " + std::to_string(x.size());
            for (std::size_t d = 0; d < s.size(); ++d)
                if (d != ax && s[d] != x[d])
                    return "Split output " + graph.tensor(op.outputs[o]).name + " has shape " +
                           shapeToString(s) + ", differs from input outside axis";
            total += s[ax];
        }
        if (total != x[ax])
            return "Split outputs cover " + std::to_string(total) + " of " +
                   std::to_string(x[ax]) + " along axis " + std::to_string(axis);
        return std::nullopt;
    }
    return std::nullopt;
}

std::optional<Error> validate(const Graph &graph, const std::string &input)
{
    auto fail = [&](std::string where, std::string problem) {
        return Error{input, std::move(where), std::move(problem)};
    };

    // The structure is read from the graph's flat arrays, the records only
    // for names: on a deep model the records no longer fit in cache.
    const auto arrays = graph.arrays().view();
    // The graph maps each name to its first tensor and op: a later one of the
    // same name is a duplicate. A graph that never saw a name twice has none.
    const bool lookUpNames = !graph.namesKnownUnique();
    if (static_cast<std::int64_t>(graph.opCount()) > kMaxOps)
        return fail({}, "the model has " + std::to_string(graph.opCount()) + " ops; Tapestry plans at most " +
                            std::to_string(kMaxOps));
    // Every size past this point is plain int64 arithmetic (ir/sizes.h).
    std::int64_t modelBytes = 0;
    for (std::size_t i = 0; i < graph.tensorCount(); ++i) {
        const TensorId id(static_cast<std::int32_t>(i));
        if (lookUpNames && graph.findTensor(graph.tensor(id).name) != id)
            return fail("tensor '" + graph.tensor(id).name + "'", "duplicate tensor name");
        std::int64_t bytes = 0;
        if (auto problem = tensorSizeProblem(arrays.shape(id), byteSize(arrays.dtype(id)), bytes))
            return fail("tensor '" + graph.tensor(id).name + "'", *problem);
        modelBytes += bytes;  // each term is at most kMaxModelBytes, so the sum stays below 2^63 until checked
        if (modelBytes > kMaxModelBytes)
            return fail("tensor '" + graph.tensor(id).name + "'",
                        "the model's tensors hold more than " + limitBytesText(kMaxModelBytes) +
                            " together, the most a model may hold");
    }
    const auto tensorCount = static_cast<std::int32_t>(graph.tensorCount());
    for (std::size_t i = 0; i < graph.opCount(); ++i) {
        const OpId id(static_cast<std::int32_t>(i));
        if (lookUpNames && graph.findOp(graph.op(id).name) != id)
            return fail("op '" + graph.op(id).name + "'", "duplicate op name");
        for (TensorId t : arrays.inputs(id))
            if (!t.valid() || t.value >= tensorCount)
                return fail("op '" + graph.op(id).name + "'", "reads tensor id " + std::to_string(t.value) +
                                                                   " that does not exist");
        for (TensorId t : arrays.outputs(id))
            if (!t.valid() || t.value >= tensorCount)
                return fail("op '" + graph.op(id).name + "'", "writes tensor id " + std::to_string(t.value) +
                                                                   " that does not exist");
    }
    std::vector<int> writers(graph.tensorCount(), 0);
    for (std::size_t i = 0; i < graph.opCount(); ++i)
        for (TensorId t : arrays.outputs(OpId(static_cast<std::int32_t>(i))))
            if (++writers[t.index()] > 1)
                return fail("tensor '" + graph.tensor(t).name + "'", "written by more than one op");
    for (std::size_t i = 0; i < graph.tensorCount(); ++i) {
        const TensorId id(static_cast<std::int32_t>(i));
        const Role role = arrays.role(id);
        const bool produced = writers[i] > 0;
        if ((role == Role::Activation || role == Role::Output) && !produced)
            return fail("tensor '" + graph.tensor(id).name + "'",
                        "is an " + std::string(toString(role)) + " but no op produces it");
        if ((role == Role::Parameter || role == Role::Input) && produced)
            return fail("tensor '" + graph.tensor(id).name + "'",
                        "is a " + std::string(toString(role)) + " but op '" + graph.op(arrays.producer(id)).name +
                            "' writes it");
    }
    if (!graph.topologicalOrder()) {
        // Name one op on the cycle: repeatedly strip ops whose inputs are all
        // available; what is left is on or behind a cycle.
        std::vector<bool> done(graph.opCount(), false);
        bool progress = true;
        while (progress) {
            progress = false;
            for (std::size_t i = 0; i < graph.opCount(); ++i) {
                if (done[i])
                    continue;
                const Op &op = graph.ops()[i];
                bool ready = std::all_of(op.inputs.begin(), op.inputs.end(), [&](TensorId t) {
                    OpId p = graph.tensor(t).producer;
                    return !p.valid() || done[p.index()];
                });
                if (ready) {
                    done[i] = progress = true;
                }
            }
        }
        for (std::size_t i = 0; i < graph.opCount(); ++i)
            if (!done[i])
                return fail("op '" + graph.ops()[i].name + "'", "is part of a cycle");
    }
    for (std::size_t i = 0; i < graph.opCount(); ++i) {
        OpId id(static_cast<std::int32_t>(i));
        if (auto problem = checkShapes(graph, id))
            return fail("op '" + graph.op(id).name + "' (" + graph.op(id).type + ")", *problem);
    }
    return std::nullopt;
}

} // namespace tapestry::ir
