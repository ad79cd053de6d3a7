#include "shardedprogram.h"

#include "initializer.h"
#include "kernels/matmul.h"
#include "kernels/strided.h"
#include "opsupport.h"
#include "shardlayout.h"
#include "watchdog.h"

#include "cost/activationmemory.h"
#include "cost/chargerules.h"
#include "ir/error.h"
#include "sharding/reshard.h"
#include "sharding/strategy.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

namespace tapestry::exec {

using sharding::isFloat;

namespace {

using sharding::Placement;
using sharding::ShardingSpec;

std::int64_t elements(const ir::Shape &shape)
{
    std::int64_t n = 1;
    for (auto d : shape)
        n *= d;
    return n;
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

// The spec of a matrix's transpose: its two dims' splits swapped.
ShardingSpec transposed(const ShardingSpec &spec)
{
    ShardingSpec out = spec;
    for (Placement &p : out.placements)
        if (p.isShard())
            p = Placement::shard(1 - p.dim);
    return out;
}

// Whether `from` becomes `to` by all-reduces alone (pending sums made whole).
bool reducesOnly(const ShardingSpec &from, const ShardingSpec &to)
{
    for (std::size_t a = 0; a < to.placements.size(); ++a)
        if (!(from.placements[a] == to.placements[a] ||
              (from.placements[a].isPartial() && to.placements[a].isReplicate())))
            return false;
    return true;
}

} // namespace

ShardedProgram::ShardedProgram(ir::Graph graph, const std::vector<ShardingSpec> &specs,
                               const sharding::Mesh &mesh, RankMesh &plan, RankMesh &aux, Device &device,
                               ShardedProgramOptions options, const std::string &input)
    : m_graph(std::move(graph)), m_specs(specs), m_mesh(mesh), m_plan(plan), m_aux(aux), m_device(device),
      m_options(options), m_profileKernels(std::getenv("TAPESTRY_PROFILE_KERNELS") != nullptr)
{
    for (const auto &axis : m_mesh.axes)
        m_meshShape.push_back(axis.size);
    m_microBatches = std::max(1, m_options.techniques.microBatches);
    if (m_options.microBatched.size() != m_graph.tensorCount())
        m_options.microBatched.assign(m_graph.tensorCount(), false);
    checkRunnable(m_graph, input);
    build(input);
    layOut();
    resolve();
    initialise();
}

void ShardedProgram::appendReshard(std::size_t tensor, const ir::Shape &full, const ShardingSpec &from,
                                   const ShardingSpec &to, Slot src, Slot dst, bool aux, std::vector<Action> &into)
{
    std::vector<ReshardStep> steps;
    planReshard(full, from, to, m_meshShape, src, dst, m_buffers, steps);
    for (ReshardStep &s : steps) {
        if (!aux && s.kind == ReshardStep::Kind::AllReduce)
            s.dropped = ++m_allReduces == m_options.dropAllReduce;
        into.push_back({Action::Type::Reshard, m_steps.size(), kNoSlot, kNoSlot, 0.0f, m_building});
        m_steps.push_back(s);
        m_auxStep.push_back(aux);
        m_stepTensor.push_back(tensor);
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
    appendReshard(tensor, m_graph.tensors()[tensor].shape, m_specs[tensor], spec, m_values[tensor], slot, false, into);
    m_variants.emplace(key, slot);
    return slot;
}
std::vector<IndexView> ShardedProgram::indices(std::size_t tensor, const ShardingSpec &spec)
{
    const auto key = std::make_pair(tensor, spec);
    if (auto it = m_indexViews.find(key); it != m_indexViews.end())
        return it->second;
    // Token ids and labels are inputs, a function of the seed alone: each
    // spec a consumer reads is built locally, never sent. Micro-batch k
    // holds rows k·b .. (k+1)·b − 1 of the whole batch's tensor.
    const ir::Tensor &t = m_graph.tensors()[tensor];
    const ir::TensorId id(static_cast<std::int32_t>(tensor));
    const bool batched = m_options.microBatched[tensor];
    ir::Shape whole = t.shape;
    if (batched)
        whole[0] *= m_microBatches;
    const ir::Shape local = shardShape(spec, t.shape, m_meshShape);
    const std::int64_t n = elements(local);
    const kernels::Dims full = kernels::contiguousStrides(whole);
    const std::uint64_t stream = streamKey(m_options.training.seed, t.name);
    const IndexRule rule = indexRuleFor(m_graph, id);
    std::vector<IndexView> views;
    for (int k = 0; k < m_microBatches; ++k) {
        auto offset = shardOffset(spec, t.shape, m_meshShape, m_plan.coordinates());
        if (batched)
            offset[0] += k * t.shape[0];
        std::vector<std::int64_t> data(static_cast<std::size_t>(n));
        std::vector<std::int64_t> idx(local.size(), 0);
        for (std::int64_t i = 0; i < n; ++i) {
            std::int64_t flat = 0;
            for (std::size_t d = 0; d < local.size(); ++d)
                flat += (offset[d] + idx[d]) * full[d];
            initializeIndices(&data[static_cast<std::size_t>(i)], 1, flat, stream, rule);
            for (std::size_t d = local.size(); d-- > 0;) {
                if (++idx[d] < local[d])
                    break;
                idx[d] = 0;
            }
        }
        m_memory.indices += n * static_cast<std::int64_t>(sizeof(std::int64_t));
        views.push_back(IndexView{m_device.keepIndices(std::move(data)), local});
        if (!batched)
            break;
    }
    while (static_cast<int>(views.size()) < m_microBatches)
        views.push_back(views.front());
    m_indexViews.emplace(key, views);
    return views;
}

void ShardedProgram::finalizeGradient(std::size_t tensor, std::vector<Action> &into)
{
    const ShardingSpec target = sharding::gradientSpec(m_specs[tensor]);
    for (const auto &[spec, slot] : m_contributions[tensor]) {
        const Slot landing = m_buffers.reserve(m_buffers.shape(m_grads[tensor]));
        appendReshard(tensor, m_graph.tensors()[tensor].shape, spec, target, slot, landing, false, into);
        into.push_back({Action::Type::AddInto, 0, landing, m_grads[tensor], 0.0f, m_building});
    }
}

void ShardedProgram::finalizeActivationGradient(std::size_t tensor, std::vector<Action> &into)
{
    const ShardingSpec target = sharding::gradientSpec(m_specs[tensor]);
    const auto &cs = m_contributions[tensor];
    const Slot grad = m_grads[tensor];
    // (An output's gradient is also seeded by the objective, whole.)
    const bool reduceOnly = cs.size() == 1 && !m_gradWritten[tensor] && grad != kNoSlot &&
                            m_buffers.base(grad) == grad && m_graph.tensors()[tensor].role != ir::Role::Output &&
                            m_buffers.shape(cs.front().second) == m_buffers.shape(grad) &&
                            reducesOnly(cs.front().first, target);
    if (!reduceOnly) {
        finalizeGradient(tensor, into);
        return;
    }
    const Slot sum = cs.front().second;
    m_buffers.rebase(grad, sum);
    for (std::size_t a = 0; a < target.placements.size(); ++a) {
        if (!cs.front().first.placements[a].isPartial() || !target.placements[a].isReplicate())
            continue;
        ReshardStep step{ReshardStep::Kind::AllReduce, a, -1, -1, sum, sum};
        step.dropped = ++m_allReduces == m_options.dropAllReduce;
        into.push_back({Action::Type::Reshard, m_steps.size(), kNoSlot, kNoSlot, 0.0f, m_building});
        m_steps.push_back(step);
        m_auxStep.push_back(false);
        m_stepTensor.push_back(tensor);
    }
}

ShardingSpec ShardedProgram::zeroSpec(const Parameter &p, const ShardingSpec &from, bool shard) const
{
    // The flattened local shard [n]: each axis the parameter is replicated
    // on cuts it (shard) or holds it as `from` does there (a pending sum, or
    // whole); every other axis already split the parameter, so the flat
    // shard is whole there.
    // Axes outside the plan's ZeRO axes (techniques.zeroAxes) hold it whole
    // in the stored form: a pending sum there is all-reduced.
    const ShardingSpec &spec = m_specs[p.tensor];
    const auto &zeroAxes = m_options.techniques.zeroAxes;
    ShardingSpec flat = ShardingSpec::replicated(m_mesh.rank());
    for (std::size_t a = 0; a < spec.placements.size(); ++a) {
        if (!spec.placements[a].isReplicate())
            continue;
        const bool cut = !zeroAxes || std::find(zeroAxes->begin(), zeroAxes->end(), m_mesh.axes[a].name) !=
                                          zeroAxes->end();
        flat.placements[a] = shard && cut                    ? Placement::shard(0)
                             : !shard && from.placements[a].isPartial() ? Placement::partial()
                                                                         : Placement::replicate();
    }
    return flat;
}

void ShardedProgram::build(const std::string &input)
{
    const auto order = m_graph.topologicalOrder();
    if (!order)
        throw TapestryError(Error{input, {}, "the graph has a cycle"});
    const std::size_t nt = m_graph.tensorCount();
    const auto &tensors = m_graph.tensors();
    const int stage = m_options.techniques.zeroStage;

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
    m_roles = cost::recomputeRoles(m_graph);

    // Trained parameters under ZeRO: their value and gradient are laid out
    // flat, padded to a multiple of the degree, so that each rank's piece is
    // one block of it.
    std::vector<std::int64_t> degree(nt, 1);
    for (std::size_t i = 0; i < nt; ++i) {
        const bool trained = tensors[i].role == ir::Role::Parameter && needsGrad[i];
        if (trained) {
            Parameter p;
            p.name = tensors[i].name;
            p.tensor = i;
            p.degree = stage >= 1 ? cost::zeroDegree(m_specs[i], m_mesh, m_options.techniques) : 1;
            degree[i] = p.degree;
            m_parameters.push_back(std::move(p));
        }
    }
    auto padded = [&](std::size_t t) {
        const std::int64_t n = elements(shardShape(m_specs[t], tensors[t].shape, m_meshShape));
        return (n + degree[t] - 1) / degree[t] * degree[t];
    };

    m_values.assign(nt, kNoSlot);
    m_grads.assign(nt, kNoSlot);
    m_contributions.resize(nt);
    std::vector<Slot> gradFlat(nt, kNoSlot);
    for (std::size_t i = 0; i < nt; ++i) {
        if (!isFloat(tensors[i].dtype))
            continue;
        const ir::Shape local = shardShape(m_specs[i], tensors[i].shape, m_meshShape);
        if (degree[i] > 1) {
            m_values[i] = m_buffers.alias(m_buffers.reserve({padded(i)}), local);
            gradFlat[i] = m_buffers.reserve({padded(i)});
            m_grads[i] = m_buffers.alias(gradFlat[i], local);
            m_zeroed.push_back(m_grads[i]);
            continue;
        }
        m_values[i] = m_buffers.reserve(local);
        if (needsGrad[i]) {
            m_grads[i] = m_buffers.reserve(
                shardShape(sharding::gradientSpec(m_specs[i]), tensors[i].shape, m_meshShape));
            m_zeroed.push_back(m_grads[i]);
        }
    }
    // Whether a parameter's own gradient buffer is written by some op (its
    // other contributions arrive in other specs).
    m_gradWritten.assign(nt, false);
    std::vector<bool> &gradWritten = m_gradWritten;
    // Where an op's backward step writes tensor t's gradient when it gives
    // it in spec g: t's gradient itself, or its contribution in g (summed
    // with the other ops' in g, and made t's gradient spec once all ran).
    // Tensor t's gradient contribution in spec g, of local `shape`
    // (reserved by the first op that gives one).
    auto contribution = [&](std::size_t t, const ShardingSpec &g, const ir::Shape &shape) {
        auto &cs = m_contributions[t];
        auto it = std::find_if(cs.begin(), cs.end(), [&](const auto &c) { return c.first == g; });
        if (it != cs.end())
            return it->second;
        // A parameter's contribution ZeRO reduce-scatters flat: padded as
        // its gradient is.
        const bool flat = degree[t] > 1 && shape == m_buffers.shape(m_grads[t]);
        cs.emplace_back(g, flat ? m_buffers.alias(m_buffers.reserve({padded(t)}), shape) : m_buffers.reserve(shape));
        m_zeroed.push_back(cs.back().second);
        return cs.back().second;
    };
    auto gradientSlot = [&](std::size_t t, const ShardingSpec &g) {
        if (g == sharding::gradientSpec(m_specs[t])) {
            gradWritten[t] = true;
            return m_grads[t];
        }
        return contribution(t, g, shardShape(g, tensors[t].shape, m_meshShape));
    };

    // A transpose of a parameter matrix that only MatMuls read, as their
    // right operand and in the spec it is stored in (a tied LM head reads
    // the embedding [vocab, h] so): left out. The MatMuls read the
    // parameter in place (OpAttributes::transB) and give the view's
    // gradient in the parameter's layout, reduced as the plan reduces the
    // view's (the same collectives) and added into the parameter's, so that
    // no transposed copy and no gradient of the copy is held. (Not under
    // ZeRO-3, whose parameter is gathered before its first reader.)
    struct Fold {
        std::size_t param = 0;
        ShardingSpec paramGradient;  // the spec the transpose's backward step gives the parameter's gradient in
    };
    std::map<std::size_t, Fold> folds;  // by the transpose's output
    std::vector<bool> folded(m_graph.opCount(), false);
    for (ir::OpId o : *order) {
        const ir::Op &op = m_graph.op(o);
        if (op.type != "Transpose" || op.inputs.size() != 1 || op.outputs.size() != 1)
            continue;
        const std::size_t w = op.inputs[0].index(), t = op.outputs[0].index();
        const ir::Tensor &param = tensors[w], &view = tensors[t];
        if (param.role != ir::Role::Parameter || !isFloat(param.dtype) || param.shape.size() != 2 ||
            view.role == ir::Role::Output || view.consumers.empty() || (stage >= 3 && degree[w] > 1))
            continue;
        if (auto perm = ir::intsAttr(op.attributes, "perm"); perm && *perm != std::vector<std::int64_t>{1, 0})
            continue;
        const sharding::OpStrategy st = sharding::resolveStrategy(m_graph, o, {m_specs[w]}, m_mesh);
        if (st.inputs[0] != m_specs[w] || st.outputs[0] != m_specs[t] ||
            st.inputGradients[0] != transposed(sharding::gradientSpec(m_specs[t])))
            continue;
        bool matmuls = true;
        for (ir::OpId c : view.consumers) {
            const ir::Op &use = m_graph.op(c);
            matmuls = use.type == "MatMul" && use.inputs.size() == 2 && use.inputs[1].index() == t &&
                      use.inputs[0].index() != t;
            if (matmuls) {
                std::vector<ShardingSpec> ins;
                for (ir::TensorId i : use.inputs)
                    ins.push_back(m_specs[i.index()]);
                matmuls = sharding::resolveStrategy(m_graph, c, ins, m_mesh).inputs[1] == m_specs[t];
            }
            if (!matmuls)
                break;
        }
        if (!matmuls)
            continue;
        folds[t] = {w, st.inputGradients[0]};
        folded[o.index()] = true;
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
        if (folded[o.index()])
            continue;
        m_building = static_cast<std::int32_t>(o.index());
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
        bool transB = false;
        for (std::size_t i = 0; i < op.inputs.size(); ++i) {
            if (isShapeOperand(op.type, i))
                continue;
            const std::size_t t = op.inputs[i].index();
            if (auto f = folds.find(t); f != folds.end()) {
                // The parameter itself, stored as the view's transpose.
                const std::size_t w = f->second.param;
                step.in.push_back(m_values[w]);
                Slot din = kNoSlot;
                if (opBackward[o.index()] && needsGrad[t]) {
                    // The view's own contribution, laid out as the parameter.
                    const ShardingSpec &g = s.inputGradients[i];
                    din = g == sharding::gradientSpec(m_specs[t])
                              ? gradientSlot(w, f->second.paramGradient)
                              : contribution(t, g, shardShape(transposed(g), tensors[w].shape, m_meshShape));
                }
                step.din.push_back(din);
                transB = true;
                continue;
            }
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
            if (opBackward[o.index()] && needsGrad[t])
                din = gradientSlot(t, s.inputGradients[i]);
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
        step.attributes.transB = transB;
        step.kind = kernelKindOf(op.type, def.gemm);
        step.reads = backwardReadsOf(def.backwardReads, step.attributes);
        if (def.refuseSharded)
            if (auto why = def.refuseSharded(step.attributes, s.inputs[0]))
                refuse(*why);
        if (def.vocabDim) {
            const ir::Shape &whole = tensors[op.inputs[0].index()].shape;
            const int dim = *def.vocabDim < 0 ? static_cast<int>(whole.size()) + *def.vocabDim : *def.vocabDim;
            step.splitAxes = axesSplitting(s.inputs[0], dim);
            step.offset = shardOffset(s.inputs[0], whole, m_meshShape, m_plan.coordinates())[static_cast<std::size_t>(dim)];
        }
        if (def.indexInput) {
            // The loss is the mean over the whole batch's tokens, so that the
            // micro-batches' losses and gradients add up to the step's.
            const std::size_t labels = op.inputs[*def.indexInput].index();
            step.denominator = static_cast<double>(tensors[labels].elementCount()) *
                               (m_options.microBatched[labels] ? m_microBatches : 1);
        }
        {
            const ir::Shape rows(x.begin(), x.empty() ? x.end() : x.end() - 1);
            for (int k = 0; k < def.scratchRows; ++k)
                step.scratch.push_back(m_buffers.reserve(rows));
            for (int k = 0; k < def.savedRows; ++k)
                step.saved.push_back(m_buffers.reserve(rows));
        }

        opIndex[o.index()] = m_ops.size();
        m_forward.push_back({Action::Type::Forward, m_ops.size(), kNoSlot, kNoSlot, 0.0f, m_building});
        m_ops.push_back(std::move(step));
        for (const auto &[k, slot] : outputReshards) {
            const std::size_t t = op.outputs[k].index();
            appendReshard(t, tensors[t].shape, s.outputs[k], m_specs[t], slot, m_values[t], false, m_forward);
        }
    }
    m_building = -1;

    // Parameters and inputs are written by initialise(), outside the steps:
    // they keep their memory (but for ZeRO-3's parameters, kept as pieces).
    for (std::size_t i = 0; i < nt; ++i)
        if ((tensors[i].role == ir::Role::Parameter || tensors[i].role == ir::Role::Input) &&
            m_values[i] != kNoSlot && !(stage >= 3 && degree[i] > 1) &&
            !(m_microBatches > 1 && m_options.microBatched[i]))
            m_buffers.keep(m_values[i]);

    // Float inputs with a batch dim hold each micro-batch's rows in turn,
    // copied in before its forward pass.
    m_loadInputs.resize(static_cast<std::size_t>(m_microBatches));
    for (std::size_t i = 0; i < nt; ++i) {
        if (tensors[i].role != ir::Role::Input || m_values[i] == kNoSlot || !m_options.microBatched[i] ||
            m_microBatches == 1)
            continue;
        std::vector<Slot> rows;
        for (int k = 0; k < m_microBatches; ++k) {
            rows.push_back(m_buffers.reserve(m_buffers.shape(m_values[i])));
            m_buffers.keep(rows.back());
            std::vector<ReshardStep> copy{{ReshardStep::Kind::Copy, 0, -1, -1, rows.back(), m_values[i]}};
            m_loadInputs[static_cast<std::size_t>(k)].push_back({Action::Type::Reshard, m_steps.size()});
            m_steps.push_back(copy.front());
            m_auxStep.push_back(false);
            m_stepTensor.push_back(i);
        }
        m_microInputs.emplace_back(i, std::move(rows));
    }

    // The objective: its outputs gathered whole; for Σ y² the seed gradient
    // 2y is sliced back from the whole value (no communication), for a
    // loss it is 1.
    for (std::size_t t : m_objectiveTensors) {
        const Slot whole = m_buffers.reserve(tensors[t].shape);
        m_buffers.keep(whole);
        m_wholeObjective.push_back(whole);
        ir::Shape shape = tensors[t].shape;
        if (!shape.empty())
            shape[0] *= m_microBatches;
        m_wholeShapes.push_back(shape);
        appendReshard(t, tensors[t].shape, m_specs[t], ShardingSpec::replicated(m_mesh.rank()), m_values[t], whole,
                      true, m_objectiveGather);
        if (m_grads[t] == kNoSlot)
            continue;
        if (m_objective == Objective::SumOfSquares) {
            appendReshard(t, tensors[t].shape, ShardingSpec::replicated(m_mesh.rank()),
                          sharding::gradientSpec(m_specs[t]), whole, m_grads[t], true, m_seed);
            m_seed.push_back({Action::Type::Scale, 0, kNoSlot, m_grads[t], 2.0f});
        } else {
            m_seed.push_back({Action::Type::Fill, 0, kNoSlot, m_grads[t], 1.0f});
        }
    }

    // Backward in reverse order: a tensor's gradient is complete once every
    // consumer (later in the order) has run, i.e. just before its producer.
    for (auto it = order->rbegin(); it != order->rend(); ++it) {
        if (!opBackward[it->index()])
            continue;
        m_building = static_cast<std::int32_t>(it->index());
        if (folded[it->index()]) {
            // The left-out transpose: the view's gradient, laid out as the
            // parameter, made the view's gradient spec (transposed) and
            // added into the parameter's.
            const std::size_t t = m_graph.op(*it).outputs[0].index();
            const Fold &f = folds.at(t);
            const ShardingSpec target = transposed(sharding::gradientSpec(m_specs[t]));
            for (const auto &[g, slot] : m_contributions[t]) {
                const ShardingSpec from = transposed(g);
                const Slot reduced = reducesOnly(from, target)
                                         ? slot
                                         : m_buffers.reserve(shardShape(target, tensors[f.param].shape, m_meshShape));
                appendReshard(t, tensors[f.param].shape, from, target, slot, reduced, false, m_backward);
                m_backward.push_back({Action::Type::AddInto, 0, reduced, gradientSlot(f.param, f.paramGradient), 0.0f,
                                      m_building});
            }
            continue;
        }
        const Produced &p = produced[it->index()];
        for (std::size_t k = 0; k < p.outputs.size(); ++k) {
            const auto &[t, spec] = p.outputs[k];
            finalizeActivationGradient(t, m_backward);
            if (p.dout[k] != m_grads[t])
                appendReshard(t, tensors[t].shape, sharding::gradientSpec(m_specs[t]), sharding::gradientSpec(spec),
                              m_grads[t], p.dout[k], false, m_backward);
        }
        m_backward.push_back({Action::Type::Backward, opIndex[it->index()], kNoSlot, kNoSlot, 0.0f, m_building});
    }
    m_building = -1;
    // Inputs that need a gradient (none are trained, but a graph may pass a
    // parameter through an identity): as the reference, summed.
    for (std::size_t t = 0; t < nt; ++t)
        if (needsGrad[t] && !tensors[t].producer.valid() && tensors[t].role != ir::Role::Parameter)
            finalizeGradient(t, m_backward);
    for (Parameter &p : m_parameters)
        p.flat = degree[p.tensor] > 1 ? m_buffers.base(m_values[p.tensor]) : kNoSlot;
    for (Parameter &p : m_parameters)
        p.gradFlat = gradFlat[p.tensor];

    buildParameters(gradWritten);
    buildRecomputation();
    placeParameterCollectives();
    placeZeroFills();

    // FLOPs and tokens of one step: every micro-batch's, the recomputed
    // forward GEMMs included.
    auto opFlops = [&](const OpStep &op) {
        TensorView out{nullptr, m_buffers.shape(op.out[0])}, a{nullptr, m_buffers.shape(op.in[0])};
        return kernels::matmulFlops(out, a);
    };
    for (const auto *list : {&m_forward, &m_backward})
        for (const Action &a : *list) {
            if (a.type != Action::Type::Forward && a.type != Action::Type::Backward)
                continue;
            const OpStep &op = m_ops[a.index];
            if (!op.def->gemm)
                continue;
            if (a.type == Action::Type::Forward)
                m_flops += opFlops(op) * m_microBatches;
            else
                for (Slot g : op.din)
                    if (g != kNoSlot)
                        m_flops += opFlops(op) * m_microBatches;
        }

    for (std::size_t i = 0; i < nt && m_tokens == 0; ++i)
        if (tensors[i].role == ir::Role::Input && !isFloat(tensors[i].dtype) &&
            indexRuleFor(m_graph, ir::TensorId(static_cast<std::int32_t>(i))).range > 0)
            m_tokens = tensors[i].elementCount() * (m_options.microBatched[i] ? m_microBatches : 1);
    for (std::size_t i = 0; i < nt && m_tokens == 0; ++i)
        if (tensors[i].role == ir::Role::Input && isFloat(tensors[i].dtype))
            m_tokens = (tensors[i].shape.empty() ? 1 : tensors[i].elementCount() / tensors[i].shape.back()) *
                       (m_options.microBatched[i] ? m_microBatches : 1);
}

void ShardedProgram::buildParameters(const std::vector<bool> &gradWritten)
{
    const auto &tensors = m_graph.tensors();
    const int stage = m_options.techniques.zeroStage;
    const bool adam = m_options.training.optimizer == Optimizer::Adam;
    const ShardingSpec whole = ShardingSpec::replicated(m_mesh.rank());
    for (std::size_t index = 0; index < m_parameters.size(); ++index) {
        Parameter &p = m_parameters[index];
        const std::size_t t = p.tensor;
        const ir::Shape &shape = tensors[t].shape;
        const ShardingSpec gradSpec = sharding::gradientSpec(m_specs[t]);
        p.value = m_values[t];
        if (p.degree <= 1) {
            // Stage 0 (or nothing to shard over): the local gradient,
            // accumulated over the micro-batches, made whole once per step.
            // A gradient no op writes in its own spec is made by the
            // synchronisation alone, and needs memory only from there.
            p.grad = m_grads[t];
            (gradWritten[t] ? m_stepStart : p.sync).push_back({Action::Type::Fill, 0, kNoSlot, p.grad, 0.0f});
            for (const auto &c : m_contributions[t])
                m_stepStart.push_back({Action::Type::Fill, 0, kNoSlot, c.second, 0.0f});
            finalizeGradient(t, p.sync);
            if (adam) {
                p.m = m_buffers.reserve(m_buffers.shape(p.value));
                p.v = m_buffers.reserve(m_buffers.shape(p.value));
            }
            if (m_options.gatherGradients) {
                p.whole = m_buffers.reserve(shape);
                appendReshard(t, shape, gradSpec, whole, p.grad, p.whole, true, p.gather);
                appendReshard(t, shape, m_specs[t], whole, p.value, p.whole, true, p.valueGather);
            }
        } else {
            const ir::Shape flat = m_buffers.shape(p.flat);
            const ShardingSpec flatWhole = whole, flatShard = zeroSpec(p, whole, true);
            const ir::Shape piece = shardShape(flatShard, flat, m_meshShape);
            p.grad = m_buffers.reserve(piece);
            // Stage 1 keeps the local gradient whole until the step's
            // synchronisation; 2 and 3 reduce each micro-batch's and keep
            // only the piece.
            if (stage == 1) {
                (gradWritten[t] ? m_stepStart : p.sync).push_back({Action::Type::Fill, 0, kNoSlot, p.gradFlat, 0.0f});
                for (const auto &c : m_contributions[t])
                    m_stepStart.push_back({Action::Type::Fill, 0, kNoSlot, m_buffers.base(c.second), 0.0f});
                p.sync.push_back({Action::Type::Fill, 0, kNoSlot, p.grad, 0.0f});
            } else {
                m_stepStart.push_back({Action::Type::Fill, 0, kNoSlot, p.grad, 0.0f});
            }
            // Contributions the flat reduce-scatter cannot take (split
            // otherwise than the parameter) are first made the parameter's
            // gradient spec by the plan's reshard.
            std::vector<std::pair<ShardingSpec, Slot>> flatSums;
            bool local = gradWritten[t];
            for (const auto &[spec, slot] : m_contributions[t]) {
                bool simple = m_buffers.base(slot) != slot;
                for (std::size_t a = 0; simple && a < spec.placements.size(); ++a)
                    simple = m_specs[t].placements[a].isReplicate() ? !spec.placements[a].isShard()
                                                                    : spec.placements[a] == m_specs[t].placements[a];
                if (simple) {
                    flatSums.emplace_back(spec, m_buffers.base(slot));
                    continue;
                }
                const Slot landing = m_buffers.reserve(m_buffers.shape(m_grads[t]));
                appendReshard(t, shape, spec, gradSpec, slot, landing, false, p.sync);
                p.sync.push_back({Action::Type::AddInto, 0, landing, m_grads[t]});
                local = true;
            }
            if (local)
                flatSums.emplace_back(flatWhole, p.gradFlat);
            for (const auto &[spec, src] : flatSums) {
                const Slot landing = m_buffers.reserve(piece);
                appendReshard(t, flat, zeroSpec(p, spec, false), flatShard, src, landing, false, p.sync);
                p.sync.push_back({Action::Type::AddInto, 0, landing, p.grad});
            }
            if (adam) {
                p.m = m_buffers.reserve(piece);
                p.v = m_buffers.reserve(piece);
            }
            if (stage >= 3) {
                // The parameter is stored as its piece, gathered before use.
                p.shard = m_buffers.reserve(piece);
                m_buffers.keep(p.shard);
                appendReshard(t, flat, flatShard, flatWhole, p.shard, p.flat, false, p.gatherShards);
                appendReshard(t, flat, flatWhole, flatShard, p.flat, p.shard, false, p.initialShard);
                m_update.push_back({Action::Type::Update, index});
            } else {
                // The update runs on this rank's piece, then every rank
                // gathers the updated parameter.
                p.shard = m_buffers.reserve(piece);
                appendReshard(t, flat, flatWhole, flatShard, p.flat, p.shard, false, m_update);
                m_update.push_back({Action::Type::Update, index});
                appendReshard(t, flat, flatShard, flatWhole, p.shard, p.flat, false, m_update);
            }
            if (m_options.gatherGradients) {
                p.whole = m_buffers.reserve(shape);
                const Slot gathered = m_buffers.reserve(flat);
                appendReshard(t, flat, flatShard, flatWhole, p.grad, gathered, true, p.gather);
                appendReshard(t, shape, gradSpec, whole, m_buffers.alias(gathered, m_buffers.shape(p.value)), p.whole,
                              true, p.gather);
                if (stage >= 3) {
                    const Slot value = m_buffers.reserve(flat);
                    appendReshard(t, flat, flatShard, flatWhole, p.shard, value, true, p.valueGather);
                    appendReshard(t, shape, m_specs[t], whole, m_buffers.alias(value, m_buffers.shape(p.value)),
                                  p.whole, true, p.valueGather);
                } else {
                    appendReshard(t, shape, m_specs[t], whole, p.value, p.whole, true, p.valueGather);
                }
            }
        }
        if (p.degree <= 1)
            m_update.push_back({Action::Type::Update, index});
        if (p.m != kNoSlot) {
            m_buffers.keep(p.m);
            m_buffers.keep(p.v);
        }
    }
}

void ShardedProgram::buildRecomputation()
{
    const cost::Techniques &t = m_options.techniques;
    // Each op as its layer's kind is recomputed (Techniques::recomputeLayers).
    const auto modes = cost::recomputeModes(m_graph, t);
    const bool anyFull = std::find(modes.begin(), modes.end(), cost::Recompute::Full) != modes.end();
    const bool anyCore =
        t.flashAttention || std::find(modes.begin(), modes.end(), cost::Recompute::Selective) != modes.end();
    if (!anyFull && !anyCore)
        return;
    // One group per transformer layer (full) or attention core (selective,
    // flash attention): its ops, and the ops whose backward pass needs what
    // they computed, before the first of which it runs again.
    struct Group {
        std::set<std::int32_t> ops, before;
    };
    std::map<std::string, Group> groups;
    for (std::size_t o = 0; o < m_graph.opCount(); ++o) {
        const auto id = static_cast<std::int32_t>(o);
        const std::uint8_t role = m_roles[o];
        const bool full = modes[o] == cost::Recompute::Full;
        const bool core = modes[o] == cost::Recompute::Selective || t.flashAttention;
        const std::string scope(cost::layerScope(m_graph.op(ir::OpId(id)).name));
        if (full && (role & cost::kLayer)) {
            Group &g = groups["layer " + scope];
            g.ops.insert(id);
            g.before.insert(id);
        } else if (core && (role & cost::kScore)) {
            Group &g = groups["core " + scope];
            g.ops.insert(id);
            g.before.insert(id);
        } else if (core && (role & cost::kContext)) {
            groups["core " + scope].before.insert(id);
        }
    }
    std::map<std::size_t, std::vector<Action>> inserts;  // before m_backward[i]
    for (const auto &[name, g] : groups) {
        std::vector<Action> again;
        for (const Action &a : m_forward)
            if (g.ops.count(a.op) || (a.type == Action::Type::Reshard && g.before.count(a.op)))
                again.push_back(a);
        const auto at = std::find_if(m_backward.begin(), m_backward.end(),
                                     [&](const Action &a) { return g.before.count(a.op) > 0; });
        if (again.empty() || at == m_backward.end())
            continue;
        auto &into = inserts[static_cast<std::size_t>(at - m_backward.begin())];
        into.insert(into.end(), again.begin(), again.end());
    }
    std::vector<Action> backward;
    for (std::size_t i = 0; i < m_backward.size(); ++i) {
        if (auto it = inserts.find(i); it != inserts.end())
            backward.insert(backward.end(), it->second.begin(), it->second.end());
        backward.push_back(m_backward[i]);
    }
    m_backward = std::move(backward);
}

template <class F>
void ShardedProgram::forEachAccess(const Action &a, F f) const
{
    switch (a.type) {
    case Action::Type::Reshard: {
        const ReshardStep &s = m_steps[a.index];
        if (s.src == s.dst) {
            if (s.kind != ReshardStep::Kind::Copy)
                f(s.dst, Access::Update);
        } else {
            f(s.src, Access::Read);
            f(s.dst, Access::Write);
        }
        break;
    }
    case Action::Type::Forward: {
        const OpStep &op = m_ops[a.index];
        for (Slot s : op.in)
            if (s != kNoSlot)
                f(s, Access::Read);
        for (const auto *slots : {&op.out, &op.saved, &op.scratch})
            for (Slot s : *slots)
                f(s, Access::Write);
        break;
    }
    case Action::Type::Backward: {
        const OpStep &op = m_ops[a.index];
        for (Slot s : op.scratch)
            f(s, Access::Write);
        forEachBackwardAccess(op.reads, op.in, op.out, op.dout, op.saved, op.din, kNoSlot,
                              [&](Slot s, bool update) { f(s, update ? Access::Update : Access::Read); });
        break;
    }
    case Action::Type::AddInto:
        f(a.src, Access::Read);
        f(a.dst, Access::Update);
        break;
    case Action::Type::Fill:
        f(a.dst, Access::Write);
        break;
    case Action::Type::Scale:
        f(a.dst, Access::Update);
        break;
    case Action::Type::Update: {
        const Parameter &p = m_parameters[a.index];
        f(p.shard != kNoSlot ? p.shard : p.value, Access::Update);
        f(p.grad, Access::Read);
        if (p.m != kNoSlot) {
            f(p.m, Access::Update);
            f(p.v, Access::Update);
        }
        break;
    }
    }
}

void ShardedProgram::placeParameterCollectives()
{
    // ZeRO-3: a parameter is gathered before its first reader in the
    // forward pass, and again in the backward pass (recomputation included).
    // ZeRO 2 and 3: each micro-batch's gradient is reduced as soon as it is
    // complete, after the last op writing it; otherwise once per step.
    std::map<std::size_t, std::vector<Action>> forwardBefore, backwardBefore, backwardAfter;
    auto firstRead = [&](const std::vector<Action> &list, Slot flat) -> std::optional<std::size_t> {
        for (std::size_t i = 0; i < list.size(); ++i) {
            bool reads = false;
            forEachAccess(list[i], [&](Slot s, Access access) {
                reads = reads || (m_buffers.base(s) == flat && access != Access::Write);
            });
            if (reads)
                return i;
        }
        return std::nullopt;
    };
    const bool perMicroBatch = m_options.techniques.zeroStage >= 2;
    for (const Parameter &p : m_parameters) {
        if (!p.gatherShards.empty()) {
            if (auto i = firstRead(m_forward, p.flat))
                forwardBefore[*i].insert(forwardBefore[*i].end(), p.gatherShards.begin(), p.gatherShards.end());
            if (auto i = firstRead(m_backward, p.flat))
                backwardBefore[*i].insert(backwardBefore[*i].end(), p.gatherShards.begin(), p.gatherShards.end());
        }
        if (!perMicroBatch || p.degree <= 1) {
            m_sync.insert(m_sync.end(), p.sync.begin(), p.sync.end());
            continue;
        }
        std::set<Slot> grads{m_buffers.base(m_grads[p.tensor])};
        for (const auto &c : m_contributions[p.tensor])
            grads.insert(m_buffers.base(c.second));
        std::size_t last = m_backward.size();
        for (std::size_t i = 0; i < m_backward.size(); ++i)
            forEachAccess(m_backward[i], [&](Slot s, Access) {
                if (grads.count(m_buffers.base(s)))
                    last = i;
            });
        if (last == m_backward.size())
            m_sync.insert(m_sync.end(), p.sync.begin(), p.sync.end());
        else
            backwardAfter[last].insert(backwardAfter[last].end(), p.sync.begin(), p.sync.end());
    }
    auto rebuild = [](std::vector<Action> &list, std::map<std::size_t, std::vector<Action>> &before,
                      std::map<std::size_t, std::vector<Action>> &after) {
        std::vector<Action> out;
        for (std::size_t i = 0; i < list.size(); ++i) {
            if (auto it = before.find(i); it != before.end())
                out.insert(out.end(), it->second.begin(), it->second.end());
            out.push_back(list[i]);
            if (auto it = after.find(i); it != after.end())
                out.insert(out.end(), it->second.begin(), it->second.end());
        }
        list = std::move(out);
    };
    std::map<std::size_t, std::vector<Action>> none;
    rebuild(m_forward, forwardBefore, none);
    rebuild(m_backward, backwardBefore, backwardAfter);
}

void ShardedProgram::placeZeroFills()
{
    // A gradient buffer that a micro-batch accumulates into is zeroed just
    // before its first use in the backward pass (not at its start), so that
    // it holds memory only from there.
    std::set<Slot> zeroed;
    for (Slot s : m_zeroed)
        zeroed.insert(m_buffers.base(s));
    for (const Action &a : m_stepStart)
        zeroed.erase(m_buffers.base(a.dst));
    std::map<std::size_t, std::vector<Action>> seedBefore, backwardBefore;
    auto scan = [&](const std::vector<Action> &list, std::map<std::size_t, std::vector<Action>> &before) {
        for (std::size_t i = 0; i < list.size(); ++i)
            forEachAccess(list[i], [&](Slot s, Access access) {
                const Slot b = m_buffers.base(s);
                if (!zeroed.count(b))
                    return;
                zeroed.erase(b);
                if (access != Access::Write || s != b)
                    before[i].push_back({Action::Type::Fill, 0, kNoSlot, b, 0.0f});
            });
    };
    scan(m_seed, seedBefore);
    scan(m_backward, backwardBefore);
    auto rebuild = [](std::vector<Action> &list, std::map<std::size_t, std::vector<Action>> &before) {
        std::vector<Action> out;
        for (std::size_t i = 0; i < list.size(); ++i) {
            if (auto it = before.find(i); it != before.end())
                out.insert(out.end(), it->second.begin(), it->second.end());
            out.push_back(list[i]);
        }
        list = std::move(out);
    };
    rebuild(m_seed, seedBefore);
    rebuild(m_backward, backwardBefore);
}

void ShardedProgram::layOut()
{
    // One step in order, one micro-batch standing for all of them: what a
    // micro-batch keeps from its forward pass to its backward pass, and
    // what lives across micro-batches (accumulators, filled at the step's
    // start) or steps (parameters, optimizer state: read before written).
    std::vector<SlotAccess> accesses;
    std::int64_t position = 0;
    auto add = [&](const std::vector<Action> &list) {
        for (const Action &a : list) {
            forEachAccess(a, [&](Slot s, Access access) { accesses.push_back({position, s, access}); });
            ++position;
        }
    };
    // initialise() writes a ZeRO-3 parameter whole, then keeps its piece.
    for (const Parameter &p : m_parameters)
        if (!p.initialShard.empty()) {
            accesses.push_back({position++, p.flat, Access::Write});
            add(p.initialShard);
        }
    add(m_stepStart);
    for (const auto &load : m_loadInputs)
        add(load);
    add(m_forward);
    add(m_objectiveGather);
    add(m_seed);
    add(m_backward);
    add(m_sync);
    for (const Parameter &p : m_parameters)
        add(p.gather);
    add(m_update);
    for (const Parameter &p : m_parameters)
        add(p.valueGather);
    m_buffers.allocate(m_device, accesses);
    m_memory.arena = m_buffers.bytes();
    m_memory.liveBytes = m_buffers.liveBytes();
    // The model states as held where the step's memory peaks: each buffer
    // once, and only where it is live there (a gradient buffer written
    // only by the synchronisation is not, at a peak in the backward pass).
    std::set<Slot> parameters, gradients, optimizer;
    for (const Parameter &p : m_parameters) {
        parameters.insert(m_buffers.base(p.gatherShards.empty() ? p.value : p.shard));
        gradients.insert(m_buffers.base(p.grad));
        gradients.insert(m_buffers.base(m_grads[p.tensor]));
        for (const auto &c : m_contributions[p.tensor])
            gradients.insert(m_buffers.base(c.second));
        if (p.m != kNoSlot) {
            optimizer.insert(p.m);
            optimizer.insert(p.v);
        }
    }
    auto held = [&](const std::set<Slot> &slots) {
        std::int64_t bytes = 0;
        for (Slot s : slots)
            if (m_buffers.liveAtPeak(s))
                bytes += m_buffers.slotBytes(s);
        return bytes;
    };
    m_memory.parameters = held(parameters);
    m_memory.gradients = held(gradients);
    m_memory.optimizer = held(optimizer);
}

void ShardedProgram::initialise()
{
    // Off the host, each block is made in host memory and uploaded.
    std::vector<float> staging;
    const auto &tensors = m_graph.tensors();
    auto fill = [&](const TensorView &value, std::vector<std::int64_t> offset, const ir::Shape &whole,
                    const ir::Tensor &t, ir::TensorId id) {
        TensorView block = value;
        if (!m_device.hostMemory()) {
            staging.assign(static_cast<std::size_t>(value.size()), 0.0f);
            block.data = staging.data();
        }
        initializeBlock(block, offset, whole, streamKey(m_options.training.seed, t.name), initRuleFor(m_graph, id));
        if (block.data != value.data)
            m_device.upload(value, block.data);
    };
    std::vector<const Parameter *> parameters(tensors.size(), nullptr);
    for (const Parameter &p : m_parameters)
        parameters[p.tensor] = &p;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const ir::Tensor &t = tensors[i];
        if ((t.role != ir::Role::Parameter && t.role != ir::Role::Input) || m_values[i] == kNoSlot)
            continue;
        const ir::TensorId id(static_cast<std::int32_t>(i));
        const auto offset = shardOffset(m_specs[i], t.shape, m_meshShape, m_plan.coordinates());
        const Parameter *p = parameters[i];
        if (p && p->flat != kNoSlot)
            m_device.fill(m_buffers.view(p->flat), 0.0f);  // the padding
        auto rows = std::find_if(m_microInputs.begin(), m_microInputs.end(),
                                 [&](const auto &m) { return m.first == i; });
        if (rows == m_microInputs.end()) {
            fill(m_buffers.view(m_values[i]), offset, t.shape, t, id);
            // ZeRO-3: the rank keeps its piece, and the whole value's memory
            // is free for the next parameter's.
            if (p)
                run(p->initialShard);
            continue;
        }
        ir::Shape whole = t.shape;
        whole[0] *= m_microBatches;
        for (int k = 0; k < m_microBatches; ++k) {
            auto at = offset;
            at[0] += k * t.shape[0];
            fill(m_buffers.view(rows->second[static_cast<std::size_t>(k)]), at, whole, t, id);
        }
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

ShardedProgram::~ShardedProgram()
{
    if (m_kernelProfile.empty())
        return;
    std::vector<std::pair<std::string, std::pair<std::int64_t, double>>> rows(m_kernelProfile.begin(),
                                                                              m_kernelProfile.end());
    std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) { return a.second.second > b.second.second; });
    double total = 0.0;
    for (const auto &r : rows)
        total += r.second.second;
    std::fprintf(stderr, "tapestry-exec: kernel profile (TAPESTRY_PROFILE_KERNELS), every step together:\n");
    for (const auto &[kind, figures] : rows)
        std::fprintf(stderr, "  %-28s %8lld calls %10.3f ms %5.1f%%\n", kind.c_str(),
                     static_cast<long long>(figures.first), figures.second * 1e3,
                     total > 0 ? 100.0 * figures.second / total : 0.0);
}

void ShardedProgram::run(const std::vector<Action> &actions)
{
    Watchdog *watchdog = m_options.watchdog;
    using Clock = std::chrono::steady_clock;
    Clock::time_point started;
    auto begin = [&] {
        if (!m_profileKernels)
            return;
        m_device.synchronize();
        started = Clock::now();
    };
    auto end = [&](std::string kind) {
        if (!m_profileKernels)
            return;
        m_device.synchronize();
        auto &[calls, seconds] = m_kernelProfile[std::move(kind)];
        ++calls;
        seconds += std::chrono::duration<double>(Clock::now() - started).count();
    };
    for (const Action &a : actions) {
        switch (a.type) {
        case Action::Type::Reshard:
            if (watchdog)
                watchdog->workingOn(&m_graph.tensors()[m_stepTensor[a.index]].name, false);
            begin();
            runStep(m_steps[a.index], m_auxStep[a.index]);
            end("(reshard)");
            break;
        case Action::Type::Forward:
        case Action::Type::Backward: {
            const OpStep &op = m_ops[a.index];
            if (watchdog && a.op >= 0)
                watchdog->workingOn(&m_graph.ops()[static_cast<std::size_t>(a.op)].name, true);
            begin();
            m_device.beginKernel();
            const OpArgs call = args(op);
            if (a.type == Action::Type::Forward)
                op.kernels.forward(call);
            else
                op.kernels.backward(call);
            m_device.endKernel(op.kind);
            end(std::string(op.def->name) + (a.type == Action::Type::Forward ? " forward" : " backward"));
            break;
        }
        case Action::Type::AddInto:
            m_device.addInto(m_buffers.view(a.dst), m_buffers.view(a.src));
            break;
        case Action::Type::Fill:
            m_device.fill(m_buffers.view(a.dst), a.value);
            break;
        case Action::Type::Scale:
            m_device.scale(m_buffers.view(a.dst), a.value);
            break;
        case Action::Type::Update: {
            const Parameter &p = m_parameters[a.index];
            const TensorView &value = m_buffers.view(p.shard != kNoSlot ? p.shard : p.value);
            if (m_options.training.optimizer == Optimizer::Adam) {
                kernels::AdamConfig adam = m_options.training.adam;
                adam.learningRate = m_options.training.learningRate;
                m_device.adamUpdate(value, m_buffers.view(p.grad), m_buffers.view(p.m), m_buffers.view(p.v),
                                    m_updates, adam);
            } else {
                m_device.sgdUpdate(value, m_buffers.view(p.grad), m_options.training.learningRate);
            }
            break;
        }
        }
    }
}

void ShardedProgram::runMicroBatchForward()
{
    run(m_loadInputs[static_cast<std::size_t>(m_micro)]);
    run(m_forward);
    run(m_objectiveGather);
    // The whole batch's outputs on the host: a loss summed over the
    // micro-batches, other outputs' rows placed after the earlier ones'.
    for (std::size_t i = 0; i < m_wholeObjective.size(); ++i) {
        const TensorView y = m_device.hostView(m_buffers.view(m_wholeObjective[i]), m_staging);
        std::vector<float> &host = m_hostOutputs[i];
        if (m_wholeShapes[i].empty())
            host[0] += y.data[0];
        else
            std::copy(y.data, y.data + y.size(), host.begin() + m_micro * y.size());
    }
}

float ShardedProgram::forward()
{
    m_hostOutputs.resize(m_wholeObjective.size());
    for (std::size_t i = 0; i < m_wholeObjective.size(); ++i)
        m_hostOutputs[i].assign(static_cast<std::size_t>(std::max<std::int64_t>(1, elements(m_wholeShapes[i]))), 0.0f);
    run(m_stepStart);
    for (m_micro = 0; m_micro < m_microBatches; ++m_micro) {
        runMicroBatchForward();
        if (m_micro + 1 == m_microBatches)
            break;
        run(m_seed);
        run(m_backward);
    }
    double objective = 0.0;
    for (const std::vector<float> &y : m_hostOutputs)
        for (float v : y)
            objective += m_objective == Objective::Loss ? static_cast<double>(v) : static_cast<double>(v) * v;
    return static_cast<float>(objective);
}

void ShardedProgram::backward()
{
    run(m_seed);
    run(m_backward);
    run(m_sync);
}

void ShardedProgram::update()
{
    ++m_updates;
    run(m_update);
}

std::vector<std::pair<std::string, TensorView>> ShardedProgram::wholeOutputs()
{
    std::vector<std::pair<std::string, TensorView>> outs;
    for (std::size_t i = 0; i < m_objectiveTensors.size(); ++i)
        outs.emplace_back(m_graph.tensors()[m_objectiveTensors[i]].name,
                          TensorView{m_hostOutputs[i].data(), m_wholeShapes[i]});
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

TensorView ShardedProgram::gatherParameter(const std::string &parameter)
{
    for (const Parameter &p : m_parameters)
        if (p.name == parameter && p.whole != kNoSlot) {
            run(p.valueGather);
            return m_device.hostView(m_buffers.view(p.whole), m_hostGradient);
        }
    throw TapestryError(Error{m_graph.name, "tensor '" + parameter + "'",
                              "no gathered value (a trained parameter, with gatherGradients set)"});
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
            for (kernels::GemmCall c :
                 kernels::matmulGemms(m_buffers.shape(op.out[0]), m_buffers.shape(op.in[0]),
                                      m_buffers.shape(op.in[1]), backward, op.din[0] != kNoSlot,
                                      op.din[1] != kNoSlot, op.attributes.transB)) {
                c.count *= m_microBatches;
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
    if (!op.index.empty())
        a.index = op.index[static_cast<std::size_t>(m_micro)];
    a.attributes = &op.attributes;
    a.device = &m_device;
    a.offset = op.offset;
    a.split = op.split;
    a.denominator = op.denominator;
    return a;
}

} // namespace tapestry::exec
