#include "sharding/strategy.h"

#include "sharding/oprule.h"
#include "sharding/reshard.h"

#include <algorithm>
#include <limits>
#include <set>
#include <string>

namespace tapestry::sharding {

bool isFloat(ir::DType dtype)
{
    return dtype == ir::DType::F32 || dtype == ir::DType::F16 || dtype == ir::DType::BF16 || dtype == ir::DType::F64;
}

namespace {

// Ranking weight of a collective's bytes: an all-reduce moves twice what the
// others do on the same axis.
double movedBytes(const std::vector<Collective> &cs)
{
    double b = 0;
    for (const auto &c : cs)
        b += static_cast<double>(c.bytes) * (c.kind == CollectiveKind::AllReduce ? 2.0 : 1.0);
    return b;
}

// Ops that only relabel their input's elements: no kernel reads or writes
// memory for them.
bool movesNoData(const ir::Op &op)
{
    static const std::set<std::string, std::less<>> views{"Constant", "Flatten", "Identity", "Reshape",
                                                          "Shape", "Squeeze", "Unsqueeze"};
    return views.count(op.type) != 0;
}

// A transpose of a parameter matrix that only MatMuls read, as their right
// operand (a tied LM head reading the embedding [vocab, h] as [h, vocab]):
// a training job reads the parameter in place (torch's linear on the tied
// weight, tapestry-exec's transposed GEMM operand), so it moves no data.
bool readsWeightTransposed(const ir::Graph &graph, const ir::Op &op)
{
    if (op.type != "Transpose" || op.inputs.size() != 1 || op.outputs.size() != 1)
        return false;
    const ir::Tensor &weight = graph.tensor(op.inputs[0]), &view = graph.tensor(op.outputs[0]);
    if (weight.role != ir::Role::Parameter || weight.shape.size() != 2 || view.role == ir::Role::Output ||
        view.consumers.empty())
        return false;
    return std::all_of(view.consumers.begin(), view.consumers.end(), [&](ir::OpId c) {
        const ir::Op &use = graph.op(c);
        return use.type == "MatMul" && use.inputs.size() == 2 && use.inputs[1] == op.outputs[0] &&
               use.inputs[0] != op.outputs[0];
    });
}

ir::DType computeTypeOf(const ir::Graph &graph, const ir::Op &op)
{
    for (auto t : op.outputs)
        if (isFloat(graph.tensor(t).dtype))
            return graph.tensor(t).dtype;
    for (auto t : op.inputs)
        if (isFloat(graph.tensor(t).dtype))
            return graph.tensor(t).dtype;
    return ir::DType::F32;
}

// Collectives the op runs inside itself when axis `axis` splits loop `loop`.
std::vector<Collective> internalCollectives(const ir::Graph &graph, const ir::Op &op, const DimMap &rule,
                                            const Mesh &mesh, int axis, int loop,
                                            const std::vector<ShardingSpec> &inputs, bool backward)
{
    std::vector<Collective> cs;
    if (loop < 0 || !rule.internal.count(loop) || mesh.axes[static_cast<std::size_t>(axis)].size == 1)
        return cs;
    for (const auto &ic : rule.internal.at(loop)) {
        if (ic.backward != backward)
            continue;
        const auto input = static_cast<std::size_t>(ic.input);
        const ir::Tensor &t = graph.tensor(op.inputs[input]);
        const ir::Shape local = inputs[input].localShape(t.shape, mesh);
        std::int64_t elements = 1;
        for (int d : ic.dims)
            elements *= local[static_cast<std::size_t>(d)];
        for (int k = 0; k < ic.count; ++k)
            cs.push_back({ic.kind, axis, elements * ic.bytesPerElement, t.name,
                          op.type + " reduces across the devices of a split dim"});
    }
    return cs;
}

} // namespace

std::string OpStrategy::choice(const Mesh &mesh) const
{
    std::string s;
    for (std::size_t a = 0; a < axisLoop.size() && a < mesh.axes.size(); ++a) {
        s += s.empty() ? "" : ", ";
        s += mesh.axes[a].name + ": ";
        if (axisLoop[a] == kWhole)
            s += "whole";
        else if (axisLoop[a] == kPassPartial)
            s += "partial sum passed through";
        else
            s += "splits loop " + std::string(1, static_cast<char>('a' + axisLoop[a] % 26));
    }
    return s;
}

std::string OpStrategy::toString(const ir::Graph &graph, const Mesh &mesh) const
{
    const ir::Op &o = graph.op(op);
    std::string s = o.name + " (" + o.type + ") " + rule + " | " + choice(mesh) + " | in:";
    for (const auto &spec : inputs)
        s += " " + spec.toPlacements();
    s += " -> out:";
    for (const auto &spec : outputs)
        s += " " + spec.toPlacements();
    for (const auto &c : forward)
        s += " | forward " + c.toString(mesh.axes[static_cast<std::size_t>(c.axis)].name);
    for (const auto &c : backward)
        s += " | backward " + c.toString(mesh.axes[static_cast<std::size_t>(c.axis)].name);
    return s;
}

std::string_view kernelFamily(std::string_view opType)
{
    static const std::set<std::string, std::less<>> activations{"Gelu", "FastGelu", "Silu", "Tanh", "Sigmoid",
                                                                "Erf", "Relu", "Softplus"};
    static const std::set<std::string, std::less<>> norms{"LayerNormalization", "RMSNorm",
                                                          "SimplifiedLayerNormalization"};
    if (opType == "Transpose")
        return "transpose";
    if (opType == "Softmax" || opType == "LogSoftmax")
        return "softmax";
    if (activations.count(opType))
        return "activation";
    if (norms.count(opType))
        return "normalization";
    return {};
}

namespace {

// 2 x M x N x K of one GEMM call of a product's local shards: its loops
// summed over are K, those of the first operand and the output M, of the
// second and the output N; loops of both operands and the output are
// batch (one call each), as the executor's kernels issue them.
double gemmCallFlops(const ir::Graph &graph, const ir::Op &op, const DimMap &rule, const std::vector<int> &axisLoop,
                     const Mesh &mesh)
{
    std::vector<double> size(static_cast<std::size_t>(rule.loopCount()), 1.0);
    for (std::size_t i = 0; i < 2; ++i) {
        const ir::Shape &shape = graph.tensor(op.inputs[i]).shape;
        for (std::size_t d = 0; d < rule.inputs[i].size() && d < shape.size(); ++d)
            if (rule.inputs[i][d] >= 0)
                size[static_cast<std::size_t>(rule.inputs[i][d])] = static_cast<double>(shape[d]);
    }
    for (std::size_t ax = 0; ax < axisLoop.size(); ++ax)
        if (axisLoop[ax] >= 0)
            size[static_cast<std::size_t>(axisLoop[ax])] /= mesh.axes[ax].size;
    double flops = 2;
    for (int loop = 0; loop < rule.loopCount(); ++loop) {
        const bool first = rule.inputDim(0, loop) >= 0, second = rule.inputDim(1, loop) >= 0;
        if (rule.contracted[static_cast<std::size_t>(loop)] || first != second)
            flops *= size[static_cast<std::size_t>(loop)];
    }
    return flops;
}

} // namespace

OpStrategy resolveStrategy(const ir::Graph &graph, ir::OpId opId, const std::vector<ShardingSpec> &inputSpecs,
                           const Mesh &mesh)
{
    return resolveStrategy(graph, opId, inputSpecs, mesh, opRule(graph, graph.op(opId)));
}

OpStrategy resolveStrategy(const ir::Graph &graph, ir::OpId opId, const std::vector<ShardingSpec> &inputSpecs,
                           const Mesh &mesh, const std::optional<DimMap> &rule)
{
    const ir::Op &op = graph.op(opId);
    const int axes = mesh.rank();
    OpStrategy s;
    s.op = opId;
    s.computeType = computeTypeOf(graph, op);
    s.inputs = inputSpecs;
    s.axisLoop.assign(static_cast<std::size_t>(axes), OpStrategy::kWhole);
    s.outputs.assign(op.outputs.size(), ShardingSpec::replicated(axes));
    s.inputGradients.assign(op.inputs.size(), ShardingSpec::replicated(axes));
    s.dataInputs.assign(op.inputs.size(), true);

    if (!rule) {
        s.rule = "no sharding rule";
        for (auto &spec : s.inputs)
            spec = ShardingSpec::replicated(axes);
        for (auto t : op.outputs)
            s.forwardFlops += static_cast<double>(graph.tensor(t).elementCount());
        s.backwardFlops = s.forwardFlops;
        s.warnings.push_back("op '" + op.name + "' (" + op.type +
                             ") has no sharding rule: its inputs are gathered and it is computed replicated");
    } else {
        s.hasRule = true;
        s.rule = rule->toString();
        for (std::size_t i = 0; i < op.inputs.size(); ++i)
            s.dataInputs[i] = !rule->ignored[i];
        double splitFactor = 1;
        for (int a = 0; a < axes; ++a) {
            const auto ax = static_cast<std::size_t>(a);
            std::vector<int> candidates;
            std::vector<std::size_t> partialInputs;
            for (std::size_t i = 0; i < op.inputs.size(); ++i) {
                if (!s.dataInputs[i])
                    continue;
                const Placement &p = s.inputs[i].placements[ax];
                if (p.isPartial())
                    partialInputs.push_back(i);
                if (!p.isShard() || p.dim < 0 || p.dim >= static_cast<int>(rule->inputs[i].size()))
                    continue;
                const int loop = rule->inputs[i][static_cast<std::size_t>(p.dim)];
                if (loop >= 0 && rule->splittable[static_cast<std::size_t>(loop)] &&
                    std::find(candidates.begin(), candidates.end(), loop) == candidates.end())
                    candidates.push_back(loop);
            }
            if (!partialInputs.empty()) {
                std::size_t multiplicative = 0;
                for (auto i : partialInputs)
                    multiplicative += rule->additive[i] ? 0 : 1;
                const bool pass = (rule->partial == PartialRule::Unary && partialInputs == std::vector<std::size_t>{0}) ||
                                  rule->partial == PartialRule::AllOperands ||
                                  (rule->partial == PartialRule::OneOperand && multiplicative == 1) ||
                                  (rule->partial == PartialRule::FirstOperand &&
                                   partialInputs == std::vector<std::size_t>{0});
                if (pass)
                    candidates.push_back(OpStrategy::kPassPartial);
            }
            candidates.push_back(OpStrategy::kWhole);

            // Placements on this axis of inputs, outputs and input gradients under a candidate.
            struct Trial {
                std::vector<Placement> in, out, grad;
            };
            auto trialOf = [&](int cand) {
                Trial t;
                for (std::size_t i = 0; i < op.inputs.size(); ++i) {
                    Placement in = s.inputs[i].placements[ax], grad;
                    if (s.dataInputs[i]) {
                        if (cand >= 0) {
                            const int d = rule->inputDim(i, cand);
                            const bool summedAway = rule->contracted[static_cast<std::size_t>(cand)] && rule->additive[i];
                            in = d >= 0 ? Placement::shard(d) : summedAway ? Placement::partial() : Placement::replicate();
                            grad = d >= 0 ? Placement::shard(d) : summedAway ? Placement::replicate() : Placement::partial();
                        } else if (cand == OpStrategy::kPassPartial) {
                            const bool keep = in.isPartial() || rule->additive[i] || rule->partial == PartialRule::AllOperands;
                            in = keep ? Placement::partial() : Placement::replicate();
                        } else {
                            in = Placement::replicate();
                        }
                    }
                    t.in.push_back(in);
                    t.grad.push_back(grad);
                }
                for (std::size_t o = 0; o < op.outputs.size(); ++o) {
                    Placement out;
                    if (cand >= 0) {
                        const int d = rule->outputDim(o, cand);
                        if (d >= 0)
                            out = Placement::shard(d);
                        else if (rule->contracted[static_cast<std::size_t>(cand)])
                            out = Placement::partial();
                    } else if (cand == OpStrategy::kPassPartial) {
                        out = Placement::partial();
                    }
                    t.out.push_back(out);
                }
                return t;
            };
            int best = OpStrategy::kWhole;
            double bestParam = std::numeric_limits<double>::infinity(), bestAct = bestParam;
            for (int cand : candidates) {
                const Trial t = trialOf(cand);
                std::vector<ShardingSpec> ins = s.inputs, outs = s.outputs;
                bool legal = true;
                double param = 0, act = 0;
                for (std::size_t i = 0; i < op.inputs.size() && legal; ++i) {
                    ins[i].placements[ax] = t.in[i];
                    if (!s.dataInputs[i])
                        continue;
                    const ir::Tensor &tensor = graph.tensor(op.inputs[i]);
                    double &moved = tensor.role == ir::Role::Parameter ? param : act;
                    legal = forEachReshardStep(tensor, s.inputs[i], ins[i], mesh, [&](const ReshardStep &r) {
                        moved += static_cast<double>(r.bytes) * (r.kind == CollectiveKind::AllReduce ? 2.0 : 1.0);
                    });
                }
                for (std::size_t o = 0; o < op.outputs.size() && legal; ++o) {
                    outs[o].placements[ax] = t.out[o];
                    legal = outs[o].holds(graph.tensor(op.outputs[o]).shape, mesh);
                }
                if (!legal)
                    continue;
                act += movedBytes(internalCollectives(graph, op, *rule, mesh, a, cand, ins, false)) +
                       movedBytes(internalCollectives(graph, op, *rule, mesh, a, cand, ins, true));
                if (param < bestParam || (param == bestParam && act < bestAct)) {
                    best = cand;
                    bestParam = param;
                    bestAct = act;
                }
            }
            const Trial t = trialOf(best);
            for (std::size_t i = 0; i < op.inputs.size(); ++i) {
                s.inputs[i].placements[ax] = t.in[i];
                s.inputGradients[i].placements[ax] = t.grad[i];
            }
            for (std::size_t o = 0; o < op.outputs.size(); ++o)
                s.outputs[o].placements[ax] = t.out[o];
            s.axisLoop[ax] = best;
            if (best >= 0)
                splitFactor *= mesh.axes[ax].size;
        }
        for (int a = 0; a < axes; ++a) {
            const int loop = s.axisLoop[static_cast<std::size_t>(a)];
            for (auto &c : internalCollectives(graph, op, *rule, mesh, a, loop, s.inputs, false))
                s.internalForward.push_back(std::move(c));
            for (auto &c : internalCollectives(graph, op, *rule, mesh, a, loop, s.inputs, true))
                s.internalBackward.push_back(std::move(c));
        }
        s.forwardFlops = rule->forwardFlops / splitFactor;
        s.backwardFlops = s.forwardFlops * rule->backwardFactor;
        if ((op.type == "MatMul" || op.type == "Gemm" || op.type == "Einsum") && op.inputs.size() >= 2)
            s.gemmCallFlops = gemmCallFlops(graph, op, *rule, s.axisLoop, mesh);
    }
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        if (!s.dataInputs[i])
            continue;
        const ir::Tensor &t = graph.tensor(op.inputs[i]);
        for (auto &c : reshard(t, inputSpecs[i], s.inputs[i], mesh).collectives)
            s.forward.push_back(std::move(c));
        if (isFloat(t.dtype) && t.role != ir::Role::Input)
            for (auto &c : reshard(t, s.inputGradients[i], gradientSpec(inputSpecs[i]), mesh).collectives) {
                c.reason = "gradient: " + c.reason;
                s.backward.push_back(std::move(c));
            }
    }
    s.forward.insert(s.forward.end(), s.internalForward.begin(), s.internalForward.end());
    s.backward.insert(s.backward.end(), s.internalBackward.begin(), s.internalBackward.end());
    if (!movesNoData(op) && !readsWeightTransposed(graph, op)) {
        s.kernelFamily = kernelFamily(op.type);
        for (std::size_t i = 0; i < op.inputs.size(); ++i)
            if (s.dataInputs[i] && op.inputs[i].valid()) {
                const ir::Tensor &t = graph.tensor(op.inputs[i]);
                s.forwardBytes += static_cast<double>(s.inputs[i].localElements(t.shape, mesh)) *
                                  static_cast<double>(ir::byteSize(t.dtype));
            }
        for (std::size_t o = 0; o < op.outputs.size(); ++o) {
            const ir::Tensor &t = graph.tensor(op.outputs[o]);
            s.forwardBytes += static_cast<double>(s.outputs[o].localElements(t.shape, mesh)) *
                              static_cast<double>(ir::byteSize(t.dtype));
        }
        s.backwardBytes = 2 * s.forwardBytes;
    }
    return s;
}

} // namespace tapestry::sharding
