#pragma once

#include "tensorview.h"

namespace tapestry::exec::kernels {

// SoftmaxCrossEntropyLoss with mean reduction over tokens: logits[..., C]
// (classes on the last axis, as the zoo writes the LM head), int64 labels of
// the leading shape, all in [0, C). Writes the scalar loss and, per token,
// log Σ exp(logits) (lse) for the backward pass, so no probability tensor of
// the vocabulary's size is kept.
void crossEntropyForward(const TensorView &loss, const TensorView &lse, const TensorView &logits,
                         const IndexView &labels);

// dlogits += dloss/N · (softmax(logits) − onehot(label)).
void crossEntropyBackward(const TensorView &dloss, const TensorView &logits, const IndexView &labels,
                          const TensorView &lse, const TensorView &dlogits);

} // namespace tapestry::exec::kernels
