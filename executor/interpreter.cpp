#include "interpreter.h"

#include "initializer.h"
#include "kernels/matmul.h"
#include "opsupport.h"

#include "ir/error.h"

#include <chrono>
#include <cstring>

namespace tapestry::exec {

namespace {

bool isFloat(ir::DType d)
{
    return d == ir::DType::F32 || d == ir::DType::F16 || d == ir::DType::BF16 ||
           d == ir::DType::F64;
}

} // namespace

cost::CostOptions heldCostOptions(cost::CostOptions options, Optimizer optimizer)
{
    options.parameterBytes = 4;
    options.gradientBytes = 4;
    options.activationBytes = 4;
    options.optimizerBytes = optimizer == Optimizer::Adam ? 8 : 0;
    return options;
}

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
    if (m_objectiveTensors.empty() || m_options.stagePart)
        m_objectiveTensors = outputs;
    m_seeds.resize(m_objectiveTensors.size());

    // A tensor needs a gradient when it is a parameter or computed from one
    // (or received from the stage before, whose gradient goes back to it).
    m_received.assign(nt, false);
    for (const std::string &name : m_options.receivedInputs) {
        const auto id = m_graph.findTensor(name);
        if (!id || m_graph.tensor(*id).role != ir::Role::Input || !isFloat(m_graph.tensor(*id).dtype))
            throw TapestryError(Error{input, "tensor '" + name + "'", "not a float input of the stage"});
        m_received[id->index()] = true;
    }
    std::vector<bool> needsGrad(nt, false);
    for (std::size_t i = 0; i < nt; ++i)
        needsGrad[i] = (m_graph.tensors()[i].role == ir::Role::Parameter || m_received[i]) &&
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
        const bool borrowed = m_options.parametersOf && t.role == ir::Role::Parameter;
        if (isFloat(t.dtype) && !borrowed)
            valueOff[i] = m_arena.reserve(t.elementCount());
        else if (m_indexRange[i] > 0) {
            indexOff[i] = indexCount;
            indexCount += t.elementCount();
        }
    }
    m_gradBegin = m_arena.size();
    for (std::size_t i = 0; i < nt; ++i)
        if (needsGrad[i] && !m_options.parametersOf)
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
        const int count = findOp(op.type)->savedRows;
        for (int k = 0; k < count; ++k)
            savedOff[o.index()].emplace_back(m_arena.reserve(n), rows);
    }
    std::vector<std::pair<std::int64_t, std::int64_t>> momentOff;
    for (std::size_t i = 0; i < nt; ++i)
        if (m_graph.tensors()[i].role == ir::Role::Parameter && needsGrad[i]) {
            const std::int64_t n = m_graph.tensors()[i].elementCount();
            if (m_options.optimizer == Optimizer::Adam && !m_options.parametersOf)
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
        if (m_options.parametersOf) {
            // The owner's gradients, every one: a copy runs its backward
            // pass when no other copy does, and each pass starts them
            // afresh (stagePart), but for the parameters' it accumulates.
            const Interpreter &owner = *m_options.parametersOf;
            if (owner.m_graph.tensorCount() != nt)
                throw TapestryError(Error{input, {}, "a copy of another graph than its parameters' owner"});
            m_grads[i] = owner.m_grads[i];
            if (m_graph.tensors()[i].role == ir::Role::Parameter && isFloat(m_graph.tensors()[i].dtype))
                m_values[i] = owner.m_values[i];
        }
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

    for (ir::OpId o : *order) {
        const ir::Op &op = m_graph.op(o);
        Instr ins;
        ins.def = findOp(op.type);
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
        ins.attributes = decodeAttributes(*ins.def, op, ins.in[0].shape);
        if (ins.def->gemm) {
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
        if (!source || m_received[i] || (m_options.parametersOf && t.role == ir::Role::Parameter))
            continue;  // set by the caller, or the owner's
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
        run(ins.def->host.forward, ins);
    double objective = 0.0;
    for (ir::TensorId t : m_objectiveTensors) {
        if (m_options.stagePart && !m_graph.tensor(t).shape.empty())
            continue;  // sent on, not trained on here
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
    if (m_options.stagePart) {
        // The parameters' gradients accumulate over the micro-batches.
        for (std::size_t i = 0; i < m_graph.tensorCount(); ++i)
            if (m_grads[i] && m_graph.tensors()[i].role != ir::Role::Parameter)
                std::memset(m_grads[i].data, 0, static_cast<std::size_t>(m_grads[i].size()) * sizeof(float));
        for (std::size_t k = 0; k < m_objectiveTensors.size(); ++k) {
            const TensorView &g = m_grads[m_objectiveTensors[k].index()];
            if (!g)
                continue;
            if (m_graph.tensor(m_objectiveTensors[k]).shape.empty())
                g.data[0] = m_options.lossScale;
            else if (!m_seeds[k].empty())
                std::copy(m_seeds[k].begin(), m_seeds[k].end(), g.data);
        }
        for (auto it = m_program.rbegin(); it != m_program.rend(); ++it)
            if (it->backward)
                run(it->def->host.backward, *it);
        for (auto &seed : m_seeds)
            seed.clear();
        return;
    }
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
            run(it->def->host.backward, *it);
}

void Interpreter::update()
{
    if (m_options.parametersOf)
        return;  // the owner updates them
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

void Interpreter::seedGradient(std::string_view output, const float *gradient)
{
    for (std::size_t k = 0; k < m_objectiveTensors.size(); ++k)
        if (m_graph.tensor(m_objectiveTensors[k]).name == output) {
            const auto n = static_cast<std::size_t>(m_graph.tensor(m_objectiveTensors[k]).elementCount());
            m_seeds[k].assign(gradient, gradient + n);
            return;
        }
    throw TapestryError(Error{m_graph.name, "tensor '" + std::string(output) + "'", "not an output of the stage"});
}

void Interpreter::zeroParameterGradients()
{
    for (const Parameter &p : m_parameters)
        std::memset(p.grad.data, 0, static_cast<std::size_t>(p.grad.size()) * sizeof(float));
}

void Interpreter::loadInputRows(std::int64_t firstRow, std::int64_t batchRows,
                                const std::vector<std::string> &batched)
{
    for (const std::string &name : batched) {
        const auto found = m_graph.findTensor(name);
        if (!found)
            continue;  // read by another stage
        const ir::TensorId id = *found;
        const auto i = id.index();
        const ir::Tensor &t = m_graph.tensor(id);
        if (t.role != ir::Role::Input || m_received[i] || t.shape.empty())
            continue;
        ir::Shape whole = t.shape;
        whole[0] = batchRows;
        const std::uint64_t key = streamKey(m_options.seed, t.name);
        if (m_values[i]) {
            std::vector<std::int64_t> origin(t.shape.size(), 0);
            origin[0] = firstRow;
            initializeBlock(m_values[i], origin, whole, key, initRuleFor(m_graph, id));
        } else if (m_indexRange[i] > 0) {
            const std::int64_t perRow = t.elementCount() / t.shape[0];
            initializeIndices(m_indices.data() + m_indexOffset[i], t.elementCount(), firstRow * perRow, key,
                              indexRuleFor(m_graph, id));
        }
    }
}

std::vector<std::string> Interpreter::parameterNames() const
{
    std::vector<std::string> names;
    for (std::size_t i = 0; i < m_graph.tensorCount(); ++i)
        if (m_graph.tensors()[i].role == ir::Role::Parameter && m_grads[i])
            names.push_back(m_graph.tensors()[i].name);
    return names;
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

void Interpreter::run(OpKernel kernel, const Instr &ins)
{
    const auto start = std::chrono::steady_clock::now();
    kernel(ins.args());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    (ins.def->gemm ? m_kernelTimes.gemm : m_kernelTimes.other) += s;
}

OpArgs Interpreter::Instr::args() const
{
    OpArgs a;
    a.in = in;
    a.out = out;
    a.din = din;
    a.dout = dout;
    a.saved = saved;
    a.index = index;
    a.attributes = &attributes;
    return a;
}

} // namespace tapestry::exec
