#pragma once

#include "ir/graph.h"

#include <cstdint>
#include <vector>

namespace tapestry::sharding {

// The graph's ops grouped by all that an op's rule (opRule) and its
// strategy under given input specs (resolveStrategy) are derived from: its
// type, domain and attributes; the shape, dtype and role of each input and
// output; which of them are one tensor. Ops of a kind differ only in their
// own and their tensors' names: the copies of a repeated layer are of the
// kinds of the first copy's ops. The costers derive a rule once per kind
// and a strategy once per kind and input specs.
class OpKinds {
public:
    explicit OpKinds(const ir::Graph &graph);

    std::size_t count() const { return m_first.size(); }
    std::int32_t of(ir::OpId op) const { return m_kind[op.index()]; }
    // The op of the kind with the lowest id.
    ir::OpId first(std::int32_t kind) const { return m_first[static_cast<std::size_t>(kind)]; }

private:
    std::vector<std::int32_t> m_kind;  // by op id
    std::vector<ir::OpId> m_first;     // by kind
};

} // namespace tapestry::sharding
