#pragma once

#include "ir/graph.h"

#include <cstdint>
#include <map>
#include <optional>

namespace tapestry::sharding {

// The batch of a model found by data flow, not by position: a sequence-first
// export (torch.nn.Transformer's default, src [s, b, d]) has its batch in
// dim 1, and splitting its dim 0 splits the sequence.
//
// The model's main input is its token ids (the indices of the largest
// embedding table a Gather reads) or else its largest float input. A dim of
// it is the batch when a split of that dim passes every op it reaches by
// the ops' sharding rules (oprule.h) as one loop, never contracted, never
// kept whole (a softmax's axis, attention's keys) until the loss reduces it
// to a scalar: the sequence fails at the first attention, whose keys it
// also indexes. Dims are tried in order, so a model whose tokens are all
// independent (an MLP over [b, s, h]) keeps dim 0. Each graph input an op
// reads beside a tensor the batch reaches takes the batch in the dim that
// op maps to it (labels, padding masks), and so does each other input
// whose dim of the batch's size passes in the same way (T5's decoder ids).
struct BatchFlow {
    ir::TensorId input;                 // the main input
    int dim = 0;                        // its batch dim
    std::int64_t size = 0;              // the batch
    std::map<ir::TensorId, int> inputs;  // every graph input the batch reaches, by its batch dim
};

// Nothing where no dim of the main input passes (an op without a sharding
// rule on the way, a model without inputs).
std::optional<BatchFlow> batchByDataFlow(const ir::Graph &graph);

} // namespace tapestry::sharding
