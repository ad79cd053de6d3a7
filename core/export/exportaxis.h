#pragma once

#include "ir/graph.h"
#include "plan/axisroles.h"
#include "plan/plan.h"
#include "sharding/shardingspec.h"

#include <string>
#include <vector>

namespace tapestry::exports {

// What the framework exports start from: a plan checked against its model
// (fingerprint, every spec legal), its specs by tensor id, and the one mesh
// axis its parameters are split on.
struct ExportInput {
    const ir::Graph &graph;
    const plan::Plan &plan;
    std::vector<sharding::ShardingSpec> specs;  // by tensor id
    // The tensor-parallel axis: the only axis any parameter is split on; -1
    // when every parameter is replicated (a data-parallel plan).
    int tensorParallelAxis = -1;
    // What each mesh axis carries under the specs, and the name the export
    // gives it after that (exportAxisNames).
    std::vector<plan::AxisCarries> carries;
    std::vector<std::string> axisNames;
};

// The names an export gives the mesh's axes, by what each carries: the
// plan's name where it says so (an axis named data that carries data, an
// axis named model that carries tensor, a name that asks for no role),
// else what it carries ("tensor", "data", "tensor_sequence",
// "replicated"), made unique with the axis index. A process group built
// from an exported name then does what the name says.
std::vector<std::string> exportAxisNames(const sharding::Mesh &mesh, const std::vector<plan::AxisCarries> &carries);
// "axis data (2) carries tensor, exported as 'tensor'", one per axis.
std::vector<std::string> axisNotes(const ExportInput &in);

// Validates `plan` against `graph` (errors name `planInput`) and finds the
// tensor-parallel axis. Frameworks with a 1-D tensor-parallel mesh (torch's
// parallelize_module, Megatron-LM) cannot hold parameters split on two axes:
// `format` names the export in the error, which names the first parameter
// that needs a second axis.
ExportInput exportInput(const ir::Graph &graph, const plan::Plan &plan, const std::string &planInput,
                        const std::string &format, bool oneAxis);

// The lines a Python export's docstring opens with after its title: where
// it came from (`tapestry-cli export --to FORMAT`, the model, method, mesh
// and techniques) and what each mesh axis carries (axisNotes).
std::string exportProvenance(const plan::Plan &source, const std::string &format,
                             const std::vector<std::string> &axisNotes);

// "transformer.h.3.attn.q_proj.weight" -> "transformer.h.3.attn.q_proj";
// empty when the name does not end in ".weight" or ".bias".
std::string moduleOf(const std::string &parameterName);

// GPT-2's fused query/key/value projection as the zoo holds it: the weight
// [3, in, out] (q, k and v stacked; Hugging Face's [in, 3 out] Conv1D
// weight viewed so) and the bias [3, 1, out], of a module named c_attn.
bool isFusedQkvWeight(const ir::Tensor &parameter);
bool isFusedQkvBias(const ir::Tensor &parameter);

// The placement of `spec` on `axis` in DTensor notation, the last dim as -1
// as torch's layouts write it: "Replicate()", "Shard(1)", "Shard(-1)".
std::string torchLayout(const sharding::ShardingSpec &spec, int axis, std::size_t tensorRank);

} // namespace tapestry::exports
