#pragma once

#include "export/exportaxis.h"

#include <string>
#include <vector>

namespace tapestry::exports {

// One entry of a torch tensor-parallel plan: a module name (or a glob over
// the layer index, where every instance shares the entry) and the
// ParallelStyle applied to it, with the input and output layouts on the
// tensor-parallel mesh where they differ from the style's defaults
// (ColwiseParallel: Replicate() in, Shard(-1) out; RowwiseParallel:
// Shard(-1) in, Replicate() out).
struct TorchModulePlan {
    std::string module;  // "model.layers.*.self_attn.q_proj"
    std::string style;   // "ColwiseParallel", "RowwiseParallel", "SequenceParallel"
    std::string inputLayouts;   // "Shard(1)"; empty: the default
    std::string outputLayouts;
    friend bool operator==(const TorchModulePlan &, const TorchModulePlan &) = default;
};

struct TorchPlan {
    std::string meshAxis;  // the tensor-parallel axis' exported name; empty when nothing is split
    int meshAxisSize = 1;
    // The whole mesh (device_mesh() in the Python): its sizes and its axes named by
    // what each carries (exportAxisNames), with a note per axis.
    std::vector<int> meshShape;
    std::vector<std::string> meshDimNames;
    std::vector<std::string> axisNotes;
    std::vector<TorchModulePlan> modules;  // ordered by module name
};

// The plan as parallelize_module expects it. Weights are [in, out], used as
// x @ W (and embedding tables [vocab, hidden]): a split of dim 1 is
// ColwiseParallel, of dim 0 RowwiseParallel; a norm computing on sequence
// shards is SequenceParallel. Throws TapestryError naming `planInput` and
// the tensor where torch's 1-D form cannot say what the plan does:
// parameters split over two mesh axes, a split weight of rank other than 2
// or read by something other than a MatMul, Gemm or Gather, a bias stored
// other than its module's style stores it.
TorchPlan torchPlan(const ExportInput &in, const std::string &planInput);

// A Python file defining `mesh_shape`, `mesh_dim_names`, `tp_mesh_dim`,
// `plan = {...}` and `device_mesh(device_type)`, the plan's mesh as a
// DeviceMesh with the tensor-parallel axis innermost (parallelize_module
// refuses it elsewhere) and the same ranks on each axis.
std::string torchPlanPython(const TorchPlan &plan, const plan::Plan &source);

} // namespace tapestry::exports
