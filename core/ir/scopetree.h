#pragma once

#include "ir/graph.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tapestry::ir {

// The module hierarchy implied by op names: "transformer/h.3/attn/MatMul"
// sits in scope transformer > h > 3 > attn.
struct ScopeNode {
    std::string name;       // this component ("3")
    std::string path;       // full path joined by '/' ("transformer/h/3")
    int depth = 0;          // root is 0
    std::vector<OpId> ops;  // ops directly in this scope
    std::map<std::string, std::unique_ptr<ScopeNode>> children;

    std::size_t totalOps() const;
};

class ScopeTree {
public:
    explicit ScopeTree(const Graph &graph);

    const ScopeNode &root() const { return m_root; }
    int depth() const { return m_depth; }  // deepest scope depth (0: flat names)

private:
    ScopeNode m_root;
    int m_depth = 0;
};

} // namespace tapestry::ir
