#pragma once

#include "communicator.h"
#include "planrun.h"

#include "ir/graph.h"
#include "plan/plan.h"

#include <ostream>

namespace tapestry::exec {

// Runs a pipelined plan (plan.pipeline) on the ranks of `world`, one rank
// per stage: the model at one micro-batch's size is cut where the plan's
// cuts say (between copies of its repeated layers, cost::modelLayers),
// each rank holds its chunks (interleaved: chunks s, s + p, ... on stage s)
// as single-process programs (Interpreter in its stagePart form), and every
// step takes the stage's slots in the schedule's order
// (cost::pipelineTimeline: GPipe, 1F1B, interleaved 1F1B): a forward loads
// the micro-batch's rows, receives the tensors earlier chunks computed and
// sends on what later chunks read; a backward receives their gradients,
// runs, and sends the gradients of what it received back. Sends are
// non-blocking and receives wait, which the schedule's order keeps free of
// deadlock. Each chunk keeps one copy of its program per micro-batch in
// flight at once (its activations; parameters kept equal), gradients
// accumulate over the micro-batches, a parameter several stages read (a
// tied embedding) has its gradient summed over them, and one update ends
// the step. The loss is the whole batch's mean, as one device computes it.
//
// With `verify` the first step is checked on rank 0 against the unsharded
// reference (loss, and every parameter's gradient). Rank 0 reports the
// measured step and bubble (time the ranks waited for a stage before or
// after them) beside the prediction: the plan's pipeline costed again as
// this executor holds tensors, on `meshProfile`. Stages of more than one
// device, and plans the ranks do not match, are refused (TapestryError).
int runPipeline(const PlanRunOptions &options, ir::Graph graph, const plan::Plan &plan, Communicator &world,
                std::ostream &out, std::ostream &progress);

} // namespace tapestry::exec
