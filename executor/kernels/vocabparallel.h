#pragma once

#include "tensorview.h"

#include <cstdint>

namespace tapestry::exec::kernels {

// Megatron's vocabulary-parallel embedding and cross-entropy: the table's
// rows (the logits' classes) are split over ranks, each rank holding the
// block that starts at `offset`. The communication between the phases (an
// all-reduce of the embedding output, and of the per-token max, sum and
// target logit) is the caller's.

// out[i, :] = table[ids[i] − offset, :] for ids the shard holds, zeros for
// the others: a partial sum over the ranks of the split.
void shardedGatherForward(const TensorView &out, const TensorView &table, const IndexView &ids,
                          std::int64_t offset);
// dtable[ids[i] − offset, :] += dout[i, :] for ids the shard holds.
void shardedGatherBackward(const TensorView &dout, const IndexView &ids, std::int64_t offset,
                           const TensorView &dtable);

// Per token (row of logits[..., C/p]): the largest local logit.
void crossEntropyRowMax(const TensorView &logits, const TensorView &rowMax);
// Per token, given the global max: Σ exp(z − max) over the local classes,
// and the label's logit where the label is a local class (else 0).
void crossEntropyRowSums(const TensorView &logits, const IndexView &labels, std::int64_t offset,
                         const TensorView &rowMax, const TensorView &sumExp, const TensorView &target);
// With the sums over all classes: lse = max + log Σ, and the loss
// Σ_tokens (lse − target) / denominator (the token count of the whole batch,
// so that ranks holding different tokens add up to the mean).
void crossEntropyFinish(const TensorView &loss, const TensorView &lse, const TensorView &rowMax,
                        const TensorView &sumExp, const TensorView &target, double denominator);
// dlogits += dloss/denominator · (softmax − onehot) on the local classes.
void crossEntropyShardBackward(const TensorView &dloss, const TensorView &logits, const IndexView &labels,
                               std::int64_t offset, const TensorView &lse, double denominator,
                               const TensorView &dlogits);

} // namespace tapestry::exec::kernels
