#include "search/segmentcost.h"

#include "cost/activationmemory.h"
#include "cost/chargerules.h"
#include "cost/collectivetime.h"
#include "cost/costmodel.h"
#include "ir/attribute.h"
#include "ir/error.h"
#include "sharding/reshard.h"
#include "sharding/strategy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace tapestry::search {

using sharding::Placement;
using sharding::ShardingSpec;

namespace {

std::size_t hashInts(const std::vector<std::int32_t> &v)
{
    std::uint64_t h = 0xcbf29ce484222325ULL ^ v.size();
    for (std::int32_t x : v)
        h = (h ^ static_cast<std::uint32_t>(x)) * 0x100000001b3ULL;
    return static_cast<std::size_t>(h ^ (h >> 29));
}

} // namespace

std::size_t SegmentCoster::IntsHash::operator()(const std::vector<std::int32_t> &v) const noexcept
{
    return hashInts(v);
}

namespace {

// The per-op search's state: the tensors it still has to read, each with
// its stored spec and what has already been charged for it (forward
// reshards to the specs its consumers compute on, reductions of its
// gradient contributions per spec), and whether a norm runs on sequence
// shards. Held as one flat array of interned numbers,
//   [sequenceParallel, (tensor, spec, needs..., -1, gradients..., -1)...]
// with tensors ascending and needs and gradients sorted, so that a state
// copies in one allocation and two states compare as plain integer
// sequences. The -1 after each list sorts before any spec, which orders
// states exactly as comparing (tensor, spec, needs, gradients) per tensor.
class State {
public:
    State() : m_flat{0} {}
    bool operator<(const State &o) const { return m_flat < o.m_flat; }
    bool operator==(const State &o) const { return m_flat == o.m_flat; }
    std::size_t hash() const { return hashInts(m_flat); }
    // The state without its needs and gradients: sequence parallelism, then
    // per entry its tensor and stored spec.
    void skeleton(std::vector<std::int32_t> &out) const
    {
        out.assign(1, m_flat[0]);
        for (std::size_t p = 1; p < m_flat.size(); p = next(p)) {
            out.push_back(m_flat[p]);
            out.push_back(m_flat[p + 1]);
        }
    }
    // Calls f(entry, list, value) for every need (list 0) and gradient
    // (list 1) of every entry, entries numbered from 0.
    template <typename F>
    void forEachCharged(F f) const
    {
        std::int32_t entry = 0;
        for (std::size_t p = 1; p < m_flat.size(); p = next(p), ++entry) {
            std::size_t q = p + 2;
            for (; m_flat[q] != -1; ++q)
                f(entry, 0, m_flat[q]);
            for (++q; m_flat[q] != -1; ++q)
                f(entry, 1, m_flat[q]);
        }
    }

    bool sequenceParallel() const { return m_flat[0] != 0; }
    void setSequenceParallel() { m_flat[0] = 1; }

    // Where tensor t's entry starts, or -1. Entries are sorted by tensor,
    // so the walk stops at the first that is not before t.
    int find(std::int32_t t) const
    {
        for (std::size_t p = 1; p < m_flat.size(); p = next(p))
            if (m_flat[p] >= t)
                return m_flat[p] == t ? static_cast<int>(p) : -1;
        return -1;
    }
    std::int32_t spec(int at) const { return m_flat[static_cast<std::size_t>(at) + 1]; }
    void setSpec(int at, std::int32_t spec) { m_flat[static_cast<std::size_t>(at) + 1] = spec; }
    // Whether the entry's needs (list 0) or gradients (list 1) hold `value`.
    bool has(int at, int list, std::int32_t value) const
    {
        std::size_t p = static_cast<std::size_t>(at) + 2;
        if (list == 1)
            p = endOfList(p) + 1;
        const auto first = m_flat.begin() + static_cast<std::ptrdiff_t>(p);
        const auto last = m_flat.begin() + static_cast<std::ptrdiff_t>(endOfList(p));
        return std::binary_search(first, last, value);
    }
    // Adds t with stored spec `spec` where it sorts; its entry's position.
    int insert(std::int32_t t, std::int32_t spec)
    {
        std::size_t p = 1;
        while (p < m_flat.size() && m_flat[p] < t)
            p = next(p);
        const std::int32_t entry[] = {t, spec, -1, -1};
        m_flat.insert(m_flat.begin() + static_cast<std::ptrdiff_t>(p), std::begin(entry), std::end(entry));
        return static_cast<int>(p);
    }
    // Adds `value` to the entry's needs (list 0) or gradients (list 1);
    // false when it was there already.
    bool add(int at, int list, std::int32_t value)
    {
        std::size_t p = static_cast<std::size_t>(at) + 2;
        if (list == 1)
            p = endOfList(p) + 1;
        const std::size_t end = endOfList(p);
        const auto first = m_flat.begin() + static_cast<std::ptrdiff_t>(p);
        const auto last = m_flat.begin() + static_cast<std::ptrdiff_t>(end);
        const auto it = std::lower_bound(first, last, value);
        if (it != last && *it == value)
            return false;
        m_flat.insert(it, value);
        return true;
    }
    // Drops every entry whose tensor `done` says is read no more.
    template <typename Done>
    void dropWhere(Done done)
    {
        std::size_t out = 1;
        for (std::size_t p = 1; p < m_flat.size();) {
            const std::size_t n = next(p);
            if (!done(m_flat[p])) {
                std::copy(m_flat.begin() + static_cast<std::ptrdiff_t>(p),
                          m_flat.begin() + static_cast<std::ptrdiff_t>(n),
                          m_flat.begin() + static_cast<std::ptrdiff_t>(out));
                out += n - p;
            }
            p = n;
        }
        m_flat.resize(out);
    }

private:
    std::size_t endOfList(std::size_t p) const
    {
        while (m_flat[p] != -1)
            ++p;
        return p;
    }
    // The start of the entry after the one at p.
    std::size_t next(std::size_t p) const { return endOfList(endOfList(p + 2) + 1) + 1; }

    std::vector<std::int32_t> m_flat;
};

// A partial choice of weights: its costs so far. Activation memory by
// Korthikanti's formula depends on whether any norm of the segment runs on
// sequence shards, so it is carried both ways until the end.
struct Partial {
    double time = 0, comm = 0;
    double parameterBytes = 0, weightBytes = 0;  // model states, all parameters and the weights alone
    std::int64_t activations = 0;
    std::int64_t korthikanti[2] = {0, 0};  // without, with sequence parallelism
    // Its weight choices: the last of them in the memo's trail, -1 for none,
    // and the choice of the last op's new weights until it is kept.
    std::int32_t trail = -1;
    std::int64_t pending = -1;
};

// Whether `a` is at least as good as `b` for every completion, in `time`
// (or comm) and in memory either way sequence parallelism turns out, and
// in weight memory (checked against capacity at the end).
bool dominates(const Partial &a, const Partial &b, bool byComm)
{
    const double ma = a.parameterBytes + static_cast<double>(a.activations);
    const double mb = b.parameterBytes + static_cast<double>(b.activations);
    return (byComm ? a.comm <= b.comm : a.time <= b.time) &&
           ma + static_cast<double>(a.korthikanti[0]) <= mb + static_cast<double>(b.korthikanti[0]) &&
           ma + static_cast<double>(a.korthikanti[1]) <= mb + static_cast<double>(b.korthikanti[1]) &&
           a.weightBytes <= b.weightBytes;
}

// Keeps, in their order, the partials that no other dominates in time or in
// communication. Per metric the partials are taken best first (ties in
// their order) and one stays when none taken before it dominates it; as
// domination is transitive, that is when no partial before it in that
// order dominates it. Most states hold a handful of partials: those are
// compared pairwise in place, larger lists sorted.
void prune(std::vector<Partial> &ps)
{
    const std::size_t n = ps.size();
    if (n < 2)
        return;
    std::vector<bool> keep(n, false);
    if (n <= 8) {
        for (std::size_t i = 0; i < n; ++i)
            for (bool byComm : {false, true}) {
                const double mi = byComm ? ps[i].comm : ps[i].time;
                bool beaten = false;
                for (std::size_t j = 0; j < n && !beaten; ++j) {
                    const double mj = byComm ? ps[j].comm : ps[j].time;
                    beaten = j != i && (mj < mi || (mj == mi && j < i)) &&
                             dominates(ps[j], ps[i], byComm);
                }
                if (!beaten) {
                    keep[i] = true;
                    break;
                }
            }
    } else {
        std::vector<std::pair<double, std::size_t>> keyed;
        keyed.reserve(n);
        std::vector<std::size_t> kept;
        for (bool byComm : {false, true}) {
            // By the metric, ties in their order: (metric, index) pairs are distinct.
            keyed.clear();
            for (std::size_t i = 0; i < n; ++i)
                keyed.emplace_back(byComm ? ps[i].comm : ps[i].time, i);
            std::sort(keyed.begin(), keyed.end());
            kept.clear();
            for (const auto &[unused, i] : keyed) {
                const bool beaten = std::any_of(kept.begin(), kept.end(), [&](std::size_t k) {
                    return dominates(ps[k], ps[i], byComm);
                });
                if (!beaten) {
                    kept.push_back(i);
                    keep[i] = true;
                }
            }
        }
    }
    std::size_t out = 0;
    for (std::size_t i = 0; i < n; ++i)
        if (keep[i])
            ps[out++] = ps[i];
    ps.resize(out);
}

// Keeps, in their order, a state's fastest partial and its least-
// communication one, ties going to less memory (either way sequence
// parallelism turns out), then to the first.
void keepBest(std::vector<Partial> &ps)
{
    if (ps.size() < 2)
        return;
    auto memory = [&](const Partial &p) {
        return p.parameterBytes + static_cast<double>(p.activations) +
               static_cast<double>(std::max(p.korthikanti[0], p.korthikanti[1]));
    };
    std::size_t fastest = 0, quietest = 0;
    for (std::size_t i = 1; i < ps.size(); ++i) {
        const double m = memory(ps[i]);
        if (ps[i].time < ps[fastest].time || (ps[i].time == ps[fastest].time && m < memory(ps[fastest])))
            fastest = i;
        if (ps[i].comm < ps[quietest].comm || (ps[i].comm == ps[quietest].comm && m < memory(ps[quietest])))
            quietest = i;
    }
    const Partial a = ps[std::min(fastest, quietest)], b = ps[std::max(fastest, quietest)];
    ps.clear();
    ps.push_back(a);
    if (fastest != quietest)
        ps.push_back(b);
}

// The per-op search's front after an op: its states in ascending order
// (the order ties are broken in), each with its partials, held flat.
struct Front {
    std::vector<State> states;
    std::vector<std::size_t> begins{0};  // per state where its partials start, then the end
    std::vector<Partial> partials;

    std::size_t size() const { return states.size(); }
    const Partial *begin(std::size_t s) const { return partials.data() + begins[s]; }
    const Partial *end(std::size_t s) const { return partials.data() + begins[s + 1]; }
};

// Gathers the next front: each state found by hashing (an open-addressing
// table of indices into `states`), its partials in the order they come,
// then the states sorted, so that the front is what a map from state to
// partials would hold, without a node per state.
class FrontBuilder {
public:
    // The partials of state `st`, added as it is first seen.
    std::vector<Partial> &slot(const State &st)
    {
        if (2 * (m_states.size() + 1) > m_table.size())
            grow();
        const std::size_t mask = m_table.size() - 1;
        for (std::size_t at = st.hash() & mask;; at = (at + 1) & mask) {
            const std::int32_t i = m_table[at];
            if (i < 0) {
                m_table[at] = static_cast<std::int32_t>(m_states.size());
                m_states.push_back(st);
                m_partials.emplace_back();
                return m_partials.back();
            }
            if (m_states[static_cast<std::size_t>(i)] == st)
                return m_partials[static_cast<std::size_t>(i)];
        }
    }
    std::size_t size() const { return m_states.size(); }
    // The front, states ascending; `keep` runs on each state's partials first.
    template <typename Keep>
    Front build(Keep keep)
    {
        std::vector<std::uint32_t> order(m_states.size());
        for (std::size_t i = 0; i < order.size(); ++i)
            order[i] = static_cast<std::uint32_t>(i);
        std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) { return m_states[a] < m_states[b]; });
        Front f;
        f.states.reserve(order.size());
        f.begins.reserve(order.size() + 1);
        for (std::uint32_t i : order) {
            auto &ps = m_partials[i];
            keep(ps);
            f.states.push_back(std::move(m_states[i]));
            f.partials.insert(f.partials.end(), ps.begin(), ps.end());
            f.begins.push_back(f.partials.size());
        }
        return f;
    }

private:
    void grow()
    {
        std::vector<std::int32_t> table(std::max<std::size_t>(64, 2 * m_table.size()), -1);
        const std::size_t mask = table.size() - 1;
        for (std::size_t i = 0; i < m_states.size(); ++i) {
            std::size_t at = m_states[i].hash() & mask;
            while (table[at] >= 0)
                at = (at + 1) & mask;
            table[at] = static_cast<std::int32_t>(i);
        }
        m_table = std::move(table);
    }

    std::vector<State> m_states;
    std::vector<std::vector<Partial>> m_partials;
    std::vector<std::int32_t> m_table;
};

// Per op of the segment, the key its twins share, or "" for none. The
// numbered modules whose weights are tied (the readers of experts.3's w1
// and experts.0's differ in "experts.N/") name repeat stems, and an op
// inside one ("experts.5/Silu") is a twin of the ops of its type with the
// same name under the other numbers.
std::vector<std::string> twinKeys(const ir::Graph &graph, const Segment &segment)
{
    const std::size_t n = segment.ops.size();
    std::vector<std::string> keys(n);
    std::unordered_map<std::int32_t, std::size_t> firstReader;
    for (std::size_t i = 0; i < n; ++i)
        for (ir::TensorId t : graph.op(segment.ops[i]).inputs)
            if (t.valid())
                firstReader.emplace(t.value, i);
    std::set<std::string> stems;
    for (std::size_t w = 0; w < segment.weights.size(); ++w)
        if (segment.tiedTo[w] >= 0) {
            const auto reader = [&](std::size_t weight) -> const std::string & {
                return graph.op(segment.ops[firstReader.at(segment.weights[weight].value)]).name;
            };
            const std::string &a = reader(w);
            const std::string &b = reader(static_cast<std::size_t>(segment.tiedTo[w]));
            std::size_t at = 0;
            while (at < a.size() && at < b.size() && a[at] == b[at])
                ++at;
            while (at > 0 && a[at - 1] >= '0' && a[at - 1] <= '9')
                --at;
            stems.insert(a.substr(0, at));
        }
    for (std::size_t i = 0; i < n && !stems.empty(); ++i) {
        const std::string &name = graph.op(segment.ops[i]).name;
        for (const std::string &stem : stems) {
            if (name.compare(0, stem.size(), stem) != 0)
                continue;
            std::size_t end = stem.size();
            while (end < name.size() && name[end] >= '0' && name[end] <= '9')
                ++end;
            if (end > stem.size() && end < name.size() && name[end] == '/') {
                keys[i] = stem + "#" + name.substr(end) + "#" + graph.op(segment.ops[i]).type;
                break;
            }
        }
    }
    return keys;
}

// A mixture's experts searched once (SegmentCoster::setRepeatsOnce). The
// experts take one choice of weights between them (Segment::tiedTo) and
// store nothing as searched (allowStoredLayouts), so every expert's ops
// follow the rules on the specs the first expert's do, reading from the
// dispatch and writing into the combine as it does: each expert costs what
// the first costs. The per-op search runs the first expert's ops alone,
// counting each op's costs, each of its tensors' reshards and saved bytes
// and each weight's charges once per expert; the other experts' ops are
// not run, and the ops outside them that write or read their tensors (the
// dispatch, the combine) write and read the first expert's in their place.
// Found only where that holds op by op: twins of one type and attributes,
// reading the same tensors, tied weights or like tensors in the same
// places, whose tensors no op outside the segment reads and each op
// outside the experts reads all or none of; else empty, and every expert
// is searched. (A mixture of 256 experts held 256 buffers live in every
// state from the dispatch to the combine and ran 256 times the ops.)
struct Repeats {
    std::vector<bool> skip;  // per op of the segment: a twin searched as its leader
    std::unordered_map<std::int32_t, std::int32_t> alias;   // a skipped twin's tensor -> its leader's
    std::unordered_map<std::int32_t, double> tensorCopies;  // a leader's tensor -> the tensors it stands for
    std::unordered_map<std::int32_t, double> opCopies;      // a leader op -> the ops it stands for
    std::vector<double> weightCopies;                       // per weight: the weights it stands for
    bool empty() const { return opCopies.empty(); }
};

Repeats findRepeats(const ir::Graph &graph, const Segment &segment)
{
    const std::vector<std::string> keys = twinKeys(graph, segment);
    const std::size_t n = segment.ops.size();
    std::vector<std::size_t> leader(n);
    std::map<std::string, std::size_t> firstOf;  // twin key -> its first op
    bool any = false;
    for (std::size_t i = 0; i < n; ++i) {
        leader[i] = i;
        if (keys[i].empty())
            continue;
        const auto [it, first] = firstOf.emplace(keys[i], i);
        if (!first) {
            leader[i] = it->second;
            any = true;
        }
    }
    if (!any)
        return {};
    const std::set<ir::OpId> inside(segment.ops.begin(), segment.ops.end());
    std::unordered_map<std::int32_t, std::size_t> weightIndex;
    for (std::size_t w = 0; w < segment.weights.size(); ++w)
        weightIndex.emplace(segment.weights[w].value, w);
    const std::set<ir::TensorId> derived(segment.derived.begin(), segment.derived.end());
    const std::set<ir::TensorId> outputs(segment.outputs.begin(), segment.outputs.end());
    std::set<ir::TensorId> held;
    for (const auto &[t, spec] : segment.held)
        held.insert(t);
    auto alike = [&](ir::TensorId a, ir::TensorId b) {
        const ir::Tensor &x = graph.tensor(a), &y = graph.tensor(b);
        return x.shape == y.shape && x.dtype == y.dtype && x.role == y.role;
    };
    // Read inside the segment only, and not one of its outputs.
    auto internal = [&](ir::TensorId t) {
        const ir::Tensor &tensor = graph.tensor(t);
        return !outputs.count(t) && tensor.role != ir::Role::Output &&
               std::all_of(tensor.consumers.begin(), tensor.consumers.end(),
                           [&](ir::OpId c) { return inside.count(c) != 0; });
    };
    Repeats r;
    r.skip.assign(n, false);
    r.weightCopies.assign(segment.weights.size(), 1.0);
    std::map<ir::TensorId, ir::TensorId> skippedDerived;  // a twin's derived parameter -> its leader's
    std::set<ir::OpId> skippedOps;
    auto aliasTo = [&](ir::TensorId a, ir::TensorId b) {
        const auto [it, added] = r.alias.emplace(a.value, b.value);
        return added || it->second == b.value;
    };
    for (std::size_t i = 0; i < n; ++i) {
        if (leader[i] == i)
            continue;
        const ir::Op &op = graph.op(segment.ops[i]), &lead = graph.op(segment.ops[leader[i]]);
        if (op.type != lead.type || op.inputs.size() != lead.inputs.size() ||
            op.outputs.size() != lead.outputs.size() ||
            ir::hashAttributes(op.domain, op.attributes) != ir::hashAttributes(lead.domain, lead.attributes))
            return {};
        for (std::size_t k = 0; k < op.inputs.size(); ++k) {
            const ir::TensorId a = op.inputs[k], b = lead.inputs[k];
            if (a == b)
                continue;  // read by every twin alike (checked below not to be a twin's own)
            if (!a.valid() || !b.valid() || !alike(a, b))
                return {};
            if (const auto w = weightIndex.find(a.value); w != weightIndex.end()) {
                const auto lw = weightIndex.find(b.value);
                if (lw == weightIndex.end() || segment.tiedTo[w->second] != static_cast<int>(lw->second))
                    return {};
                continue;
            }
            if (derived.count(a)) {
                if (!derived.count(b) || held.count(a) || held.count(b))
                    return {};
                if (!skippedDerived.emplace(a, b).second && skippedDerived.at(a) != b)
                    return {};
                continue;
            }
            if (r.alias.count(a.value)) {
                if (r.alias.at(a.value) != b.value)
                    return {};
                continue;
            }
            // Two outputs of one op outside the twins (a dispatch's buffers).
            const ir::OpId pa = graph.tensor(a).producer;
            if (!pa.valid() || pa != graph.tensor(b).producer || !inside.count(pa) || skippedOps.count(pa) ||
                !internal(a) || !aliasTo(a, b))
                return {};
        }
        for (std::size_t o = 0; o < op.outputs.size(); ++o)
            if (!alike(op.outputs[o], lead.outputs[o]) || !internal(op.outputs[o]) ||
                !aliasTo(op.outputs[o], lead.outputs[o]))
                return {};
        r.skip[i] = true;
        skippedOps.insert(segment.ops[i]);
    }
    for (std::size_t i = 0; i < n; ++i)
        if (r.skip[i])
            r.opCopies.try_emplace(segment.ops[leader[i]].value, 1.0).first->second += 1;
    std::map<std::int32_t, std::vector<std::int32_t>> members;  // a leader's tensor -> it and its twins'
    for (const auto &[a, b] : r.alias) {
        if (r.alias.count(b))
            return {};
        auto &m = members[b];
        if (m.empty())
            m.push_back(b);
        m.push_back(a);
        r.tensorCopies[b] = static_cast<double>(m.size());
    }
    // A tied weight read by twins searched as their leaders is counted in
    // its leader's charges; one read by such a twin and by an op searched
    // too leaves every expert searched, as does a derived parameter.
    for (std::size_t w = 0; w < segment.weights.size(); ++w) {
        if (segment.tiedTo[w] < 0)
            continue;
        const auto &consumers = graph.tensor(segment.weights[w]).consumers;
        const auto skipped = static_cast<std::size_t>(std::count_if(
            consumers.begin(), consumers.end(), [&](ir::OpId c) { return skippedOps.count(c) != 0; }));
        if (skipped == 0)
            continue;
        if (skipped != consumers.size())
            return {};
        r.weightCopies[static_cast<std::size_t>(segment.tiedTo[w])] += 1;
        r.weightCopies[w] = 0;
    }
    for (const auto &[a, b] : skippedDerived) {
        for (ir::OpId c : graph.tensor(a).consumers)
            if (!skippedOps.count(c))
                return {};
        r.tensorCopies.try_emplace(b.value, 1.0).first->second += 1;
    }
    // A weight's or a derived parameter's reshards (its gradient's
    // reduction) stand for its twins' too: read by the leader ops alone.
    for (std::size_t w = 0; w < segment.weights.size(); ++w)
        if (r.weightCopies[w] > 1)
            r.tensorCopies[segment.weights[w].value] = r.weightCopies[w];
    for (const auto &[t, copies] : r.tensorCopies) {
        if (!weightIndex.count(t) && !derived.count(ir::TensorId{t}))
            continue;
        for (ir::OpId c : graph.tensor(ir::TensorId{t}).consumers)
            if (!r.opCopies.count(c.value) || r.opCopies.at(c.value) != copies)
                return {};
    }
    // Every op searched but the leaders reads all of a leader's tensor's
    // twins or none, as often each, and writes all or none; a twin reads
    // no leader's tensor in place of its own.
    std::unordered_map<std::int32_t, std::int32_t> classOf;
    for (const auto &[b, m] : members)
        for (std::int32_t t : m)
            classOf[t] = b;
    for (std::size_t i = 0; i < n; ++i) {
        const ir::Op &op = graph.op(segment.ops[i]);
        if (r.skip[i]) {
            const ir::Op &lead = graph.op(segment.ops[leader[i]]);
            for (std::size_t k = 0; k < op.inputs.size(); ++k)
                if (op.inputs[k] == lead.inputs[k] && op.inputs[k].valid() && classOf.count(op.inputs[k].value))
                    return {};
            continue;
        }
        if (r.opCopies.count(segment.ops[i].value))
            continue;
        for (const auto *list : {&op.inputs, &op.outputs}) {
            std::map<std::int32_t, int> count;
            for (ir::TensorId t : *list)
                if (t.valid())
                    ++count[t.value];
            for (const auto &[t, c] : count) {
                const auto it = classOf.find(t);
                if (it == classOf.end())
                    continue;
                for (std::int32_t m : members.at(it->second)) {
                    const auto mc = count.find(m);
                    if (mc == count.end() || mc->second != c)
                        return {};
                }
            }
        }
    }
    return r;
}

// The order the per-op search takes a segment's ops in. Its state holds
// every tensor written or read and still to be read, each in one of up to
// 3^rank specs, so the number of states grows with how many are live at
// once: taking the ops as listed, a layer's query, key and value
// projections are all live before attention reads any (27^3 states on a 3D
// mesh). Of the ops whose producers have run, greedily, by the rules below
// (`greedy`), the order whose bound on the states (`costOf`) sums lowest.
// An op reading a tied weight waits for its leader to be read, and one
// reading a derived parameter for that parameter's first consumer as
// listed, which decides its spec.
struct SearchOrder {
    std::vector<ir::OpId> ops;
    double bound = 0;  // the states' bound summed over the ops
};

// With `rollout`, the rules' order improved by rolling out where its bound
// is large; without, the rules' alone (the bound is the same either way).
SearchOrder orderWithBound(const ir::Graph &graph, const Segment &segment, bool rollout);

std::vector<ir::OpId> searchOrder(const ir::Graph &graph, const Segment &segment)
{
    return orderWithBound(graph, segment, true).ops;
}

SearchOrder orderWithBound(const ir::Graph &graph, const Segment &segment, bool rollout)
{
    const std::size_t n = segment.ops.size();
    std::unordered_map<std::int32_t, std::size_t> position;
    for (std::size_t i = 0; i < n; ++i)
        position.emplace(segment.ops[i].value, i);
    std::unordered_map<std::int32_t, int> readers;  // ops still to read each tensor
    std::vector<std::vector<ir::TensorId>> reads(n);
    std::vector<std::vector<std::size_t>> after(n);  // ops that wait for each op
    std::vector<int> waiting(n, 0);
    std::unordered_map<std::int32_t, std::size_t> firstReader;
    for (std::size_t i = 0; i < n; ++i) {
        const ir::Op &op = graph.op(segment.ops[i]);
        for (ir::TensorId t : op.inputs)
            if (t.valid() && std::find(reads[i].begin(), reads[i].end(), t) == reads[i].end()) {
                reads[i].push_back(t);
                ++readers[t.value];
                firstReader.emplace(t.value, i);
            }
    }
    auto wait = [&](std::size_t before, std::size_t op) {
        if (before != op) {
            after[before].push_back(op);
            ++waiting[op];
        }
    };
    std::unordered_map<std::int32_t, std::int32_t> leaderOf;
    for (std::size_t w = 0; w < segment.weights.size(); ++w)
        if (segment.tiedTo[w] >= 0)
            leaderOf.emplace(segment.weights[w].value,
                             segment.weights[static_cast<std::size_t>(segment.tiedTo[w])].value);
    const std::set<ir::TensorId> derived(segment.derived.begin(), segment.derived.end());
    for (std::size_t i = 0; i < n; ++i)
        for (ir::TensorId t : reads[i]) {
            if (const ir::OpId producer = graph.tensor(t).producer; producer.valid())
                if (auto it = position.find(producer.value); it != position.end())
                    wait(it->second, i);
            if (auto it = leaderOf.find(t.value); it != leaderOf.end())
                if (auto first = firstReader.find(it->second); first != firstReader.end())
                    wait(first->second, i);
            if (derived.count(t))
                wait(firstReader.at(t.value), i);
        }
    // Nested repeats run in lockstep: once one twin runs (twinKeys), the
    // others that are ready run next, so that a leader's choice stays in
    // the state across one op per repeat instead of across every repeat (a
    // mixture's eight experts, run one after the other, held the three
    // leaders' specs live through them all: 27^3 states on a 3D mesh).
    const std::vector<std::string> twinKey = twinKeys(graph, segment);
    std::set<std::int32_t> free;  // weights whose choices are searched (not tied to another's)
    for (std::size_t w = 0; w < segment.weights.size(); ++w)
        if (segment.tiedTo[w] < 0)
            free.insert(segment.weights[w].value);
    const std::unordered_map<std::int32_t, int> totalReaders = readers;
    // Tensors written outside the segment, not weights: the boundary gives
    // each one spec, so keeping them live multiplies no states.
    std::set<std::int32_t> fixedSpec;
    for (std::size_t i = 0; i < n; ++i)
        for (ir::TensorId t : reads[i]) {
            const ir::OpId producer = graph.tensor(t).producer;
            if ((!producer.valid() || !position.count(producer.value)) &&
                graph.tensor(t).role != ir::Role::Parameter)
                fixedSpec.insert(t.value);
        }
    // Which weight or Segment::stored tensor each tensor's spec may vary
    // with: a weight by its own choice (a tied one by its leader's), a
    // stored tensor by its layout, anything else an op writes by what
    // that op reads; what the boundary fixes (the segment's inputs and
    // outputs) by nothing. The product of the choices of every source a
    // live tensor has bounds the search's states at that point, so an
    // order's cost is that bound summed over its ops.
    std::map<std::int32_t, int> sourceOf;  // weight or stored tensor -> its source index
    std::vector<double> sourceChoices;
    for (std::size_t w = 0; w < segment.weights.size(); ++w)
        if (segment.tiedTo[w] < 0) {
            sourceOf[segment.weights[w].value] = static_cast<int>(sourceChoices.size());
            sourceChoices.push_back(static_cast<double>(segment.choices[w].size()));
        }
    for (std::size_t w = 0; w < segment.weights.size(); ++w)
        if (segment.tiedTo[w] >= 0)
            sourceOf[segment.weights[w].value] =
                sourceOf.at(segment.weights[static_cast<std::size_t>(segment.tiedTo[w])].value);
    std::map<std::int32_t, int> storedSource;
    for (std::size_t j = 0; j < segment.stored.size(); ++j) {
        storedSource[segment.stored[j].value] = static_cast<int>(sourceChoices.size());
        sourceChoices.push_back(static_cast<double>(1 + segment.storedChoices[j].size()));
    }
    const std::set<ir::TensorId> outputs(segment.outputs.begin(), segment.outputs.end());
    // A live tensor holds one of at most (rank + 2)^axes specs (per mesh
    // axis replicated, partial or one dim split), whatever its sources: an
    // embedding sum's output takes few specs of the 27^2 its two lookups'
    // weight choices make.
    std::size_t meshRank = 0;
    for (const auto &choices : segment.choices)
        if (!choices.empty())
            meshRank = choices.front().placements.size();
    for (const auto &choices : segment.storedChoices)
        if (!choices.empty())
            meshRank = choices.front().placements.size();
    auto specsOf = [&](std::int32_t t) {
        if (meshRank == 0)
            return std::numeric_limits<double>::infinity();
        const auto rank = static_cast<double>(graph.tensor(ir::TensorId{t}).shape.size());
        return std::pow(rank + 2, static_cast<double>(meshRank));
    };
    auto costOf = [&](const std::vector<std::size_t> &taken, bool capped = true) {
        auto left = totalReaders;
        std::map<std::int32_t, std::set<int>> live;  // live tensor -> its sources
        double cost = 0;
        for (std::size_t i : taken) {
            std::set<int> sources;
            for (ir::TensorId t : reads[i]) {
                if (auto w = sourceOf.find(t.value); w != sourceOf.end()) {
                    sources.insert(w->second);
                    if (left[t.value] > 1)
                        live[t.value] = {w->second};
                } else if (auto it = live.find(t.value); it != live.end()) {
                    sources.insert(it->second.begin(), it->second.end());
                }
                if (--left[t.value] == 0)
                    live.erase(t.value);
            }
            for (ir::TensorId t : graph.op(segment.ops[i]).outputs) {
                if (!t.valid() || !left.count(t.value) || left[t.value] == 0 || outputs.count(t))
                    continue;
                auto &own = live[t.value] = sources;
                if (auto j = storedSource.find(t.value); j != storedSource.end())
                    own.insert(j->second);
            }
            std::set<int> all;
            double byTensors = 1;
            for (const auto &[t, own] : live) {
                all.insert(own.begin(), own.end());
                double mine = 1;
                for (int source : own)
                    mine = std::min(mine * sourceChoices[static_cast<std::size_t>(source)], 1e18);
                byTensors = std::min(byTensors * std::min(mine, specsOf(t)), 1e18);
            }
            double states = 1;
            for (int source : all)
                states = std::min(states * sourceChoices[static_cast<std::size_t>(source)], 1e18);
            cost += capped ? std::min(states, byTensors) : states;
        }
        return cost;
    };

    // Greedily, by one of three rules. Each first takes an op that
    // continues what the last one wrote (depth first: a projection's
    // reshapes and rotary embedding run before the next projection
    // multiplies the states by its weight's choices), a twin of the last
    // op before that. Then:
    //  - the fewest tensors live after it;
    //  - an op choosing no weight, then the fewest live;
    //  - the fewest live not counting what the boundary fixes, then an op
    //    choosing no weight.
    // Ties go to the first listed; the order whose bound sums lowest wins.
    auto greedy = [&](int rule, const std::vector<std::size_t> &head) {
        auto left = totalReaders;
        auto blockers = waiting;
        std::set<std::int32_t> live;
        std::vector<ir::TensorId> lastWritten;
        std::string lastTwin;
        std::vector<std::size_t> taken;
        taken.reserve(n);
        std::vector<std::size_t> ready;
        for (std::size_t i = 0; i < n; ++i)
            if (blockers[i] == 0)
                ready.push_back(i);
        while (!ready.empty()) {
            std::size_t best = 0;
            std::tuple<int, int, int, std::size_t> bestKey{0, 0, 0, n};
            if (taken.size() < head.size()) {
                // The given head first, each op where it is ready; else no order.
                const auto it = std::find(ready.begin(), ready.end(), head[taken.size()]);
                if (it == ready.end())
                    return std::vector<std::size_t>{};
                best = static_cast<std::size_t>(it - ready.begin());
            }
            for (std::size_t r = 0; r < ready.size() && taken.size() >= head.size(); ++r) {
                const std::size_t i = ready[r];
                int change = 0;
                for (ir::TensorId t : reads[i]) {
                    if (rule == 2 && fixedSpec.count(t.value))
                        continue;
                    const bool last = left[t.value] == 1;
                    if (live.count(t.value))
                        change -= last ? 1 : 0;
                    else
                        change += last ? 0 : 1;
                }
                for (ir::TensorId t : graph.op(segment.ops[i]).outputs)
                    if (t.valid() && left.count(t.value) && left[t.value] > 0)
                        ++change;
                int fresh = 1;
                for (ir::TensorId t : reads[i])
                    fresh = std::find(lastWritten.begin(), lastWritten.end(), t) != lastWritten.end() ? 0 : fresh;
                if (!lastTwin.empty() && twinKey[i] == lastTwin)
                    fresh = -1;
                int opens = 0;
                for (ir::TensorId t : reads[i])
                    if (free.count(t.value) && left[t.value] == totalReaders.at(t.value))
                        opens = 1;
                const std::tuple<int, int, int, std::size_t> key =
                    rule == 0   ? std::tuple<int, int, int, std::size_t>{fresh, change, 0, i}
                    : rule == 1 ? std::tuple<int, int, int, std::size_t>{fresh, opens, change, i}
                                : std::tuple<int, int, int, std::size_t>{fresh, change, opens, i};
                if (std::get<3>(bestKey) == n || key < bestKey) {
                    bestKey = key;
                    best = r;
                }
            }
            const std::size_t i = ready[best];
            ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(best));
            taken.push_back(i);
            lastTwin = twinKey[i];
            const auto &outs = graph.op(segment.ops[i]).outputs;
            lastWritten.assign(outs.begin(), outs.end());
            for (ir::TensorId t : reads[i]) {
                if (--left[t.value] == 0)
                    live.erase(t.value);
                else
                    live.insert(t.value);
            }
            for (ir::TensorId t : outs)
                if (t.valid() && left.count(t.value) && left[t.value] > 0)
                    live.insert(t.value);
            for (std::size_t next : after[i])
                if (--blockers[next] == 0)
                    ready.push_back(next);
        }
        return taken;
    };
    std::vector<std::size_t> best;
    double bestCost = 0;
    int bestRule = 0;
    // The bound the order is reported with (searchStateBound's thresholds
    // are set on it): the states' sources alone, the least of the rules'.
    double sourcesBound = std::numeric_limits<double>::infinity();
    for (int rule = 0; rule < 3; ++rule) {
        auto taken = greedy(rule, {});
        if (taken.size() != n)  // not a DAG as listed: keep the listed order
            return {segment.ops, std::numeric_limits<double>::infinity()};
        sourcesBound = std::min(sourcesBound, costOf(taken, false));
        const double cost = costOf(taken);
        if (best.empty() || cost < bestCost) {
            best = std::move(taken);
            bestCost = cost;
            bestRule = rule;
        }
    }
    // Greedy rules see one op ahead: of an embedding sum's three lookups
    // they take the one added last first, and hold its choices live while
    // the other two multiply the states (27^3 on a 3D mesh). On small
    // segments, each op of the order is chosen again by rolling out (the
    // pilot method): every ready op is tried at that place, the rest
    // completed by the winning rule, and the one whose whole order's bound
    // is lowest kept, so the order is never worse than the rule's. Where
    // the bound is small (1D meshes), the search is fast either way.
    constexpr std::size_t kRolloutUpTo = 48;
    constexpr double kRolloutFrom = 1e4;
    if (rollout && n <= kRolloutUpTo && bestCost > kRolloutFrom) {
        std::vector<std::size_t> prefix;
        for (std::size_t at = 0; at < n; ++at) {
            std::vector<std::size_t> chosen = best;  // keeps best[at] unless a rollout beats it
            for (std::size_t candidate = at; candidate < n; ++candidate) {
                auto head = prefix;
                head.push_back(best[candidate]);
                auto taken = greedy(bestRule, head);
                if (taken.size() != n)
                    continue;  // op was not ready at this place
                const double cost = costOf(taken);
                if (cost < bestCost) {
                    bestCost = cost;
                    chosen = std::move(taken);
                }
            }
            best = std::move(chosen);
            prefix.push_back(best[at]);
        }
    }
    SearchOrder order;
    order.bound = sourcesBound;
    order.ops.reserve(n);
    for (std::size_t i : best)
        order.ops.push_back(segment.ops[i]);
    return order;
}

ShardingSpec withoutPartials(ShardingSpec spec)
{
    for (auto &p : spec.placements)
        if (p.isPartial())
            p = Placement::replicate();
    return spec;
}

} // namespace

// A need no spec is: a Segment::stored tensor whose writer chose how to
// store it (a partial sum), which its first reader does not re-store.
constexpr std::int32_t kDecided = std::numeric_limits<std::int32_t>::max();

// Drops the partials that another state's partials dominate across states
// that differ only in what they have already charged. A state's needs and
// gradients are reshards paid for: a later reader needing one of them pays
// nothing, any other pays its reshard once. So where state A has not paid
// for charges B has, A owes at most their sum (`owed`, each at the most a
// reader could be charged for it) more than B for any completion, and a
// partial of A whose time and communication plus that sum are no more than
// a partial of B's (memory as prune() compares it) makes B's of no use.
// The lists a state may differ in multiply the front: a layer's input read
// by the query, key and value projections, each wanting it in the spec of
// its weight's choice, made 36,782 states of 27 skeletons on a 3D mesh.
// A writer's decision (kDecided) takes choices away, so states differing
// in it are not compared. Per group of one skeleton, partials are taken
// fastest first and checked against those kept before them (domination is
// transitive, as the owed sums add up over the lists' differences); groups
// whose lists hold more than 64 distinct charges are left as they are,
// and a partial is checked against the fastest kMostDominators kept, so
// that a group with little to drop costs no more than linear time.
constexpr std::size_t kMostDominators = 256;
// Fronts of fewer states are cheap to carry as they are.
constexpr std::size_t kFewStates = 32;
template <typename Owed>
void dropDominatedByCharges(Front &front, Owed owed)
{
    if (front.size() < kFewStates)
        return;
    // The states grouped by skeleton: sorted by its hash, then by itself.
    std::vector<std::int32_t> skeletons, skeleton;
    std::vector<std::size_t> at{0};
    std::vector<std::size_t> hashes;
    for (std::size_t i = 0; i < front.size(); ++i) {
        front.states[i].skeleton(skeleton);
        skeletons.insert(skeletons.end(), skeleton.begin(), skeleton.end());
        at.push_back(skeletons.size());
        hashes.push_back(hashInts(skeleton));
    }
    auto skeletonOf = [&](std::uint32_t i) {
        return std::make_pair(skeletons.begin() + static_cast<std::ptrdiff_t>(at[i]),
                              skeletons.begin() + static_cast<std::ptrdiff_t>(at[i + 1]));
    };
    std::vector<std::uint32_t> byGroup(front.size());
    for (std::size_t i = 0; i < byGroup.size(); ++i)
        byGroup[i] = static_cast<std::uint32_t>(i);
    std::sort(byGroup.begin(), byGroup.end(), [&](std::uint32_t a, std::uint32_t b) {
        if (hashes[a] != hashes[b])
            return hashes[a] < hashes[b];
        const auto [a0, a1] = skeletonOf(a);
        const auto [b0, b1] = skeletonOf(b);
        return std::lexicographical_compare(a0, a1, b0, b1);
    });
    std::vector<std::vector<std::uint32_t>> groups;
    for (std::size_t g = 0; g < byGroup.size();) {
        std::size_t end = g + 1;
        const auto [g0, g1] = skeletonOf(byGroup[g]);
        while (end < byGroup.size()) {
            const auto [e0, e1] = skeletonOf(byGroup[end]);
            if (hashes[byGroup[end]] != hashes[byGroup[g]] || !std::equal(g0, g1, e0, e1))
                break;
            ++end;
        }
        if (end - g > 1)
            groups.emplace_back(byGroup.begin() + static_cast<std::ptrdiff_t>(g),
                                byGroup.begin() + static_cast<std::ptrdiff_t>(end));
        g = end;
    }
    std::vector<bool> dropped(front.partials.size(), false);
    bool any = false;
    std::vector<std::tuple<std::int32_t, int, std::int32_t>> bits;
    std::vector<double> bitOwed;
    std::vector<std::uint64_t> masks, decided;
    struct Item {
        double time, comm;
        std::uint32_t member;
        std::size_t partial;
    };
    std::vector<Item> items;
    std::vector<std::size_t> survivors;  // indices into items
    for (const auto &members : groups) {
        const std::int32_t *const skeletonOfGroup = skeletons.data() + at[members.front()];
        bits.clear();
        bitOwed.clear();
        masks.assign(members.size(), 0);
        decided.assign(members.size(), 0);
        bool fits = true;
        for (std::size_t m = 0; m < members.size() && fits; ++m)
            front.states[members[m]].forEachCharged([&](std::int32_t entry, int list, std::int32_t value) {
                const std::tuple<std::int32_t, int, std::int32_t> charge{entry, list, value};
                const auto bit = static_cast<std::size_t>(std::find(bits.begin(), bits.end(), charge) - bits.begin());
                const bool added = bit == bits.size();
                if (bit >= 64) {
                    fits = false;
                    return;
                }
                if (added) {
                    bits.push_back(charge);
                    bitOwed.push_back(value == kDecided
                                          ? 0.0
                                          : owed(skeletonOfGroup[1 + 2 * static_cast<std::size_t>(entry)],
                                                 skeletonOfGroup[2 + 2 * static_cast<std::size_t>(entry)], list, value));
                }
                masks[m] |= std::uint64_t{1} << bit;
                if (value == kDecided)
                    decided[m] |= std::uint64_t{1} << bit;
            });
        if (!fits)
            continue;
        items.clear();
        for (std::size_t m = 0; m < members.size(); ++m)
            for (std::size_t p = front.begins[members[m]]; p < front.begins[members[m] + 1]; ++p)
                items.push_back({front.partials[p].time, front.partials[p].comm, static_cast<std::uint32_t>(m), p});
        std::stable_sort(items.begin(), items.end(), [](const Item &x, const Item &y) {
            return x.time != y.time ? x.time < y.time : x.comm < y.comm;
        });
        survivors.clear();
        for (std::size_t i = 0; i < items.size(); ++i) {
            const Item &b = items[i];
            const Partial &pb = front.partials[b.partial];
            bool beaten = false;
            for (std::size_t k : survivors) {
                const Item &a = items[k];
                if (a.member == b.member || decided[a.member] != decided[b.member])
                    continue;
                double due = 0;
                for (std::uint64_t missing = masks[b.member] & ~masks[a.member]; missing; missing &= missing - 1)
                    due += bitOwed[static_cast<std::size_t>(__builtin_ctzll(missing))];
                const Partial &pa = front.partials[a.partial];
                if (pa.time + due <= pb.time && pa.comm + due <= pb.comm && dominates(pa, pb, false)) {
                    beaten = true;
                    break;
                }
            }
            if (beaten) {
                dropped[b.partial] = true;
                any = true;
            } else if (survivors.size() < kMostDominators) {
                survivors.push_back(i);
            }
        }
    }
    if (!any)
        return;
    Front kept;
    kept.states.reserve(front.size());
    for (std::size_t i = 0; i < front.size(); ++i) {
        const std::size_t before = kept.partials.size();
        for (std::size_t p = front.begins[i]; p < front.begins[i + 1]; ++p)
            if (!dropped[p])
                kept.partials.push_back(front.partials[p]);
        if (kept.partials.size() == before)
            continue;
        kept.states.push_back(std::move(front.states[i]));
        kept.begins.push_back(kept.partials.size());
    }
    front = std::move(kept);
}

// searchWeights' m_weightOf for a tensor that is not one of the segment's
// weights, and for one of its derived parameters.
constexpr std::int32_t kNotAWeight = -1;
constexpr std::int32_t kDerived = -2;

// The most partial plans a block's search keeps after one op.
constexpr std::size_t kMaxPartials = 1'000'000;

struct SegmentCoster::Memo {
    struct Prefix {
        std::shared_ptr<const Front> front;  // shared by the checkpoints and the searches going on from them
        bool partialsStored = false;  // some op of the prefix stored a partial sum
    };
    std::map<std::vector<std::int64_t>, Prefix> fronts;
    // searchOrder() by segment (its first op and size).
    std::map<std::pair<std::int32_t, std::size_t>, std::vector<ir::OpId>> orders;
    // findRepeats() by segment (its first op and size, its ties, its held parameters).
    std::map<std::vector<std::int64_t>, Repeats> repeats;
    // Partials record their weight choices as a chain through this trail,
    // so that extending one copies an index, and a block of any number of
    // weights is searched (a mixed-radix index over its choices overflows
    // at a few dozen weights: a mixture of experts' block has more).
    struct Step {
        std::int32_t previous;
        std::int32_t weight;
        std::int32_t choice;
    };
    std::vector<Step> trail;
};

std::int64_t comboCount(const Segment &segment)
{
    std::int64_t n = 1;
    auto times = [&n](std::size_t k) {
        const auto kk = static_cast<std::int64_t>(k);
        if (n > std::numeric_limits<std::int64_t>::max() / kk)
            n = std::numeric_limits<std::int64_t>::max();
        else
            n *= kk;
    };
    for (std::size_t w = 0; w < segment.choices.size(); ++w)
        if (segment.tiedTo[w] < 0)
            times(segment.choices[w].size());
    for (const auto &c : segment.storedChoices)
        times(1 + c.size());
    return n;
}

std::vector<std::uint16_t> comboChoice(const Segment &segment, std::int64_t combo)
{
    std::vector<std::uint16_t> choice(segment.choices.size() + segment.stored.size(), 0);
    for (std::size_t w = 0; w < segment.choices.size(); ++w) {
        if (const int leader = segment.tiedTo[w]; leader >= 0) {
            choice[w] = choice[static_cast<std::size_t>(leader)];
            continue;
        }
        const auto k = static_cast<std::int64_t>(segment.choices[w].size());
        choice[w] = static_cast<std::uint16_t>(combo % k);
        combo /= k;
    }
    for (std::size_t j = 0; j < segment.stored.size(); ++j) {
        const auto k = static_cast<std::int64_t>(1 + segment.storedChoices[j].size());
        choice[segment.choices.size() + j] = static_cast<std::uint16_t>(combo % k);
        combo /= k;
    }
    return choice;
}

std::vector<ShardingSpec> chosenSpecs(const Segment &segment, const std::vector<std::uint16_t> &choice)
{
    std::vector<ShardingSpec> specs;
    specs.reserve(segment.choices.size());
    for (std::size_t w = 0; w < segment.choices.size(); ++w)
        specs.push_back(segment.choices[w][choice[w]]);
    return specs;
}

std::vector<std::pair<ir::TensorId, ShardingSpec>> storedSpecs(const Segment &segment,
                                                               const std::vector<std::uint16_t> &choice)
{
    std::vector<std::pair<ir::TensorId, ShardingSpec>> specs;
    for (std::size_t j = 0; j < segment.stored.size(); ++j) {
        const std::size_t at = segment.choices.size() + j;
        if (at < choice.size() && choice[at] > 0)
            specs.emplace_back(segment.stored[j], segment.storedChoices[j][choice[at] - 1u]);
    }
    return specs;
}

const std::optional<sharding::DimMap> &SegmentCoster::ruleOf(ir::OpId op)
{
    auto it = m_rules.find(op);
    if (it == m_rules.end())
        it = m_rules.emplace(op, sharding::opRule(m_graph, m_graph.op(op))).first;
    return it->second;
}

std::int32_t SegmentCoster::intern(const ShardingSpec &spec)
{
    auto [it, added] = m_specIds.try_emplace(spec, static_cast<std::int32_t>(m_interned.size()));
    if (added) {
        m_interned.push_back(spec);
        m_gradientIds.push_back(-1);
    }
    return it->second;
}

std::int32_t SegmentCoster::gradientId(std::int32_t spec)
{
    if (m_gradientIds[static_cast<std::size_t>(spec)] < 0) {
        const std::int32_t g = intern(sharding::gradientSpec(m_interned[static_cast<std::size_t>(spec)]));
        m_gradientIds[static_cast<std::size_t>(spec)] = g;
    }
    return m_gradientIds[static_cast<std::size_t>(spec)];
}

double SegmentCoster::reshardTime(ir::TensorId t, std::int32_t from, std::int32_t to)
{
    if (from == to)
        return 0;
    const ReshardKey key{static_cast<std::int32_t>(t.index()), from, to};
    if (auto it = m_reshards.find(key); it != m_reshards.end())
        return it->second;
    const double time = cost::reshardSeconds(m_graph.tensor(t), m_interned[static_cast<std::size_t>(from)],
                                             m_interned[static_cast<std::size_t>(to)], m_mesh);
    return m_reshards.emplace(key, time).first->second;
}

double SegmentCoster::zeroForward(ir::TensorId t, std::int32_t from, std::int32_t stored)
{
    const int stage = m_options.techniques.zeroStage;
    if (stage < 1 || stage > 2 || m_graph.tensor(t).role != ir::Role::Parameter)
        return 0;
    const std::int32_t gradient = gradientId(stored);  // (may intern: the references after it)
    return cost::zeroForwardSeconds(m_graph.tensor(t), m_interned[static_cast<std::size_t>(from)],
                                    m_interned[static_cast<std::size_t>(gradient)],
                                    m_interned[static_cast<std::size_t>(stored)], m_mesh, m_options.techniques);
}

std::int64_t SegmentCoster::savedBytes(ir::TensorId t, std::int32_t spec) const
{
    return cost::savedBytes(m_graph.tensor(t), m_interned[static_cast<std::size_t>(spec)], m_mesh,
                            m_options.techniques.microBatches);
}

const SegmentCoster::OpOutcome &SegmentCoster::opOutcome(ir::OpId id, const std::vector<std::int32_t> &inputs,
                                                         const std::vector<bool> &pending,
                                                         const std::vector<std::int32_t> &fixed)
{
    if (m_outcomes.empty())
        m_outcomes.resize(m_graph.opCount());
    OutcomeTable &table = m_outcomes[id.index()];
    std::vector<std::int32_t> &key = m_outcomeKey;
    key.assign(1, static_cast<std::int32_t>(m_partial));
    key.push_back(m_flowVariant);
    key.insert(key.end(), inputs.begin(), inputs.end());
    key.insert(key.end(), pending.begin(), pending.end());
    key.insert(key.end(), fixed.begin(), fixed.end());
    const std::size_t hash = hashInts(key);
    std::size_t slot = 0;
    if (!table.index.empty()) {
        const std::size_t mask = table.index.size() - 1;
        for (slot = hash & mask; table.index[slot].second != 0; slot = (slot + 1) & mask) {
            const auto &[h, entry] = table.index[slot];
            const OutcomeEntry &e = table.entries[entry - 1];
            if (h == hash && table.keys.size() - e.key >= key.size() &&
                std::equal(key.begin(), key.end(), table.keys.begin() + e.key))
                return e.outcome;
        }
    }
    // As evaluate() does it, for this op alone.
    const ir::Op &op = m_graph.op(id);
    OpOutcome out;
    std::vector<std::int32_t> &resolvedKey = m_resolvedKey;
    resolvedKey.assign(1, static_cast<std::int32_t>(id.index()));
    resolvedKey.insert(resolvedKey.end(), inputs.begin(), inputs.end());
    resolvedKey.insert(resolvedKey.end(), pending.begin(), pending.end());
    auto found = m_resolved.find(resolvedKey);
    if (found == m_resolved.end()) {
        Resolved r;
        for (auto i : inputs)
            r.stored.push_back(m_interned[static_cast<std::size_t>(i)]);
        r.strategy = sharding::resolveStrategy(m_graph, id, r.stored, m_mesh, ruleOf(id));
        bool derivedHere = false;
        for (std::size_t i = 0; i < op.inputs.size(); ++i) {
            if (!pending[i] || !r.strategy.dataInputs[i])
                continue;
            const ShardingSpec spec = withoutPartials(r.strategy.inputs[i]);
            if (spec.holds(m_graph.tensor(op.inputs[i]).shape, m_mesh) && spec != r.stored[i]) {
                r.stored[i] = spec;
                derivedHere = true;
            }
        }
        if (derivedHere)
            r.strategy = sharding::resolveStrategy(m_graph, id, r.stored, m_mesh, ruleOf(id));
        found = m_resolved.emplace(resolvedKey, std::move(r)).first;
    }
    // The inputs, with the small parameters it decides.
    const std::vector<ShardingSpec> &stored = found->second.stored;
    const sharding::OpStrategy &s = found->second.strategy;
    std::vector<ShardingSpec> outputs;
    out.outputs.resize(op.outputs.size());
    for (std::size_t o = 0; o < op.outputs.size(); ++o) {
        const bool partial = s.outputs[o] != withoutPartials(s.outputs[o]);
        out.outputs[o].partial = partial;
        if (fixed[o] >= 0) {
            outputs.push_back(m_interned[static_cast<std::size_t>(fixed[o])]);
            continue;
        }
        out.partialsStored = out.partialsStored || partial;
        outputs.push_back(sharding::storedSpec(s.outputs[o], m_graph.tensor(op.outputs[o]).shape, m_mesh, m_partial));
    }
    if (!stored.empty())
        out.firstInput = stored.front();
    out.flows = cost::gradientFlows(op, s, m_flow);
    struct Sink {
        SegmentCoster &coster;
        double &comm;
        double forward = 0;
        void collective(cost::Phase phase, const sharding::Collective &c)
        {
            const double t = cost::collectiveSeconds(c, coster.m_mesh);
            comm += t;
            forward += phase == cost::Phase::Forward ? t : 0;
        }
        void reshard(cost::Phase phase, ir::TensorId t, const ShardingSpec &from, const ShardingSpec &to,
                     std::string_view)
        {
            const double r = coster.reshardTime(t, coster.intern(from), coster.intern(to));
            comm += r;
            forward += phase == cost::Phase::Forward ? r : 0;
        }
    } sink{*this, out.comm};
    cost::chargeOp(m_graph, op, s, out.flows, [&](std::size_t o) -> const ShardingSpec & { return outputs[o]; },
                   sink);
    const cost::Recomputed again =
        out.flows ? cost::recomputedForward(m_roles[id.index()], m_modes[id.index()],
                                            m_options.techniques.flashAttention)
                  : cost::Recomputed{};
    out.recomputeComm = again.comm;
    out.comm += again.comm * sink.forward;
    const cost::OpCompute computed = cost::opCompute(s, out.flows, m_mesh, again);
    // The forward collectives run again in the backward pass are backward.
    const double backwardComm = out.comm - sink.forward;
    out.time = computed.forward + m_backwardCompute * computed.backward + sink.forward + m_backwardComm * backwardComm;
    cost::ParameterLoad derived;
    for (std::size_t i = 0; i < op.inputs.size(); ++i)
        if (pending[i])
            derived += cost::parameterLoad(m_graph.tensor(op.inputs[i]), stored[i], m_mesh, m_options,
                                           m_parameterShares[op.inputs[i].index()]);
    if (std::any_of(pending.begin(), pending.end(), [](bool p) { return p; })) {
        const cost::ParameterCharge charge = cost::chargeParameters(derived, m_mesh, m_options);
        out.derivedBytes = charge.unroundedBytes;
        out.derivedSeconds = weightedSeconds(charge);
    }
    out.inputs.resize(op.inputs.size());
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        OpOutcome::Input &in = out.inputs[i];
        in.stored = intern(stored[i]);
        in.need = intern(s.inputs[i]);
        in.gradient = intern(s.inputGradients[i]);
        in.data = s.dataInputs[i];
    }
    for (std::size_t o = 0; o < outputs.size(); ++o)
        out.outputs[o].stored = intern(outputs[o]);
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        OpOutcome::Input &in = out.inputs[i];
        in.needSeconds = reshardTime(op.inputs[i], in.stored, in.need);
        in.gradientSeconds = reshardTime(op.inputs[i], in.gradient, gradientId(in.stored));
        in.gradientForward = zeroForward(op.inputs[i], in.gradient, in.stored);
    }
    if (2 * (table.entries.size() + 1) > table.index.size()) {
        std::vector<std::pair<std::size_t, std::uint32_t>> grown(std::max<std::size_t>(64, 2 * table.index.size()));
        const std::size_t mask = grown.size() - 1;
        for (const auto &[h, entry] : table.index)
            if (entry != 0) {
                std::size_t at = h & mask;
                while (grown[at].second != 0)
                    at = (at + 1) & mask;
                grown[at] = {h, entry};
            }
        table.index = std::move(grown);
        slot = hash & mask;
        while (table.index[slot].second != 0)
            slot = (slot + 1) & mask;
    }
    if (table.entries.size() >= std::numeric_limits<std::uint32_t>::max() - 1)
        throw TapestryError(Error{m_graph.op(id).name, {}, "tap: too many op outcomes to search"});
    table.entries.push_back({static_cast<std::uint32_t>(table.keys.size()), std::move(out)});
    table.keys.insert(table.keys.end(), key.begin(), key.end());
    table.index[slot] = {hash, static_cast<std::uint32_t>(table.entries.size())};
    return table.entries.back().outcome;
}

std::vector<std::vector<WeightChoice>> SegmentCoster::searchWeights(
    const Segment &segment, const std::map<ir::TensorId, ShardingSpec> &boundary, std::int64_t weightCapacity,
    ir::TensorId link, const std::vector<ShardingSpec> &linkSpecs, const std::vector<ir::TensorId> &readLater)
{
    // The per-parameter charges of each weight choice (they are linear in
    // the load), so that partial plans are charged weight by weight.
    const std::int32_t replicated = intern(ShardingSpec::replicated(m_mesh.rank()));
    std::vector<std::vector<std::int32_t>> choiceIds;
    // Per weight and choice: model-state bytes per device, and the seconds
    // of its optimizer update and ZeRO collectives.
    std::vector<std::vector<double>> choiceBytes, choiceSeconds;
    for (std::size_t w = 0; w < segment.choices.size(); ++w) {
        choiceIds.emplace_back();
        choiceBytes.emplace_back();
        choiceSeconds.emplace_back();
        for (const auto &c : segment.choices[w]) {
            choiceIds.back().push_back(intern(c));
            const cost::ParameterCharge charge = cost::chargeParameters(
                cost::parameterLoad(m_graph.tensor(segment.weights[w]), c, m_mesh, m_options,
                                    m_parameterShares[segment.weights[w].index()]),
                m_mesh, m_options);
            choiceBytes.back().push_back(charge.unroundedBytes);
            choiceSeconds.back().push_back(weightedSeconds(charge));
        }
    }

    // Per tensor: the position of its last reader here, and whether the
    // saved-tensor model keeps it for the backward pass; valid where the
    // tensor's stamp is this call's. Per op: whether it is a norm.
    if (m_readStamp.empty()) {
        m_readStamp.assign(m_graph.tensorCount(), 0);
        m_lastRead.assign(m_graph.tensorCount(), 0);
        m_saved.assign(m_graph.tensorCount(), false);
        m_weightOf.assign(m_graph.tensorCount(), kNotAWeight);
    }
    const std::uint32_t stamp = ++m_stamp;
    auto readHere = [&](std::int32_t t) { return m_readStamp[static_cast<std::size_t>(t)] == stamp; };
    auto lastRead = [&](std::int32_t t) { return m_lastRead[static_cast<std::size_t>(t)]; };
    if (!m_memo)
        m_memo = std::make_shared<Memo>();
    const std::pair<std::int32_t, std::size_t> segmentKey{segment.ops.empty() ? -1 : segment.ops.front().value,
                                                          segment.ops.size()};
    auto order = m_memo->orders.find(segmentKey);
    if (order == m_memo->orders.end())
        order = m_memo->orders.emplace(segmentKey, searchOrder(m_graph, segment)).first;
    // A mixture's experts searched once (Repeats), unless a later block
    // reads one of the weights left out or gradients flow through a twin's
    // tensors otherwise than through its leader's.
    const Repeats *repeats = nullptr;
    if (m_repeatsOnce) {
        // (A group of copies searched with a pin held has the ops of the
        // others, and its own ties and held parameters.)
        std::vector<std::int64_t> repeatsKey{segmentKey.first, static_cast<std::int64_t>(segmentKey.second)};
        repeatsKey.insert(repeatsKey.end(), segment.tiedTo.begin(), segment.tiedTo.end());
        for (const auto &[t, spec] : segment.held)
            repeatsKey.push_back(t.value);
        auto found = m_memo->repeats.find(repeatsKey);
        if (found == m_memo->repeats.end())
            found = m_memo->repeats.emplace(std::move(repeatsKey), findRepeats(m_graph, segment)).first;
        if (!found->second.empty())
            repeats = &found->second;
        for (std::size_t w = 0; repeats && w < segment.weights.size(); ++w)
            if (repeats->weightCopies[w] == 0 &&
                std::find(readLater.begin(), readLater.end(), segment.weights[w]) != readLater.end())
                repeats = nullptr;
        if (repeats)
            for (const auto &[a, b] : repeats->alias)
                if (m_flow[static_cast<std::size_t>(a)] != m_flow[static_cast<std::size_t>(b)]) {
                    repeats = nullptr;
                    break;
                }
    }
    // The ops searched, and those that write or read a twin's tensors
    // (the dispatch, the combine) as they write and read the leader's.
    std::vector<ir::OpId> searched;
    std::unordered_map<std::int32_t, ir::Op> views;
    std::unordered_map<std::int32_t, double> opCopies;
    if (repeats) {
        std::set<ir::OpId> skipped;
        for (std::size_t i = 0; i < segment.ops.size(); ++i)
            if (repeats->skip[i])
                skipped.insert(segment.ops[i]);
        for (ir::OpId id : order->second) {
            if (skipped.count(id))
                continue;
            searched.push_back(id);
            ir::Op view = m_graph.op(id);
            bool aliased = false;
            for (auto *list : {&view.inputs, &view.outputs})
                for (ir::TensorId &t : *list)
                    if (const auto it = t.valid() ? repeats->alias.find(t.value) : repeats->alias.end();
                        it != repeats->alias.end()) {
                        t = ir::TensorId{it->second};
                        aliased = true;
                    }
            if (aliased)
                views.emplace(id.value, std::move(view));
        }
        for (std::size_t w = 0; w < segment.weights.size(); ++w)
            for (std::size_t c = 0; c < choiceBytes[w].size(); ++c) {
                choiceBytes[w][c] *= repeats->weightCopies[w];
                choiceSeconds[w][c] *= repeats->weightCopies[w];
            }
    }
    const std::vector<ir::OpId> &ops = repeats ? searched : order->second;
    auto opOf = [&](ir::OpId id) -> const ir::Op & {
        const auto it = views.find(id.value);
        return it != views.end() ? it->second : m_graph.op(id);
    };
    // How many ops an op searched stands for, and tensors a tensor.
    auto copiesOfOp = [&](ir::OpId id) {
        if (!repeats)
            return 1.0;
        const auto it = repeats->opCopies.find(id.value);
        return it != repeats->opCopies.end() ? it->second : 1.0;
    };
    auto copiesOf = [&](ir::TensorId t) -> std::int64_t {
        if (!repeats)
            return 1;
        const auto it = repeats->tensorCopies.find(t.value);
        return it != repeats->tensorCopies.end() ? static_cast<std::int64_t>(it->second) : 1;
    };
    for (std::size_t k = 0; k < ops.size(); ++k) {
        const ir::Op &op = opOf(ops[k]);
        const bool flows =
            std::any_of(op.inputs.begin(), op.inputs.end(), [&](ir::TensorId t) { return m_flow[t.index()]; });
        for (auto t : op.inputs) {
            if (m_readStamp[t.index()] != stamp) {
                m_readStamp[t.index()] = stamp;
                m_saved[t.index()] = false;
                m_weightOf[t.index()] = kNotAWeight;
            }
            m_lastRead[t.index()] = k;
            if (!m_attention && flows && cost::savesInputs(op) &&
                m_graph.tensor(t).role != ir::Role::Parameter)
                m_saved[t.index()] = true;
        }
    }
    // A tied weight takes its leader's choice from the state, so the leader
    // stays there until its last twin has been read.
    for (std::size_t w = 0; w < segment.weights.size(); ++w)
        if (const int leader = segment.tiedTo[w];
            leader >= 0 && readHere(static_cast<std::int32_t>(segment.weights[w].index()))) {
            auto &last = m_lastRead[segment.weights[static_cast<std::size_t>(leader)].index()];
            last = std::max(last, m_lastRead[segment.weights[w].index()]);
        }
    // Weights a later block reads again stay in the state to the end, so
    // that plans choosing them differently are kept apart.
    for (ir::TensorId t : readLater)
        if (readHere(static_cast<std::int32_t>(t.index())))
            m_lastRead[t.index()] = ops.size();
    // Which weight each tensor read here is, looked up once per op and state.
    for (std::size_t w = 0; w < segment.weights.size(); ++w)
        m_weightOf[segment.weights[w].index()] = static_cast<std::int32_t>(w);
    for (ir::TensorId t : segment.derived)
        m_weightOf[t.index()] = kDerived;
    auto weightOf = [&](ir::TensorId t) {
        return m_readStamp[t.index()] == stamp ? m_weightOf[t.index()] : kNotAWeight;
    };
    // Derived parameters held to a pin, and what they cost as pinned: the
    // same in every plan of the segment.
    auto heldSpec = [&](ir::TensorId t) -> const ShardingSpec * {
        for (const auto &[held, spec] : segment.held)
            if (held == t)
                return &spec;
        return nullptr;
    };
    double heldBytes = 0, heldSeconds = 0;
    for (const auto &[t, spec] : segment.held) {
        const cost::ParameterCharge charge = cost::chargeParameters(
            cost::parameterLoad(m_graph.tensor(t), spec, m_mesh, m_options, m_parameterShares[t.index()]), m_mesh,
            m_options);
        heldBytes += charge.unroundedBytes;
        heldSeconds += weightedSeconds(charge);
    }
    // Where each Segment::stored tensor is first read, in the search's order.
    std::map<ir::TensorId, std::size_t> firstReads;
    for (std::size_t k = ops.size(); k-- > 0;)
        for (ir::TensorId t : opOf(ops[k]).inputs)
            if (std::find(segment.stored.begin(), segment.stored.end(), t) != segment.stored.end())
                firstReads[t] = k;
    auto firstRead = [&](ir::TensorId t) {
        const auto it = firstReads.find(t);
        return it == firstReads.end() ? ops.size() : it->second;
    };
    std::vector<Memo::Step> &trail = m_memo->trail;
    // The most any reader's forward collectives run again (recomputation).
    double maxRecompute = 0;
    for (ir::OpId id : ops)
        maxRecompute = std::max(maxRecompute, cost::recomputedForward(m_roles[id.index()], m_modes[id.index()],
                                                                      m_options.techniques.flashAttention)
                                                  .comm);
    // A tensor's reshards: this copy's share of them, for each tensor it
    // stands for.
    auto shareOf = [&](ir::TensorId t) {
        const auto copies = static_cast<double>(copiesOf(t));
        for (const auto &[shared, share] : segment.readShare)
            if (shared == t)
                return share * copies;
        return copies;
    };

    // One op: every state and partial extended by every choice of the
    // weights read here first. `linkSpec`: the interned stored spec of
    // `link` where this op writes it.
    auto advance = [&](const Front &front, std::size_t k, std::int32_t linkSpec) {
        if (m_cancelled && m_cancelled())
            throw TapestryError(Error{segment.name, {}, "tap: cancelled"});
        const ir::OpId id = ops[k];
        const ir::Op &op = opOf(id);
        const double copies = copiesOfOp(id);
        std::vector<std::int32_t> fixed(op.outputs.size(), -1);
        for (std::size_t o = 0; o < op.outputs.size(); ++o)
            if (op.outputs[o] == link && linkSpec >= 0)
                fixed[o] = linkSpec;
            else if (auto it = boundary.find(op.outputs[o]); it != boundary.end())
                fixed[o] = intern(it->second);
        // Segment::stored tensors are stored as searched. One is re-stored
        // where it is first read: the reader takes it in a layout of its
        // choice, charged the reshard from the produced spec, so that the
        // search's states carry one spec per tensor between writer and
        // reader. A partial sum cannot be (storing it as produced has
        // already reduced it, which a reduce-scatter into the layout
        // would not), so its writer chooses at once and marks it decided.
        // Per such output: its index, its interned layout specs, its
        // index in Segment::stored; per such input the same.
        struct Storing {
            std::size_t slot;
            std::vector<std::int32_t> ids;
            std::size_t stored;
            std::int32_t given = -1;  // a graph input's spec as the boundary gives it
        };
        std::vector<Storing> storedOuts, storedIns;
        std::int64_t storings = 1;
        auto storingOf = [&](ir::TensorId t, std::size_t slot) -> std::optional<Storing> {
            const auto j = std::find(segment.stored.begin(), segment.stored.end(), t);
            if (j == segment.stored.end())
                return std::nullopt;
            Storing storing{slot, {}, static_cast<std::size_t>(j - segment.stored.begin())};
            for (const auto &spec : segment.storedChoices[storing.stored])
                storing.ids.push_back(intern(spec));
            storings *= static_cast<std::int64_t>(1 + storing.ids.size());
            return storing;
        };
        for (std::size_t o = 0; o < op.outputs.size(); ++o)
            if (fixed[o] < 0)
                if (auto storing = storingOf(op.outputs[o], o))
                    storedOuts.push_back(std::move(*storing));
        for (std::size_t i = 0; i < op.inputs.size(); ++i)
            if (firstRead(op.inputs[i]) == k &&
                std::find(op.inputs.begin(), op.inputs.begin() + static_cast<std::ptrdiff_t>(i), op.inputs[i]) ==
                    op.inputs.begin() + static_cast<std::ptrdiff_t>(i))
                if (auto storing = storingOf(op.inputs[i], i)) {
                    if (auto it = boundary.find(op.inputs[i]); it != boundary.end())
                        storing->given = intern(it->second);
                    storedIns.push_back(std::move(*storing));
                }
        std::int64_t restorings = 1;
        for (const Storing &in : storedIns)
            restorings *= static_cast<std::int64_t>(1 + in.ids.size());
        std::vector<std::pair<ir::TensorId, std::int32_t>> restored;
        std::vector<ir::TensorId> decided;
        FrontBuilder next;
        std::size_t extended = 0;  // partials made, before pruning
        std::vector<std::int32_t> given;
        std::vector<bool> pending;
        std::vector<int> newWeights;  // indices into segment.weights
        State st;
        for (std::size_t si = 0; si < front.size(); ++si) {
            // Fronts of a 4D mesh take seconds per op: polled here too.
            if (si % 256 == 255 && m_cancelled && m_cancelled())
                throw TapestryError(Error{segment.name, {}, "tap: cancelled"});
            const State &state = front.states[si];
            const Partial *const partialsBegin = front.begin(si), *const partialsEnd = front.end(si);
            // The inputs read here first: weights to choose, small
            // parameters this op decides, boundary tensors.
            given.assign(op.inputs.size(), replicated);
            pending.assign(op.inputs.size(), false);
            newWeights.clear();
            // Of tied weights read here first, as their leaders' choices.
            double tiedBytes = 0, tiedSeconds = 0;
            for (std::size_t i = 0; i < op.inputs.size(); ++i) {
                const ir::TensorId t = op.inputs[i];
                if (const int at = state.find(static_cast<std::int32_t>(t.index())); at >= 0) {
                    given[i] = state.spec(at);
                } else if (const int w = weightOf(t); w >= 0) {
                    const auto wi = static_cast<std::size_t>(w);
                    const int leader = segment.tiedTo[wi];
                    const int at = leader < 0 ? -1
                                              : state.find(static_cast<std::int32_t>(
                                                    segment.weights[static_cast<std::size_t>(leader)].index()));
                    if (at >= 0) {
                        given[i] = state.spec(at);
                        const auto &ids = choiceIds[wi];
                        const auto c = static_cast<std::size_t>(std::find(ids.begin(), ids.end(), given[i]) - ids.begin());
                        if (std::find(op.inputs.begin(), op.inputs.begin() + static_cast<std::ptrdiff_t>(i), t) ==
                            op.inputs.begin() + static_cast<std::ptrdiff_t>(i))
                        {
                            tiedBytes += choiceBytes[wi][c < ids.size() ? c : 0];
                            tiedSeconds += choiceSeconds[wi][c < ids.size() ? c : 0];
                        }
                    } else if (std::find(newWeights.begin(), newWeights.end(), w) == newWeights.end()) {
                        newWeights.push_back(w);
                    }
                } else if (const ShardingSpec *pin = heldSpec(t); w == kDerived && pin) {
                    given[i] = intern(*pin);
                } else if (w == kDerived) {
                    const bool first = std::find(op.inputs.begin(), op.inputs.begin() + static_cast<std::ptrdiff_t>(i),
                                                 t) == op.inputs.begin() + static_cast<std::ptrdiff_t>(i);
                    pending[i] = first;
                } else if (auto it = boundary.find(t); it != boundary.end()) {
                    given[i] = intern(it->second);
                } else {
                    given[i] = intern(m_specs[t.index()]);
                }
            }
            std::int64_t choices = 1;
            for (int w : newWeights)
                choices *= static_cast<std::int64_t>(segment.choices[static_cast<std::size_t>(w)].size());
            for (std::int64_t combined = 0; combined < choices * storings; ++combined) {
                const std::int64_t choice = combined % choices;
                double weightBytes = tiedBytes, weightSeconds = tiedSeconds;
                for (std::int64_t r = choice; int w : newWeights) {
                    const auto &cs = segment.choices[static_cast<std::size_t>(w)];
                    const auto c = static_cast<std::size_t>(r % static_cast<std::int64_t>(cs.size()));
                    r /= static_cast<std::int64_t>(cs.size());
                    const ir::TensorId t = segment.weights[static_cast<std::size_t>(w)];
                    weightBytes += choiceBytes[static_cast<std::size_t>(w)][c];
                    weightSeconds += choiceSeconds[static_cast<std::size_t>(w)][c];
                    for (std::size_t i = 0; i < op.inputs.size(); ++i)
                        if (op.inputs[i] == t)
                            given[i] = choiceIds[static_cast<std::size_t>(w)][c];
                }
                // The Segment::stored tensors read here first, each as
                // stored or re-stored in a layout (the same as stored, or
                // decided by its writer: that plan is made otherwise).
                std::int64_t r = combined / choices;
                bool again = false;
                restored.clear();
                for (const Storing &in : storedIns) {
                    const ir::TensorId t = op.inputs[in.slot];
                    const int at = state.find(static_cast<std::int32_t>(t.index()));
                    const auto n = static_cast<std::int64_t>(1 + in.ids.size());
                    const auto c = static_cast<std::size_t>(r % n);
                    r /= n;
                    // A graph input is stored as chosen here at no cost
                    // (the data comes in that layout); anything else is
                    // in the state, written before.
                    const bool input = !m_graph.tensor(t).producer.valid();
                    if (at < 0 && !(input && in.given >= 0)) {
                        again = again || c > 0;
                        continue;
                    }
                    std::int32_t spec = at >= 0 ? state.spec(at) : in.given;
                    if (c > 0) {
                        again = again || (at >= 0 && state.has(at, 0, kDecided)) || spec == in.ids[c - 1];
                        spec = in.ids[c - 1];
                        if (at >= 0)
                            restored.emplace_back(t, spec);
                    }
                    for (std::size_t i = 0; i < op.inputs.size(); ++i)
                        if (op.inputs[i] == t)
                            given[i] = spec;
                }
                if (again)
                    continue;
                // The partial sums written here: stored as produced, or
                // reduced into a layout at once.
                const OpOutcome *produced = nullptr;
                decided.clear();
                r = (combined / choices) / restorings;
                for (const Storing &out : storedOuts) {
                    const auto n = static_cast<std::int64_t>(1 + out.ids.size());
                    const auto c = static_cast<std::size_t>(r % n);
                    r /= n;
                    if (!produced) {
                        for (const Storing &o : storedOuts)
                            fixed[o.slot] = -1;
                        produced = &opOutcome(id, given, pending, fixed);
                    }
                    const bool partial = produced->outputs[out.slot].partial;
                    if (c > 0 && (!partial || produced->outputs[out.slot].stored == out.ids[c - 1])) {
                        again = true;
                        break;
                    }
                    fixed[out.slot] = c > 0 ? out.ids[c - 1] : -1;
                    if (partial)
                        decided.push_back(op.outputs[out.slot]);
                }
                if (again)
                    continue;
                const OpOutcome &oc = opOutcome(id, given, pending, fixed);
                m_partialsStored = m_partialsStored || oc.partialsStored;
                st = state;  // into the scratch state's buffer: no allocation
                double time = oc.time * copies, comm = oc.comm * copies;
                std::int64_t activations = 0;
                // Re-stored here: moved from the produced spec, forward and
                // its gradient back, as its writer would store it so.
                for (const auto &[t, spec] : restored) {
                    const int at = st.find(static_cast<std::int32_t>(t.index()));
                    const std::int32_t from = st.spec(at);
                    // The writer's forward collectives run again where it is recomputed.
                    const ir::OpId writer = m_graph.tensor(t).producer;
                    const double again = writer.valid() && m_flow[t.index()]
                                             ? cost::recomputedForward(m_roles[writer.index()], m_modes[writer.index()],
                                                                       m_options.techniques.flashAttention)
                                                   .comm
                                             : 0;
                    const double forward = reshardTime(t, from, spec);
                    double backward = forward * again;
                    if (m_flow[t.index()] && sharding::isFloat(m_graph.tensor(t).dtype))
                        backward += reshardTime(t, gradientId(spec), gradientId(from));
                    time += (forward + m_backwardComm * backward) * static_cast<double>(copiesOf(t));
                    comm += (forward + backward) * static_cast<double>(copiesOf(t));
                    if (m_saved[t.index()])
                        activations += (savedBytes(t, spec) - savedBytes(t, from)) * copiesOf(t);
                    st.setSpec(at, spec);
                }
                auto entry = [&](ir::TensorId t, std::int32_t spec) {
                    const auto ti = static_cast<std::int32_t>(t.index());
                    if (const int at = st.find(ti); at >= 0)
                        return at;
                    if (m_saved[t.index()])
                        activations += savedBytes(t, spec) * copiesOf(t);
                    return st.insert(ti, spec);
                };
                for (std::size_t i = 0; i < op.inputs.size(); ++i) {
                    const ir::TensorId t = op.inputs[i];
                    const OpOutcome::Input &in = oc.inputs[i];
                    const int at = entry(t, in.stored);
                    if (!in.data)
                        continue;
                    const std::int32_t stored = st.spec(at);
                    // Needs and gradients are kept sorted, so that states
                    // differing only in the order their reshards were
                    // charged merge. A need of the stored spec itself (and
                    // a gradient that reduces to the stored one's) costs
                    // nothing now or later, so it is not kept to tell
                    // states apart.
                    if (in.need != stored && st.add(at, 0, in.need)) {
                        const double seconds =
                            stored == in.stored ? in.needSeconds : reshardTime(t, stored, in.need);
                        const double r = seconds * shareOf(t);
                        time += r * (1 + m_backwardComm * oc.recomputeComm);
                        comm += r * (1 + oc.recomputeComm);
                    }
                    if (oc.flows && m_flow[t.index()] && in.gradient != gradientId(stored) &&
                        st.add(st.find(static_cast<std::int32_t>(t.index())), 1, in.gradient)) {
                        const bool same = stored == in.stored;
                        const double seconds = same ? in.gradientSeconds : reshardTime(t, in.gradient, gradientId(stored));
                        // ZeRO 1 and 2 gather the parameter in the forward pass.
                        const double forward = same ? in.gradientForward : zeroForward(t, in.gradient, stored);
                        const double r = seconds * shareOf(t);
                        time += m_backwardComm * r + (1 - m_backwardComm) * forward * shareOf(t);
                        comm += r;
                    }
                }
                if (!op.inputs.empty() && cost::normOnSequenceShards(m_graph, m_mesh, op, oc.firstInput))
                    st.setSequenceParallel();
                std::int64_t korthikanti[2] = {0, 0};
                if (m_attention && op.type == "Softmax" && !op.inputs.empty()) {
                    const ShardingSpec keep = m_specs[op.inputs[0].index()];
                    m_specs[op.inputs[0].index()] = oc.firstInput;
                    for (int sp = 0; sp < 2; ++sp)
                        if (auto l = layerOf(id, sp == 1))
                            korthikanti[sp] = cost::layerActivationBytes(*l, m_options) +
                                              cost::layerWorkingBytes(*l, m_options, m_shares[id.index()]);
                    m_specs[op.inputs[0].index()] = keep;
                }
                for (std::size_t o = 0; o < op.outputs.size(); ++o)
                    if (readHere(static_cast<std::int32_t>(op.outputs[o].index())))
                        entry(op.outputs[o], oc.outputs[o].stored);
                for (ir::TensorId t : decided)
                    if (const int at = st.find(static_cast<std::int32_t>(t.index())); at >= 0)
                        st.add(at, 0, kDecided);
                st.dropWhere([&](std::int32_t t) { return lastRead(t) <= k; });
                auto &slot = next.slot(st);
                for (const Partial *pp = partialsBegin; pp != partialsEnd; ++pp) {
                    const Partial &p = *pp;
                    Partial n = p;
                    n.time += time + weightSeconds + oc.derivedSeconds * copies;
                    n.comm += comm;
                    n.weightBytes += weightBytes;
                    n.parameterBytes += weightBytes + oc.derivedBytes * copies;
                    n.activations += activations;
                    n.korthikanti[0] += korthikanti[0];
                    n.korthikanti[1] += korthikanti[1];
                    // Weight memory only grows: over capacity now, over at the end.
                    if (std::llround(n.weightBytes) > weightCapacity) {
                        ++m_capacitySkips;
                        continue;
                    }
                    n.pending = newWeights.empty() && storedOuts.empty() && storedIns.empty() ? -1 : combined;
                    slot.push_back(n);
                    ++extended;
                }
            }
        }
        // Weights whose choices all interact (their ops need the same
        // tensors in many different specs) make the front grow with every
        // one of them: stop with a clear answer before memory and time run out.
        m_peakStates = std::max(m_peakStates, next.size());
        if (extended > kMaxPartials)
            throw TapestryError(Error{segment.name, {}, "tap: more than " + std::to_string(kMaxPartials) +
                                                            " partial plans of " +
                                                            std::to_string(segment.weights.size()) +
                                                            " interacting weights; pin some of them, or plan it "
                                                            "with megatron"});
        Front built = next.build([&](std::vector<Partial> &ps) {
            if (m_memoryBinds)
                prune(ps);
            else
                keepBest(ps);
            // The kept partials' choices join the trail.
            for (Partial &p : ps) {
                if (p.pending < 0)
                    continue;
                if (trail.size() + newWeights.size() + storedOuts.size() + storedIns.size() >= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
                    throw TapestryError(Error{segment.name, {}, "tap: too many partial plans to search"});
                std::int64_t r = p.pending;
                for (int w : newWeights) {
                    const auto n = static_cast<std::int64_t>(segment.choices[static_cast<std::size_t>(w)].size());
                    trail.push_back({p.trail, w, static_cast<std::int32_t>(r % n)});
                    r /= n;
                    p.trail = static_cast<std::int32_t>(trail.size() - 1);
                }
                for (const auto *list : {&storedIns, &storedOuts})
                    for (const Storing &storing : *list) {
                        const auto n = static_cast<std::int64_t>(1 + storing.ids.size());
                        if (r % n > 0) {
                            trail.push_back({p.trail, static_cast<std::int32_t>(segment.weights.size() + storing.stored),
                                             static_cast<std::int32_t>(r % n)});
                            p.trail = static_cast<std::int32_t>(trail.size() - 1);
                        }
                        r /= n;
                    }
                p.pending = -1;
            }
        });
        if (m_dropDominatedCharges)
            dropDominatedByCharges(built, [&](std::int32_t t, std::int32_t stored, int list, std::int32_t value) {
                const ir::TensorId id{t};
                return list == 0 ? reshardTime(id, stored, value) * shareOf(id) * (1 + maxRecompute)
                                 : reshardTime(id, value, gradientId(stored)) * shareOf(id);
            });
        return built;
    };
    auto finish = [&](const Front &front) {
        std::vector<WeightChoice> result;
        for (std::size_t si = 0; si < front.size(); ++si)
            for (const Partial *pp = front.begin(si); pp != front.end(si); ++pp) {
                const Partial &p = *pp;
                const State &state = front.states[si];
                ++m_evaluations;
                std::vector<std::uint16_t> choice(segment.weights.size() + segment.stored.size(), 0);
                for (std::int32_t at = p.trail; at >= 0; at = trail[static_cast<std::size_t>(at)].previous)
                    choice[static_cast<std::size_t>(trail[static_cast<std::size_t>(at)].weight)] =
                        static_cast<std::uint16_t>(trail[static_cast<std::size_t>(at)].choice);
                for (std::size_t w = 0; w < segment.weights.size(); ++w)
                    if (const int leader = segment.tiedTo[w]; leader >= 0)
                        choice[w] = choice[static_cast<std::size_t>(leader)];
                result.push_back({p.time + heldSeconds, p.comm,
                                  std::llround(p.parameterBytes + heldBytes) + p.activations +
                                      p.korthikanti[state.sequenceParallel() ? 1 : 0],
                                  std::move(choice)});
            }
        return result;
    };

    auto writesLink = [&](std::size_t at) {
        const auto &outs = opOf(ops[at]).outputs;
        return !linkSpecs.empty() && std::find(outs.begin(), outs.end(), link) != outs.end();
    };
    // The ops before the first that writes a fixed output (a boundary
    // tensor, the link) or costs activations from the coster's working
    // specs (an attention core's softmax under Korthikanti's formula) see nothing of this call
    // but the specs of what they read from outside. Their front is kept by
    // those specs, so a block searched under every layout of what it
    // writes (each class output layout, each link layout) runs them once.
    std::size_t prefix = 0;
    for (; prefix < ops.size(); ++prefix) {
        const ir::Op &op = opOf(ops[prefix]);
        const bool fixes = std::any_of(op.outputs.begin(), op.outputs.end(),
                                       [&](ir::TensorId t) { return boundary.count(t) != 0; });
        // (A softmax outside an attention core, a router's, costs none.)
        if (fixes || writesLink(prefix) ||
            (m_attention && op.type == "Softmax" && layerOf(ops[prefix], false)))
            break;
    }
    std::vector<std::int64_t> key{ops.empty() ? -1 : ops.front().value,
                                  static_cast<std::int64_t>(ops.size()), static_cast<std::int64_t>(prefix),
                                  weightCapacity, static_cast<std::int64_t>(m_partial), m_flowVariant,
                                  static_cast<std::int64_t>(readLater.size())};
    for (ir::TensorId t : readLater)
        key.push_back(t.value);
    // The weights' choices: copies of a class searched with a pin held (a
    // group of their own over the same ops) have one choice where the
    // others have all, and their prefix is not the others'.
    for (std::size_t w = 0; w < segment.weights.size(); ++w) {
        key.push_back(segment.tiedTo[w]);
        key.push_back(static_cast<std::int64_t>(segment.choices[w].size()));
        if (segment.choices[w].size() == 1)
            key.push_back(intern(segment.choices[w].front()));
    }
    for (const auto &[t, spec] : segment.held) {
        key.push_back(t.value);
        key.push_back(intern(spec));
    }
    // Checkpoints in the prefix: before each op that reads a tensor from
    // outside (the link, a boundary input, a carried weight's spec), keyed
    // by the specs read before it. A block searched once per spec of a
    // tensor it reads late (the labels its loss reads last, a tied weight
    // its head reads) runs the ops before that reader once for all of
    // them, from the front kept there.
    std::vector<std::size_t> points;
    std::vector<std::vector<std::int64_t>> keys;
    {
        std::set<ir::TensorId> written;
        std::vector<std::int64_t> specs;
        auto keyAt = [&](std::size_t at) {
            auto k = key;
            k[2] = -1;  // the checkpoint, not where the prefix ends, says where the front stands
            k.push_back(static_cast<std::int64_t>(at));
            k.insert(k.end(), specs.begin(), specs.end());
            return k;
        };
        for (std::size_t k = 0; k < prefix; ++k) {
            const ir::Op &op = opOf(ops[k]);
            auto outside = [&](ir::TensorId t) { return !written.count(t) && weightOf(t) == kNotAWeight; };
            if (k > 0 && std::any_of(op.inputs.begin(), op.inputs.end(), outside)) {
                points.push_back(k);
                keys.push_back(keyAt(k));
            }
            for (ir::TensorId t : op.inputs)
                if (outside(t)) {
                    const auto it = boundary.find(t);
                    specs.push_back(intern(it != boundary.end() ? it->second : m_specs[t.index()]));
                }
            written.insert(op.outputs.begin(), op.outputs.end());
        }
        points.push_back(prefix);
        keys.push_back(keyAt(prefix));
    }
    // The latest checkpoint kept, and the prefix advanced from it to its
    // end, keeping the front at each checkpoint passed.
    std::size_t from = points.size();
    auto cached = m_memo->fronts.end();
    for (std::size_t j = points.size(); j-- > 0;)
        if (cached = m_memo->fronts.find(keys[j]); cached != m_memo->fronts.end()) {
            from = j;
            break;
        }
    if (from + 1 != points.size()) {
        const bool storedBefore = m_partialsStored;
        std::shared_ptr<const Front> at;
        std::size_t k = 0;
        if (from < points.size()) {
            at = cached->second.front;
            m_partialsStored = cached->second.partialsStored;
            k = points[from];
        } else {
            auto first = std::make_shared<Front>();
            first->states.emplace_back();
            first->partials.emplace_back();
            first->begins.push_back(1);
            at = std::move(first);
            m_partialsStored = false;
        }
        std::size_t next = from < points.size() ? from + 1 : 0;
        for (; k < prefix; ++k) {
            at = std::make_shared<const Front>(advance(*at, k, -1));
            if (next < points.size() && points[next] == k + 1) {
                if (next + 1 < points.size())
                    m_memo->fronts.emplace(keys[next], Memo::Prefix{at, m_partialsStored});
                ++next;
            }
        }
        cached = m_memo->fronts.emplace(std::move(keys.back()), Memo::Prefix{std::move(at), m_partialsStored}).first;
        m_partialsStored = m_partialsStored || storedBefore;
    }
    m_partialsStored = m_partialsStored || cached->second.partialsStored;
    // The cached front is read in place, not copied: advancing makes a new one.
    const Front *front = cached->second.front.get();
    Front advanced;
    std::size_t k = prefix;
    for (; k < ops.size() && !writesLink(k); ++k) {
        Front next = advance(*front, k, -1);
        advanced = std::move(next);
        front = &advanced;
    }
    if (k == ops.size())
        return {finish(*front)};
    // Nothing here reads the link, so the ops before its writer are searched
    // once for all of its specs.
    std::vector<std::vector<WeightChoice>> results;
    for (const auto &spec : linkSpecs) {
        Front f = advance(*front, k, intern(spec));
        for (std::size_t rest = k + 1; rest < ops.size(); ++rest)
            f = advance(f, rest, -1);
        results.push_back(finish(f));
    }
    return results;
}

SegmentCoster::SegmentCoster(const ir::Graph &graph, const sharding::Mesh &mesh, const cost::CostOptions &options)
    : m_graph(graph), m_mesh(mesh), m_options(options), m_flow(cost::gradientFlow(graph)),
      m_roles(cost::recomputeRoles(graph)), m_modes(cost::recomputeModes(graph, options.techniques)),
      m_shares(cost::layerShares(graph)),
      m_parameterShares(cost::parameterShares(graph)),
      m_specs(graph.tensorCount(), ShardingSpec::replicated(mesh.rank()))
{
    findAttention();
}

SegmentCoster::SegmentCoster(const ir::Graph &graph, const sharding::Mesh &mesh, const cost::CostOptions &options,
                             const cost::PlanCoster &derived)
    : m_graph(graph), m_mesh(mesh), m_options(options), m_flow(derived.flow()), m_roles(derived.roles()),
      m_modes(derived.modes()), m_shares(derived.shares()), m_parameterShares(derived.parameterShares()),
      m_specs(graph.tensorCount(), ShardingSpec::replicated(mesh.rank()))
{
    findAttention();
}

void SegmentCoster::findAttention()
{
    // m_specs holds every tensor replicated until the first evaluate().
    m_widths.assign(m_graph.opCount(), {});
    for (std::size_t o = 0; o < m_graph.opCount(); ++o) {
        const ir::OpId id(static_cast<std::int32_t>(o));
        if (m_graph.op(id).type != "Softmax")
            continue;
        m_widths[o] = cost::layerWidths(m_graph, id);
        m_attention = m_attention || layerOf(id, false).has_value();
    }
}

std::optional<cost::TransformerLayerShape> SegmentCoster::layerOf(ir::OpId softmax, bool sequenceParallel) const
{
    return cost::transformerLayer(m_graph, m_mesh, m_specs, softmax, sequenceParallel, &m_widths[softmax.index()]);
}

std::int64_t SegmentCoster::weightMemory(const Segment &segment, const std::vector<ShardingSpec> &weights) const
{
    cost::ParameterLoad load;
    for (std::size_t w = 0; w < segment.weights.size(); ++w)
        load += cost::parameterLoad(m_graph.tensor(segment.weights[w]), weights[w], m_mesh, m_options,
                                    m_parameterShares[segment.weights[w].index()]);
    return cost::chargeParameters(load, m_mesh, m_options).bytes;
}

SegmentCost SegmentCoster::evaluate(const Segment &segment, const std::map<ir::TensorId, ShardingSpec> &boundary,
                                    const std::vector<ShardingSpec> &weights, bool withBreakdown)
{
    ++m_evaluations;
    const ShardingSpec replicated = ShardingSpec::replicated(m_mesh.rank());
    for (const auto &[t, spec] : boundary)
        m_specs[t.index()] = spec;
    for (std::size_t w = 0; w < segment.weights.size(); ++w)
        m_specs[segment.weights[w].index()] = weights[w];
    std::vector<ir::TensorId> pending(segment.derived.begin(), segment.derived.end());
    auto takePending = [&](ir::TensorId t) {
        auto it = std::find(pending.begin(), pending.end(), t);
        if (it == pending.end())
            return false;
        pending.erase(it);
        return true;
    };
    for (auto t : segment.derived)
        m_specs[t.index()] = replicated;
    for (const auto &[t, spec] : segment.held) {
        m_specs[t.index()] = spec;
        std::erase(pending, t);
    }

    std::vector<sharding::OpStrategy> strategies;
    strategies.reserve(segment.ops.size());
    std::vector<ShardingSpec> inputs;
    for (ir::OpId id : segment.ops) {
        const ir::Op &op = m_graph.op(id);
        auto resolve = [&] {
            inputs.clear();
            for (auto t : op.inputs)
                inputs.push_back(m_specs[t.index()]);
            return sharding::resolveStrategy(m_graph, id, inputs, m_mesh, ruleOf(id));
        };
        sharding::OpStrategy s = resolve();
        bool derivedHere = false;
        for (std::size_t i = 0; i < op.inputs.size(); ++i) {
            if (!takePending(op.inputs[i]) || !s.dataInputs[i])
                continue;
            // A bias or scale is stored the way its consumer computes on it,
            // a pending sum (a row-parallel bias added once) as a replica.
            ShardingSpec spec = s.inputs[i];
            for (auto &p : spec.placements)
                if (p.isPartial())
                    p = Placement::replicate();
            if (spec.holds(m_graph.tensor(op.inputs[i]).shape, m_mesh) && spec != m_specs[op.inputs[i].index()]) {
                m_specs[op.inputs[i].index()] = spec;
                derivedHere = true;
            }
        }
        if (derivedHere)
            s = resolve();
        for (std::size_t o = 0; o < op.outputs.size(); ++o) {
            const ir::TensorId t = op.outputs[o];
            if (boundary.count(t))
                continue;
            m_partialsStored = m_partialsStored || s.outputs[o] != withoutPartials(s.outputs[o]);
            m_specs[t.index()] = sharding::storedSpec(s.outputs[o], m_graph.tensor(t).shape, m_mesh, m_partial);
        }
        strategies.push_back(std::move(s));
    }

    SegmentCost result;
    cost::PlanCost c;
    double backwardCompute = 0, backwardComm = 0;
    if (withBreakdown) {
        c = cost::evaluateOps(m_graph, m_mesh, m_specs, segment.ops, strategies, m_flow,
                              {&m_roles, &m_modes, m_options.techniques.flashAttention}, &m_options.techniques);
        if (auto it = c.byPhase.find("backward"); it != c.byPhase.end()) {
            backwardCompute = it->second.compute;
            backwardComm = it->second.comm;
        }
    } else {
        const auto totals = cost::evaluateOpsTotals(m_graph, m_mesh, m_specs, segment.ops, strategies, m_flow,
                                                    {&m_roles, &m_modes, m_options.techniques.flashAttention},
                                                    &m_options.techniques);
        c.compute = totals.compute;
        c.comm = totals.comm;
        c.stepTime = totals.compute + totals.comm;
        backwardCompute = totals.backwardCompute;
        backwardComm = totals.backwardComm;
    }
    // Inputs other copies also read: this copy carries its share of their
    // reshards, as the whole plan makes them once.
    for (const auto &[t, share] : segment.readShare) {
        const ir::Tensor &tensor = m_graph.tensor(t);
        const ShardingSpec &stored = m_specs[t.index()];
        std::vector<ShardingSpec> needs, contributions;
        double reshards = 0, backwardReshards = 0;
        for (std::size_t k = 0; k < segment.ops.size(); ++k) {
            const ir::Op &op = m_graph.op(segment.ops[k]);
            const sharding::OpStrategy &s = strategies[k];
            for (std::size_t i = 0; i < op.inputs.size(); ++i) {
                if (op.inputs[i] != t || !s.dataInputs[i])
                    continue;
                if (s.inputs[i] != stored && std::find(needs.begin(), needs.end(), s.inputs[i]) == needs.end()) {
                    needs.push_back(s.inputs[i]);
                    // Charged again where the reader is recomputed.
                    const double again = cost::gradientFlows(op, s, m_flow)
                                             ? cost::recomputedForward(m_roles[segment.ops[k].index()],
                                                                       m_modes[segment.ops[k].index()],
                                                                       m_options.techniques.flashAttention)
                                                   .comm
                                             : 0;
                    const double forward = cost::reshardSeconds(tensor, stored, s.inputs[i], m_mesh);
                    reshards += forward * (1 + again);
                    backwardReshards += forward * again;
                }
                if (cost::gradientFlows(op, s, m_flow) && m_flow[t.index()] &&
                    s.inputGradients[i] != sharding::gradientSpec(stored) &&
                    std::find(contributions.begin(), contributions.end(), s.inputGradients[i]) ==
                        contributions.end()) {
                    contributions.push_back(s.inputGradients[i]);
                    const ShardingSpec gradient = sharding::gradientSpec(stored);
                    const double backward = cost::reshardSeconds(tensor, s.inputGradients[i], gradient, m_mesh);
                    reshards += backward;
                    backwardReshards += backward - cost::zeroForwardSeconds(tensor, s.inputGradients[i], gradient,
                                                                            stored, m_mesh, m_options.techniques);
                }
            }
        }
        c.comm -= reshards * (1 - share);
        c.stepTime -= reshards * (1 - share);
        backwardComm -= backwardReshards * (1 - share);
    }
    cost::ParameterLoad load;
    for (const auto *parameters : {&segment.weights, &segment.derived})
        for (auto t : *parameters)
            load += cost::parameterLoad(m_graph.tensor(t), m_specs[t.index()], m_mesh, m_options,
                                        m_parameterShares[t.index()]);
    const cost::ParameterCharge perParameter = cost::chargeParameters(load, m_mesh, m_options);
    result.comm = c.comm + perParameter.zero.comm;
    result.backwardCompute = backwardCompute;
    result.backwardComm = backwardComm + perParameter.zeroBackward;
    result.time = c.stepTime + perParameter.seconds() - (1 - m_backwardCompute) * result.backwardCompute -
                  (1 - m_backwardComm) * result.backwardComm;
    result.parameterMemory = perParameter.bytes;

    std::int64_t activations = 0;
    if (m_attention) {
        bool sequenceParallel = false;
        for (ir::OpId id : segment.ops) {
            const ir::Op &op = m_graph.op(id);
            if (!op.inputs.empty() && cost::normOnSequenceShards(m_graph, m_mesh, op, m_specs[op.inputs[0].index()]))
                sequenceParallel = true;
        }
        for (ir::OpId id : segment.ops)
            if (auto l = layerOf(id, sequenceParallel))
                activations += cost::layerActivationBytes(*l, m_options) +
                               cost::layerWorkingBytes(*l, m_options, m_shares[id.index()]);
    } else {
        // The saved-tensor model of the cost model, over this segment's ops.
        std::set<ir::TensorId> saved;
        for (ir::OpId id : segment.ops) {
            const ir::Op &op = m_graph.op(id);
            const bool flows = std::any_of(op.inputs.begin(), op.inputs.end(),
                                           [&](ir::TensorId t) { return m_flow[t.index()]; });
            if (!flows || !cost::savesInputs(op))
                continue;
            for (auto t : op.inputs)
                if (m_graph.tensor(t).role != ir::Role::Parameter)
                    saved.insert(t);
        }
        for (auto t : saved)
            activations += cost::savedBytes(m_graph.tensor(t), m_specs[t.index()], m_mesh,
                                            m_options.techniques.microBatches);
    }
    result.memory = result.parameterMemory + activations;
    if (withBreakdown)
        result.breakdown = std::move(c);
    return result;
}

std::vector<std::vector<ir::OpId>> splitAtResidualCuts(const ir::Graph &graph, const std::vector<ir::OpId> &ops)
{
    std::map<ir::OpId, std::size_t> position;
    for (std::size_t k = 0; k < ops.size(); ++k)
        position[ops[k]] = k;
    // Per position p: how many tensors written at or before p are read after p.
    std::vector<int> crossing(ops.size(), 0);
    std::vector<ir::TensorId> lastCrossing(ops.size());
    for (std::size_t k = 0; k < ops.size(); ++k)
        for (auto t : graph.op(ops[k]).outputs) {
            std::size_t last = k;
            for (auto c : graph.tensor(t).consumers)
                if (auto it = position.find(c); it != position.end())
                    last = std::max(last, it->second);
            for (std::size_t p = k; p < last; ++p) {
                crossing[p] += 1;
                lastCrossing[p] = t;
            }
        }
    std::vector<std::vector<ir::OpId>> blocks(1);
    for (std::size_t k = 0; k < ops.size(); ++k) {
        blocks.back().push_back(ops[k]);
        if (k + 1 == ops.size() || crossing[k] != 1)
            continue;
        // The residual stream: an Add's output (pre-norm layers), or a
        // norm's that an Add reads again (post-norm layers, BERT's).
        const ir::Tensor &t = graph.tensor(lastCrossing[k]);
        const ir::Op &op = graph.op(ops[k]);
        const bool residual = op.type == "Add" || (op.isNorm() && std::any_of(t.consumers.begin(), t.consumers.end(),
                                                                               [&](ir::OpId c) {
                                                                                   return graph.op(c).type == "Add";
                                                                               }));
        if (t.producer == ops[k] && t.consumers.size() >= 2 && residual)
            blocks.emplace_back();
    }
    return blocks;
}

namespace {

// Fills segment.tiedTo: a weight is tied to an earlier one when their names
// differ in one numbered module alone ("experts.3/w1/weight" and
// "experts.0/w1/weight"), their shapes and types match, and the ops that
// read them first are of one type, the earlier one's first. Names without
// a numbered module inside them tie nothing.
void tieNestedRepeats(const ir::Graph &graph, Segment &s)
{
    s.tiedTo.assign(s.weights.size(), -1);
    std::map<ir::TensorId, std::size_t> firstReader;  // position in s.ops
    for (std::size_t k = 0; k < s.ops.size(); ++k)
        for (ir::TensorId t : graph.op(s.ops[k]).inputs)
            firstReader.try_emplace(t, k);
    std::map<std::string, std::size_t> byKey;  // a name with one numbered module blanked -> its first weight
    for (std::size_t w = 0; w < s.weights.size(); ++w) {
        const ir::Tensor &tensor = graph.tensor(s.weights[w]);
        const std::string &name = tensor.name;
        const std::size_t reader = firstReader.at(s.weights[w]);
        std::vector<std::string> keys;
        for (std::size_t begin = 0; begin < name.size();) {
            std::size_t end = name.find_first_of("/.", begin);
            if (end == std::string::npos)
                end = name.size();
            const bool numbered = end > begin && end < name.size() &&
                                  std::all_of(name.begin() + static_cast<std::ptrdiff_t>(begin),
                                              name.begin() + static_cast<std::ptrdiff_t>(end),
                                              [](char c) { return c >= '0' && c <= '9'; });
            if (numbered && begin > 0)
                keys.push_back(name.substr(0, begin) + "#" + name.substr(end));
            begin = end + 1;
        }
        for (const std::string &key : keys) {
            const auto it = byKey.find(key);
            if (it == byKey.end())
                continue;
            const ir::Tensor &other = graph.tensor(s.weights[it->second]);
            const std::size_t otherReader = firstReader.at(s.weights[it->second]);
            if (other.shape == tensor.shape && other.dtype == tensor.dtype && otherReader < reader &&
                graph.op(s.ops[otherReader]).type == graph.op(s.ops[reader]).type) {
                const int leader = s.tiedTo[it->second];
                s.tiedTo[w] = leader >= 0 ? leader : static_cast<int>(it->second);
                break;
            }
        }
        for (std::string &key : keys)
            byKey.try_emplace(std::move(key), w);
    }
}

} // namespace

Segment makeSegment(const ir::Graph &graph, const sharding::Mesh &mesh, std::string name, int classIndex,
                    int instances, std::vector<ir::OpId> ops)
{
    Segment s;
    s.name = std::move(name);
    s.classIndex = classIndex;
    s.instances = instances;
    s.ops = std::move(ops);
    const std::set<ir::OpId> inside(s.ops.begin(), s.ops.end());
    std::set<ir::TensorId> seen;
    for (ir::OpId id : s.ops) {
        const ir::Op &op = graph.op(id);
        for (auto t : op.inputs) {
            const ir::Tensor &tensor = graph.tensor(t);
            if (!seen.insert(t).second)
                continue;
            if (tensor.role == ir::Role::Parameter) {
                // A parameter another segment also reads (a tied embedding)
                // is decided where it is read first.
                bool readFirstHere = true;
                for (auto c : tensor.consumers)
                    readFirstHere = readFirstHere && (inside.count(c) || c > id);
                if (!readFirstHere)
                    s.inputs.push_back(t);
                else  // (a bias of any rank, GPT-2's fused [3, 1, h] and torch's in_proj_bias too, is derived)
                    (tensor.shape.size() >= 2 && sharding::isFloat(tensor.dtype) && !tensor.name.ends_with("bias")
                         ? s.weights
                         : s.derived)
                        .push_back(t);
            } else if (!tensor.producer.valid() || !inside.count(tensor.producer)) {
                s.inputs.push_back(t);
            }
        }
        for (auto t : op.outputs) {
            const ir::Tensor &tensor = graph.tensor(t);
            bool outside = tensor.role == ir::Role::Output || tensor.consumers.empty();
            for (auto c : tensor.consumers)
                outside = outside || !inside.count(c);
            if (outside)
                s.outputs.push_back(t);
        }
    }
    for (auto w : s.weights) {
        const ir::Tensor &tensor = graph.tensor(w);
        std::vector<ShardingSpec> specs{ShardingSpec::replicated(mesh.rank())};
        for (int a = 0; a < mesh.rank(); ++a) {
            std::vector<ShardingSpec> next;
            for (const auto &spec : specs) {
                next.push_back(spec);
                for (int d = 0; d < static_cast<int>(tensor.shape.size()); ++d) {
                    ShardingSpec n = spec;
                    n.placements[static_cast<std::size_t>(a)] = Placement::shard(d);
                    next.push_back(n);
                }
            }
            specs = std::move(next);
        }
        std::vector<ShardingSpec> legal;
        for (const auto &spec : specs)
            if (spec.holds(tensor.shape, mesh))
                legal.push_back(spec);
        s.choices.push_back(std::move(legal));
    }
    tieNestedRepeats(graph, s);
    return s;
}

namespace {

// Whether op `c`'s coarse node computes on what it reads in a way its
// layout decides (a matmul, a convolution, an attention core, a norm, a
// loss): where storing that input otherwise than as produced can pay.
bool computesOn(const passes::CoarseGraph &coarse, ir::OpId c)
{
    switch (coarse.node(coarse.nodeOf(c)).kind) {
    case passes::NodeKind::Linear:
    case passes::NodeKind::MatMul:
    case passes::NodeKind::Conv:
    case passes::NodeKind::Attention:
    case passes::NodeKind::Norm:
    case passes::NodeKind::Loss:
        return true;
    default:
        return false;
    }
}

} // namespace

void allowInputLayouts(Segment &segment, const ir::Graph &graph, const sharding::Mesh &mesh,
                       const std::vector<ActivationLayout> &layouts, const std::vector<ir::TensorId> *only)
{
    const std::set<ir::OpId> inside(segment.ops.begin(), segment.ops.end());
    const ShardingSpec replicated = ShardingSpec::replicated(mesh.rank());
    for (ir::TensorId t : segment.inputs) {
        const ir::Tensor &tensor = graph.tensor(t);
        if (tensor.producer.valid() || tensor.role == ir::Role::Parameter ||
            std::find(segment.stored.begin(), segment.stored.end(), t) != segment.stored.end() ||
            (only && std::find(only->begin(), only->end(), t) == only->end()))
            continue;
        std::vector<ShardingSpec> specs;
        for (const auto &layout : layouts)
            if (auto spec = layout.specFor(tensor, mesh); spec != replicated || only)
                specs.push_back(std::move(spec));
        std::sort(specs.begin(), specs.end());
        specs.erase(std::unique(specs.begin(), specs.end()), specs.end());
        if (specs.empty())
            continue;
        segment.stored.push_back(t);
        segment.storedChoices.push_back(std::move(specs));
    }
}

void allowStoredLayouts(Segment &segment, const ir::Graph &graph, const passes::CoarseGraph &coarse,
                        const sharding::Mesh &mesh, const std::vector<ActivationLayout> &layouts)
{
    segment.stored.clear();
    segment.storedChoices.clear();
    // Nested repeats (a mixture's experts) take one choice of weights
    // between them; their inner outputs, chosen each on its own, would
    // multiply the search by the layouts per repeat.
    if (std::any_of(segment.tiedTo.begin(), segment.tiedTo.end(), [](int t) { return t >= 0; }))
        return;
    const std::set<ir::OpId> inside(segment.ops.begin(), segment.ops.end());
    for (ir::OpId id : segment.ops) {
        const passes::NodeId node = coarse.nodeOf(id);
        for (ir::TensorId t : graph.op(id).outputs) {
            const ir::Tensor &tensor = graph.tensor(t);
            // A tensor read outside the segment too is stored as the
            // boundary or the link between blocks says.
            if (tensor.role == ir::Role::Output ||
                std::find(segment.outputs.begin(), segment.outputs.end(), t) != segment.outputs.end())
                continue;
            // Read by another node that computes on it as stored (a
            // matmul, a norm); written by an embedding lookup (split over
            // the hidden features by its table, summed before the norm
            // reads it); or a matmul's output a residual add reads (a
            // row-parallel projection's partial sum, all-reduced or
            // reduce-scattered before the add). Outputs a pointwise chain
            // passes along (a rotary embedding's, a gated MLP's halves)
            // follow the layout they are given: storing each of them as
            // searched multiplied LLaMA's search six- to tenfold.
            const auto kind = coarse.node(node).kind;
            const bool lookup = kind == passes::NodeKind::Embedding;
            const bool product =
                kind == passes::NodeKind::Linear || kind == passes::NodeKind::MatMul || kind == passes::NodeKind::Conv;
            bool crosses = false;
            for (ir::OpId c : tensor.consumers)
                crosses = crosses || (inside.count(c) && coarse.nodeOf(c) != node &&
                                      (lookup || computesOn(coarse, c) || (product && graph.op(c).type == "Add")));
            if (!crosses)
                continue;
            std::vector<ShardingSpec> specs;
            for (const auto &layout : layouts)
                specs.push_back(layout.specFor(tensor, mesh));
            std::sort(specs.begin(), specs.end());
            specs.erase(std::unique(specs.begin(), specs.end()), specs.end());
            segment.stored.push_back(t);
            segment.storedChoices.push_back(std::move(specs));
        }
    }
}

double searchStateBound(const ir::Graph &graph, const Segment &segment)
{
    return orderWithBound(graph, segment, false).bound;
}

} // namespace tapestry::search
