#pragma once

#include "io/loadoptions.h"

#include "onnx/onnx_pb.h"

#include <string>
#include <string_view>

namespace tapestry::io::onnximport {

enum class DimKind { Batch, Sequence, Other };

// What a symbolic dim's name stands for: names containing "batch" (or N, B,
// bs, bsz) are the batch; names containing "seq" or "len" (or S, T) the
// sequence length. Case does not matter.
DimKind classifyDim(std::string_view name);

// Replaces the symbolic dims of the graph's inputs (initializers excluded)
// with LoadOptions.batch / .seq. Defaults: batch 1; seq the maximum the model
// records in its metadata (max_position_embeddings, n_positions,
// max_sequence_length, max_seq_len, n_ctx). Dims of the same names in outputs
// and value_info are bound too, so inference and declared shapes agree.
// Throws TapestryError naming `input`, the graph input and the dim when a dim
// cannot be bound.
void bindSymbolicDims(::onnx::ModelProto &model, const LoadOptions &options, const std::string &input);

} // namespace tapestry::io::onnximport
