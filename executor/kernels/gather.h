#pragma once

#include "tensorview.h"

namespace tapestry::exec::kernels {

// Embedding lookup, Gather along axis 0: out[..., :] = table[ids[...], :]
// for table[V, H] and ids of any shape. Ids must lie in [0, V).
void gatherForward(const TensorView &out, const TensorView &table, const IndexView &ids);

// Scatter-add: dtable[ids[...], :] += dout[..., :]; repeated ids add up.
void gatherBackward(const TensorView &dout, const IndexView &ids, const TensorView &dtable);

} // namespace tapestry::exec::kernels
