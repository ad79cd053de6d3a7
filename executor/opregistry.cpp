#include "opregistry.h"

#include "collectives.h"
#include "kernels/activation.h"
#include "kernels/binary.h"
#include "kernels/crossentropy.h"
#include "kernels/gather.h"
#include "kernels/layernorm.h"
#include "kernels/layout.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "kernels/softmax.h"
#include "kernels/vocabparallel.h"

#include <algorithm>
#include <map>

namespace tapestry::exec {

namespace {

using kernels::BinaryOp;
using sharding::Placement;
using sharding::ShardingSpec;

std::size_t normaliseAxis(std::int64_t axis, std::size_t rank)
{
    return static_cast<std::size_t>(axis < 0 ? axis + static_cast<std::int64_t>(rank) : axis);
}

bool lastAxis(const ir::Op &op, std::size_t rank, std::int64_t fallback)
{
    auto axis = ir::intAttr(op.attributes, "axis").value_or(fallback);
    if (axis < 0)
        axis += static_cast<std::int64_t>(rank);
    return axis == static_cast<std::int64_t>(rank) - 1;
}

std::size_t rankOf(const ir::Graph &graph, const ir::Op &op, std::size_t input)
{
    return graph.tensor(op.inputs[input]).shape.size();
}

bool splitOver(const ShardingSpec &spec, std::size_t dim)
{
    return std::any_of(spec.placements.begin(), spec.placements.end(),
                       [&](const Placement &p) { return p == Placement::shard(static_cast<int>(dim)); });
}

std::optional<std::string> axisSplit(const OpAttributes &a, const ShardingSpec &input)
{
    if (splitOver(input, a.axis))
        return std::string("its axis is split over the mesh");
    return std::nullopt;
}

std::optional<std::string> refuseNorm(const ir::Graph &graph, const ir::Op &op)
{
    if (!lastAxis(op, rankOf(graph, op, 0), -1))
        return std::string("normalises over more than the last axis");
    if (op.outputs.size() != 1 || op.inputs.size() < 2)
        return std::string("expects input and scale, and one output");
    if (op.type != "LayerNormalization" && op.inputs.size() != 2)
        return std::string("RMSNorm takes no bias");
    return std::nullopt;
}

const TensorView &optional(std::span<const TensorView> views, std::size_t i)
{
    static const TensorView none;
    return i < views.size() ? views[i] : none;
}

const std::vector<OpDef> kOps = {
    {.name = "MatMul",
     .types = {"MatMul"},
     .gemm = true,
     .refuse = [](const ir::Graph &g, const ir::Op &op) -> std::optional<std::string> {
         if (rankOf(g, op, 0) < 2 || rankOf(g, op, 1) < 2)
             return std::string("a 1-D operand (vector product)");
         return std::nullopt;
     },
     .host = {[](const OpArgs &a) { kernels::matmulForward(a.out[0], a.in[0], a.in[1], a.attributes->transB); },
              [](const OpArgs &a) {
                  kernels::matmulBackward(a.dout[0], a.in[0], a.in[1], a.din[0], a.din[1], a.attributes->transB);
              }}},
    {.name = "Binary",
     .types = {"Add", "Sub", "Mul", "Div"},
     .backwardReads = BackwardReads::ProductInputs,
     .refuse = [](const ir::Graph &, const ir::Op &op) -> std::optional<std::string> {
         if (op.inputs.size() != 2)
             return std::string("expects two inputs");
         return std::nullopt;
     },
     .decode =
         [](const ir::Op &op, const ir::Shape &, OpAttributes &a) {
             a.binary = op.type == "Sub" ? BinaryOp::Sub
                        : op.type == "Mul" ? BinaryOp::Mul
                        : op.type == "Div" ? BinaryOp::Div
                                           : BinaryOp::Add;
         },
     .host = {[](const OpArgs &a) { kernels::binaryForward(a.attributes->binary, a.out[0], a.in[0], a.in[1]); },
              [](const OpArgs &a) {
                  kernels::binaryBackward(a.attributes->binary, a.dout[0], a.in[0], a.in[1], a.din[0], a.din[1]);
              }}},
    {.name = "Relu",
     .types = {"Relu"},
     .host = {[](const OpArgs &a) { kernels::reluForward(a.out[0], a.in[0]); },
              [](const OpArgs &a) { kernels::reluBackward(a.dout[0], a.in[0], a.din[0]); }}},
    {.name = "Gelu",
     .types = {"Gelu"},
     .refuse = [](const ir::Graph &, const ir::Op &op) -> std::optional<std::string> {
         const auto form = ir::stringAttr(op.attributes, "approximate").value_or("none");
         if (form != "none" && form != "tanh")
             return "approximate='" + form + "'";
         return std::nullopt;
     },
     .host = {[](const OpArgs &a) { kernels::geluForward(a.attributes->gelu, a.out[0], a.in[0]); },
              [](const OpArgs &a) { kernels::geluBackward(a.attributes->gelu, a.dout[0], a.in[0], a.din[0]); }}},
    {.name = "Silu",
     .types = {"Silu"},
     .host = {[](const OpArgs &a) { kernels::siluForward(a.out[0], a.in[0]); },
              [](const OpArgs &a) { kernels::siluBackward(a.dout[0], a.in[0], a.din[0]); }}},
    {.name = "Neg",
     .types = {"Neg"},
     .backwardReads = BackwardReads::Nothing,
     .host = {[](const OpArgs &a) { kernels::negForward(a.out[0], a.in[0]); },
              [](const OpArgs &a) { kernels::negBackward(a.dout[0], a.din[0]); }}},
    {.name = "Softmax",
     .types = {"Softmax"},
     .backwardReads = BackwardReads::Output,
     .refuse = [](const ir::Graph &g, const ir::Op &op) -> std::optional<std::string> {
         if (!lastAxis(op, rankOf(g, op, 0), -1))
             return std::string("axis is not the last");
         return std::nullopt;
     },
     .host = {[](const OpArgs &a) { kernels::softmaxForward(a.out[0], a.in[0]); },
              [](const OpArgs &a) { kernels::softmaxBackward(a.dout[0], a.out[0], a.din[0]); }}},
    {.name = "LayerNorm",
     .types = {"LayerNormalization"},
     .savedRows = 2,
     .refuse = refuseNorm,
     .host = {[](const OpArgs &a) {
                  kernels::layernormForward(a.out[0], a.saved[0], a.saved[1], a.in[0], a.in[1], optional(a.in, 2),
                                            a.attributes->epsilon);
              },
              [](const OpArgs &a) {
                  kernels::layernormBackward(a.dout[0], a.in[0], a.in[1], a.saved[0], a.saved[1], a.din[0],
                                             a.din[1], optional(a.din, 2));
              }}},
    {.name = "RmsNorm",
     .types = {"RMSNorm", "SimplifiedLayerNormalization"},
     .savedRows = 1,
     .refuse = refuseNorm,
     .host = {[](const OpArgs &a) {
                  kernels::rmsnormForward(a.out[0], a.saved[0], a.in[0], a.in[1], a.attributes->epsilon);
              },
              [](const OpArgs &a) {
                  kernels::rmsnormBackward(a.dout[0], a.in[0], a.in[1], a.saved[0], a.din[0], a.din[1]);
              }}},
    // Flatten and Identity take one input, so reading their further inputs
    // as shapes changes nothing.
    {.name = "Reshape",
     .types = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"},
     .backwardReads = BackwardReads::Nothing,
     .shapeOperands = true,
     .host = {[](const OpArgs &a) { kernels::reshapeForward(a.out[0], a.in[0]); },
              [](const OpArgs &a) { kernels::reshapeBackward(a.dout[0], a.din[0]); }}},
    {.name = "Transpose",
     .types = {"Transpose"},
     .backwardReads = BackwardReads::Nothing,
     .decode =
         [](const ir::Op &op, const ir::Shape &x, OpAttributes &a) {
             if (auto perm = ir::intsAttr(op.attributes, "perm"))
                 a.perm = *perm;
             else
                 for (std::size_t i = x.size(); i-- > 0;)
                     a.perm.push_back(static_cast<std::int64_t>(i));
         },
     .host = {[](const OpArgs &a) { kernels::transposeForward(a.out[0], a.in[0], a.attributes->perm); },
              [](const OpArgs &a) { kernels::transposeBackward(a.dout[0], a.attributes->perm, a.din[0]); }}},
    {.name = "Split",
     .types = {"Split"},
     .backwardReads = BackwardReads::Nothing,
     .shapeOperands = true,
     .refuseSharded = axisSplit,
     .host = {[](const OpArgs &a) { kernels::splitForward(a.out, a.in[0], a.attributes->axis); },
              [](const OpArgs &a) { kernels::splitBackward(a.dout, a.attributes->axis, a.din[0]); }}},
    {.name = "Concat",
     .types = {"Concat"},
     .backwardReads = BackwardReads::Nothing,
     .refuseSharded = axisSplit,
     .host = {[](const OpArgs &a) { kernels::concatForward(a.out[0], a.in, a.attributes->axis); },
              [](const OpArgs &a) { kernels::concatBackward(a.dout[0], a.attributes->axis, a.din); }}},
    {.name = "Slice",
     .types = {"Slice"},
     .backwardReads = BackwardReads::Nothing,
     .refuse = [](const ir::Graph &, const ir::Op &op) -> std::optional<std::string> {
         if (op.inputs.size() != 1)
             return std::string("starts/ends given as tensors (only as attributes)");
         if (!ir::intsAttr(op.attributes, "starts") || !ir::intsAttr(op.attributes, "ends"))
             return std::string("no starts/ends attributes");
         return std::nullopt;
     },
     .decode =
         [](const ir::Op &op, const ir::Shape &x, OpAttributes &a) {
             const std::size_t rank = x.size();
             const auto starts = *ir::intsAttr(op.attributes, "starts");
             std::vector<std::int64_t> axes(starts.size());
             for (std::size_t i = 0; i < axes.size(); ++i)
                 axes[i] = static_cast<std::int64_t>(i);
             axes = ir::intsAttr(op.attributes, "axes").value_or(axes);
             const auto steps =
                 ir::intsAttr(op.attributes, "steps").value_or(std::vector<std::int64_t>(starts.size(), 1));
             a.starts.assign(rank, 0);
             a.steps.assign(rank, 1);
             for (std::size_t i = 0; i < starts.size(); ++i) {
                 const std::size_t d = normaliseAxis(axes[i], rank);
                 const std::int64_t dim = x[d];
                 std::int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
                 s = steps[i] > 0 ? std::clamp<std::int64_t>(s, 0, dim) : std::clamp<std::int64_t>(s, 0, dim - 1);
                 a.starts[d] = s;
                 a.steps[d] = steps[i];
                 a.sliced.push_back(d);
             }
         },
     // Its "axis" (0 when absent) and every sliced dim must be whole.
     .refuseSharded = [](const OpAttributes &a, const ShardingSpec &input) -> std::optional<std::string> {
         if (auto why = axisSplit(a, input))
             return why;
         for (std::size_t d : a.sliced)
             if (splitOver(input, d))
                 return std::string("a sliced dim is split over the mesh");
         return std::nullopt;
     },
     .host = {[](const OpArgs &a) {
                  kernels::sliceForward(a.out[0], a.in[0], a.attributes->starts, a.attributes->steps);
              },
              [](const OpArgs &a) {
                  kernels::sliceBackward(a.dout[0], a.attributes->starts, a.attributes->steps, a.din[0]);
              }}},
    {.name = "Expand",
     .types = {"Expand"},
     .backwardReads = BackwardReads::Nothing,
     .shapeOperands = true,
     .host = {[](const OpArgs &a) { kernels::expandForward(a.out[0], a.in[0]); },
              [](const OpArgs &a) { kernels::expandBackward(a.dout[0], a.din[0]); }}},
    {.name = "Gather",
     .types = {"Gather"},
     .backwardReads = BackwardReads::Nothing,
     .indexInput = 1,
     .vocabDim = 0,
     .refuse = [](const ir::Graph &, const ir::Op &op) -> std::optional<std::string> {
         if (ir::intAttr(op.attributes, "axis").value_or(0) != 0)
             return std::string("axis is not 0 (only embedding lookups)");
         return std::nullopt;
     },
     .host = {[](const OpArgs &a) { kernels::gatherForward(a.out[0], a.in[0], a.index); },
              [](const OpArgs &a) { kernels::gatherBackward(a.dout[0], a.index, a.din[0]); }},
     // Vocab-parallel: a rank holds a block of the table's rows, from `offset`.
     .hostShard = {[](const OpArgs &a) {
                       kernels::shardedGatherForward(a.out[0], a.in[0], a.index, a.offset);
                   },
                   [](const OpArgs &a) {
                       kernels::shardedGatherBackward(a.dout[0], a.index, a.offset, a.din[0]);
                   }}},
    {.name = "CrossEntropy",
     .types = {"SoftmaxCrossEntropyLoss"},
     .indexInput = 1,
     .savedRows = 1,
     .scratchRows = 3,  // row max, sum of exponentials, target logit
     .vocabDim = -1,
     .refuse = [](const ir::Graph &g, const ir::Op &op) -> std::optional<std::string> {
         if (ir::stringAttr(op.attributes, "reduction").value_or("mean") != "mean")
             return std::string("reduction is not 'mean'");
         if (op.attributes.count("ignore_index"))
             return std::string("ignore_index is not supported");
         if (op.inputs.size() != 2 || op.outputs.size() != 1)
             return std::string("class weights or a log-prob output");
         ir::Shape lead = g.tensor(op.inputs[0]).shape;
         if (lead.empty())
             return std::string("scalar logits");
         lead.pop_back();
         if (g.tensor(op.inputs[1]).shape != lead)
             return std::string("classes are not on the last axis of the logits");
         return std::nullopt;
     },
     .host = {[](const OpArgs &a) { kernels::crossEntropyForward(a.out[0], a.saved[0], a.in[0], a.index); },
              [](const OpArgs &a) {
                  kernels::crossEntropyBackward(a.dout[0], a.in[0], a.index, a.saved[0], a.din[0]);
              }},
     // Vocab-parallel (Megatron): each rank holds a block of the classes;
     // the row max and the two row sums are reduced over the axes splitting them.
     .hostShard = {[](const OpArgs &a) {
                       const TensorView &rowMax = a.scratch[0], &sumExp = a.scratch[1], &target = a.scratch[2];
                       kernels::crossEntropyRowMax(a.in[0], rowMax);
                       for (Collectives *c : a.split)
                           c->allReduceMax(rowMax);
                       kernels::crossEntropyRowSums(a.in[0], a.index, a.offset, rowMax, sumExp, target);
                       for (Collectives *c : a.split) {
                           c->allReduceSum(sumExp);
                           c->allReduceSum(target);
                       }
                       kernels::crossEntropyFinish(a.out[0], a.saved[0], rowMax, sumExp, target, a.denominator);
                   },
                   [](const OpArgs &a) {
                       kernels::crossEntropyShardBackward(a.dout[0], a.in[0], a.index, a.offset, a.saved[0],
                                                          a.denominator, a.din[0]);
                   }}},
};

} // namespace

std::span<const OpDef> opRegistry()
{
    return kOps;
}

const OpDef *findOp(std::string_view type)
{
    static const std::map<std::string_view, const OpDef *> byType = [] {
        std::map<std::string_view, const OpDef *> m;
        for (const OpDef &def : kOps)
            for (std::string_view t : def.types)
                m.emplace(t, &def);
        return m;
    }();
    const auto it = byType.find(type);
    return it == byType.end() ? nullptr : it->second;
}

BackwardReads backwardReadsOf(BackwardReads declared, const OpAttributes &attributes)
{
    if (declared != BackwardReads::ProductInputs)
        return declared;
    return attributes.binary == kernels::BinaryOp::Mul || attributes.binary == kernels::BinaryOp::Div
               ? BackwardReads::Inputs
               : BackwardReads::Nothing;
}

OpAttributes decodeAttributes(const OpDef &def, const ir::Op &op, const ir::Shape &x)
{
    OpAttributes a;
    a.axis = normaliseAxis(ir::intAttr(op.attributes, "axis").value_or(0), x.size());
    a.epsilon = static_cast<float>(ir::floatAttr(op.attributes, "epsilon").value_or(1e-5));
    if (ir::stringAttr(op.attributes, "approximate").value_or("none") == "tanh")
        a.gelu = kernels::GeluForm::Tanh;
    if (def.decode)
        def.decode(op, x, a);
    return a;
}

} // namespace tapestry::exec
