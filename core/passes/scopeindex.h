#pragma once

#include "ir/ids.h"
#include "passes/scopenames.h"

#include <algorithm>
#include <cstddef>
#include <functional>
#include <string_view>
#include <utility>
#include <vector>

namespace tapestry::passes {

// The module hierarchy implied by op names ("transformer/h.3/attn/MatMul"
// sits in scope transformer > h > 3 > attn), built in the graph index's one sweep over the ops for pruning: scope
// names are views into the op names, scopes are numbered in depth-first
// order, and the ops of a scope's whole subtree are one contiguous range, so
// neither building it nor reading a scope's ops allocates per op.
class ScopeIndex {
public:
    // The index of a graph without ops: the root scope alone.
    ScopeIndex() : m_built(1) { finish({}); }
    // Scopes are numbered in depth-first order: a scope's first child is
    // the next number, and each child's `end` is where its next sibling is.
    struct Scope {
        std::string_view name;
        int depth = 0;
        int end = 0;  // one past the last scope of its subtree
    };

    // Takes the ops' names in id order (add), then their topological order
    // (finish). Built by GraphIndex's one sweep over the ops, beside the labels.
    explicit ScopeIndex(std::size_t ops) : m_built(1) { m_scopeOfOp.reserve(ops); }

    void add(std::string_view name)
    {
        // Ops come mostly in module order, so an op's scopes are largely its
        // predecessor's: components that end inside the common name prefix
        // are taken from the predecessor's path without a lookup.
        std::size_t common = 0;
        while (common < name.size() && common < m_previous.size() && name[common] == m_previous[common])
            ++common;
        std::size_t kept = 0;
        while (kept < m_path.size() && m_path[kept].first < common)
            ++kept;
        m_path.resize(kept);
        int node = kept == 0 ? 0 : m_path.back().second;
        std::size_t begin = kept == 0 ? 0 : m_path.back().first + 1;
        // Every component but the last (the op's own leaf name) is a scope.
        std::string_view pending;
        std::size_t pendingEnd = 0;
        for (std::size_t j = begin; j <= name.size(); ++j) {
            if (j < name.size() && !isScopeSeparator(name[j]))
                continue;
            if (j > begin) {
                if (!pending.empty()) {
                    node = descend(node, pending);
                    m_path.emplace_back(pendingEnd, node);
                }
                pending = name.substr(begin, j - begin);
                pendingEnd = j;
            }
            begin = j + 1;
        }
        m_scopeOfOp.push_back(node);
        m_previous = name;
    }

    // Renumbers scopes in depth-first order and lays the ops out scope by
    // scope, each scope's ops in topological order.
    void finish(const std::vector<ir::OpId> &order)
    {
        std::vector<int> preorder(m_built.size(), 0);
        m_scopes.resize(m_built.size());
        int next = 0;
        number(0, 0, preorder, next);
        std::vector<int> start(m_built.size() + 1, 0);
        for (int &s : m_scopeOfOp) {
            s = preorder[static_cast<std::size_t>(s)];
            ++start[static_cast<std::size_t>(s) + 1];
        }
        for (std::size_t s = 1; s < start.size(); ++s)
            start[s] += start[s - 1];
        m_opStart = start;
        m_ops.resize(m_scopeOfOp.size());
        for (ir::OpId op : order)
            m_ops[static_cast<std::size_t>(start[static_cast<std::size_t>(m_scopeOfOp[op.index()])]++)] = op;
        m_built = {};
        m_slots = {};
    }

    std::size_t scopeCount() const { return m_scopes.size(); }
    const Scope &scope(int s) const { return m_scopes[static_cast<std::size_t>(s)]; }
    template <typename Visit>
    void forEachChild(int s, Visit visit) const
    {
        for (int c = s + 1; c < scope(s).end; c = scope(c).end)
            visit(c);
    }
    // The ops of scope s and every scope below it.
    void subtreeOps(int s, std::vector<ir::OpId> &out) const
    {
        const auto first = m_opStart[static_cast<std::size_t>(s)];
        const auto last = m_opStart[static_cast<std::size_t>(m_scopes[static_cast<std::size_t>(s)].end)];
        out.assign(m_ops.begin() + first, m_ops.begin() + last);
    }

private:
    // The child of `parent` named `name`, made when new. Children are found
    // in an open-addressing table of scope numbers: no allocation per scope.
    int descend(int parent, std::string_view name)
    {
        if (2 * (m_built.size() + 1) > m_slots.size())
            grow();
        const std::size_t mask = m_slots.size() - 1;
        for (std::size_t i = slotOf(parent, name) & mask;; i = (i + 1) & mask) {
            const int s = m_slots[i];
            if (s < 0) {
                const int id = static_cast<int>(m_built.size());
                m_slots[i] = id;
                Built &p = m_built[static_cast<std::size_t>(parent)];
                if (p.lastChild < 0)
                    p.firstChild = id;
                else
                    m_built[static_cast<std::size_t>(p.lastChild)].nextSibling = id;
                p.lastChild = id;
                m_built.push_back(Built{name, parent});
                return id;
            }
            const Built &b = m_built[static_cast<std::size_t>(s)];
            if (b.parent == parent && b.name == name)
                return s;
        }
    }

    static std::size_t slotOf(int parent, std::string_view name)
    {
        return std::hash<std::string_view>{}(name) * 31 + static_cast<std::size_t>(parent) * 0x9e3779b97f4a7c15ULL;
    }

    void grow()
    {
        std::vector<int> table(std::max<std::size_t>(64, 2 * m_slots.size()), -1);
        const std::size_t mask = table.size() - 1;
        for (std::size_t s = 1; s < m_built.size(); ++s) {
            std::size_t i = slotOf(m_built[s].parent, m_built[s].name) & mask;
            while (table[i] >= 0)
                i = (i + 1) & mask;
            table[i] = static_cast<int>(s);
        }
        m_slots = std::move(table);
    }

    int number(int s, int depth, std::vector<int> &preorder, int &next)
    {
        const int id = next++;
        preorder[static_cast<std::size_t>(s)] = id;
        Scope &out = m_scopes[static_cast<std::size_t>(id)];  // m_scopes is sized: no reallocation
        out.name = m_built[static_cast<std::size_t>(s)].name;
        out.depth = depth;
        for (int c = m_built[static_cast<std::size_t>(s)].firstChild; c >= 0;
             c = m_built[static_cast<std::size_t>(c)].nextSibling)
            number(c, depth + 1, preorder, next);
        out.end = next;
        return id;
    }

    // While adding: scopes in the order first met, children as linked lists,
    // and the lookup of a child.
    struct Built {
        std::string_view name;
        int parent = -1;
        int firstChild = -1, lastChild = -1, nextSibling = -1;
    };
    std::vector<Built> m_built;
    std::vector<int> m_slots;  // scope numbers, -1 where free; a power of two long
    std::string_view m_previous;
    std::vector<std::pair<std::size_t, int>> m_path;  // per scope of the previous op: end of its name, scope
    std::vector<int> m_scopeOfOp;

    std::vector<Scope> m_scopes;  // in depth-first order, the root first
    std::vector<int> m_opStart;   // per scope, where its own ops begin in m_ops
    std::vector<ir::OpId> m_ops;
};

} // namespace tapestry::passes
