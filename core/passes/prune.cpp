#include "passes/prune.h"

#include "ir/hash.h"
#include "passes/graphindex.h"
#include "passes/scopeindex.h"
#include "passes/scopenames.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>

namespace tapestry::passes {

namespace {

using ir::OpId;
using ir::TensorId;

using ir::hashMix;

bool isNumber(std::string_view s)
{
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}


// The first `components` parts of an op name, with its own separators:
// ("/transformer/h.3/attn/MatMul", 2) -> "transformer/h.3".
std::string namePrefix(std::string_view name, std::size_t components)
{
    std::size_t begin = std::string_view::npos, seen = 0;
    bool inPart = false;
    for (std::size_t i = 0; i <= name.size(); ++i) {
        const bool sep = i == name.size() || isScopeSeparator(name[i]);
        if (!sep && !inPart) {
            inPart = true;
            if (begin == std::string_view::npos)
                begin = i;
        } else if (sep && inPart) {
            inPart = false;
            if (++seen == components)
                return std::string(name.substr(begin, i - begin));
        }
    }
    return std::string(begin == std::string_view::npos ? name : name.substr(begin));
}

class Pruner {
public:
    Pruner(const ir::GraphArrays &graph, const CoarseGraph &coarse, int minDuplicate)
        : m_graph(graph), m_coarse(coarse), m_minDuplicate(std::max(1, minDuplicate))
    {
        // The coarse graph carries the flat index coarsening built: links,
        // topological order, op labels and scopes from one sweep over the
        // graph. Build it again only for a coarse graph made some other way.
        if (coarse.graphIndex().opCount() == graph.opCount() &&
            coarse.graphIndex().tensorCount() == graph.tensorCount()) {
            m_index = &coarse.graphIndex();
        } else {
            m_ownIndex = GraphIndex(graph);
            m_ownIndex.requireKnownTensors();
            m_index = &m_ownIndex;
        }
        m_localIndex.assign(graph.opCount(), {-1, 0});
        m_externalIndex.assign(graph.tensorCount(), {-1, 0});
    }

    SubgraphClasses run()
    {
        SubgraphClasses result;
        result.minDuplicate = m_minDuplicate;
        selectScopes(m_index->scopes(), 0);
        mergeEqualClasses();
        if (!hasRepeats()) {
            std::vector<Candidate> scoped = std::move(m_candidates);
            m_candidates.clear();
            findRepeatedChains();
            result.fromScopes = !hasRepeats();
            if (result.fromScopes)
                m_candidates = std::move(scoped);
        }
        return finish(std::move(result));
    }

private:
    struct Member {
        std::string scope;
        std::vector<OpId> ops;  // sorted by rank
    };
    struct Candidate {
        std::vector<Member> members;
        std::vector<std::uint64_t> form;
        std::uint64_t signature = 0;
        bool numbered = false;  // found among numbered siblings (h.0, h.1, ...)
    };

    int rank(OpId op) const { return m_index->rank(op); }

    // The block written out op by op in topological order: each op's label
    // and where each of its inputs comes from (an earlier op of the block and
    // its output slot, the n-th distinct outside tensor, the n-th parameter).
    // Two blocks are the same structure exactly when their forms are equal,
    // which is the side-by-side walk; the signature hashes the form.
    // Written into `form`, which is cleared first.
    void formOf(std::span<const OpId> ops, std::vector<std::uint64_t> &form)
    {
        ++m_stamp;
        form.clear();
        form.push_back(ops.size());
        for (std::size_t i = 0; i < ops.size(); ++i)
            m_localIndex[ops[i].index()] = {static_cast<int>(i), m_stamp};
        int externals = 0, parameters = 0;
        for (OpId op : ops) {
            form.push_back(m_index->label(op));
            for (TensorId t : m_index->inputs(op)) {
                if (!t.valid()) {
                    form.push_back(0);
                    continue;
                }
                const OpId p = m_index->producer(t);
                if (p.valid() && m_localIndex[p.index()].second == m_stamp) {
                    const auto outs = m_index->outputs(p);
                    const auto slot = static_cast<std::uint64_t>(
                        std::find(outs.begin(), outs.end(), t) - outs.begin());
                    form.push_back((1ULL << 60) |
                                   (static_cast<std::uint64_t>(m_localIndex[p.index()].first) << 8) |
                                   slot);
                    continue;
                }
                auto &ext = m_externalIndex[t.index()];
                const bool parameter = m_index->role(t) == ir::Role::Parameter;
                if (ext.second != m_stamp)
                    ext = {parameter ? parameters++ : externals++, m_stamp};
                form.push_back(((parameter ? 3ULL : 2ULL) << 60) | static_cast<std::uint64_t>(ext.first));
            }
        }
    }

    static std::uint64_t hashForm(const std::vector<std::uint64_t> &form)
    {
        std::uint64_t h = 0;
        for (auto v : form)
            h = hashMix(h, v);
        return h;
    }

    Member memberOf(const ScopeIndex &scopes, int scope) const
    {
        Member m;
        scopes.subtreeOps(scope, m.ops);
        auto byRank = [&](OpId a, OpId b) { return rank(a) < rank(b); };
        if (!std::is_sorted(m.ops.begin(), m.ops.end(), byRank))
            std::sort(m.ops.begin(), m.ops.end(), byRank);
        m.scope = namePrefix(m_index->name(m.ops.front()),
                             static_cast<std::size_t>(scopes.scope(scope).depth));
        return m;
    }

    // Splits members into structures: bucket by signature, verify by form.
    std::vector<Candidate> partition(std::vector<Member> members)
    {
        std::vector<Candidate> parts;
        std::unordered_map<std::uint64_t, std::vector<std::size_t>> bySignature;
        // A member's form is written into one scratch vector and kept only
        // by the first member of its structure.
        std::vector<std::uint64_t> &form = m_form;
        for (auto &m : members) {
            formOf(m.ops, form);
            const auto signature = hashForm(form);
            auto &bucket = bySignature[signature];
            bool placed = false;
            for (std::size_t i : bucket)
                if (parts[i].form == form) {
                    parts[i].members.push_back(std::move(m));
                    placed = true;
                    break;
                }
            if (!placed) {
                bucket.push_back(parts.size());
                Candidate c;
                c.signature = signature;
                c.form = form;
                c.members.push_back(std::move(m));
                parts.push_back(std::move(c));
            }
        }
        return parts;
    }

    // Top-down over the scope tree: the first level whose sibling group
    // repeats takes its whole subtree, so nested repeats stay inside their
    // layer. Numbered siblings (h.0, h.1, ...) are a stack the model author
    // declared, so all of their structures become classes, the odd ones too
    // (a ResNet stage's first block with its downsample); named siblings
    // (layer1..layer4, conv1/conv2) only when a structure repeats.
    void selectScopes(const ScopeIndex &scopes, int scope)
    {
        // Children grouped by stem, each group in the order its scopes first
        // appear in the graph.
        std::vector<std::pair<std::string_view, int>> byStem;
        scopes.forEachChild(scope,
                            [&](int child) { byStem.emplace_back(stemOf(scopes.scope(child).name), child); });
        std::stable_sort(byStem.begin(), byStem.end(),
                         [](const auto &a, const auto &b) { return a.first < b.first; });
        for (std::size_t begin = 0, end = 0; begin < byStem.size(); begin = end) {
            bool numbered = true;
            for (end = begin; end < byStem.size() && byStem[end].first == byStem[begin].first; ++end)
                numbered = numbered && isNumber(scopes.scope(byStem[end].second).name);
            bool selected = false;
            if (end - begin >= static_cast<std::size_t>(std::max(2, m_minDuplicate))) {
                std::vector<Member> members;
                members.reserve(end - begin);
                for (std::size_t i = begin; i < end; ++i)
                    members.push_back(memberOf(scopes, byStem[i].second));
                auto parts = partition(std::move(members));
                bool repeats = false;
                for (const auto &p : parts)
                    repeats = repeats || p.members.size() >= static_cast<std::size_t>(m_minDuplicate);
                // Numbered siblings none of which repeats may be a stack of
                // unlike stages (ConvNeXt's features.0..7: stem, stages and
                // downsamplers) each holding a stack of like blocks: where
                // a numbered stack below them repeats, the blocks are the
                // classes, not the stages.
                if (!repeats && numbered && repeatsBelow(scopes, byStem, begin, end)) {
                    for (std::size_t i = begin; i < end; ++i)
                        selectScopes(scopes, byStem[i].second);
                    continue;
                }
                if (repeats || numbered) {
                    selected = true;
                    for (auto &p : parts) {
                        p.numbered = numbered;
                        m_candidates.push_back(std::move(p));
                    }
                }
            }
            if (!selected)
                for (std::size_t i = begin; i < end; ++i)
                    selectScopes(scopes, byStem[i].second);
        }
    }

    // Whether selecting below the siblings byStem[begin, end) finds a
    // numbered stack that repeats. The candidates it finds are dropped.
    bool repeatsBelow(const ScopeIndex &scopes, const std::vector<std::pair<std::string_view, int>> &byStem,
                      std::size_t begin, std::size_t end)
    {
        std::vector<Candidate> kept = std::move(m_candidates);
        m_candidates.clear();
        for (std::size_t i = begin; i < end; ++i)
            selectScopes(scopes, byStem[i].second);
        bool found = false;
        for (const auto &c : m_candidates)
            found = found || (c.numbered && c.members.size() >= static_cast<std::size_t>(std::max(2, m_minDuplicate)));
        m_candidates = std::move(kept);
        return found;
    }

    // The same structure found under different parents is one class.
    void mergeEqualClasses()
    {
        std::vector<Candidate> merged;
        std::unordered_map<std::uint64_t, std::vector<std::size_t>> bySignature;
        for (auto &c : m_candidates) {
            auto &bucket = bySignature[c.signature];
            bool placed = false;
            for (std::size_t i : bucket)
                if (merged[i].form == c.form) {
                    for (auto &m : c.members)
                        merged[i].members.push_back(std::move(m));
                    placed = true;
                    break;
                }
            if (!placed) {
                bucket.push_back(merged.size());
                merged.push_back(std::move(c));
            }
        }
        m_candidates = std::move(merged);
    }

    bool hasRepeats() const
    {
        for (const auto &c : m_candidates)
            if (c.members.size() >= static_cast<std::size_t>(std::max(2, m_minDuplicate)))
                return true;
        return false;
    }

    // Without names: order the coarse nodes by depth from the inputs (copies
    // of a layer then sit in consecutive, identical runs), label each by its
    // structure, and find the period that covers the most of the sequence.
    void findRepeatedChains()
    {
        const std::size_t n = m_coarse.nodeCount();
        const auto order = m_coarse.topologicalOrder();
        std::vector<int> level(n, 0);
        for (NodeId id : order)
            for (EdgeId e : m_coarse.node(id).outEdges) {
                const auto to = m_coarse.edge(e).to.index();
                level[to] = std::max(level[to], level[id.index()] + 1);
            }
        std::vector<std::uint64_t> nodeLabel(n);
        for (std::size_t i = 0; i < n; ++i) {
            formOf(m_coarse.nodes()[i].ops, m_form);
            nodeLabel[i] = hashMix(hashForm(m_form), static_cast<std::uint64_t>(m_coarse.nodes()[i].kind));
        }
        std::vector<std::size_t> seq;
        for (std::size_t i = 0; i < n; ++i)
            if (!m_coarse.nodes()[i].ops.empty())
                seq.push_back(i);
        std::sort(seq.begin(), seq.end(), [&](std::size_t a, std::size_t b) {
            if (level[a] != level[b])
                return level[a] < level[b];
            if (nodeLabel[a] != nodeLabel[b])
                return nodeLabel[a] < nodeLabel[b];
            return rank(m_coarse.nodes()[a].ops.front()) < rank(m_coarse.nodes()[b].ops.front());
        });
        const std::size_t len = seq.size();
        std::vector<std::uint64_t> s(len);
        std::vector<std::size_t> position(n, 0);
        for (std::size_t i = 0; i < len; ++i) {
            s[i] = nodeLabel[seq[i]];
            position[seq[i]] = i;
        }
        const std::vector<int> cuts = cutCounts(seq, position);
        const std::size_t minCopies = static_cast<std::size_t>(std::max(2, m_minDuplicate));
        std::vector<bool> taken(len, false);
        for (;;) {
            auto best = bestRepeat(s, taken, minCopies);
            if (best.copies < minCopies)
                break;
            const std::size_t p = best.period;
            // Of the rotations that fit, cut where the fewest tensors cross:
            // between layers only the residual stream does. A post-norm
            // layer's closing norm has a twin before the first layer (the
            // embedding norm) that cuts as cheaply, so ties go to the later
            // start; a pre-norm layer's opening norm is settled by the cut.
            std::size_t start = best.begin;
            const std::size_t slack = best.length - best.copies * p;
            for (std::size_t r = best.begin; r <= best.begin + slack; ++r)
                if (cuts[r + p] <= cuts[start + p])
                    start = r;
            std::vector<Member> members;
            for (std::size_t j = 0; j < best.copies; ++j) {
                Member m;
                for (std::size_t i = start + j * p; i < start + (j + 1) * p; ++i) {
                    const auto &ops = m_coarse.nodes()[seq[i]].ops;
                    m.ops.insert(m.ops.end(), ops.begin(), ops.end());
                }
                std::sort(m.ops.begin(), m.ops.end(),
                          [&](OpId a, OpId b) { return rank(a) < rank(b); });
                m.scope = m_index->name(m.ops.front());
                if (m.ops.size() > 1) {
                    m.scope += "…";
                    m.scope += m_index->name(m.ops.back());
                }
                members.push_back(std::move(m));
            }
            for (std::size_t i = best.begin; i < best.begin + best.length; ++i)
                taken[i] = true;
            for (auto &part : partition(std::move(members)))
                if (part.members.size() >= minCopies)
                    m_candidates.push_back(std::move(part));
        }
    }

    // cuts[b]: distinct tensors made before sequence position b and read at
    // or after it.
    std::vector<int> cutCounts(const std::vector<std::size_t> &seq,
                               const std::vector<std::size_t> &position) const
    {
        std::vector<int> diff(seq.size() + 2, 0);
        // Per tensor: the position of its writer and of its last reader.
        constexpr std::size_t none = static_cast<std::size_t>(-1);
        std::vector<std::pair<std::size_t, std::size_t>> span(m_graph.tensorCount(), {none, 0});
        for (const auto &e : m_coarse.edges()) {
            const auto from = position[e.from.index()], to = position[e.to.index()];
            auto &s = span[e.tensor.index()];
            if (s.first == none)
                s = {from, to};
            else
                s.second = std::max(s.second, to);
        }
        for (const auto &fromTo : span)
            if (fromTo.first != none && fromTo.second > fromTo.first) {
                ++diff[fromTo.first + 1];
                --diff[fromTo.second + 1];
            }
        std::vector<int> cuts(seq.size() + 1, 0);
        int running = 0;
        for (std::size_t b = 0; b <= seq.size(); ++b) {
            running += diff[b];
            cuts[b] = running;
        }
        return cuts;
    }

    struct Repeat {
        std::size_t period = 0, begin = 0, length = 0, copies = 0;
    };

    // Candidate periods are the commonest gaps between equal labels; each is
    // checked in one scan for its longest run where s[i] == s[i + period].
    Repeat bestRepeat(const std::vector<std::uint64_t> &s, const std::vector<bool> &taken,
                      std::size_t minCopies) const
    {
        const std::size_t len = s.size();
        std::unordered_map<std::uint64_t, std::size_t> last;
        std::map<std::size_t, std::size_t> gaps;
        for (std::size_t i = 0; i < len; ++i) {
            if (taken[i])
                continue;
            auto [it, fresh] = last.try_emplace(s[i], i);
            if (!fresh) {
                ++gaps[i - it->second];
                it->second = i;
            }
        }
        std::vector<std::pair<std::size_t, std::size_t>> ranked;  // count, period
        for (const auto &[gap, count] : gaps)
            if (count + 1 >= minCopies && gap * minCopies <= len)
                ranked.emplace_back(count, gap);
        std::sort(ranked.rbegin(), ranked.rend());
        if (ranked.size() > 8)
            ranked.resize(8);
        Repeat best;
        for (const auto &[_, p] : ranked) {
            std::size_t run = 0;
            for (std::size_t i = 0; i + p <= len; ++i) {
                const bool match = i + p < len && !taken[i] && !taken[i + p] && s[i] == s[i + p];
                if (match) {
                    ++run;
                    continue;
                }
                if (run > 0) {
                    Repeat r{p, i - run, run + p, (run + p) / p};
                    const auto covered = r.copies * p, bestCovered = best.copies * best.period;
                    if (r.copies >= minCopies &&
                        (covered > bestCovered || (covered == bestCovered && p > best.period)))
                        best = r;
                }
                run = 0;
            }
        }
        return best;
    }

    SubgraphClasses finish(SubgraphClasses result)
    {
        for (auto &c : m_candidates)
            std::sort(c.members.begin(), c.members.end(), [&](const Member &a, const Member &b) {
                return rank(a.ops.front()) < rank(b.ops.front());
            });
        std::sort(m_candidates.begin(), m_candidates.end(), [&](const Candidate &a, const Candidate &b) {
            return rank(a.members.front().ops.front()) < rank(b.members.front().ops.front());
        });
        result.classOfOp.assign(m_graph.opCount(), ClassId());
        std::size_t covered = 0;
        for (auto &c : m_candidates) {
            SubgraphClass cls;
            cls.id = ClassId(static_cast<std::int32_t>(result.classes.size()));
            cls.signature = c.signature;
            cls.opsPerInstance = c.members.front().ops.size();
            const bool repeated = c.members.size() >= static_cast<std::size_t>(std::max(2, m_minDuplicate));
            cls.instances.reserve(c.members.size());
            for (auto &m : c.members) {
                for (OpId op : m.ops)
                    result.classOfOp[op.index()] = cls.id;
                if (repeated)
                    covered += m.ops.size();
                cls.instances.push_back(instanceOf(std::move(m)));
            }
            for (TensorId t : cls.instances.front().parameters)
                cls.parametersPerInstance += ir::elementCount(m_graph.view().shape(t));
            result.classes.push_back(std::move(cls));
        }
        result.coverage = m_graph.opCount() == 0
                              ? 0.0
                              : static_cast<double>(covered) / static_cast<double>(m_graph.opCount());
        return result;
    }

    SubgraphInstance instanceOf(Member m)
    {
        ++m_stamp;
        for (OpId op : m.ops)
            m_localIndex[op.index()] = {0, m_stamp};
        auto inside = [&](OpId op) { return op.valid() && m_localIndex[op.index()].second == m_stamp; };
        // Lists gather in scratch vectors and are copied once at their
        // final size: a thousand instances are a few allocations each.
        Scratch &s = m_scratch;
        s.nodes.clear();
        s.inputs.clear();
        s.outputs.clear();
        s.parameters.clear();
        for (OpId op : m.ops) {
            const NodeId node = m_coarse.nodeOf(op);
            if (node.valid() && std::find(s.nodes.begin(), s.nodes.end(), node) == s.nodes.end())
                s.nodes.push_back(node);
            for (TensorId t : m_index->inputs(op)) {
                if (!t.valid() || m_externalIndex[t.index()].second == m_stamp)
                    continue;
                if (m_index->role(t) == ir::Role::Parameter) {
                    m_externalIndex[t.index()] = {0, m_stamp};
                    s.parameters.push_back(t);
                } else if (!inside(m_index->producer(t))) {
                    m_externalIndex[t.index()] = {0, m_stamp};
                    s.inputs.push_back(t);
                }
            }
            for (TensorId t : m_index->outputs(op)) {
                if (!t.valid())
                    continue;
                bool leaves = m_index->role(t) == ir::Role::Output;
                for (OpId c : m_index->consumers(t))
                    leaves = leaves || !inside(c);
                if (leaves)
                    s.outputs.push_back(t);
            }
        }
        SubgraphInstance inst;
        inst.scope = std::move(m.scope);
        inst.ops = std::move(m.ops);
        inst.nodes.assign(s.nodes.begin(), s.nodes.end());
        inst.inputs.assign(s.inputs.begin(), s.inputs.end());
        inst.outputs.assign(s.outputs.begin(), s.outputs.end());
        inst.parameters.assign(s.parameters.begin(), s.parameters.end());
        return inst;
    }

    const ir::GraphArrays &m_graph;
    const CoarseGraph &m_coarse;
    int m_minDuplicate;
    const GraphIndex *m_index = nullptr;
    GraphIndex m_ownIndex;
    // Scratch marks reset by bumping m_stamp, so each block costs its size.
    std::vector<std::pair<int, std::uint32_t>> m_localIndex;
    std::vector<std::pair<int, std::uint32_t>> m_externalIndex;
    std::uint32_t m_stamp = 0;
    std::vector<std::uint64_t> m_form;  // scratch for formOf
    struct Scratch {
        std::vector<NodeId> nodes;
        std::vector<TensorId> inputs, outputs, parameters;
    } m_scratch;  // for instanceOf
    std::vector<Candidate> m_candidates;
};

// Scope components of a member's scope string: "transformer/h.3" has 3.
std::size_t componentCount(std::string_view scope)
{
    std::size_t count = 0;
    bool inPart = false;
    for (char c : scope) {
        const bool sep = isScopeSeparator(c);
        if (!sep && !inPart)
            ++count;
        inPart = !sep;
    }
    return count;
}

// The classes of a graph from those of its reduced graph (repeats.h): head
// and tail instances move into place, and each template instance is stamped
// onto every copy between. None when an instance holds ops of the template
// and of another part, which the stamping cannot place.
std::optional<SubgraphClasses> stampClasses(const ir::GraphArrays &graph, const CoarseReduction &reduction,
                                            SubgraphClasses inner)
{
    const ReducedGraph &r = reduction.reduced;
    const auto a = graph.view();
    const std::int32_t T = reduction.templateNodes;
    const std::int32_t S = r.stampedCopies(), firstCopy = ReducedGraph::kTemplate, lastCopy = firstCopy + S - 1;
    const std::int32_t tailMove = (S - 1) * T;
    SubgraphClasses result;
    result.minDuplicate = inner.minDuplicate;
    result.fromScopes = inner.fromScopes;
    result.stampedInstances = inner.stampedInstances;
    result.classOfOp.assign(graph.opCount(), ClassId());
    std::size_t covered = 0;
    for (SubgraphClass &c : inner.classes) {
        SubgraphClass cls;
        cls.id = c.id;
        cls.opsPerInstance = c.opsPerInstance;
        cls.parametersPerInstance = c.parametersPerInstance;
        cls.signature = c.signature;
        cls.instances.reserve(c.instances.size() + static_cast<std::size_t>(S - 1));
        for (std::size_t i = 0; i < c.instances.size(); ++i) {
            SubgraphInstance &in = c.instances[i];
            if (i == c.representative)
                cls.representative = cls.instances.size();
            const auto part = r.partOf(in.ops.front());
            if (r.partOf(in.ops.back()) != part)
                return std::nullopt;
            if (part == ReducedGraph::Part::Head) {
                for (TensorId &t : in.inputs)
                    t = r.tensorOf(t);
                for (TensorId &t : in.outputs)
                    t = r.tensorOf(t);
                for (TensorId &t : in.parameters)
                    t = r.tensorOf(t);
                cls.instances.push_back(std::move(in));
                continue;
            }
            if (part == ReducedGraph::Part::Tail) {
                for (OpId &op : in.ops)
                    op = r.opOf(op);
                for (NodeId &n : in.nodes)
                    n = NodeId(n.value + tailMove);
                for (TensorId &t : in.inputs)
                    t = r.tailTensorOf(t, a);
                for (TensorId &t : in.outputs)
                    t = r.tailTensorOf(t, a);
                for (TensorId &t : in.parameters)
                    t = r.tailTensorOf(t, a);
                cls.instances.push_back(std::move(in));
                continue;
            }
            const std::size_t depth = componentCount(in.scope);
            result.stampedInstances += static_cast<std::size_t>(S - 1);
            for (std::int32_t copy = firstCopy; copy <= lastCopy; ++copy) {
                SubgraphInstance out;
                out.ops.reserve(in.ops.size());
                for (OpId op : in.ops)
                    out.ops.push_back(r.opOf(op, copy));
                out.scope = copy == firstCopy ? in.scope : namePrefix(a.name(out.ops.front()), depth);
                out.nodes.reserve(in.nodes.size());
                for (NodeId n : in.nodes)
                    out.nodes.emplace_back(n.value + (copy - firstCopy) * T);
                auto map = [&](const std::vector<TensorId> &from, std::vector<TensorId> &to) {
                    to.reserve(from.size());
                    for (TensorId t : from)
                        to.push_back(r.tensorOf(t, copy, a));
                };
                map(in.inputs, out.inputs);
                map(in.outputs, out.outputs);
                map(in.parameters, out.parameters);
                cls.instances.push_back(std::move(out));
            }
        }
        const bool repeated = cls.instances.size() >= static_cast<std::size_t>(std::max(2, result.minDuplicate));
        for (const SubgraphInstance &in : cls.instances) {
            for (OpId op : in.ops)
                result.classOfOp[op.index()] = cls.id;
            if (repeated)
                covered += in.ops.size();
        }
        result.classes.push_back(std::move(cls));
    }
    result.coverage = graph.opCount() == 0 ? 0.0
                                           : static_cast<double>(covered) / static_cast<double>(graph.opCount());
    return result;
}

} // namespace

SubgraphClasses Prune::run(const ir::GraphArrays &graph, const CoarseGraph &coarse) const
{
    // A stamped coarse graph carries the reduced graph it was stamped from:
    // prune that, and stamp its classes. Only while the kept copies alone
    // are enough to count as repeated, and where copies are scopes, which
    // is what pruning reads.
    const CoarseReduction *reduction = m_repeats == Repeats::Stamp ? coarse.reduction() : nullptr;
    if (reduction && reduction->source == &graph && reduction->reduced.run().scopesAligned &&
        std::max(2, m_minDuplicate) <= ReducedGraph::kKept) {
        auto inner = Prune(m_minDuplicate, m_repeats).run(reduction->reduced.arrays(), reduction->coarse);
        if (inner.fromScopes)
            if (auto stamped = stampClasses(graph, *reduction, std::move(inner)))
                return std::move(*stamped);
    }
    return Pruner(graph, coarse, m_minDuplicate).run();
}

} // namespace tapestry::passes
