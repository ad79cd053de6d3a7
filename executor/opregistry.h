#pragma once

#include "kernels/activation.h"
#include "kernels/binary.h"
#include "tensorview.h"

#include "ir/graph.h"
#include "sharding/shardingspec.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tapestry::exec {

class Collectives;
class Device;

// What an op's backward kernels read of its forward pass, besides the
// output gradients and the saved rows: a rank keeps only that from the
// forward pass to the backward pass.
enum class BackwardReads {
    Inputs,
    Output,
    ProductInputs,  // the inputs of Mul and Div; nothing for Add and Sub
    Nothing,
};

// What the backward kernels of an op read of its forward pass: its entry's
// BackwardReads, ProductInputs resolved by the op's binary kind (Mul and
// Div read their inputs, Add and Sub nothing).
struct OpAttributes;
BackwardReads backwardReadsOf(BackwardReads declared, const OpAttributes &attributes);

// The buffers one op's backward step touches, as a program lays out its
// memory by them: its output gradients and saved rows read, its inputs or
// its output read as `reads` says, its input gradients added to; `none`
// (no gradient wanted) skipped.
template <class Buffers, class F>
void forEachBackwardAccess(BackwardReads reads, const Buffers &in, const Buffers &out, const Buffers &dout,
                           const Buffers &saved, const Buffers &din, typename Buffers::value_type none, F f)
{
    enum Kind { Read, Update };
    auto each = [&](const Buffers &list, Kind kind) {
        for (const auto &b : list)
            if (b != none)
                f(b, kind == Update);
    };
    each(dout, Read);
    each(saved, Read);
    if (reads == BackwardReads::Inputs)
        each(in, Read);
    if (reads == BackwardReads::Output)
        each(out, Read);
    each(din, Update);
}

// An op's attributes, decoded once when a program is built.
struct OpAttributes {
    std::size_t axis = 0;  // "axis", made non-negative
    float epsilon = 1e-5f;
    kernels::GeluForm gelu = kernels::GeluForm::Erf;
    kernels::BinaryOp binary = kernels::BinaryOp::Add;
    std::vector<std::int64_t> perm, starts, steps;  // Transpose; Slice, per dim
    std::vector<std::size_t> sliced;                 // Slice: the dims it names
    // MatMul: its right operand is a parameter stored [N, K], read through a
    // transpose the program leaves out (kernels::matmulForward).
    bool transB = false;
};

// What an op's kernels see when they run. din[i] has no data when input i
// needs no gradient; backward kernels add into din.
struct OpArgs {
    std::span<const TensorView> in, out, din, dout;
    std::span<const TensorView> saved;    // statistics kept from forward for backward (mean, rstd, lse)
    std::span<const TensorView> scratch;  // per-row scratch of a rank's vocab-parallel loss
    IndexView index;                      // the integer input (Gather's ids, the loss's labels)
    const OpAttributes *attributes = nullptr;
    // Rank kernels only: the device they run on (a GPU's kernels take its
    // stream from it), and for vocab-parallel ops (split over the rows of an
    // embedding or the classes of the logits) where this rank's block starts,
    // the collectives of the mesh axes splitting it, and the whole batch's
    // token count.
    Device *device = nullptr;
    std::int64_t offset = 0;
    std::span<Collectives *const> split;
    double denominator = 1.0;
};

using OpKernel = void (*)(const OpArgs &);
struct OpKernels {
    OpKernel forward = nullptr;
    OpKernel backward = nullptr;
    explicit operator bool() const { return forward && backward; }
};

// One op kind the executor runs, declared once in opregistry.cpp: the IR
// (ONNX) types it serves, which inputs are integer data or restated
// shapes, what it keeps from forward, the forms it refuses, how its
// attributes decode, and its host kernels. The single-rank interpreter, the
// sharded program and the support check all read this table, so that a new
// op is one entry here plus its kernels.
//
// A rank runs the kernels its Device gives for the entry
// (Device::opKernels): a CPU rank those named here, a GPU rank the CUDA
// kernels registered under the entry's name (cuda/opkernels.cpp). An op
// without CUDA kernels runs on CPU ranks and GPU ranks refuse it up front.
struct OpDef {
    std::string_view name;                 // the kind, e.g. "Reshape"; CUDA kernels register under it
    std::vector<std::string_view> types;   // IR op types it serves
    BackwardReads backwardReads = BackwardReads::Inputs;
    std::optional<std::size_t> indexInput = std::nullopt;  // integer data read by the kernels
    bool shapeOperands = false;             // inputs past the first only restate the output's shape
    int savedRows = 0;                      // per-row statistics kept for backward
    int scratchRows = 0;                    // per-row scratch on ranks
    bool gemm = false;                      // timed and counted as a GEMM (FLOPs, GEMM calls)
    // The input dim a rank may hold a block of (vocab-parallel): 0 rows, -1 the last; unset none.
    std::optional<int> vocabDim = std::nullopt;
    // Why a form of the op cannot run (rank of the operands, attributes), or nothing.
    std::optional<std::string> (*refuse)(const ir::Graph &, const ir::Op &) = nullptr;
    // Extra attributes past axis, epsilon and the Gelu form; `x` is the first input's (local) shape.
    void (*decode)(const ir::Op &, const ir::Shape &x, OpAttributes &) = nullptr;
    // Why the op cannot run with its first input sharded as `input`, or nothing.
    std::optional<std::string> (*refuseSharded)(const OpAttributes &, const sharding::ShardingSpec &input) = nullptr;
    // The kernels of kernels/*.h on host memory: the interpreter's (the
    // reference) on whole tensors, and a CPU rank's on its shards.
    OpKernels host = {};
    // A CPU rank's kernels where they differ from `host`: a vocab-parallel
    // op runs on a block of its vocabulary dim and reduces over the ranks
    // splitting it.
    OpKernels hostShard = {};
};

// The entry serving IR op type `type`, or nullptr when the executor has none.
const OpDef *findOp(std::string_view type);
// Every entry, in declaration order.
std::span<const OpDef> opRegistry();

// `op`'s attributes for an input of shape `x`.
OpAttributes decodeAttributes(const OpDef &def, const ir::Op &op, const ir::Shape &x);

} // namespace tapestry::exec
