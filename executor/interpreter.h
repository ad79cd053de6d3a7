#pragma once

#include "buffertable.h"
#include "kernels/optimizer.h"
#include "opregistry.h"
#include "steploop.h"
#include "tensorview.h"

#include "cost/costoptions.h"
#include "ir/graph.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tapestry::exec {

enum class Optimizer { Sgd, Adam };

// `options` as this executor holds tensors, for predicting its runs:
// float32 parameters, gradients and activations, and for Adam its two
// float32 moments (SGD keeps none).
cost::CostOptions heldCostOptions(cost::CostOptions options, Optimizer optimizer);

class Interpreter;

struct InterpreterOptions {
    std::uint64_t seed = 1;
    Optimizer optimizer = Optimizer::Sgd;
    float learningRate = 0.01f;
    kernels::AdamConfig adam;  // its learningRate is replaced by the one above
    // For one pipeline stage's part of the graph (pipelinerun.h): float
    // inputs whose values the caller sets (received from the stage before)
    // and whose gradients it reads after backward(); with them the graph's
    // non-scalar outputs are seeded only by seedGradient() (zero
    // otherwise), scalar losses by `lossScale` (1 / the micro-batches), and
    // backward() leaves the parameters' gradients to accumulate until
    // zeroParameterGradients().
    std::vector<std::string> receivedInputs;
    bool stagePart = false;
    float lossScale = 1.0f;
    // Another copy of the same graph whose parameters and gradients this
    // one uses rather than holding its own (stagePart): the micro-batches
    // a pipeline stage has in flight at once each need their activations,
    // not the parameters again, and their backward passes run one at a
    // time. Only the owner updates the parameters. Must outlive this one.
    const Interpreter *parametersOf = nullptr;
};

// What a step minimises. A graph with a loss (scalar outputs, e.g. the zoo's
// SoftmaxCrossEntropyLoss) trains on the sum of its scalar outputs; a graph
// without one (the tutorial MLP and ABC models end in a matmul) trains on the
// sum of squares of all its outputs, Σ y², whose gradient is 2y.
enum class Objective { Loss, SumOfSquares };

// Runs a whole op-level graph on one process: forward, backward in reverse
// topological order with gradients accumulated where a tensor has several
// consumers, and an SGD or Adam update. Parameters and inputs come from the
// seed (initializer.h); the same batch is used every step. All memory lives
// in one arena laid out at construction. This is the single-rank reference
// the plan-driven ranks are checked against.
class Interpreter final : public StepProgram {
public:
    // Throws TapestryError naming `input` when the graph has ops the
    // executor cannot run, or nothing to train on.
    Interpreter(ir::Graph graph, InterpreterOptions options, std::string input = {});
    Interpreter(const Interpreter &) = delete;
    Interpreter &operator=(const Interpreter &) = delete;

    float forward() override;   // returns the objective
    void backward() override;   // gradients of the objective for the last forward
    void update() override;     // one optimizer step on every parameter
    float step();               // all three; returns the objective before the update
    // InterpreterOptions::stagePart: the gradient backward() starts `output`
    // from (its size), and the parameters' gradients set to zero.
    void seedGradient(std::string_view output, const float *gradient);
    void zeroParameterGradients();
    // The inputs named in `batched` (dim 0 a micro-batch of the whole
    // batch of `batchRows` rows) as rows [firstRow, ...) of the whole batch's
    // seeded data: the micro-batch's own rows; other inputs as they are.
    void loadInputRows(std::int64_t firstRow, std::int64_t batchRows, const std::vector<std::string> &batched);
    // Trained parameters by name, value and gradient.
    std::vector<std::string> parameterNames() const;
    void synchronize() override { }  // the host kernels are done when they return
    // Seconds inside the op kernels since the last reset, the GEMMs apart.
    KernelTimes kernelTimes() override { return m_kernelTimes; }
    void resetKernelTimes() override { m_kernelTimes = {}; }

    Objective objective() const { return m_objective; }
    const ir::Graph &graph() const { return m_graph; }
    // A float tensor's value, and its gradient (no data when the objective
    // does not depend on it). Throws TapestryError for unknown names.
    TensorView value(std::string_view tensorName) const;
    TensorView grad(std::string_view tensorName) const;

    // Floating-point operations of one training step, counted on the matmuls
    // (forward product and each gradient GEMM); the other ops add well under
    // a percent for transformer shapes.
    double flopsPerStep() const override { return m_flops; }
    // Tokens in one step: elements of the first integer input (token ids), or
    // rows (all dims but the last) of the first float input.
    std::int64_t tokensPerStep() const override { return m_tokens; }
    // Bytes of its arena: every buffer for the whole step, or for a
    // pipeline stage's part (stagePart) the buffers laid out by lifetime.
    std::int64_t arenaBytes() const { return m_buffers.bytes(); }

private:
    // One op, resolved to views into the arena; run by its registry entry's host kernels.
    struct Instr {
        const OpDef *def = nullptr;
        OpAttributes attributes;
        std::vector<TensorView> in, out, din, dout;  // din[i] has no data when no gradient is wanted
        IndexView index;                              // Gather's ids, the loss's labels
        std::vector<TensorView> saved;                // mean/rstd, or per-token lse
        std::vector<TensorView> zeroFirst;            // gradients zeroed before backward (stagePart)
        bool backward = false;  // some input needs a gradient
        KernelKind kind = KernelKind::Other;
        OpArgs args() const;
    };
    struct Parameter {
        TensorView value, grad, m, v;
    };

    void layOut(const std::string &input);
    void initialise();
    // Runs `kernel` on `ins`, adding its time to m_kernelTimes.
    void run(OpKernel kernel, const Instr &ins);

    ir::Graph m_graph;
    InterpreterOptions m_options;
    Objective m_objective = Objective::Loss;
    BufferTable m_buffers;
    std::vector<std::int64_t> m_indices;  // integer inputs, allocated once
    std::vector<TensorView> m_values, m_grads;  // per tensor id
    std::vector<IndexView> m_indexValues;       // per tensor id (integer inputs only)
    std::vector<std::int64_t> m_indexRange;     // per tensor id: ids lie in [0, range); 0 if not read
    std::vector<std::int64_t> m_indexOffset;    // per tensor id: offset into m_indices, or −1
    std::vector<Instr> m_program;               // topological order
    std::vector<Parameter> m_parameters;
    std::vector<ir::TensorId> m_objectiveTensors;
    std::vector<bool> m_received;               // per tensor id: InterpreterOptions::receivedInputs
    std::vector<std::vector<float>> m_seeds;    // per objective tensor (stagePart)
    std::vector<TensorView> m_zeroAtBackward;     // gradients zeroed as backward starts
    std::int64_t m_updates = 0;
    double m_flops = 0.0;
    std::int64_t m_tokens = 0;
    KernelTimes m_kernelTimes;
};

} // namespace tapestry::exec
