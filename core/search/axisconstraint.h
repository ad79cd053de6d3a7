#pragma once

#include "ir/graph.h"
#include "plan/axisroles.h"
#include "search/activationlayout.h"
#include "search/segment.h"
#include "sharding/shardingspec.h"

#include <optional>
#include <string>
#include <vector>

namespace tapestry::search {

// Per mesh axis, the role the user's name for it asks for (`--axes
// data,model`), or nothing where the axis is free. Empty: every axis free.
using AxisRoles = std::vector<std::optional<plan::AxisRole>>;

// The roles the axis names of `names` ask for (plan::axisRoleFromName).
// Throws TapestryError naming `option` for an axis named after expert
// parallelism, which the plan space does not have.
AxisRoles axisRolesFromNames(const std::vector<std::string> &names, const std::string &option);
bool anyRole(const AxisRoles &roles);

// What each role lets an axis do, as the searches apply it:
// - data: weights whole on it; activations at block and class boundaries
//   whole or split over the batch;
// - tensor: weights split or whole; boundary activations whole or split over
//   the sequence (Megatron's sequence parallelism), never over the batch;
// - sequence: weights whole; boundary activations whole or split over the
//   sequence.
// Activations inside a block follow from these by the strategy rules.

// Whether `spec`, a weight's, keeps to `roles`; where it does not, the
// first axis it breaks.
std::optional<int> brokenAxis(const AxisRoles &roles, const sharding::ShardingSpec &weightSpec);
bool allows(const AxisRoles &roles, const ActivationLayout &layout);
// The layouts of a mesh of `rank` axes that keep to `roles`, the replicated
// one first (as allLayouts).
std::vector<ActivationLayout> allowedLayouts(int rank, const AxisRoles &roles);
// The layouts tap links blocks and classes with: allowedLayouts, and on a
// mesh of two or more axes the hidden split on each axis named for tensor
// parallelism too (the residual stream of a chain of column-parallel
// linears, each all-gathering its input over that axis: an MLP stack on
// `4x4 (dp, tp)` under a tight memory limit took 277 us without it, where
// exact's 108 us kept the stream so). Only at boundaries: the outputs a
// block stores inside it keep to allowedLayouts, whose count bounds that
// search (tapsearch.cpp, kStoredLayoutsUpTo).
std::vector<ActivationLayout> boundaryLayouts(int rank, const AxisRoles &roles);
// Drops the weight choices of `segment` that break `roles`; the replicated
// choice, first, always stays.
void keepToRoles(Segment &segment, const AxisRoles &roles);

} // namespace tapestry::search
