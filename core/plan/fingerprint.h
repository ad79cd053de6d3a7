#pragma once

#include "ir/graph.h"

#include <string>

namespace tapestry::plan {

// A hash of the model as plans see it: op types, domains and attributes, the
// wiring of tensors into ops, and every tensor's name, shape, dtype and role
// (not op names, which plans never key on). Tensor names are in because plans
// are keyed by them: a plan must never be applied to a model whose tensors
// merely look alike. Shapes are in because batch and sequence change costs.
// "fnv1a64:" and 16 hex digits.
std::string modelFingerprint(const ir::Graph &graph);

} // namespace tapestry::plan
