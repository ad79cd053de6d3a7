#include "interpreter.h"

#include "initializer.h"
#include "kernels/matmul.h"
#include "opsupport.h"

#include "ir/error.h"
#include "sharding/strategy.h"

#include <chrono>
#include <cstring>

namespace tapestry::exec {

using sharding::isFloat;

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

    // Slots first, views once the arena is laid out. The whole-graph
    // reference keeps every buffer for the whole step (its values and
    // gradients are read after it); a pipeline stage's part keeps what the
    // caller reads and what lives across steps (parameters, their
    // gradients and optimizer state, the received inputs and the outputs),
    // and lets the rest share memory where their lifetimes allow, as a
    // framework frees what its backward pass no longer needs.
    const bool compact = m_options.stagePart;
    std::vector<Slot> valueSlot(nt, kNoSlot), gradSlot(nt, kNoSlot);
    std::vector<std::int64_t> &indexOff = m_indexOffset;
    indexOff.assign(nt, -1);
    std::int64_t indexCount = 0;
    auto borrowed = [&](std::size_t i) {
        return m_options.parametersOf && m_graph.tensors()[i].role == ir::Role::Parameter;
    };
    for (std::size_t i = 0; i < nt; ++i) {
        const ir::Tensor &t = m_graph.tensors()[i];
        if (isFloat(t.dtype) && !borrowed(i))
            valueSlot[i] = m_buffers.reserve(t.shape);
        else if (m_indexRange[i] > 0) {
            indexOff[i] = indexCount;
            indexCount += t.elementCount();
        }
    }
    for (std::size_t i = 0; i < nt; ++i)
        if (needsGrad[i] && !borrowed(i))
            gradSlot[i] = m_buffers.reserve(m_graph.tensors()[i].shape);
    std::vector<std::vector<Slot>> savedSlot(m_graph.opCount());
    for (ir::OpId o : *order) {
        const ir::Op &op = m_graph.op(o);
        const ir::Shape &x = m_graph.tensor(op.inputs[0]).shape;
        ir::Shape rows(x.begin(), x.empty() ? x.end() : x.end() - 1);
        for (int k = 0; k < findOp(op.type)->savedRows; ++k)
            savedSlot[o.index()].push_back(m_buffers.reserve(rows));
    }
    std::vector<std::pair<Slot, Slot>> momentSlot;
    for (std::size_t i = 0; i < nt; ++i)
        if (m_graph.tensors()[i].role == ir::Role::Parameter && needsGrad[i]) {
            const ir::Shape &shape = m_graph.tensors()[i].shape;
            if (m_options.optimizer == Optimizer::Adam && !m_options.parametersOf)
                momentSlot.emplace_back(m_buffers.reserve(shape), m_buffers.reserve(shape));
            else
                momentSlot.emplace_back(kNoSlot, kNoSlot);
        }

    // What lives across the step or is read by the caller.
    std::vector<bool> objectiveTensor(nt, false);
    for (ir::TensorId t : m_objectiveTensors)
        objectiveTensor[t.index()] = true;
    auto keepIf = [&](Slot s, bool keep) {
        if (s != kNoSlot && (keep || !compact))
            m_buffers.keep(s);
    };
    for (std::size_t i = 0; i < nt; ++i) {
        const bool parameter = m_graph.tensors()[i].role == ir::Role::Parameter;
        keepIf(valueSlot[i], parameter || m_received[i] || objectiveTensor[i]);
        keepIf(gradSlot[i], parameter || m_received[i]);
    }
    for (const auto &slots : savedSlot)
        for (Slot s : slots)
            keepIf(s, false);
    for (const auto &[ms, vs] : momentSlot) {
        keepIf(ms, true);
        keepIf(vs, true);
    }

    // The program, in slots: its accesses in step order lay out the arena.
    struct Slots {
        std::vector<Slot> in, out, din, dout, saved, zeroFirst;
        OpAttributes attributes;
        BackwardReads reads = BackwardReads::Inputs;
    };
    std::vector<Slots> program;
    for (ir::OpId o : *order) {
        const ir::Op &op = m_graph.op(o);
        Slots p;
        for (std::size_t i = 0; i < op.inputs.size(); ++i) {
            if (isShapeOperand(op.type, i))
                continue;
            p.in.push_back(valueSlot[op.inputs[i].index()]);
            p.din.push_back(opBackward[o.index()] ? gradSlot[op.inputs[i].index()] : kNoSlot);
        }
        for (ir::TensorId t : op.outputs) {
            p.out.push_back(valueSlot[t.index()]);
            p.dout.push_back(gradSlot[t.index()]);
        }
        p.saved = savedSlot[o.index()];
        const OpDef &def = *findOp(op.type);
        p.attributes = decodeAttributes(def, op, m_graph.tensor(op.inputs[0]).shape);
        p.reads = backwardReadsOf(def.backwardReads, p.attributes);
        program.push_back(std::move(p));
    }
    std::vector<SlotAccess> accesses;
    if (compact) {
        std::int64_t position = 0;
        auto touch = [&](Slot s, Access a) {
            if (s != kNoSlot)
                accesses.push_back({position, s, a});
        };
        for (const Slots &p : program) {
            for (Slot s : p.in)
                touch(s, Access::Read);
            for (const auto *slots : {&p.out, &p.saved})
                for (Slot s : *slots)
                    touch(s, Access::Write);
            ++position;
        }
        // The seeds; every other gradient is zeroed where the backward pass
        // first touches it.
        std::vector<bool> started(m_buffers.slotCount(), false);
        for (ir::TensorId t : m_objectiveTensors)
            if (gradSlot[t.index()] != kNoSlot) {
                touch(gradSlot[t.index()], Access::Write);
                started[static_cast<std::size_t>(gradSlot[t.index()])] = true;
            }
        ++position;
        std::size_t j = program.size();
        for (auto it = order->rbegin(); it != order->rend(); ++it) {
            Slots &p = program[--j];
            if (!opBackward[it->index()])
                continue;
            for (const auto *slots : {&p.dout, &p.din})
                for (Slot s : *slots)
                    if (s != kNoSlot && !m_buffers.kept(s) && !started[static_cast<std::size_t>(s)]) {
                        started[static_cast<std::size_t>(s)] = true;
                        p.zeroFirst.push_back(s);
                        touch(s, Access::Write);
                    }
            forEachBackwardAccess(p.reads, p.in, p.out, p.dout, p.saved, p.din, kNoSlot,
                                  [&](Slot s, bool update) { touch(s, update ? Access::Update : Access::Read); });
            ++position;
        }
    }
    m_buffers.allocate(accesses);
    m_indices.assign(static_cast<std::size_t>(indexCount), 0);

    m_values.resize(nt);
    m_grads.resize(nt);
    m_indexValues.resize(nt);
    for (std::size_t i = 0; i < nt; ++i) {
        const ir::Shape &s = m_graph.tensors()[i].shape;
        m_values[i] = valueSlot[i] != kNoSlot ? m_buffers.view(valueSlot[i]) : TensorView{nullptr, s};
        m_grads[i] = gradSlot[i] != kNoSlot ? m_buffers.view(gradSlot[i]) : TensorView{nullptr, s};
        if (m_options.parametersOf && m_graph.tensors()[i].role == ir::Role::Parameter) {
            // The owner's parameters and their gradients: a copy runs its
            // backward pass when no other copy does, and the parameters'
            // gradients accumulate over every copy's.
            const Interpreter &owner = *m_options.parametersOf;
            if (owner.m_graph.tensorCount() != nt)
                throw TapestryError(Error{input, {}, "a copy of another graph than its parameters' owner"});
            m_grads[i] = owner.m_grads[i];
            if (isFloat(m_graph.tensors()[i].dtype))
                m_values[i] = owner.m_values[i];
        }
        if (indexOff[i] >= 0)
            m_indexValues[i] = IndexView{m_indices.data() + indexOff[i], s};
        // Zeroed at the start of every backward pass: all of the reference's
        // gradients, a stage's received inputs' (the rest where first touched).
        if (gradSlot[i] != kNoSlot && (!compact || m_received[i]))
            m_zeroAtBackward.push_back(m_grads[i]);
    }
    std::size_t p = 0;
    for (std::size_t i = 0; i < nt; ++i)
        if (m_graph.tensors()[i].role == ir::Role::Parameter && needsGrad[i]) {
            const auto [ms, vs] = momentSlot[p++];
            const ir::Shape &s = m_graph.tensors()[i].shape;
            m_parameters.push_back({m_values[i], m_grads[i],
                                    ms != kNoSlot ? m_buffers.view(ms) : TensorView{nullptr, s},
                                    vs != kNoSlot ? m_buffers.view(vs) : TensorView{nullptr, s}});
        }

    std::size_t j = 0;
    for (ir::OpId o : *order) {
        const ir::Op &op = m_graph.op(o);
        const Slots &slots = program[j++];
        Instr ins;
        ins.def = findOp(op.type);
        ins.kind = kernelKindOf(op.type, ins.def->gemm);
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
        for (Slot s : slots.saved)
            ins.saved.push_back(m_buffers.view(s));
        for (Slot s : slots.zeroFirst)
            ins.zeroFirst.push_back(m_buffers.view(s));
        ins.attributes = slots.attributes;
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
        if (m_graph.tensors()[i].role == ir::Role::Input && m_values[i])
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
    for (const TensorView &g : m_zeroAtBackward)
        std::memset(g.data, 0, static_cast<std::size_t>(g.size()) * sizeof(float));
    if (m_options.stagePart) {
        // The parameters' gradients accumulate over the micro-batches.
        for (std::size_t k = 0; k < m_objectiveTensors.size(); ++k) {
            const TensorView &g = m_grads[m_objectiveTensors[k].index()];
            if (!g)
                continue;
            if (m_graph.tensor(m_objectiveTensors[k]).shape.empty())
                g.data[0] = m_options.lossScale;
            else if (!m_seeds[k].empty())
                std::copy(m_seeds[k].begin(), m_seeds[k].end(), g.data);
            else
                std::memset(g.data, 0, static_cast<std::size_t>(g.size()) * sizeof(float));
        }
        for (auto it = m_program.rbegin(); it != m_program.rend(); ++it)
            if (it->backward) {
                for (const TensorView &g : it->zeroFirst)
                    std::memset(g.data, 0, static_cast<std::size_t>(g.size()) * sizeof(float));
                run(it->def->host.backward, *it);
            }
        for (auto &seed : m_seeds)
            seed.clear();
        return;
    }
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
    m_kernelTimes.add(ins.kind, s);
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
