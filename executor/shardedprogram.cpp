#include "shardedprogram.h"

#include "initializer.h"
#include "kernels/matmul.h"
#include "kernels/strided.h"
#include "opsupport.h"
#include "shardlayout.h"

#include "ir/error.h"
#include "sharding/reshard.h"
#include "sharding/strategy.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace tapestry::exec {

namespace {

using sharding::Placement;
using sharding::ShardingSpec;

bool isFloat(ir::DType d)
{
    return d == ir::DType::F32 || d == ir::DType::F16 || d == ir::DType::BF16 || d == ir::DType::F64;
}

// Mesh axes that split dim `dim` under `spec`.
std::vector<std::size_t> axesSplitting(const ShardingSpec &spec, int dim)
{
    std::vector<std::size_t> axes;
    for (std::size_t a = 0; a < spec.placements.size(); ++a)
        if (spec.placements[a] == Placement::shard(dim))
            axes.push_back(a);
    return axes;
}

} // namespace

ShardedProgram::ShardedProgram(ir::Graph graph, const std::vector<ShardingSpec> &specs,
                               const sharding::Mesh &mesh, RankMesh &plan, RankMesh &aux, Device &device,
                               ShardedProgramOptions options, const std::string &input)
    : m_graph(std::move(graph)), m_specs(specs), m_mesh(mesh), m_plan(plan), m_aux(aux), m_device(device),
      m_options(options)
{
    for (const auto &axis : m_mesh.axes)
        m_meshShape.push_back(axis.size);
    checkRunnable(m_graph, input);
    build(input);
    m_buffers.allocate(m_device);
    resolve();
    initialise();
}

void ShardedProgram::appendReshard(std::size_t tensor, const ShardingSpec &from, const ShardingSpec &to,
                                   Slot src, Slot dst, bool aux, std::vector<Action> &into)
{
    std::vector<ReshardStep> steps;
    planReshard(m_graph.tensors()[tensor].shape, from, to, m_meshShape, src, dst, m_buffers, steps);
    for (ReshardStep &s : steps) {
        if (!aux && s.kind == ReshardStep::Kind::AllReduce)
            s.dropped = ++m_allReduces == m_options.dropAllReduce;
        into.push_back({Action::Type::Reshard, m_steps.size()});
        m_steps.push_back(s);
        m_auxStep.push_back(aux);
    }
}

Slot ShardedProgram::variant(std::size_t tensor, const ShardingSpec &spec, std::vector<Action> &into)
{
    if (spec == m_specs[tensor])
        return m_values[tensor];
    const auto key = std::make_pair(tensor, spec);
    if (auto it = m_variants.find(key); it != m_variants.end())
        return it->second;
    const Slot slot = m_buffers.reserve(shardShape(spec, m_graph.tensors()[tensor].shape, m_meshShape));
    appendReshard(tensor, m_specs[tensor], spec, m_values[tensor], slot, false, into);
    m_variants.emplace(key, slot);
    return slot;
}

IndexView ShardedProgram::indices(std::size_t tensor, const ShardingSpec &spec)
{
    const auto key = std::make_pair(tensor, spec);
    if (auto it = m_indexViews.find(key); it != m_indexViews.end())
        return it->second;
    // Token ids and labels are inputs, a function of the seed alone: each
    // spec a consumer reads is built locally, never sent.
    const ir::Tensor &t = m_graph.tensors()[tensor];
    const ir::TensorId id(static_cast<std::int32_t>(tensor));
    const ir::Shape local = shardShape(spec, t.shape, m_meshShape);
    const auto offset = shardOffset(spec, t.shape, m_meshShape, m_plan.coordinates());
    std::int64_t n = 1;
    for (auto d : local)
        n *= d;
    std::vector<std::int64_t> data(static_cast<std::size_t>(n));
    const kernels::Dims full = kernels::contiguousStrides(t.shape);
    const std::uint64_t key2 = streamKey(m_options.training.seed, t.name);
    const IndexRule rule = indexRuleFor(m_graph, id);
    std::vector<std::int64_t> idx(local.size(), 0);
    for (std::int64_t i = 0; i < n; ++i) {
        std::int64_t flat = 0;
        for (std::size_t d = 0; d < local.size(); ++d)
            flat += (offset[d] + idx[d]) * full[d];
        initializeIndices(&data[static_cast<std::size_t>(i)], 1, flat, key2, rule);
        for (std::size_t d = local.size(); d-- > 0;) {
            if (++idx[d] < local[d])
                break;
            idx[d] = 0;
        }
    }
    IndexView view{m_device.keepIndices(std::move(data)), local};
    m_indexViews.emplace(key, view);
    return view;
}

void ShardedProgram::finalizeGradient(std::size_t tensor, std::vector<Action> &into)
{
    const ShardingSpec target = sharding::gradientSpec(m_specs[tensor]);
    for (const auto &[spec, slot] : m_contributions[tensor]) {
        const Slot landing = m_buffers.reserve(m_buffers.shape(m_grads[tensor]));
        appendReshard(tensor, spec, target, slot, landing, false, into);
        into.push_back({Action::Type::AddInto, 0, landing, m_grads[tensor]});
    }
}

void ShardedProgram::build(const std::string &input)
{
    const auto order = m_graph.topologicalOrder();
    if (!order)
        throw TapestryError(Error{input, {}, "the graph has a cycle"});
    const std::size_t nt = m_graph.tensorCount();
    const auto &tensors = m_graph.tensors();

    std::vector<std::size_t> outputs;
    for (std::size_t i = 0; i < nt; ++i)
        if (tensors[i].role == ir::Role::Output && isFloat(tensors[i].dtype))
            outputs.push_back(i);
    if (outputs.empty())
        throw TapestryError(Error{input, {}, "the graph has no float output to train on"});
    for (std::size_t t : outputs)
        if (tensors[t].shape.empty())
            m_objectiveTensors.push_back(t);
    m_objective = m_objectiveTensors.empty() ? Objective::SumOfSquares : Objective::Loss;
    if (m_objectiveTensors.empty())
        m_objectiveTensors = outputs;

    // As the reference: a tensor needs a gradient when it is a float
    // parameter or computed from one.
    std::vector<bool> needsGrad(nt, false);
    for (std::size_t i = 0; i < nt; ++i)
        needsGrad[i] = tensors[i].role == ir::Role::Parameter && isFloat(tensors[i].dtype);
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

    m_values.assign(nt, kNoSlot);
    m_grads.assign(nt, kNoSlot);
    m_contributions.resize(nt);
    for (std::size_t i = 0; i < nt; ++i) {
        if (!isFloat(tensors[i].dtype))
            continue;
        m_values[i] = m_buffers.reserve(shardShape(m_specs[i], tensors[i].shape, m_meshShape));
        if (needsGrad[i]) {
            m_grads[i] = m_buffers.reserve(
                shardShape(sharding::gradientSpec(m_specs[i]), tensors[i].shape, m_meshShape));
            m_zeroed.push_back(m_grads[i]);
        }
    }

    // Per op: its backward step needs the output gradients in the spec it
    // produced; kept for the backward pass built below.
    struct Produced {
        std::vector<std::pair<std::size_t, ShardingSpec>> outputs;  // tensor, produced spec
        std::vector<Slot> dout;
    };
    std::vector<Produced> produced(m_graph.opCount());
    std::vector<std::size_t> opIndex(m_graph.opCount(), 0);

    for (ir::OpId o : *order) {
        const ir::Op &op = m_graph.op(o);
        std::vector<ShardingSpec> inputSpecs;
        for (ir::TensorId t : op.inputs)
            inputSpecs.push_back(m_specs[t.index()]);
        const sharding::OpStrategy s = sharding::resolveStrategy(m_graph, o, inputSpecs, m_mesh);
        auto refuse = [&](const std::string &why) {
            throw TapestryError(Error{input, "op '" + op.name + "'",
                                      "the executor cannot run it as the plan shards it: " + why});
        };

        OpStep step;
        step.def = findOp(op.type);
        for (std::size_t i = 0; i < op.inputs.size(); ++i) {
            if (isShapeOperand(op.type, i))
                continue;
            const std::size_t t = op.inputs[i].index();
            if (isIndexInput(op.type, i)) {
                if (s.inputs[i].hasPartial())
                    refuse("indices '" + tensors[t].name + "' as a partial sum");
                step.index = indices(t, s.inputs[i]);
                step.in.push_back(kNoSlot);
                step.din.push_back(kNoSlot);
                continue;
            }
            step.in.push_back(variant(t, s.inputs[i], m_forward));
            Slot din = kNoSlot;
            if (opBackward[o.index()] && needsGrad[t]) {
                const ShardingSpec &g = s.inputGradients[i];
                if (g == sharding::gradientSpec(m_specs[t])) {
                    din = m_grads[t];
                } else {
                    auto &cs = m_contributions[t];
                    auto it = std::find_if(cs.begin(), cs.end(), [&](const auto &c) { return c.first == g; });
                    if (it == cs.end()) {
                        cs.emplace_back(g, m_buffers.reserve(shardShape(g, tensors[t].shape, m_meshShape)));
                        m_zeroed.push_back(cs.back().second);
                        it = cs.end() - 1;
                    }
                    din = it->second;
                }
            }
            step.din.push_back(din);
        }
        std::vector<std::pair<std::size_t, Slot>> outputReshards;
        for (std::size_t k = 0; k < op.outputs.size(); ++k) {
            const std::size_t t = op.outputs[k].index();
            const ShardingSpec &p = s.outputs[k];
            Slot out = m_values[t];
            if (p != m_specs[t]) {
                out = m_buffers.reserve(shardShape(p, tensors[t].shape, m_meshShape));
                outputReshards.emplace_back(k, out);
            }
            step.out.push_back(out);
            Slot dout = m_grads[t];
            if (opBackward[o.index()] && sharding::gradientSpec(p) != sharding::gradientSpec(m_specs[t]))
                dout = m_buffers.reserve(shardShape(sharding::gradientSpec(p), tensors[t].shape, m_meshShape));
            step.dout.push_back(dout);
            produced[o.index()].outputs.emplace_back(t, p);
            produced[o.index()].dout.push_back(dout);
        }

        const OpDef &def = *step.def;
        step.kernels = m_device.opKernels(def);
        if (!step.kernels)
            throw TapestryError(Error{input, "op '" + op.name + "'",
                                      "no " + std::string(m_device.backend()) + " kernel for " + op.type});
        const ir::Shape x = step.in[0] == kNoSlot ? ir::Shape{} : m_buffers.shape(step.in[0]);
        step.attributes = decodeAttributes(def, op, x);
        if (def.refuseSharded)
            if (auto why = def.refuseSharded(step.attributes, s.inputs[0]))
                refuse(*why);
        if (def.vocabDim) {
            const ir::Shape &whole = tensors[op.inputs[0].index()].shape;
            const int dim = *def.vocabDim < 0 ? static_cast<int>(whole.size()) + *def.vocabDim : *def.vocabDim;
            step.splitAxes = axesSplitting(s.inputs[0], dim);
            step.offset = shardOffset(s.inputs[0], whole, m_meshShape, m_plan.coordinates())[static_cast<std::size_t>(dim)];
        }
        if (def.indexInput)
            step.denominator = static_cast<double>(tensors[op.inputs[*def.indexInput].index()].elementCount());
        {
            const ir::Shape rows(x.begin(), x.empty() ? x.end() : x.end() - 1);
            for (int k = 0; k < def.scratchRows; ++k)
                step.scratch.push_back(m_buffers.reserve(rows));
            for (int k = 0; k < def.savedRows; ++k)
                step.saved.push_back(m_buffers.reserve(rows));
        }
        if (def.gemm) {
            TensorView out{nullptr, m_buffers.shape(step.out[0])}, a{nullptr, x};
            const double f = kernels::matmulFlops(out, a);
            m_flops += f;
            for (Slot g : step.din)
                if (g != kNoSlot)
                    m_flops += f;
        }

        opIndex[o.index()] = m_ops.size();
        m_forward.push_back({Action::Type::Forward, m_ops.size()});
        m_ops.push_back(std::move(step));
        for (const auto &[k, slot] : outputReshards) {
            const std::size_t t = op.outputs[k].index();
            appendReshard(t, s.outputs[k], m_specs[t], slot, m_values[t], false, m_forward);
        }
    }

    // The objective: its outputs gathered whole; for Σ y² the seed gradient
    // 2y is sliced back from the whole value (no communication).
    for (std::size_t t : m_objectiveTensors) {
        const Slot whole = m_buffers.reserve(tensors[t].shape);
        m_wholeObjective.push_back(whole);
        appendReshard(t, m_specs[t], ShardingSpec::replicated(m_mesh.rank()), m_values[t], whole, true,
                      m_objectiveGather);
        if (m_objective == Objective::SumOfSquares && m_grads[t] != kNoSlot)
            appendReshard(t, ShardingSpec::replicated(m_mesh.rank()), sharding::gradientSpec(m_specs[t]),
                          whole, m_grads[t], true, m_seed);
    }

    // Backward in reverse order: a tensor's gradient is complete once every
    // consumer (later in the order) has run, i.e. just before its producer.
    for (auto it = order->rbegin(); it != order->rend(); ++it) {
        if (!opBackward[it->index()])
            continue;
        const Produced &p = produced[it->index()];
        for (std::size_t k = 0; k < p.outputs.size(); ++k) {
            const auto &[t, spec] = p.outputs[k];
            finalizeGradient(t, m_backward);
            if (p.dout[k] != m_grads[t])
                appendReshard(t, sharding::gradientSpec(m_specs[t]), sharding::gradientSpec(spec), m_grads[t],
                              p.dout[k], false, m_backward);
        }
        m_backward.push_back({Action::Type::Backward, opIndex[it->index()]});
    }
    for (std::size_t t = 0; t < nt; ++t)
        if (needsGrad[t] && !tensors[t].producer.valid())
            finalizeGradient(t, m_backward);

    for (std::size_t t = 0; t < nt; ++t) {
        if (tensors[t].role != ir::Role::Parameter || !needsGrad[t])
            continue;
        Parameter p;
        p.name = tensors[t].name;
        p.value = m_values[t];
        p.grad = m_grads[t];
        const ir::Shape &local = m_buffers.shape(m_values[t]);
        if (m_options.training.optimizer == Optimizer::Adam) {
            p.m = m_buffers.reserve(local);
            p.v = m_buffers.reserve(local);
        }
        if (m_options.gatherGradients) {
            p.whole = m_buffers.reserve(tensors[t].shape);
            appendReshard(t, sharding::gradientSpec(m_specs[t]), ShardingSpec::replicated(m_mesh.rank()),
                          m_grads[t], p.whole, true, p.gather);
        }
        m_parameters.push_back(std::move(p));
    }

    for (std::size_t i = 0; i < nt && m_tokens == 0; ++i)
        if (tensors[i].role == ir::Role::Input && !isFloat(tensors[i].dtype) &&
            indexRuleFor(m_graph, ir::TensorId(static_cast<std::int32_t>(i))).range > 0)
            m_tokens = tensors[i].elementCount();
    for (std::size_t i = 0; i < nt && m_tokens == 0; ++i)
        if (tensors[i].role == ir::Role::Input && isFloat(tensors[i].dtype))
            m_tokens = tensors[i].shape.empty() ? 1 : tensors[i].elementCount() / tensors[i].shape.back();
}

void ShardedProgram::initialise()
{
    // Off the host, each block is made in host memory and uploaded.
    std::vector<float> staging;
    const auto &tensors = m_graph.tensors();
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const ir::Tensor &t = tensors[i];
        if ((t.role != ir::Role::Parameter && t.role != ir::Role::Input) || m_values[i] == kNoSlot)
            continue;
        const ir::TensorId id(static_cast<std::int32_t>(i));
        const TensorView &value = m_buffers.view(m_values[i]);
        TensorView block = value;
        if (!m_device.hostMemory()) {
            staging.assign(static_cast<std::size_t>(value.size()), 0.0f);
            block.data = staging.data();
        }
        initializeBlock(block, shardOffset(m_specs[i], t.shape, m_meshShape, m_plan.coordinates()), t.shape,
                        streamKey(m_options.training.seed, t.name), initRuleFor(m_graph, id));
        if (block.data != value.data)
            m_device.upload(value, block.data);
    }
}

void ShardedProgram::runStep(const ReshardStep &step, bool aux)
{
    using K = ReshardStep::Kind;
    const TensorView &src = m_buffers.view(step.src), &dst = m_buffers.view(step.dst);
    RankMesh &mesh = aux ? m_aux : m_plan;
    auto copy = [&] {
        if (step.src != step.dst)
            m_device.copy(dst, src);
    };
    switch (step.kind) {
    case K::Copy:
        copy();
        break;
    case K::AllReduce:
        copy();
        if (!step.dropped)
            mesh.collectives(step.axis).allReduceSum(dst);
        break;
    case K::AllGather:
        mesh.collectives(step.axis).allGather(src, dst, static_cast<std::size_t>(step.dim));
        break;
    case K::ReduceScatter:
        mesh.collectives(step.axis).reduceScatter(src, dst, static_cast<std::size_t>(step.dim));
        break;
    case K::AllToAll:
        mesh.collectives(step.axis).allToAll(src, dst, static_cast<std::size_t>(step.dim),
                                             static_cast<std::size_t>(step.dim2));
        break;
    case K::Slice: {
        kernels::StridedBlock b;
        b.rank = dst.rank();
        const kernels::Dims from = kernels::contiguousStrides(src.shape);
        const kernels::Dims to = kernels::contiguousStrides(dst.shape);
        for (std::size_t d = 0; d < b.rank; ++d) {
            b.shape[d] = dst.shape[d];
            b.srcStride[d] = from[d];
            b.dstStride[d] = to[d];
        }
        const auto dim = static_cast<std::size_t>(step.dim);
        const std::int64_t first = m_plan.coordinates()[step.axis] * dst.shape[dim] * from[dim];
        m_device.stridedCopy(b, dst.data, src.data + first, false);
        break;
    }
    case K::KeepOnFirst:
        if (m_plan.coordinates()[step.axis] == 0)
            copy();
        else
            m_device.fill(dst, 0.0f);
        break;
    }
}

void ShardedProgram::run(const std::vector<Action> &actions)
{
    for (const Action &a : actions) {
        switch (a.type) {
        case Action::Type::Reshard:
            runStep(m_steps[a.index], m_auxStep[a.index]);
            break;
        case Action::Type::Forward:
        case Action::Type::Backward: {
            const OpStep &op = m_ops[a.index];
            m_device.beginKernel();
            const OpArgs call = args(op);
            if (a.type == Action::Type::Forward)
                op.kernels.forward(call);
            else
                op.kernels.backward(call);
            m_device.endKernel(op.def->gemm);
            break;
        }
        case Action::Type::AddInto:
            m_device.addInto(m_buffers.view(a.dst), m_buffers.view(a.src));
            break;
        }
    }
}

float ShardedProgram::forward()
{
    run(m_forward);
    run(m_objectiveGather);
    double objective = 0.0;
    m_hostOutputs.resize(m_wholeObjective.size());
    for (std::size_t i = 0; i < m_wholeObjective.size(); ++i) {
        const TensorView y = m_device.hostView(m_buffers.view(m_wholeObjective[i]), m_hostOutputs[i]);
        for (std::int64_t i = 0; i < y.size(); ++i)
            objective += m_objective == Objective::Loss ? static_cast<double>(y.data[i])
                                                        : static_cast<double>(y.data[i]) * y.data[i];
    }
    return static_cast<float>(objective);
}

void ShardedProgram::backward()
{
    for (Slot s : m_zeroed)
        m_device.fill(m_buffers.view(s), 0.0f);
    if (m_objective == Objective::SumOfSquares) {
        run(m_seed);
        for (std::size_t t : m_objectiveTensors)
            if (m_grads[t] != kNoSlot)
                m_device.scale(m_buffers.view(m_grads[t]), 2.0f);
    } else {
        for (std::size_t t : m_objectiveTensors)
            if (m_grads[t] != kNoSlot)
                m_device.fill(m_buffers.view(m_grads[t]), 1.0f);
    }
    run(m_backward);
}

void ShardedProgram::update()
{
    ++m_updates;
    kernels::AdamConfig adam = m_options.training.adam;
    adam.learningRate = m_options.training.learningRate;
    for (const Parameter &p : m_parameters) {
        if (m_options.training.optimizer == Optimizer::Adam)
            m_device.adamUpdate(m_buffers.view(p.value), m_buffers.view(p.grad), m_buffers.view(p.m),
                                m_buffers.view(p.v), m_updates, adam);
        else
            m_device.sgdUpdate(m_buffers.view(p.value), m_buffers.view(p.grad), m_options.training.learningRate);
    }
}

std::vector<std::pair<std::string, TensorView>> ShardedProgram::wholeOutputs()
{
    std::vector<std::pair<std::string, TensorView>> outs;
    m_hostOutputs.resize(m_wholeObjective.size());
    for (std::size_t i = 0; i < m_objectiveTensors.size(); ++i)
        outs.emplace_back(m_graph.tensors()[m_objectiveTensors[i]].name,
                          m_device.hostView(m_buffers.view(m_wholeObjective[i]), m_hostOutputs[i]));
    return outs;
}

std::vector<std::string> ShardedProgram::parameterNames() const
{
    std::vector<std::string> names;
    for (const Parameter &p : m_parameters)
        names.push_back(p.name);
    return names;
}

TensorView ShardedProgram::gatherGradient(const std::string &parameter)
{
    for (const Parameter &p : m_parameters)
        if (p.name == parameter && p.whole != kNoSlot) {
            run(p.gather);
            return m_device.hostView(m_buffers.view(p.whole), m_hostGradient);
        }
    throw TapestryError(Error{m_graph.name, "tensor '" + parameter + "'",
                              "no gathered gradient (a trained parameter, with gatherGradients set)"});
}

std::vector<kernels::GemmCall> ShardedProgram::gemmsPerStep() const
{
    std::vector<kernels::GemmCall> calls;
    auto add = [&](const std::vector<Action> &actions) {
        for (const Action &a : actions) {
            if (a.type != Action::Type::Forward && a.type != Action::Type::Backward)
                continue;
            const OpStep &op = m_ops[a.index];
            if (!op.def->gemm)
                continue;
            const bool backward = a.type == Action::Type::Backward;
            for (const kernels::GemmCall &c :
                 kernels::matmulGemms(m_buffers.shape(op.out[0]), m_buffers.shape(op.in[0]),
                                      m_buffers.shape(op.in[1]), backward, op.din[0] != kNoSlot,
                                      op.din[1] != kNoSlot)) {
                auto same = std::find_if(calls.begin(), calls.end(), [&](const kernels::GemmCall &e) {
                    return e.transA == c.transA && e.transB == c.transB && e.m == c.m && e.n == c.n &&
                           e.k == c.k;
                });
                if (same == calls.end())
                    calls.push_back(c);
                else
                    same->count += c.count;
            }
        }
    };
    add(m_forward);
    add(m_backward);
    return calls;
}

void ShardedProgram::resolve()
{
    auto views = [&](const std::vector<Slot> &slots, std::vector<TensorView> &into) {
        for (Slot s : slots)
            into.push_back(m_buffers.view(s));
    };
    for (OpStep &op : m_ops) {
        views(op.in, op.inView);
        views(op.out, op.outView);
        views(op.din, op.dinView);
        views(op.dout, op.doutView);
        views(op.saved, op.savedView);
        views(op.scratch, op.scratchView);
        for (std::size_t a : op.splitAxes)
            op.split.push_back(&m_plan.collectives(a));
    }
}

OpArgs ShardedProgram::args(const OpStep &op)
{
    OpArgs a;
    a.in = op.inView;
    a.out = op.outView;
    a.din = op.dinView;
    a.dout = op.doutView;
    a.saved = op.savedView;
    a.scratch = op.scratchView;
    a.index = op.index;
    a.attributes = &op.attributes;
    a.device = &m_device;
    a.offset = op.offset;
    a.split = op.split;
    a.denominator = op.denominator;
    return a;
}

} // namespace tapestry::exec
