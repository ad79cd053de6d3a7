#pragma once

#include "ir/graph.h"

#include <string>
#include <vector>

namespace tapestry::io::onnximport {

// One fused projection the loader laid out by parts.
struct StackedProjection {
    std::string weight;  // the parameter's name
    int parts = 0;       // q, k and v: 3
};

// Fused projections held as their parts stacked, as the zoo holds GPT-2's
// c_attn. An export computes q, k and v (or a gate and an up projection) as
// one linear of weight [in, k x m] and takes the parts of its output by
// Slice or Split along the last dim: torch.nn.MultiheadAttention's
// in_proj, Hugging Face GPT-2's Conv1D c_attn. A split of that weight's
// columns over devices hands one device all of q and part of k, so no plan
// could split such a projection by heads: the slices gathered it whole.
// Here the weight becomes [k, in, m] (parts stacked: W.view(in, k, m).
// permute(1, 0, 2)), its bias [k, 1, m], the input [..., 1, t, in] and the
// product [..., k, t, m] one batched matmul as before, split along the dim
// of k into the parts, each reshaped to what the slice gave. A split of the
// weight's last dim then splits every part by heads. The parameter keeps
// its name and element count; the slices' outputs keep their names, so the
// rest of the graph is untouched.
//
// Only where the pattern is exact: a 2-D parameter read by nothing but the
// matmul, an optional bias [k x m] read by nothing but the add, and a
// product read by nothing but slices (step 1) or splits of the last dim into
// k equal parts, every part taken. Parts of unequal size (a grouped-query
// q, k, v) stay as they are.
ir::Graph stackFusedProjections(const ir::Graph &graph, std::vector<StackedProjection> *stacked = nullptr);

} // namespace tapestry::io::onnximport
