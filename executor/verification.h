#pragma once

#include "communicator.h"
#include "device.h"
#include "interpreter.h"
#include "shardedprogram.h"

#include <cstdint>
#include <string>

namespace tapestry::exec {

// float32 sums in another order (a split contraction, a ring all-reduce)
// differ in the last bits; 1e-4 of the tensor's largest magnitude is far
// above that and far below any missing or doubled partial sum.
inline constexpr double kVerifyTolerance = 1e-4;
// The tolerance for GEMMs in `precision`: fp32's above; operands rounded to
// fp16 (11 significant bits) or bf16 (8 bits) leave errors of a few units in
// their last place after a step's chain of GEMMs: 1e-2 and 2e-2.
double verifyTolerance(Precision precision);

struct VerificationResult {
    bool passed = false;
    double maxError = 0.0;    // largest relative error over everything compared
    std::string where;        // "gradient of 'w1' [3, 1]", "loss", "output 'y' [0, 2]"
    int compared = 0;         // tensors compared (objective, outputs, weight gradients)
    double shardedObjective = 0.0;
    double referenceObjective = 0.0;
};

// One training step's forward and backward on the shards and, on rank 0 of
// `world`, on the unsharded reference (pass nullptr on the other ranks);
// compares the objective, the objective's outputs and every weight gradient
// (gathered whole); then applies the update on both and compares every
// updated parameter and the next forward pass's objective and outputs. Relative error of a tensor: max |sharded − reference|
// over its elements / max |reference| (for a gradient at least 1e-3 ×
// the model's largest gradient element). Every rank gets
// the verdict: passed when the largest relative error is within `tolerance`.
// One update is applied.
VerificationResult verifyStep(ShardedProgram &program, Interpreter *reference, Communicator &world,
                              double tolerance = kVerifyTolerance);

} // namespace tapestry::exec
