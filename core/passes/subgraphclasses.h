#pragma once

#include "ir/graph.h"
#include "ir/ids.h"
#include "passes/coarsegraph.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tapestry::passes {

struct SubgraphClassTag {};
using ClassId = ir::Id<SubgraphClassTag>;

// One copy of a unique subgraph: a transformer layer, a ResNet block.
struct SubgraphInstance {
    std::string scope;                     // "transformer/h.3"; "node_17…node_35" without names
    std::vector<ir::OpId> ops;             // in the graph's topological order
    std::vector<NodeId> nodes;             // coarse nodes holding its ops
    std::vector<ir::TensorId> inputs;      // activations and graph inputs read from outside
    std::vector<ir::TensorId> outputs;     // written inside, read outside or a graph output
    std::vector<ir::TensorId> parameters;  // parameter tensors its ops read
};

// Instances whose op types, attributes, shapes and internal edges match op
// for op, so one plan derived on the representative serves every instance.
struct SubgraphClass {
    ClassId id;
    std::size_t representative = 0;  // index into instances
    std::vector<SubgraphInstance> instances;
    std::size_t opsPerInstance = 0;
    std::int64_t parametersPerInstance = 0;  // elements
    std::uint64_t signature = 0;             // structural hash, equal for equal classes
};

// The result of pruning: the classes, the outermost repeated blocks first in
// graph order, and where each op went.
struct SubgraphClasses {
    std::vector<SubgraphClass> classes;
    // Fraction of the graph's ops inside classes with at least minDuplicate
    // instances: the share of the graph whose plan is searched once and reused.
    double coverage = 0.0;
    int minDuplicate = 2;
    bool fromScopes = true;  // found from scope names; false: from structure alone
    std::vector<ClassId> classOfOp;  // invalid for an op outside every class
    // Instances stamped from a run's template copy rather than compared
    // op by op (passes/repeats.h).
    std::size_t stampedInstances = 0;
};

} // namespace tapestry::passes
