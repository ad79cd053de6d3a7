#pragma once

#include "export/exportaxis.h"

#include <string>

namespace tapestry::exports {

// The plan as JAX PartitionSpecs: a Python file defining the mesh's axis
// names and shape, `partition_specs` (parameter name -> P(...), every
// parameter) and `input_specs` (graph input -> P(...)). Dims split over two
// axes name both in mesh order, as jax.sharding.Mesh lays devices out
// row-major like the plan.
std::string jaxPartitionSpecs(const ExportInput &in);

} // namespace tapestry::exports
