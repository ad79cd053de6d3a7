#include "passes/repeats.h"

#include "passes/scopenames.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <utility>

namespace tapestry::passes {

namespace {

using ir::OpId;
using ir::TensorId;
using View = ir::GraphArrays::View;

OpId op(std::int32_t i) { return OpId(i); }

// Same type, domain and attributes, and as many inputs and outputs: what a
// copy of an op must have before its tensors are compared.
bool sameKind(const View &a, std::int32_t o, std::int32_t q)
{
    return a.type(op(o)) == a.type(op(q)) && a.attributeHash(op(o)) == a.attributeHash(op(q)) &&
           a.inputs(op(o)).size() == a.inputs(op(q)).size() && a.outputs(op(o)).size() == a.outputs(op(q)).size();
}

bool sameForm(const View &a, TensorId t, TensorId u)
{
    if (a.role(t) != a.role(u) || a.dtype(t) != a.dtype(u))
        return false;
    const auto x = a.shape(t), y = a.shape(u);
    return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin());
}


// Plain loops: string_view's find_first_of looks each character up in the
// set with a call of its own.
std::size_t firstSeparator(std::string_view s, std::size_t from)
{
    for (std::size_t i = from; i < s.size(); ++i)
        if (isScopeSeparator(s[i]))
            return i;
    return std::string_view::npos;
}
std::size_t lastSeparator(std::string_view s)
{
    for (std::size_t i = s.size(); i-- > 0;)
        if (isScopeSeparator(s[i]))
            return i;
    return std::string_view::npos;
}

// The scope components of an op name (every component but the last, the
// op's own), as offsets into the name; empty components are skipped, as the
// scope index skips them.
struct Component {
    std::uint32_t begin, end;
};
std::size_t scopeComponents(std::string_view name, std::array<Component, 16> &out)
{
    std::size_t count = 0, begin = 0;
    Component last{0, 0};
    bool any = false;
    for (std::size_t j = 0; j <= name.size(); ++j) {
        if (j < name.size() && !isScopeSeparator(name[j]))
            continue;
        if (j > begin) {
            if (any && count < out.size())
                out[count++] = last;
            else if (any)
                return out.size() + 1;  // too deep to compare here
            last = {static_cast<std::uint32_t>(begin), static_cast<std::uint32_t>(j)};
            any = true;
        }
        begin = j + 1;
    }
    return count;
}

// "layer12" -> 12, "7" -> 7; -1 without trailing digits.
long long trailingNumber(std::string_view s)
{
    std::size_t i = s.size();
    while (i > 0 && std::isdigit(static_cast<unsigned char>(s[i - 1])))
        --i;
    if (i == s.size() || s.size() - i > 12)
        return -1;
    long long number = 0;
    for (; i < s.size(); ++i)
        number = number * 10 + (s[i] - '0');
    return number;
}


class RunFinder {
public:
    RunFinder(const ir::GraphArrays &graph, std::int32_t minCopies)
        : m_graph(graph), m_a(graph.view()), m_minCopies(std::max(minCopies, ReducedGraph::kKept + 1))
    {
    }

    std::optional<RepeatRun> find()
    {
        const auto n = static_cast<std::int32_t>(m_a.opCount());
        if (!m_graph.idOrderIsTopological() || n < m_minCopies)
            return std::nullopt;
        std::optional<RepeatRun> best;
        for (const std::int32_t probe : {n / 2, n / 3, 2 * n / 3, n / 4, 3 * n / 4}) {
            if (best && probe >= best->begin && probe < best->end())
                continue;
            const std::int32_t period = periodAt(probe);
            if (period == 0)
                continue;
            // Of the period and its first multiples, the first whose copies
            // are scopes of their own: a layer of two like halves repeats
            // every half, but its scopes every layer.
            std::optional<RepeatRun> found;
            for (std::int32_t m = 1; m <= 4 && period * m * m_minCopies <= n; ++m) {
                auto run = runAt(probe, period * m);
                if (run && (!found || (run->scopesAligned && !found->scopesAligned)))
                    found = run;
                if (found && found->scopesAligned)
                    break;
            }
            if (found && (!best || found->period * found->copies > best->period * best->copies))
                best = found;
        }
        return best;
    }

private:
    // The least period of the op kinds around `probe`: the least g for which
    // the g ops from probe match the g after them, kind for kind.
    std::int32_t periodAt(std::int32_t probe) const
    {
        const auto n = static_cast<std::int32_t>(m_a.opCount());
        const std::int32_t limit = n / m_minCopies;
        for (std::int32_t g = 1; g <= limit && probe + 2 * g <= n; ++g) {
            if (!sameKind(m_a, probe + g, probe))
                continue;
            std::int32_t j = 1;
            while (j < g && sameKind(m_a, probe + g + j, probe + j))
                ++j;
            if (j == g)
                return g;
        }
        return 0;
    }

    std::optional<RepeatRun> runAt(std::int32_t probe, std::int32_t period)
    {
        const auto n = static_cast<std::int32_t>(m_a.opCount());
        // Back from the probe over ops of the kind of the op one period on:
        // where the run may start. How far it goes on, the copies tell.
        std::int32_t lo = probe;
        while (lo > 0 && sameKind(m_a, lo - 1 + period, lo - 1))
            --lo;
        RepeatRun run;
        run.period = period;
        for (;;) {
            run.begin = alignToScope(lo, period);
            run.copies = (n - run.begin) / period;
            if (run.copies < m_minCopies)
                return std::nullopt;
            const auto [copies, failedAt] = verifiedCopies(run);
            run.copies = copies;
            if (copies > 1)
                break;
            // Copy 0 differs from copy 1 at failedAt: the op before the run
            // that looked like the last of a layer (an embedding's Add and a
            // residual Add), or a first layer unlike the rest. Start after
            // it, while the run still holds the probe.
            lo = failedAt + 1;
            if (lo > probe)
                return std::nullopt;
        }
        if (run.copies < m_minCopies || !afterReadsOnlyKept(run))
            return std::nullopt;
        run.scopesAligned = scopesAligned(run);
        return run;
    }

    // Where in its first period the run should start: where a copy's first
    // and last ops share the deepest scope, so copies are layers and not a
    // layer's second half with the next one's first.
    std::int32_t alignToScope(std::int32_t lo, std::int32_t period) const
    {
        const auto n = static_cast<std::int32_t>(m_a.opCount());
        std::int32_t bestStart = lo;
        std::size_t bestDepth = 0;
        std::array<Component, 16> x{}, y{};
        for (std::int32_t r = 0; r < period && lo + r + period <= n; ++r) {
            const auto first = m_a.name(op(lo + r)), last = m_a.name(op(lo + r + period - 1));
            const std::size_t nx = scopeComponents(first, x), ny = scopeComponents(last, y);
            std::size_t depth = 0;
            while (depth < nx && depth < ny && depth < x.size() &&
                   first.substr(x[depth].begin, x[depth].end - x[depth].begin) ==
                       last.substr(y[depth].begin, y[depth].end - y[depth].begin))
                ++depth;
            if (depth > bestDepth) {
                bestDepth = depth;
                bestStart = lo + r;
            }
        }
        return bestStart;
    }

    // How many copies from run.begin hold up op by op (see RepeatRun): the
    // first copy that does not ends the run. With it, the op of copy 0 the
    // first failing op was compared with.
    std::pair<std::int32_t, std::int32_t> verifiedCopies(const RepeatRun &run)
    {
        auto fail = [&run](std::int32_t k, std::int32_t i) {
            return std::pair{k, run.begin + (k - 1) * run.period + i};
        };
        const std::size_t tensors = m_a.tensorCount();
        m_seen.assign(tensors, Seen{});
        const std::int32_t P = run.period, begin = run.begin;
        const std::int32_t end = run.begin + run.period * run.copies;
        auto inRun = [&](OpId p) { return p.valid() && p.value >= begin && p.value < end; };
        for (std::int32_t k = 1; k < run.copies; ++k) {
            for (std::int32_t i = 0; i < P; ++i) {
                const std::int32_t o = begin + k * P + i, q = o - P;
                if (!sameKind(m_a, o, q))
                    return fail(k, i);
                const auto outT = m_a.outputs(op(o)), outU = m_a.outputs(op(q));
                for (std::size_t s = 0; s < outT.size(); ++s) {
                    const TensorId t = outT[s], u = outU[s];
                    if (t.valid() != u.valid() || !known(t) || !known(u))
                        return fail(k, i);
                    // (u's producer was checked as t's one copy back.)
                    if (t.valid() && (m_a.producer(t) != op(o) || (k == 1 && m_a.producer(u) != op(q)) ||
                                      !sameForm(m_a, t, u)))
                        return fail(k, i);
                }
                const auto inT = m_a.inputs(op(o)), inU = m_a.inputs(op(q));
                for (std::size_t s = 0; s < inT.size(); ++s) {
                    const TensorId t = inT[s], u = inU[s];
                    if (t.valid() != u.valid() || !known(t) || !known(u))
                        return fail(k, i);
                    if (!t.valid())
                        continue;
                    const OpId pu = m_a.producer(u), pt = m_a.producer(t);
                    if (inRun(pu)) {
                        // Made in the run: t must be u's counterpart one copy
                        // on, made at most one copy back.
                        if (pu.value < begin + (k - 2) * P)
                            return fail(k, i);
                        if (pt != op(pu.value + P))
                            return fail(k, i);
                        const auto outs = m_a.outputs(pu);
                        if (outs.size() != 1) {
                            const auto slot = std::find(outs.begin(), outs.end(), u) - outs.begin();
                            if (m_a.outputs(pt)[static_cast<std::size_t>(slot)] != t)
                                return fail(k, i);
                        }
                    } else if (t == u) {
                        if (m_seen[t.index()].owner > 0)
                            return fail(k, i);
                        m_seen[t.index()].owner = -1;
                    } else if (k == 1 && inRun(pt) && pt.value < begin + P) {
                        // Copy 0 reads what comes before the run where copy 1
                        // reads copy 0: the run's entry.
                        if (!sameForm(m_a, t, u))
                            return fail(k, i);
                    } else if (!pu.valid() && !pt.valid()) {
                        if (!copyParameter(t, u, k))
                            return fail(k, i);
                    } else {
                        return fail(k, i);
                    }
                }
            }
        }
        return {run.copies, run.end()};
    }

    // u is a parameter (or graph input) of copy k-1, t its counterpart in
    // copy k: each belongs to one copy, and the pairing is one to one.
    bool copyParameter(TensorId t, TensorId u, std::int32_t k)
    {
        Seen &seenU = m_seen[u.index()], &seenT = m_seen[t.index()];
        auto &ownerU = seenU.owner, &ownerT = seenT.owner;
        if (ownerU == 0 && k == 1)
            ownerU = 1;
        if (ownerU != k || ownerT < 0 || !sameForm(m_a, t, u))
            return false;
        if (ownerT == 0) {
            ownerT = k + 1;
        } else if (ownerT != k + 1) {
            return false;
        }
        auto &image = seenU.image, &preimage = seenT.preimage;
        if ((image >= 0 && image != t.value) || (preimage >= 0 && preimage != u.value))
            return false;
        image = t.value;
        preimage = u.value;
        return true;
    }

    // An invalid id is an empty slot; one past the graph's tensors is an
    // error the loaders report (ir::validate), which a run is not built on.
    bool known(TensorId t) const { return !t.valid() || t.index() < m_a.tensorCount(); }

    // Ops after the run may read its last kTail copies only: those are kept.
    // And every op outside the run names tensors of the graph.
    bool afterReadsOnlyKept(const RepeatRun &run) const
    {
        const std::int32_t kept = run.begin + (run.copies - ReducedGraph::kTail) * run.period;
        const auto n = static_cast<std::int32_t>(m_a.opCount());
        for (std::int32_t o = 0; o < n; o = o + 1 == run.begin ? run.end() : o + 1)
            for (TensorId t : m_a.outputs(op(o)))
                if (!known(t))
                    return false;
        for (std::int32_t o = 0; o < run.begin; ++o)
            for (TensorId t : m_a.inputs(op(o)))
                if (!known(t))
                    return false;
        for (std::int32_t o = run.end(); o < n; ++o)
            for (TensorId t : m_a.inputs(op(o))) {
                if (!t.valid())
                    continue;
                if (!known(t))
                    return false;
                const OpId p = m_a.producer(t);
                if (p.valid() && p.value >= run.begin && p.value < kept)
                    return false;
            }
        return true;
    }

    // See RepeatRun::scopesAligned. The copies' scopes differ in one
    // component (h.3, h.4: the d-th), numbered upwards; every op of copy k
    // sits under the same ancestors and in copy k's scope there, below it
    // exactly as its counterpart one copy back; and no op outside the run
    // is in the scope of a stamped copy.
    bool scopesAligned(const RepeatRun &run) const
    {
        std::array<Component, 16> x{}, y{};
        const auto first = m_a.name(op(run.begin)), second = m_a.name(op(run.begin + run.period));
        const std::size_t nx = scopeComponents(first, x), ny = scopeComponents(second, y);
        if (nx > x.size() || nx != ny)
            return false;
        std::size_t d = 0;
        auto part = [](std::string_view name, const Component &c) { return name.substr(c.begin, c.end - c.begin); };
        while (d < nx && part(first, x[d]) == part(second, y[d]))
            ++d;
        if (d == nx || x[d].begin != y[d].begin)
            return false;
        const std::size_t offset = x[d].begin;  // where the copy's component starts, after the same ancestors
        const std::string_view ancestors = first.substr(0, offset), copyStem = stemOf(part(first, x[d]));
        long long previous = -1;
        std::vector<long long> numbers(static_cast<std::size_t>(run.copies));
        std::vector<std::uint32_t> componentEnd(static_cast<std::size_t>(run.copies));
        for (std::int32_t k = 0; k < run.copies; ++k) {
            const auto name = m_a.name(op(run.begin + k * run.period));
            const std::size_t end = firstSeparator(name, offset);
            if (end == std::string_view::npos || name.compare(0, offset, ancestors) != 0)
                return false;
            const auto component = name.substr(offset, end - offset);
            const long long number = trailingNumber(component);
            if (stemOf(component) != copyStem || number <= previous)
                return false;
            previous = numbers[static_cast<std::size_t>(k)] = number;
            componentEnd[static_cast<std::size_t>(k)] = static_cast<std::uint32_t>(end);
        }
        // Every op: the same ancestors, its copy's component, and below it
        // the scope of its counterpart one copy back. Copies mostly repeat
        // their ops' names below the copy's component outright, so the
        // names are compared whole first.
        for (std::int32_t k = 0; k < run.copies; ++k) {
            const std::size_t end = componentEnd[static_cast<std::size_t>(k)];
            const std::string_view copyScope = m_a.name(op(run.begin + k * run.period)).substr(0, end);
            for (std::int32_t i = 0; i < run.period; ++i) {
                const std::int32_t o = run.begin + k * run.period + i;
                const auto name = m_a.name(op(o));
                if (name.size() <= end + 1 || name.compare(0, end, copyScope) != 0 || !isScopeSeparator(name[end]))
                    return false;
                const auto below = name.substr(end);
                if (k == 0) {
                    // Below the copy's component there is a scope or the op's own name.
                    if (isScopeSeparator(below.back()))
                        return false;
                    continue;
                }
                const auto prior = m_a.name(op(o - run.period));
                const auto priorBelow = prior.substr(componentEnd[static_cast<std::size_t>(k - 1)]);
                if (below == priorBelow)
                    continue;
                if (priorBelow.substr(0, lastSeparator(priorBelow)) != below.substr(0, lastSeparator(below)))
                    return false;
            }
        }
        // Ops outside the run in the scope of a copy that is not kept.
        const long long low = numbers[ReducedGraph::kHead], high = numbers[static_cast<std::size_t>(run.copies - ReducedGraph::kTail - 1)];
        const auto n = static_cast<std::int32_t>(m_a.opCount());
        for (std::int32_t o = 0; o < n; ++o) {
            if (o == run.begin) {
                o = run.end() - 1;
                continue;
            }
            const auto name = m_a.name(op(o));
            if (name.size() <= offset || name.substr(0, offset) != ancestors)
                continue;
            const std::size_t end = firstSeparator(name, offset);
            if (end == std::string_view::npos)
                continue;  // the op's own name, not a scope
            const auto component = name.substr(offset, end - offset);
            const long long number = trailingNumber(component);
            if (stemOf(component) == copyStem && number >= low && number <= high)
                return false;
        }
        return true;
    }

    const ir::GraphArrays &m_graph;
    View m_a;
    std::int32_t m_minCopies;
    // Per tensor, while copies are compared: 0 unseen, -1 shared by all
    // copies, c + 1 a parameter (or graph input) of copy c; and a per-copy
    // parameter's image in the next copy and its preimage in the one before.
    struct Seen {
        std::int32_t owner = 0, image = -1, preimage = -1;
    };
    std::vector<Seen> m_seen;
};

} // namespace

std::optional<RepeatRun> findRepeatRun(const ir::GraphArrays &graph, std::int32_t minCopies)
{
    return RunFinder(graph, minCopies).find();
}

std::optional<RepeatRun> findRepeatRun(const ir::GraphArrays &graph)
{
    return findRepeatRun(graph, ReducedGraph::kMinCopies);
}

ReducedGraph::ReducedGraph(const ir::GraphArrays &graph, const RepeatRun &run)
    : m_run(run), m_arrays(graph.typeNames())
{
    const View a = graph.view();
    const auto n = static_cast<std::int32_t>(a.opCount());
    const std::int32_t P = run.period;
    const std::int32_t headEnd = templateEnd();
    const std::int32_t tailBegin = run.begin + (run.copies - kTail) * P;
    // Copy K-3 reads copy K-4, which is not kept: it reads copy 3 instead.
    const std::int32_t gapBegin = tailBegin - P;
    const std::int32_t bridge = tailBegin - headEnd;  // from copy K-4 to copy 3
    auto source = [&](TensorId t) {
        const OpId p = t.valid() ? a.producer(t) : OpId();
        if (!p.valid() || p.value < gapBegin || p.value >= tailBegin)
            return t;
        const auto outs = a.outputs(p);
        const auto slot = static_cast<std::size_t>(std::find(outs.begin(), outs.end(), t) - outs.begin());
        return a.outputs(OpId(p.value - bridge))[slot];
    };
    auto next = [&](std::int32_t o) { return o + 1 == headEnd ? tailBegin : o + 1; };

    // The tensors the kept ops read and write, numbered in id order.
    std::vector<std::int32_t> tensors;
    for (std::int32_t o = 0; o < n; o = next(o)) {
        for (TensorId t : a.inputs(OpId(o)))
            if (t.valid())
                tensors.push_back(source(t).value);
        for (TensorId t : a.outputs(OpId(o)))
            if (t.valid())
                tensors.push_back(t.value);
    }
    std::sort(tensors.begin(), tensors.end());
    tensors.erase(std::unique(tensors.begin(), tensors.end()), tensors.end());
    auto reducedTensor = [&](TensorId t) {
        if (!t.valid())
            return TensorId();
        const auto it = std::lower_bound(tensors.begin(), tensors.end(), source(t).value);
        return TensorId(static_cast<std::int32_t>(it - tensors.begin()));
    };
    m_arrays.reserve(static_cast<std::size_t>(n - (tailBegin - headEnd)), tensors.size());
    m_tensorOf.reserve(tensors.size());
    for (std::int32_t t : tensors) {
        const TensorId id(t);
        m_arrays.addTensor(a.shape(id), a.dtype(id), a.role(id));
        m_tensorOf.push_back(id);
    }
    // Per reduced tensor, the first and last reduced op that reads it.
    std::vector<std::pair<std::int32_t, std::int32_t>> readers(tensors.size(), {-1, -1});
    std::vector<TensorId> inputs, outputs;
    for (std::int32_t o = 0; o < n; o = next(o)) {
        inputs.clear();
        outputs.clear();
        const OpId g(o);
        for (TensorId t : a.inputs(g))
            inputs.push_back(reducedTensor(t));
        for (TensorId t : a.outputs(g))
            outputs.push_back(reducedTensor(t));
        const OpId added = m_arrays.addOp(a.type(g), a.attributeHash(g), inputs, outputs, a.name(g));
        for (TensorId t : inputs)
            if (t.valid()) {
                auto &[first, last] = readers[t.index()];
                if (first < 0)
                    first = added.value;
                last = added.value;
            }
    }

    // Locators of the template's own tensors: made in the template or in
    // the copy before it (what the template reads of it), or a parameter
    // only the template reads.
    const View r = m_arrays.view();
    m_locator.assign(tensors.size(), Locator{});
    const std::int32_t previousBegin = templateBegin() - P;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const TensorId t(static_cast<std::int32_t>(i));
        const OpId producer = r.producer(t);
        if (producer.valid()) {
            if (producer.value < previousBegin || producer.value >= templateEnd())
                continue;
            const auto outs = r.outputs(producer);
            m_locator[i] = {producer.value, static_cast<std::int32_t>(std::find(outs.begin(), outs.end(), t) - outs.begin()), true};
            continue;
        }
        const auto [first, last] = readers[i];
        if (first < templateBegin() || last >= templateEnd())
            continue;
        const auto ins = r.inputs(OpId(first));
        m_locator[i] = {first, static_cast<std::int32_t>(std::find(ins.begin(), ins.end(), t) - ins.begin()), false};
    }
}

ReducedGraph::Part ReducedGraph::partOf(ir::OpId reduced) const
{
    if (reduced.value < templateBegin())
        return Part::Head;
    return reduced.value < templateEnd() ? Part::Template : Part::Tail;
}

ir::OpId ReducedGraph::opOf(ir::OpId reduced) const
{
    return reduced.value < templateEnd() ? reduced : ir::OpId(reduced.value + tailShift());
}


} // namespace tapestry::passes
