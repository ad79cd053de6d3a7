#include "ir/scopetree.h"

namespace tapestry::ir {

std::size_t ScopeNode::totalOps() const
{
    std::size_t n = ops.size();
    for (const auto &[_, child] : children)
        n += child->totalOps();
    return n;
}

ScopeTree::ScopeTree(const Graph &graph)
{
    for (std::size_t i = 0; i < graph.opCount(); ++i) {
        const auto scope = graph.ops()[i].scope();
        ScopeNode *node = &m_root;
        for (const auto &part : scope) {
            auto &child = node->children[part];
            if (!child) {
                child = std::make_unique<ScopeNode>();
                child->name = part;
                child->path = node->path.empty() ? part : node->path + "/" + part;
                child->depth = node->depth + 1;
            }
            node = child.get();
        }
        node->ops.emplace_back(static_cast<std::int32_t>(i));
        if (node->depth > m_depth)
            m_depth = node->depth;
    }
}

} // namespace tapestry::ir
