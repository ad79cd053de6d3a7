#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace tapestry::ir {

// The sizes Tapestry accepts, and the arithmetic that checks them. Every
// model reader and builder checks its shapes with checkedElementCount and
// checkedMul, and ir::validate checks a whole graph against the limits
// below, before any pass or cost formula sees it. Past that point sizes are
// plain int64: a model holds at most kMaxModelBytes, so a count of its bytes
// times the small factors the cost model applies (gradients, optimizer
// states, micro-batches, a collective's bus factor) stays far below 2^63.

// The most ops a model may have (a 1,000-layer GPT has about 30,000; an ONNX
// export of a 100-layer model about 20,000). Builders stop at it, so a model
// asked for with a billion layers is refused with bounded memory.
inline constexpr std::int64_t kMaxOps = std::int64_t{1} << 20;

// The most bytes a model's tensors may hold together, each counted once and
// unsplit: 1 PiB (GPT-3 175B at batch 8 holds about 1 TiB).
inline constexpr std::int64_t kMaxModelBytes = std::int64_t{1} << 50;

// a * b, or nothing when it overflows 64 bits. Both are taken as non-negative.
std::optional<std::int64_t> checkedMul(std::int64_t a, std::int64_t b);
// a + b, or nothing when it overflows 64 bits.
std::optional<std::int64_t> checkedAdd(std::int64_t a, std::int64_t b);

// Elements of a tensor of `shape`, or nothing when a dim is negative or the
// count overflows 64 bits.
std::optional<std::int64_t> checkedElementCount(std::span<const std::int64_t> shape);

// Why a tensor of `shape` and `elementBytes` bytes per element cannot be
// part of a model (a negative dim, an element count past 64 bits, more bytes
// than kMaxModelBytes), or nothing when it can. On success `bytes` holds its
// byte count.
std::optional<std::string> tensorSizeProblem(std::span<const std::int64_t> shape, std::int64_t elementBytes,
                                             std::int64_t &bytes);

// "1 PiB", "3.5 GiB": a byte count for messages about limits.
std::string limitBytesText(std::int64_t bytes);

} // namespace tapestry::ir
