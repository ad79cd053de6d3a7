#include "interpreter.h"

#include "initializer.h"
#include "kernels/binary.h"
#include "kernels/crossentropy.h"
#include "kernels/gather.h"
#include "kernels/layernorm.h"
#include "kernels/layout.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "kernels/softmax.h"
#include "opsupport.h"

#include "ir/error.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace tapestry::exec {

namespace {

bool isFloat(ir::DType d)
{
    return d == ir::DType::F32 || d == ir::DType::F16 || d == ir::DType::BF16 ||
           d == ir::DType::F64;
}

std::size_t normaliseAxis(std::int64_t axis, std::size_t rank)
{
    return static_cast<std::size_t>(axis < 0 ? axis + static_cast<std::int64_t>(rank) : axis);
}

} // namespace

Interpreter::Interpreter(ir::Graph graph, InterpreterOptions options, std::string input)
    : m_graph(std::move(graph)), m_options(options)
{
    if (input.empty())
        input = m_graph.name;
    checkRunnable(m_graph, input);
    layOut(input);
    initialise();
}

void Interpreter::layOut(const std::string &input)
{
    const auto order = m_graph.topologicalOrder();
    if (!order)
        throw TapestryError(Error{input, {}, "the graph has a cycle"});
    const std::size_t nt = m_graph.tensorCount();

    // What is trained on: scalar outputs, or all outputs' sum of squares.
    std::vector<ir::TensorId> outputs;
    for (std::size_t i = 0; i < nt; ++i) {
        const ir::TensorId id(static_cast<std::int32_t>(i));
        if (m_graph.tensor(id).role == ir::Role::Output && isFloat(m_graph.tensor(id).dtype))
            outputs.push_back(id);
    }
    if (outputs.empty())
        throw TapestryError(Error{input, {}, "the graph has no float output to train on"});
    for (ir::TensorId id : outputs)
        if (m_graph.tensor(id).shape.empty())
            m_objectiveTensors.push_back(id);
    m_objective = m_objectiveTensors.empty() ? Objective::SumOfSquares : Objective::Loss;
    if (m_objectiveTensors.empty())
        m_objectiveTensors = outputs;

    // A tensor needs a gradient when it is a parameter or computed from one.
    std::vector<bool> needsGrad(nt, false);
    for (std::size_t i = 0; i < nt; ++i)
        needsGrad[i] = m_graph.tensors()[i].role == ir::Role::Parameter &&
                       isFloat(m_graph.tensors()[i].dtype);
    std::vector<bool> opBackward(m_graph.opCount(), false);
    for (ir::OpId o : *order) {
        const ir::Op &op = m_graph.op(o);
        bool any = false;
        for (std::size_t i = 0; i < op.inputs.size(); ++i)
            any = any || (!isIndexInput(op.type, i) && !isShapeOperand(op.type, i) &&
                          needsGrad[op.inputs[i].index()]);
        opBackward[o.index()] = any;
        for (ir::TensorId t : op.outputs)
            needsGrad[t.index()] = any;
    }

    // Integer inputs the kernels read (Gather's ids, the loss's labels).
    m_indexRange.assign(nt, 0);
    for (std::size_t i = 0; i < nt; ++i)
        if (m_graph.tensors()[i].role == ir::Role::Input && !isFloat(m_graph.tensors()[i].dtype))
            m_indexRange[i] = indexRuleFor(m_graph, ir::TensorId(static_cast<std::int32_t>(i))).range;

    // Offsets first (values, then every gradient in one range, then saved
    // statistics and optimizer state), views once the arena is allocated.
    std::vector<std::int64_t> valueOff(nt, -1), gradOff(nt, -1);
    std::vector<std::int64_t> &indexOff = m_indexOffset;
    indexOff.assign(nt, -1);
    std::int64_t indexCount = 0;
    for (std::size_t i = 0; i < nt; ++i) {
        const ir::Tensor &t = m_graph.tensors()[i];
        if (isFloat(t.dtype))
            valueOff[i] = m_arena.reserve(t.elementCount());
        else if (m_indexRange[i] > 0) {
            indexOff[i] = indexCount;
            indexCount += t.elementCount();
        }
    }
    m_gradBegin = m_arena.size();
    for (std::size_t i = 0; i < nt; ++i)
        if (needsGrad[i])
            gradOff[i] = m_arena.reserve(m_graph.tensors()[i].elementCount());
    m_gradEnd = m_arena.size();
    std::vector<std::vector<std::pair<std::int64_t, ir::Shape>>> savedOff(m_graph.opCount());
    for (ir::OpId o : *order) {
        const ir::Op &op = m_graph.op(o);
        const ir::Shape &x = m_graph.tensor(op.inputs[0]).shape;
        ir::Shape rows(x.begin(), x.empty() ? x.end() : x.end() - 1);
        std::int64_t n = 1;
        for (auto d : rows)
            n *= d;
        const int count = op.type == "LayerNormalization" ? 2
                          : (op.type == "RMSNorm" || op.type == "SimplifiedLayerNormalization" ||
                             op.type == "SoftmaxCrossEntropyLoss")
                              ? 1
                              : 0;
        for (int k = 0; k < count; ++k)
            savedOff[o.index()].emplace_back(m_arena.reserve(n), rows);
    }
    std::vector<std::pair<std::int64_t, std::int64_t>> momentOff;
    for (std::size_t i = 0; i < nt; ++i)
        if (m_graph.tensors()[i].role == ir::Role::Parameter && needsGrad[i]) {
            const std::int64_t n = m_graph.tensors()[i].elementCount();
            if (m_options.optimizer == Optimizer::Adam)
                momentOff.emplace_back(m_arena.reserve(n), m_arena.reserve(n));
            else
                momentOff.emplace_back(-1, -1);
        }
    m_arena.allocate();
    m_indices.assign(static_cast<std::size_t>(indexCount), 0);

    m_values.resize(nt);
    m_grads.resize(nt);
    m_indexValues.resize(nt);
    for (std::size_t i = 0; i < nt; ++i) {
        const ir::Shape &s = m_graph.tensors()[i].shape;
        m_values[i] = valueOff[i] >= 0 ? m_arena.view(valueOff[i], s) : TensorView{nullptr, s};
        m_grads[i] = gradOff[i] >= 0 ? m_arena.view(gradOff[i], s) : TensorView{nullptr, s};
        if (indexOff[i] >= 0)
            m_indexValues[i] = IndexView{m_indices.data() + indexOff[i], s};
    }
    std::size_t p = 0;
    for (std::size_t i = 0; i < nt; ++i)
        if (m_graph.tensors()[i].role == ir::Role::Parameter && needsGrad[i]) {
            const auto [mo, vo] = momentOff[p++];
            const ir::Shape &s = m_graph.tensors()[i].shape;
            m_parameters.push_back({m_values[i], m_grads[i],
                                    mo >= 0 ? m_arena.view(mo, s) : TensorView{nullptr, s},
                                    vo >= 0 ? m_arena.view(vo, s) : TensorView{nullptr, s}});
        }

    static const std::map<std::string, Kind> kKinds = {
        {"MatMul", Kind::MatMul}, {"Add", Kind::Add}, {"Sub", Kind::Sub}, {"Mul", Kind::Mul},
        {"Div", Kind::Div}, {"Relu", Kind::Relu}, {"Gelu", Kind::Gelu}, {"Silu", Kind::Silu},
        {"Neg", Kind::Neg}, {"Softmax", Kind::Softmax}, {"LayerNormalization", Kind::LayerNorm},
        {"RMSNorm", Kind::RmsNorm}, {"SimplifiedLayerNormalization", Kind::RmsNorm},
        {"Reshape", Kind::Reshape}, {"Flatten", Kind::Reshape}, {"Squeeze", Kind::Reshape},
        {"Unsqueeze", Kind::Reshape}, {"Identity", Kind::Reshape}, {"Transpose", Kind::Transpose},
        {"Split", Kind::Split}, {"Concat", Kind::Concat}, {"Slice", Kind::Slice},
        {"Expand", Kind::Expand}, {"Gather", Kind::Gather},
        {"SoftmaxCrossEntropyLoss", Kind::CrossEntropy}};
    for (ir::OpId o : *order) {
        const ir::Op &op = m_graph.op(o);
        Instr ins;
        ins.kind = kKinds.at(op.type);
        ins.backward = opBackward[o.index()];
        for (std::size_t i = 0; i < op.inputs.size(); ++i) {
            if (isShapeOperand(op.type, i))
                continue;
            const std::size_t t = op.inputs[i].index();
            if (isIndexInput(op.type, i))
                ins.index = m_indexValues[t];
            ins.in.push_back(m_values[t]);
            ins.din.push_back(m_grads[t]);
        }
        for (ir::TensorId t : op.outputs) {
            ins.out.push_back(m_values[t.index()]);
            ins.dout.push_back(m_grads[t.index()]);
        }
        for (const auto &[off, shape] : savedOff[o.index()])
            ins.saved.push_back(m_arena.view(off, shape));
        const std::size_t rank = ins.in[0].rank();
        ins.axis = normaliseAxis(ir::intAttr(op.attributes, "axis").value_or(0), rank);
        ins.epsilon = static_cast<float>(ir::floatAttr(op.attributes, "epsilon").value_or(1e-5));
        if (ir::stringAttr(op.attributes, "approximate").value_or("none") == "tanh")
            ins.gelu = kernels::GeluForm::Tanh;
        if (ins.kind == Kind::Transpose) {
            if (auto perm = ir::intsAttr(op.attributes, "perm"))
                ins.perm = *perm;
            else
                for (std::size_t i = rank; i-- > 0;)
                    ins.perm.push_back(static_cast<std::int64_t>(i));
        }
        if (ins.kind == Kind::Slice) {
            const auto starts = *ir::intsAttr(op.attributes, "starts");
            std::vector<std::int64_t> axes(starts.size());
            for (std::size_t i = 0; i < axes.size(); ++i)
                axes[i] = static_cast<std::int64_t>(i);
            axes = ir::intsAttr(op.attributes, "axes").value_or(axes);
            const auto steps = ir::intsAttr(op.attributes, "steps")
                                   .value_or(std::vector<std::int64_t>(starts.size(), 1));
            ins.starts.assign(rank, 0);
            ins.steps.assign(rank, 1);
            for (std::size_t i = 0; i < starts.size(); ++i) {
                const std::size_t a = normaliseAxis(axes[i], rank);
                const std::int64_t dim = ins.in[0].dim(a);
                std::int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
                s = steps[i] > 0 ? std::clamp<std::int64_t>(s, 0, dim)
                                 : std::clamp<std::int64_t>(s, 0, dim - 1);
                ins.starts[a] = s;
                ins.steps[a] = steps[i];
            }
        }
        if (ins.kind == Kind::MatMul) {
            const double f = kernels::matmulFlops(ins.out[0], ins.in[0]);
            m_flops += f;
            for (const TensorView &g : ins.din)
                if (g)
                    m_flops += f;
        }
        m_program.push_back(std::move(ins));
    }

    m_tokens = 0;
    for (std::size_t i = 0; i < nt && m_tokens == 0; ++i)
        if (m_graph.tensors()[i].role == ir::Role::Input && indexOff[i] >= 0)
            m_tokens = m_graph.tensors()[i].elementCount();
    for (std::size_t i = 0; i < nt && m_tokens == 0; ++i)
        if (m_graph.tensors()[i].role == ir::Role::Input && valueOff[i] >= 0)
            m_tokens = m_values[i].rows();
}

void Interpreter::initialise()
{
    const std::size_t nt = m_graph.tensorCount();
    for (std::size_t i = 0; i < nt; ++i) {
        const ir::TensorId id(static_cast<std::int32_t>(i));
        const ir::Tensor &t = m_graph.tensor(id);
        const bool source = t.role == ir::Role::Parameter || t.role == ir::Role::Input;
        if (!source)
            continue;
        const std::uint64_t key = streamKey(m_options.seed, t.name);
        if (m_values[i]) {
            const std::vector<std::int64_t> origin(t.shape.size(), 0);
            initializeBlock(m_values[i], origin, t.shape, key, initRuleFor(m_graph, id));
        } else if (m_indexRange[i] > 0) {
            initializeIndices(m_indices.data() + m_indexOffset[i], t.elementCount(), 0, key,
                              indexRuleFor(m_graph, id));
        }
    }
}

float Interpreter::forward()
{
    for (const Instr &ins : m_program)
        runForward(ins);
    double objective = 0.0;
    for (ir::TensorId t : m_objectiveTensors) {
        const TensorView &y = m_values[t.index()];
        const std::int64_t n = y.size();
        for (std::int64_t i = 0; i < n; ++i)
            objective += m_objective == Objective::Loss
                             ? static_cast<double>(y.data[i])
                             : static_cast<double>(y.data[i]) * y.data[i];
    }
    return static_cast<float>(objective);
}

void Interpreter::backward()
{
    std::memset(m_arena.at(m_gradBegin), 0,
                static_cast<std::size_t>(m_gradEnd - m_gradBegin) * sizeof(float));
    for (ir::TensorId t : m_objectiveTensors) {
        const TensorView &g = m_grads[t.index()];
        if (!g)
            continue;
        const TensorView &y = m_values[t.index()];
        const std::int64_t n = g.size();
        for (std::int64_t i = 0; i < n; ++i)
            g.data[i] = m_objective == Objective::Loss ? 1.0f : 2.0f * y.data[i];
    }
    for (auto it = m_program.rbegin(); it != m_program.rend(); ++it)
        if (it->backward)
            runBackward(*it);
}

void Interpreter::update()
{
    ++m_updates;
    kernels::AdamConfig adam = m_options.adam;
    adam.learningRate = m_options.learningRate;
    for (const Parameter &p : m_parameters) {
        if (m_options.optimizer == Optimizer::Adam)
            kernels::adamUpdate(p.value, p.grad, p.m, p.v, m_updates, adam);
        else
            kernels::sgdUpdate(p.value, p.grad, m_options.learningRate);
    }
}

float Interpreter::step()
{
    const float objective = forward();
    backward();
    update();
    return objective;
}

TensorView Interpreter::value(std::string_view tensorName) const
{
    const auto id = m_graph.findTensor(tensorName);
    if (!id || !m_values[id->index()])
        throw TapestryError(Error{m_graph.name, "tensor '" + std::string(tensorName) + "'",
                                  "no float tensor of that name"});
    return m_values[id->index()];
}

TensorView Interpreter::grad(std::string_view tensorName) const
{
    value(tensorName);
    return m_grads[m_graph.findTensor(tensorName)->index()];
}

void Interpreter::runForward(const Instr &ins)
{
    using namespace kernels;
    const TensorView &out = ins.out[0];
    switch (ins.kind) {
    case Kind::MatMul:
        matmulForward(out, ins.in[0], ins.in[1]);
        break;
    case Kind::Add:
        binaryForward(BinaryOp::Add, out, ins.in[0], ins.in[1]);
        break;
    case Kind::Sub:
        binaryForward(BinaryOp::Sub, out, ins.in[0], ins.in[1]);
        break;
    case Kind::Mul:
        binaryForward(BinaryOp::Mul, out, ins.in[0], ins.in[1]);
        break;
    case Kind::Div:
        binaryForward(BinaryOp::Div, out, ins.in[0], ins.in[1]);
        break;
    case Kind::Relu:
        reluForward(out, ins.in[0]);
        break;
    case Kind::Gelu:
        geluForward(ins.gelu, out, ins.in[0]);
        break;
    case Kind::Silu:
        siluForward(out, ins.in[0]);
        break;
    case Kind::Neg:
        negForward(out, ins.in[0]);
        break;
    case Kind::Softmax:
        softmaxForward(out, ins.in[0]);
        break;
    case Kind::LayerNorm:
        layernormForward(out, ins.saved[0], ins.saved[1], ins.in[0], ins.in[1],
                         ins.in.size() > 2 ? ins.in[2] : TensorView{}, ins.epsilon);
        break;
    case Kind::RmsNorm:
        rmsnormForward(out, ins.saved[0], ins.in[0], ins.in[1], ins.epsilon);
        break;
    case Kind::Reshape:
        reshapeForward(out, ins.in[0]);
        break;
    case Kind::Transpose:
        transposeForward(out, ins.in[0], ins.perm);
        break;
    case Kind::Split:
        splitForward(ins.out, ins.in[0], ins.axis);
        break;
    case Kind::Concat:
        concatForward(out, ins.in, ins.axis);
        break;
    case Kind::Slice:
        sliceForward(out, ins.in[0], ins.starts, ins.steps);
        break;
    case Kind::Expand:
        expandForward(out, ins.in[0]);
        break;
    case Kind::Gather:
        gatherForward(out, ins.in[0], ins.index);
        break;
    case Kind::CrossEntropy:
        crossEntropyForward(out, ins.saved[0], ins.in[0], ins.index);
        break;
    }
}

void Interpreter::runBackward(const Instr &ins)
{
    using namespace kernels;
    const TensorView &dout = ins.dout[0];
    const TensorView &dx = ins.din[0];
    switch (ins.kind) {
    case Kind::MatMul:
        matmulBackward(dout, ins.in[0], ins.in[1], dx, ins.din[1]);
        break;
    case Kind::Add:
        binaryBackward(BinaryOp::Add, dout, ins.in[0], ins.in[1], dx, ins.din[1]);
        break;
    case Kind::Sub:
        binaryBackward(BinaryOp::Sub, dout, ins.in[0], ins.in[1], dx, ins.din[1]);
        break;
    case Kind::Mul:
        binaryBackward(BinaryOp::Mul, dout, ins.in[0], ins.in[1], dx, ins.din[1]);
        break;
    case Kind::Div:
        binaryBackward(BinaryOp::Div, dout, ins.in[0], ins.in[1], dx, ins.din[1]);
        break;
    case Kind::Relu:
        reluBackward(dout, ins.in[0], dx);
        break;
    case Kind::Gelu:
        geluBackward(ins.gelu, dout, ins.in[0], dx);
        break;
    case Kind::Silu:
        siluBackward(dout, ins.in[0], dx);
        break;
    case Kind::Neg:
        negBackward(dout, dx);
        break;
    case Kind::Softmax:
        softmaxBackward(dout, ins.out[0], dx);
        break;
    case Kind::LayerNorm:
        layernormBackward(dout, ins.in[0], ins.in[1], ins.saved[0], ins.saved[1], dx, ins.din[1],
                          ins.din.size() > 2 ? ins.din[2] : TensorView{});
        break;
    case Kind::RmsNorm:
        rmsnormBackward(dout, ins.in[0], ins.in[1], ins.saved[0], dx, ins.din[1]);
        break;
    case Kind::Reshape:
        reshapeBackward(dout, dx);
        break;
    case Kind::Transpose:
        transposeBackward(dout, ins.perm, dx);
        break;
    case Kind::Split:
        splitBackward(ins.dout, ins.axis, dx);
        break;
    case Kind::Concat:
        concatBackward(dout, ins.axis, ins.din);
        break;
    case Kind::Slice:
        sliceBackward(dout, ins.starts, ins.steps, dx);
        break;
    case Kind::Expand:
        expandBackward(dout, dx);
        break;
    case Kind::Gather:
        gatherBackward(dout, ins.index, dx);
        break;
    case Kind::CrossEntropy:
        crossEntropyBackward(dout, ins.in[0], ins.index, ins.saved[0], dx);
        break;
    }
}

} // namespace tapestry::exec
