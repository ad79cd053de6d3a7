#include "search/tapsearch.h"

#include "cost/objective.h"
#include "cost/plancoster.h"
#include "ir/error.h"
#include "passes/coarsen.h"
#include "plan/fingerprint.h"
#include "plan/plan.h"
#include "search/activationlayout.h"
#include "search/axisconstraint.h"
#include "search/segmentcost.h"
#include "sharding/propagation.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

namespace tapestry::search {

namespace {

using sharding::ShardingSpec;

// A partial plan as the dynamic program carries it: its totals and the
// choices that made it (per block: the layout index of the link after it,
// or -1, and the mixed-radix index of its weight choices).
struct Candidate {
    double time = 0;
    double comm = 0;
    std::int64_t memory = 0;
    std::vector<std::int64_t> trail;
};

Candidate operator+(const Candidate &a, const Candidate &b)
{
    Candidate c{a.time + b.time, a.comm + b.comm, a.memory + b.memory, a.trail};
    c.trail.insert(c.trail.end(), b.trail.begin(), b.trail.end());
    return c;
}

// A class's plan as searchGroup writes it, of the given totals: its
// trail is [k, first's trail, second's trail], the copies k names taking
// the first plan and the others the second.
Candidate split(std::int64_t k, double time, double comm, std::int64_t memory, const Candidate &first,
                const Candidate &second)
{
    Candidate c{time, comm, memory, {k}};
    c.trail.reserve(1 + first.trail.size() + second.trail.size());
    c.trail.insert(c.trail.end(), first.trail.begin(), first.trail.end());
    c.trail.insert(c.trail.end(), second.trail.begin(), second.trail.end());
    return c;
}

// What a front minimises besides memory: step time, or communication for
// the least-communication plan.
enum class Metric { Time, Comm };

double value(const Candidate &c, Metric m)
{
    return m == Metric::Time ? c.time : c.comm;
}

// Keeps the candidates no other beats in the metric and memory together
// (of equal ones, the first): sorted by the metric, each kept one needs
// less memory than every one before it.
std::vector<Candidate> paretoFront(std::vector<Candidate> cs, Metric m)
{
    std::stable_sort(cs.begin(), cs.end(), [m](const Candidate &a, const Candidate &b) {
        return value(a, m) != value(b, m) ? value(a, m) < value(b, m) : a.memory < b.memory;
    });
    std::vector<Candidate> front;
    for (auto &c : cs)
        if (front.empty() || c.memory < front.back().memory)
            front.push_back(std::move(c));
    return front;
}

std::vector<Candidate> paretoSum(const std::vector<Candidate> &a, const std::vector<Candidate> &b, Metric m)
{
    std::vector<Candidate> sums;
    sums.reserve(a.size() * b.size());
    for (const auto &x : a)
        for (const auto &y : b)
            sums.push_back(x + y);
    return paretoFront(std::move(sums), m);
}

// The fronts of both objectives, carried side by side so that every
// choice is costed once.
struct Fronts {
    std::vector<Candidate> time, comm;
};

Fronts frontsOf(std::vector<Candidate> cs)
{
    return {paretoFront(cs, Metric::Time), paretoFront(std::move(cs), Metric::Comm)};
}

Fronts sum(const Fronts &a, const Fronts &b)
{
    return {paretoSum(a.time, b.time, Metric::Time), paretoSum(a.comm, b.comm, Metric::Comm)};
}

// The most activation layouts for which a block's coarse-node outputs are
// stored as searched (Segment::stored): a 1D mesh's three, a 2D mesh's four
// where its axis names restrict them. Past that, a block's search grows by
// the layouts squared where one op reads two such tensors (the attention
// scores), twenty-fold on a 2x4 mesh, and those outputs follow the strategy
// rules instead (core/search/README.md, Known gaps).
constexpr std::size_t kStoredLayoutsUpTo = 4;
// ... and for blocks without an attention core (an MLP, a convolution, the
// head and the loss), whose stored outputs each a reader takes alone: a 2D
// mesh's nine.
constexpr std::size_t kStoredLayoutsWithoutAttentionUpTo = 9;

// Past those, a block may still store its coarse outputs gathered whole
// (replicated) besides as produced, as a Megatron-style plan all-gathers a
// column-parallel output before a replicated layer reads it, where its
// search's bound on the states (searchStateBound) stays under this: GPT-2's
// and LLaMA's attention blocks on 2x4 go from about 2e4 to 7e5, while
// BERT's (2e6 to 1e9) and its embeddings with their tied MLM head on 2x2x2
// (2e6 to 3e7) keep the strategy rules.
constexpr double kGatheredOutputsStatesUpTo = 1e6;

bool hasAttentionCore(const passes::CoarseGraph &coarse, const Segment &segment)
{
    return std::any_of(segment.ops.begin(), segment.ops.end(), [&](ir::OpId id) {
        return coarse.node(coarse.nodeOf(id)).kind == passes::NodeKind::Attention;
    });
}

// A class front mixes every pair of its plans between its copies where
// that makes at most this many mixes (pairs times the ways to split the
// copies), else the pairs adjacent on its lower convex hull.
constexpr std::size_t kMixEveryPairUpTo = 4096;

// One class (or the ops outside classes): its blocks and the tensors linking them.
struct Group {
    int classIndex = -1;
    int instances = 1;
    std::vector<Segment> blocks;
    std::vector<ir::TensorId> links;  // links[k] joins blocks[k] and blocks[k+1]
    Segment whole;                    // all blocks as one, for the exhaustive mode
    std::vector<int> variables;       // layout variables its costs depend on, sorted
    // Copies of the class searched apart from the others, as a group of
    // their own over the same ops (instances counting them), while this
    // group counts the other copies: where the user pinned weights of some
    // copies and not of the others (those copies searched with the pins
    // held, this group holding none), or where some copies take no
    // gradient through an input the others take one through (the first
    // layer of a stack reads the model's input: its plan costs less
    // communication than the other layers'). apartInstance[i]: copy i of
    // the class is one of them.
    std::shared_ptr<Group> apartCopies;
    std::vector<bool> apartInstance;
    // Why the copies are apart: "pinned", "its input takes no gradient".
    std::string apartWhy;
    // The gradient flow the group's blocks are costed with
    // (SegmentCoster::addGradientFlow): its copies'.
    int flowVariant = 0;
};

class TapSearch {
public:
    // `backwardCompute`, `backwardComm`: SegmentCoster::setBackwardWeights.
    TapSearch(const ir::Graph &graph, const passes::CoarseGraph &coarse, const passes::SubgraphClasses &classes,
              const sharding::Mesh &mesh, const SearchOptions &options, double backwardCompute = 1,
              double backwardComm = 1)
        : m_planCoster(std::make_unique<cost::PlanCoster>(graph, mesh, options.cost)), m_graph(graph),
          m_coarse(coarse), m_classes(classes), m_mesh(mesh), m_options(options),
          m_main{SegmentCoster(graph, mesh, options.cost, *m_planCoster), nullptr, false},
          m_layouts(boundaryLayouts(mesh.rank(), options.axisRoles)),
          m_storedLayouts(allowedLayouts(mesh.rank(), options.axisRoles)), m_capacity(mesh.device.memoryBytes > 0
                                                             ? mesh.device.memoryBytes
                                                             : std::numeric_limits<std::int64_t>::max())
    {
        m_coster.setBackwardWeights(backwardCompute, backwardComm);
        for (const auto &[name, spec] : options.pinned) {
            const auto t = graph.findTensor(name);
            if (!t)
                throw TapestryError(Error{name, {}, "pinned tensor is not in the model"});
            if (auto problem = spec.problem(graph.tensor(*t).shape, mesh))
                throw TapestryError(Error{name, {}, "pinned spec " + spec.toPlacements() + ": " + *problem});
            const auto broken = graph.tensor(*t).role == ir::Role::Parameter ? brokenAxis(options.axisRoles, spec)
                                                                              : std::nullopt;
            if (broken) {
                const auto a = static_cast<std::size_t>(*broken);
                throw TapestryError(Error{name, {}, "pinned spec " + spec.toPlacements() + " splits it over axis " +
                                                        mesh.axes[a].name + ", named for " +
                                                        std::string(plan::toString(*options.axisRoles[a])) +
                                                        ", which splits no weight"});
            }
        }
        buildGroups();
    }

    SearchResult run(const std::string &modelSource);

private:
    void buildGroups();
    // Where copies of a class take a gradient through their inputs
    // differently (the first layer of a stack reads the model's input,
    // which takes none; the others the layer before): the gradient flow
    // most copies have, as the representative's tensors carry it
    // (SegmentCoster::addGradientFlow), and the copies that differ with
    // theirs, searched apart. Nothing where every copy is alike.
    struct FlowSplit {
        int most = 0;   // the variant most copies take
        int other = 0;  // the variant of the copies marked apart
        bool fewerGradients = false;  // they take fewer than most copies
        std::vector<bool> apart;
    };
    std::optional<FlowSplit> splitByFlow(const passes::SubgraphClass &cls);
    // Holds each weight of `segment` that `pins` names to its pin.
    void holdPins(Segment &segment, const std::map<ir::TensorId, ShardingSpec> &pins) const;
    // The user's pins of the weights of the class's instance `inst`, named
    // by the representative's weights they correspond to.
    std::map<ir::TensorId, ShardingSpec> pinsOfInstance(const passes::SubgraphClass &cls,
                                                        const passes::SubgraphInstance &inst) const;
    // The plans of a group under each way of storing its partial sums,
    // merged; trails as searchBlocks writes them.
    struct Worker;
    Fronts searchPlans(Worker &w, const Group &g, const std::vector<int> &vars);
    int variableOf(int classIndex) const { return classIndex >= 0 ? classIndex : 0; }
    // Whether mesh axes a and b are interchangeable: one size, one link,
    // no role and no pin telling them apart.
    bool interchangeable(std::size_t a, std::size_t b) const;
    // Per permutation of interchangeable axes but the identity: the index
    // in m_layouts each layout maps to (-1 where the image is not allowed).
    std::vector<std::vector<int>> layoutPermutations() const;

    ShardingSpec inputSpec(const Group &g, ir::TensorId t, const std::vector<int> &vars) const;
    std::map<ir::TensorId, ShardingSpec> boundaryOf(const Group &g, const Segment &s, const std::vector<int> &vars,
                                                    int before, int after, std::size_t block) const;
    // A group's plans under each way of storing its partial sums (one
    // choice per group, see kPartialWays), merged. A group's trail is
    // [k, first, second]: its first k copies take the first plan, the rest
    // the second (the same one unless copies are planned apart), and with
    // copies apart (Group::apartCopies) their plan's trail after those;
    // each plan's trail starts with the index of its way.
    Fronts searchGroup(Worker &w, const Group &g, const std::vector<int> &vars);
    Fronts searchBlocks(Worker &w, const Group &g, const std::vector<int> &vars, int partial);
    // A class's plans where its copies may take two plans of its front
    // between them (SearchOptions::copiesApart), added to `plans`, the
    // front with every copy alike; the front's trails as searchGroup
    // writes them: [copies taking the first, trail, trail].
    std::vector<Candidate> mixCopies(const std::vector<Candidate> &front, std::size_t n, Metric metric,
                                     std::vector<Candidate> plans) const;
    Fronts searchGroupExhaustively(Worker &w, const Group &g, const std::vector<int> &vars, int partial);
    // Replays a group's trail: the specs it fixes for the representative's tensors.
    void replay(const Group &g, const std::vector<int> &vars, const std::vector<std::int64_t> &trail,
                std::map<ir::TensorId, ShardingSpec> &fixed);
    // The specs of a trail's plan, by tensor id.
    // `inputs`: graph inputs stored otherwise than the plan's copies say.
    std::vector<ShardingSpec> assemble(const std::vector<int> &vars, const Candidate &best,
                                       const std::map<ir::TensorId, ShardingSpec> &inputs = {});
    // The whole plan's coster: the plans assembled share it, each costed by
    // what differs from the one before; the segment coster takes what it
    // derived from the graph.
    cost::PlanCoster &planCoster();
    // The plan of a trail; where a class's copies split between two plans, which
    // copies take which is not in the search's costs (each copy is costed
    // as the representative, while the first layer's input, say, needs no
    // gradient): per such class the other way round is assembled too and
    // the better plan kept. Likewise a graph input a class reads in its
    // layout (the first layer's input, where the other layers read the
    // layer before) is stored so or replicated, which any layout slices
    // for free, whichever the whole plan's cost prefers: the search costs
    // every copy as the representative, reading its boundary layout.
    // Ways are ranked on the whole plan's totals; the plan kept is built
    // once, a copy of `previous` (assembled just before) where their specs
    // are the same.
    plan::Plan assembleApart(const std::string &modelSource, const std::vector<int> &vars, Candidate &best,
                             const plan::Plan *previous = nullptr);
    // One line per class whose copies `best` splits between two plans
    // (SearchStats::copiesApart).
    std::vector<std::string> copiesApart(const Candidate &best) const;
    // The length of a group's trail: [k, first, second], and the copies
    // apart's trail after them.
    static std::size_t trailLength(const Group &g)
    {
        const std::size_t n = 1 + 2 * g.blocks.size();
        return 1 + 2 * n + (g.apartCopies ? n : 0);
    }
    // searchWeights' answer for `block` of `g`, from an earlier search of
    // it with the same boundary, bound, link and partial sums where there
    // was one (a block of the ops outside classes that reads no class's
    // layout is searched once, not once per combination of the classes'
    // layouts). Valid until the next call.
    const std::vector<std::vector<WeightChoice>> &blockAnswer(Worker &w, const Group &g, const Segment &block,
                                                              int partial,
                                                              const std::map<ir::TensorId, ShardingSpec> &boundary,
                                                              ir::TensorId link,
                                                              const std::vector<ShardingSpec> &linkSpecs,
                                                              const std::vector<ir::TensorId> &readLater);
    struct BlockAnswer {
        std::vector<std::vector<WeightChoice>> found;
        bool partialsStored = false;
    };
    // What one thread of the search works with: its segment coster (whose
    // caches and working specs the per-op search changes) and the block
    // answers it has found. The groups' searches of different layout
    // combinations are independent, so each runs on one worker, its fronts
    // the same whichever worker found them (searchGroups).
    // A block's answer, shared by the workers: the one that announced it
    // finds it, the others wait for it (m_blockAnswers).
    struct SharedAnswer {
        std::mutex mutex;
        std::condition_variable ready;
        bool done = false, failed = false;
        BlockAnswer answer;
    };
    std::map<std::vector<std::int64_t>, std::shared_ptr<SharedAnswer>> m_blockAnswers;
    std::size_t m_blockAnswerChoices = 0;  // the choices m_blockAnswers holds
    std::mutex m_answersMutex;             // for both
    struct Worker {
        SegmentCoster coster;
        std::shared_ptr<SharedAnswer> current;  // the answer blockAnswer last returned
        bool capacitySkipped = false;           // the exhaustive path dropped a choice for its weights' memory
    };
    // Keeps a block's weight choice for the trails, which hold its index.
    std::int64_t keep(std::vector<std::uint16_t> choice)
    {
        const std::lock_guard lock(m_choicesMutex);
        m_choices.push_back(std::move(choice));
        return static_cast<std::int64_t>(m_choices.size() - 1);
    }
    // Runs searchGroup for each task (a group and a combination of
    // layouts) on up to SearchOptions::threads workers, the first of them
    // m_main; the fronts in the tasks' order. The other workers start from
    // copies of m_main's coster made as each exploration starts.
    // `finished` is called on the calling thread with the tasks completed
    // so far; it may throw (cancelled), which stops every worker.
    std::vector<Fronts> searchGroups(const std::vector<std::pair<std::size_t, std::vector<int>>> &tasks,
                                     const std::function<void(std::size_t)> &finished);
    std::unique_ptr<cost::PlanCoster> m_planCoster;
    std::string m_fingerprint;                    // the graph's, once a plan needed it
    std::vector<ShardingSpec> m_assembledSpecs;  // the last plan's, by tensor id

    const ir::Graph &m_graph;
    const passes::CoarseGraph &m_coarse;
    const passes::SubgraphClasses &m_classes;
    const sharding::Mesh &m_mesh;
    const SearchOptions &m_options;
    Worker m_main;
    SegmentCoster &m_coster = m_main.coster;  // the main worker's, which every step outside the searches uses
    std::vector<std::unique_ptr<Worker>> m_workers;  // the others (searchGroups)
    // The counts of workers gone (retireWorkers), for SearchStats.
    struct Retired {
        std::size_t evaluations = 0, peakStates = 0, capacitySkips = 0;
        bool capacitySkipped = false;
    };
    std::vector<Retired> m_retired;
    void retireWorkers()
    {
        for (const auto &w : m_workers)
            m_retired.push_back({w->coster.evaluations(), w->coster.peakStates(), w->coster.capacitySkips(),
                                 w->capacitySkipped});
        m_workers.clear();
    }
    // The threads a search of groups runs on (SearchOptions::threads). The
    // enumeration of decompose = false costs whole classes on the coster's
    // working specs, which each evaluation leaves as it set them: one
    // thread, so that it stays the yardstick it is.
    std::size_t threadCount() const
    {
        if (!m_options.decompose)
            return 1;
        return m_options.threads > 0 ? m_options.threads : std::max(1u, std::thread::hardware_concurrency());
    }
    // The layouts of block and class boundaries (boundaryLayouts), and
    // those a block may store its inner outputs in (allowedLayouts).
    std::vector<ActivationLayout> m_layouts, m_storedLayouts;
    std::int64_t m_capacity;
    // The memory a block's weights may take when choices are pruned: the
    // device's capacity, or no bound when nothing fits and the search looks
    // for the plan that needs the least memory instead.
    std::int64_t m_bound = std::numeric_limits<std::int64_t>::max();
    // The memory one copy of `block` may take for its weights under
    // m_bound: a share of it where every copy takes one plan; where copies
    // may take two plans between them (m_copiesApart), what the other
    // copies leave at the least they can take (a replicated copy beside
    // sharded ones fits where every copy replicated would not).
    std::int64_t copyBound(const Segment &block, std::int64_t instances) const;
    // The least weight memory of one copy of `block`: each weight split
    // as far as its choices go.
    std::int64_t leastWeightMemory(const Segment &block) const;
    std::vector<Group> m_groups;
    int m_variables = 1;
    // The layout of the graph's inputs (token ids, labels) where ops
    // outside classes read them: a variable of its own, since storing them
    // replicated while the layers' activations are split (a free slice) can
    // beat splitting them alike. Inputs a class reads (masks, positions)
    // keep the class's layout, which keeps each class searched once per
    // layout.
    int m_inputVariable = 0;
    // Whether the blocks outside classes choose their inputs' layouts
    // instead (buildGroups): then there is no input variable.
    bool m_inputsChosen = false;
    // Per tensor, -1 for most: the layout variable of a tensor every copy
    // of a class reads that ops outside classes compute, of another rank
    // than the class's residual stream (a position bias [1, heads, s, s]
    // added to every layer's attention scores). The class's layout would
    // tie the two: a bias split by heads as the attention runs would split
    // the residual stream by sequence alike. One variable per class serves
    // its side tensors.
    std::vector<int> m_sideVariable;
    // Per side variable (numbered from the classes' count on): its class
    // and the tensors it lays out.
    struct SideVariable {
        int owner;
        std::vector<ir::TensorId> tensors;
    };
    std::vector<SideVariable> m_sides;
    // Graph inputs (not pinned) that copies of a class read: stored in the
    // class's layout, or replicated (assembleApart).
    std::vector<ir::TensorId> m_classGraphInputs;
    // Whether a class's copies may take different plans (set in run():
    // where memory binds and the option allows).
    bool m_copiesApart = false;
    // The weight choices trails name, per block (see keep()).
    std::vector<std::vector<std::uint16_t>> m_choices;
    std::mutex m_choicesMutex;
};

std::map<ir::TensorId, ShardingSpec> TapSearch::pinsOfInstance(const passes::SubgraphClass &cls,
                                                                 const passes::SubgraphInstance &inst) const
{
    std::map<ir::TensorId, ShardingSpec> pins;
    if (m_options.pinned.empty())
        return pins;
    const auto &rep = cls.instances[cls.representative];
    for (std::size_t k = 0; k < rep.ops.size() && k < inst.ops.size(); ++k) {
        const ir::Op &a = m_graph.op(rep.ops[k]), &b = m_graph.op(inst.ops[k]);
        for (std::size_t i = 0; i < a.inputs.size() && i < b.inputs.size(); ++i) {
            const ir::Tensor &tensor = m_graph.tensor(b.inputs[i]);
            if (tensor.role != ir::Role::Parameter)
                continue;
            if (auto pin = m_options.pinned.find(tensor.name); pin != m_options.pinned.end())
                pins.emplace(a.inputs[i], pin->second);
        }
    }
    return pins;
}

void TapSearch::holdPins(Segment &segment, const std::map<ir::TensorId, ShardingSpec> &pins) const
{
    for (ir::TensorId t : segment.derived)
        if (const auto pin = pins.find(t); pin != pins.end())
            segment.held.emplace_back(t, pin->second);
    for (std::size_t w = 0; w < segment.weights.size(); ++w) {
        const ir::Tensor &weight = m_graph.tensor(segment.weights[w]);
        const auto pin = pins.find(segment.weights[w]);
        if (pin == pins.end())
            continue;
        auto &choices = segment.choices[w];
        if (std::find(choices.begin(), choices.end(), pin->second) == choices.end())
            throw TapestryError(Error{weight.name, {},
                                      "pinned spec " + pin->second.toPlacements() +
                                          " is not a legal choice on this mesh"});
        choices = {pin->second};
        // A pinned weight is chosen on its own; its twins keep one choice
        // among themselves, led by the next of them.
        int next = -1;
        for (std::size_t v = w + 1; v < segment.weights.size(); ++v)
            if (segment.tiedTo[v] == static_cast<int>(w)) {
                segment.tiedTo[v] = next;
                if (next < 0)
                    next = static_cast<int>(v);
            }
        segment.tiedTo[w] = -1;
    }
}

std::optional<TapSearch::FlowSplit> TapSearch::splitByFlow(const passes::SubgraphClass &cls)
{
    if (cls.instances.size() < 2)
        return std::nullopt;
    const std::vector<bool> &flow = m_planCoster->flow();
    const auto &rep = cls.instances[cls.representative];
    const std::set<ir::OpId> own(rep.ops.begin(), rep.ops.end());
    // The representative's inputs that only it reads (the model's input
    // the first layer reads, not a mask every layer reads), by place.
    std::vector<std::pair<std::size_t, std::size_t>> places;
    std::vector<ir::TensorId> tensors;
    for (std::size_t k = 0; k < rep.ops.size(); ++k) {
        const ir::Op &op = m_graph.op(rep.ops[k]);
        for (std::size_t i = 0; i < op.inputs.size(); ++i) {
            const ir::TensorId t = op.inputs[i];
            const ir::Tensor &tensor = m_graph.tensor(t);
            if (tensor.role == ir::Role::Parameter || own.count(tensor.producer) ||
                std::find(tensors.begin(), tensors.end(), t) != tensors.end() ||
                !std::all_of(tensor.consumers.begin(), tensor.consumers.end(),
                             [&](ir::OpId c) { return own.count(c) != 0; }))
                continue;
            places.emplace_back(k, i);
            tensors.push_back(t);
        }
    }
    if (places.empty())
        return std::nullopt;
    std::vector<std::vector<bool>> signatures;
    for (const auto &inst : cls.instances) {
        std::vector<bool> signature;
        for (const auto &[k, i] : places) {
            const bool at = k < inst.ops.size() && i < m_graph.op(inst.ops[k]).inputs.size();
            signature.push_back(at && flow[m_graph.op(inst.ops[k]).inputs[i].index()]);
        }
        signatures.push_back(std::move(signature));
    }
    // The most copies' (of as many, the one taking more gradients: a
    // stack of two has one first layer). Counted once: a stack has
    // hundreds of copies, nearly all alike.
    std::map<std::vector<bool>, std::size_t> copies;
    for (const auto &s : signatures)
        ++copies[s];
    auto rank = [&](const auto &entry) {
        return std::pair{entry.second, std::count(entry.first.begin(), entry.first.end(), true)};
    };
    const std::vector<bool> most =
        std::max_element(copies.begin(), copies.end(), [&](const auto &a, const auto &b) { return rank(a) < rank(b); })
            ->first;
    auto odd = std::find_if(signatures.begin(), signatures.end(), [&](const auto &s) { return s != most; });
    if (odd == signatures.end())
        return std::nullopt;
    const std::vector<bool> other = *odd;
    auto variant = [&](const std::vector<bool> &signature) {
        if (signature == signatures[cls.representative])
            return 0;
        std::vector<bool> v = flow;
        for (std::size_t p = 0; p < tensors.size(); ++p)
            v[tensors[p].index()] = signature[p];
        return m_coster.addGradientFlow(std::move(v));
    };
    FlowSplit split;
    split.most = variant(most);
    split.other = variant(other);
    split.fewerGradients = std::count(other.begin(), other.end(), true) < std::count(most.begin(), most.end(), true);
    for (const auto &s : signatures)
        split.apart.push_back(s == other);
    return split;
}

void TapSearch::buildGroups()
{
    const int classes = static_cast<int>(m_classes.classes.size());
    m_sideVariable.assign(m_graph.tensorCount(), -1);
    m_sides.clear();
    for (int c = 0; c < classes; ++c) {
        const auto &cls = m_classes.classes[static_cast<std::size_t>(c)];
        std::map<ir::TensorId, std::size_t> readers;
        for (const auto &inst : cls.instances)
            for (ir::TensorId t : std::set<ir::TensorId>(inst.inputs.begin(), inst.inputs.end()))
                ++readers[t];
        // Only a tensor of another rank than what the class writes for
        // others to read (its residual stream): one of the same rank (an
        // encoder's output every decoder layer attends to) is an
        // activation the class's layout says well.
        std::set<std::size_t> ranks;
        for (const auto &inst : cls.instances)
            for (ir::TensorId t : inst.outputs)
                ranks.insert(m_graph.tensor(t).shape.size());
        SideVariable side{c, {}};
        for (const auto &[t, copies] : readers) {
            const ir::Tensor &tensor = m_graph.tensor(t);
            if (copies < 2 || ranks.count(tensor.shape.size()) || tensor.role == ir::Role::Parameter ||
                !tensor.producer.valid() || m_classes.classOfOp[tensor.producer.index()].valid() ||
                m_sideVariable[t.index()] >= 0 || m_options.pinned.count(tensor.name))
                continue;
            m_sideVariable[t.index()] = classes + static_cast<int>(m_sides.size());
            side.tensors.push_back(t);
        }
        if (!side.tensors.empty())
            m_sides.push_back(std::move(side));
    }
    m_inputVariable = std::max<int>(1, classes + static_cast<int>(m_sides.size()));
    m_variables = m_inputVariable + 1;
    auto makeGroup = [&](int classIndex, int instances, const std::vector<ir::OpId> &ops, const std::string &name,
                         const std::map<ir::TensorId, ShardingSpec> &pins) {
        Group g;
        g.classIndex = classIndex;
        g.instances = instances;
        const auto blocks = splitAtResidualCuts(m_graph, ops);
        for (std::size_t b = 0; b < blocks.size(); ++b) {
            g.blocks.push_back(makeSegment(m_graph, m_mesh,
                                           name + " [" + std::to_string(b + 1) + "/" + std::to_string(blocks.size()) +
                                               "]",
                                           classIndex, instances, blocks[b]));
            if (b + 1 < blocks.size())
                g.links.push_back(m_graph.op(blocks[b].back()).outputs[0]);
        }
        g.whole = makeSegment(m_graph, m_mesh, name, classIndex, instances, ops);
        if (classIndex >= 0) {
            // Inputs other copies of the class read too: this copy carries
            // its share of their reshards.
            std::set<ir::OpId> rep(ops.begin(), ops.end());
            auto shareIn = [&](Segment &segment) {
                const std::set<ir::OpId> here(segment.ops.begin(), segment.ops.end());
                for (ir::TensorId t : segment.inputs) {
                    const ir::Tensor &tensor = m_graph.tensor(t);
                    double mine = 0, all = 0;
                    for (ir::OpId c : tensor.consumers) {
                        if (here.count(c))
                            mine += 1;
                        else if (rep.count(c) || c.index() >= m_classes.classOfOp.size() ||
                                 !m_classes.classOfOp[c.index()].valid() ||
                                 static_cast<int>(m_classes.classOfOp[c.index()].index()) != classIndex)
                            continue;
                        all += 1;
                    }
                    if (mine > 0 && all > mine)
                        segment.readShare.emplace_back(t, mine / all);
                }
            };
            shareIn(g.whole);
            for (Segment &block : g.blocks)
                shareIn(block);
        }
        keepToRoles(g.whole, m_options.axisRoles);
        for (Segment &block : g.blocks) {
            keepToRoles(block, m_options.axisRoles);
            if (m_options.storedLayouts &&
                (m_storedLayouts.size() <= kStoredLayoutsUpTo ||
                 (m_storedLayouts.size() <= kStoredLayoutsWithoutAttentionUpTo && !hasAttentionCore(m_coarse, block))))
                allowStoredLayouts(block, m_graph, m_coarse, m_mesh, m_storedLayouts);
            else if (m_options.storedLayouts) {
                Segment gathered = block;
                allowStoredLayouts(gathered, m_graph, m_coarse, m_mesh, {m_storedLayouts.front()});
                if (!gathered.stored.empty() && searchStateBound(m_graph, gathered) <= kGatheredOutputsStatesUpTo)
                    block = std::move(gathered);
            }
        }
        // A graph input a class of one copy reads, in one block (a
        // convolution stack's images, read by its first layer, a class of
        // its own): that block stores it in any layout, chosen where it
        // reads it, as the ops outside classes choose theirs. It took the
        // class's layout before, which a 4-channel image cannot take split
        // over its channels, leaving it whole (8x the memory) where exact
        // stores it batch split. (Where a class has more copies, the
        // others read another tensor in its place, stored in the class's
        // layout.)
        if (classIndex >= 0 && m_options.storedLayouts &&
            m_classes.classes[static_cast<std::size_t>(classIndex)].instances.size() == 1) {
            for (Segment &block : g.blocks) {
                std::vector<ir::TensorId> own;
                for (ir::TensorId t : block.inputs) {
                    const ir::Tensor &tensor = m_graph.tensor(t);
                    if (tensor.producer.valid() || tensor.role == ir::Role::Parameter ||
                        m_options.pinned.count(tensor.name))
                        continue;
                    const auto blocks = std::count_if(g.blocks.begin(), g.blocks.end(), [&](const Segment &b) {
                        return std::find(b.inputs.begin(), b.inputs.end(), t) != b.inputs.end();
                    });
                    if (blocks == 1)
                        own.push_back(t);
                }
                if (!own.empty())
                    allowInputLayouts(block, m_graph, m_mesh, m_layouts, &own);
            }
        }
        holdPins(g.whole, pins);
        for (Segment &block : g.blocks)
            holdPins(block, pins);
        // The variables whose layouts the blocks' boundaries read (as
        // boundaryOf and inputSpec read them), and no other: the search
        // of the group is kept per combination of these. The ops outside
        // classes read variable 0 only for a tensor one block writes and
        // a later one reads besides the link (an encoder's output read by
        // the decoder); with no such tensor and no class, variable 0 is
        // no layout of theirs, and combining it would search them once per
        // layout of it for nothing.
        std::set<int> vars;
        if (classIndex >= 0)
            vars.insert(classIndex);
        for (std::size_t b = 0; b < g.blocks.size(); ++b) {
            for (ir::TensorId t : g.blocks[b].inputs) {
                const ir::Tensor &tensor = m_graph.tensor(t);
                if (tensor.role == ir::Role::Parameter || (b > 0 && t == g.links[b - 1]))
                    continue;
                const ir::OpId p = tensor.producer;
                if (m_sideVariable[t.index()] >= 0)
                    vars.insert(m_sideVariable[t.index()]);
                else if (!p.valid())
                    vars.insert(classIndex < 0 ? m_inputVariable : classIndex);
                else if (m_classes.classOfOp[p.index()].valid())
                    vars.insert(static_cast<int>(m_classes.classOfOp[p.index()].index()));
                else
                    vars.insert(variableOf(classIndex));
            }
            for (ir::TensorId t : g.blocks[b].outputs) {
                if (b < g.links.size() && t == g.links[b])
                    continue;
                if (classIndex < 0 && m_sideVariable[t.index()] >= 0) {
                    vars.insert(m_sideVariable[t.index()]);
                    continue;
                }
                for (auto c : m_graph.tensor(t).consumers)
                    if (m_classes.classOfOp[c.index()].valid())
                        vars.insert(static_cast<int>(m_classes.classOfOp[c.index()].index()));
            }
        }
        g.variables.assign(vars.begin(), vars.end());
        return g;
    };
    for (std::size_t c = 0; c < m_classes.classes.size(); ++c) {
        const auto &cls = m_classes.classes[c];
        const auto &rep = cls.instances[cls.representative];
        const int n = static_cast<int>(cls.instances.size());
        for (const auto &inst : cls.instances)
            for (ir::TensorId t : inst.inputs) {
                const ir::Tensor &tensor = m_graph.tensor(t);
                if (!tensor.producer.valid() && tensor.role != ir::Role::Parameter &&
                    !m_options.pinned.count(tensor.name) &&
                    std::find(m_classGraphInputs.begin(), m_classGraphInputs.end(), t) == m_classGraphInputs.end())
                    m_classGraphInputs.push_back(t);
            }
        // Pins of some copies and not of the others: the pinned copies
        // are searched apart with their pins held, the others free. Copies
        // pinned differently from one another take the representative's
        // pins between them, and every pin is kept in the plan.
        std::vector<std::map<ir::TensorId, ShardingSpec>> pins;
        for (const auto &inst : cls.instances)
            pins.push_back(pinsOfInstance(cls, inst));
        std::map<ir::TensorId, ShardingSpec> pinned;
        std::vector<bool> apartInstance(pins.size(), false);
        bool apart = true;
        for (std::size_t i = 0; i < pins.size(); ++i) {
            if (pins[i].empty())
                continue;
            apartInstance[i] = true;
            apart = apart && (pinned.empty() || pinned == pins[i]);
            pinned = pins[i];
        }
        const int p = static_cast<int>(std::count(apartInstance.begin(), apartInstance.end(), true));
        const auto byFlow = splitByFlow(cls);
        if (p > 0 && p < n && apart) {
            Group g = makeGroup(static_cast<int>(c), n - p, rep.ops, rep.scope, {});
            g.apartCopies = std::make_shared<Group>(makeGroup(static_cast<int>(c), p, rep.ops, rep.scope, pinned));
            g.apartInstance = std::move(apartInstance);
            g.apartWhy = "pinned";
            // Costed as most copies take their gradients.
            g.flowVariant = g.apartCopies->flowVariant = byFlow ? byFlow->most : 0;
            m_groups.push_back(std::move(g));
        }
        else if (byFlow) {
            const int q = static_cast<int>(std::count(byFlow->apart.begin(), byFlow->apart.end(), true));
            Group g = makeGroup(static_cast<int>(c), n - q, rep.ops, rep.scope, pins[cls.representative]);
            g.flowVariant = byFlow->most;
            g.apartCopies = std::make_shared<Group>(
                makeGroup(static_cast<int>(c), q, rep.ops, rep.scope, pins[cls.representative]));
            g.apartCopies->flowVariant = byFlow->other;
            g.apartInstance = byFlow->apart;
            g.apartWhy = byFlow->fewerGradients ? "its input takes no gradient" : "its input takes a gradient";
            m_groups.push_back(std::move(g));
        }
        else {
            m_groups.push_back(makeGroup(static_cast<int>(c), n, rep.ops, rep.scope, pins[cls.representative]));
        }
    }
    const auto order = m_graph.topologicalOrder();
    if (!order)
        throw TapestryError(Error{m_graph.name, {}, "the graph has a cycle; no plan can be searched"});
    std::vector<ir::OpId> rest;
    for (ir::OpId id : *order)
        if (id.index() >= m_classes.classOfOp.size() || !m_classes.classOfOp[id.index()].valid())
            rest.push_back(id);
    if (!rest.empty()) {
        std::map<ir::TensorId, ShardingSpec> pins;
        for (const auto &[name, spec] : m_options.pinned)
            pins.emplace(*m_graph.findTensor(name), spec);  // checked in the constructor
        m_groups.push_back(makeGroup(-1, 1, rest, "(outside classes)", pins));
    }
    // Where every graph input the ops outside classes read is read by one
    // of their blocks alone, each block chooses the layout of its inputs
    // as it reads them (allowInputLayouts) and the input variable goes:
    // the layouts are then combined over the classes' variables only
    // (layouts^classes combinations, not layouts^(classes + 1)).
    if (m_groups.empty() || m_groups.back().classIndex >= 0)
        return;
    Group &outside = m_groups.back();
    for (ir::TensorId t : outside.whole.inputs) {
        const ir::Tensor &tensor = m_graph.tensor(t);
        if (tensor.producer.valid() || tensor.role == ir::Role::Parameter)
            continue;
        // (Classes read an input in their own layout, see inputSpec.)
        std::size_t readers = 0;
        for (const Segment &b : outside.blocks)
            readers += std::any_of(tensor.consumers.begin(), tensor.consumers.end(), [&](ir::OpId c) {
                return std::find(b.ops.begin(), b.ops.end(), c) != b.ops.end();
            });
        if (readers > 1)
            return;
    }
    for (Segment &block : outside.blocks)
        allowInputLayouts(block, m_graph, m_mesh, m_layouts);
    std::erase(outside.variables, m_inputVariable);
    m_variables = m_inputVariable;
    m_inputsChosen = true;
}

ShardingSpec TapSearch::inputSpec(const Group &g, ir::TensorId t, const std::vector<int> &vars) const
{
    const ir::Tensor &tensor = m_graph.tensor(t);
    int var = variableOf(g.classIndex);
    if (m_sideVariable[t.index()] >= 0)
        var = m_sideVariable[t.index()];
    else if (!tensor.producer.valid() && g.classIndex < 0) {
        if (m_inputsChosen)  // replicated, unless the block reading it chooses otherwise
            return ShardingSpec::replicated(m_mesh.rank());
        var = m_inputVariable;
    }
    else if (tensor.producer.valid() && m_classes.classOfOp[tensor.producer.index()].valid())
        var = static_cast<int>(m_classes.classOfOp[tensor.producer.index()].index());
    return m_layouts[static_cast<std::size_t>(vars[static_cast<std::size_t>(var)])].specFor(tensor, m_mesh);
}

std::map<ir::TensorId, ShardingSpec> TapSearch::boundaryOf(const Group &g, const Segment &s,
                                                           const std::vector<int> &vars, int before, int after,
                                                           std::size_t block) const
{
    std::map<ir::TensorId, ShardingSpec> boundary;
    for (auto t : s.inputs) {
        if (m_graph.tensor(t).role == ir::Role::Parameter)
            continue;  // a tied weight, decided where it is read first
        if (block > 0 && t == g.links[block - 1])
            boundary[t] = m_layouts[static_cast<std::size_t>(before)].specFor(m_graph.tensor(t), m_mesh);
        else
            boundary[t] = inputSpec(g, t, vars);
    }
    for (auto t : s.outputs) {
        if (block < g.links.size() && t == g.links[block]) {
            if (after >= 0)  // else left to the caller
                boundary[t] = m_layouts[static_cast<std::size_t>(after)].specFor(m_graph.tensor(t), m_mesh);
            continue;
        }
        // Class boundaries are stored in the layout of the class written
        // or read; graph outputs (the loss) as they come out.
        int var = g.classIndex;
        if (var < 0 && m_sideVariable[t.index()] >= 0)
            var = m_sideVariable[t.index()];
        for (auto c : m_graph.tensor(t).consumers)
            if (var < 0 && m_classes.classOfOp[c.index()].valid())
                var = static_cast<int>(m_classes.classOfOp[c.index()].index());
        if (var >= 0)
            boundary[t] = m_layouts[static_cast<std::size_t>(vars[static_cast<std::size_t>(var)])].specFor(
                m_graph.tensor(t), m_mesh);
    }
    return boundary;
}

Fronts TapSearch::searchGroup(Worker &w, const Group &g, const std::vector<int> &vars)
{
    Fronts fronts = searchPlans(w, g, vars);
    const std::size_t n = static_cast<std::size_t>(g.instances);
    const bool apart = m_copiesApart && g.classIndex >= 0 && n > 1;
    for (auto [front, metric] : {std::pair{&fronts.time, Metric::Time}, std::pair{&fronts.comm, Metric::Comm}}) {
        // Every copy alike: [n, trail, trail].
        std::vector<Candidate> plans;
        for (const Candidate &c : *front)
            plans.push_back(split(static_cast<std::int64_t>(n), c.time, c.comm, c.memory, c, c));
        if (apart && front->size() > 1)
            plans = mixCopies(*front, n, metric, std::move(plans));
        *front = std::move(plans);
    }
    if (!g.apartCopies)
        return fronts;
    // The copies apart take a plan of their own: [k, trail, trail, their trail].
    const Fronts other = searchPlans(w, *g.apartCopies, vars);
    auto join = [](const std::vector<Candidate> &a, const std::vector<Candidate> &b, Metric metric) {
        std::vector<Candidate> sums;
        for (const auto &x : a)
            for (const auto &y : b)
                sums.push_back(x + y);
        return paretoFront(std::move(sums), metric);
    };
    return {join(fronts.time, other.time, Metric::Time), join(fronts.comm, other.comm, Metric::Comm)};
}

std::vector<Fronts> TapSearch::searchGroups(const std::vector<std::pair<std::size_t, std::vector<int>>> &tasks,
                                            const std::function<void(std::size_t)> &finished)
{
    std::vector<Fronts> out(tasks.size());
    const std::size_t threads = std::min(tasks.size(), threadCount());
    while (m_workers.size() + 1 < threads)
        m_workers.push_back(std::make_unique<Worker>(Worker{m_main.coster.fork(), nullptr, false}));
    // Tasks are taken in order, one at a time, by whichever worker is free;
    // the main thread is one of them and alone reports (and may cancel).
    std::atomic<std::size_t> next{0}, completed{0};
    std::atomic<bool> stop{false};
    std::vector<std::exception_ptr> errors(threads);
    auto work = [&](Worker &w, std::size_t index) {
        try {
            for (std::size_t i; !stop && (i = next++) < tasks.size();) {
                out[i] = searchGroup(w, m_groups[tasks[i].first], tasks[i].second);
                ++completed;
                if (index == 0)
                    finished(completed);
            }
        } catch (...) {
            errors[index] = std::current_exception();
            stop = true;
        }
    };
    std::vector<std::thread> running;
    for (std::size_t t = 1; t < threads; ++t)
        running.emplace_back(work, std::ref(*m_workers[t - 1]), t);
    work(m_main, 0);
    for (auto &thread : running)
        thread.join();
    for (const auto &error : errors)
        if (error)
            std::rethrow_exception(error);
    finished(completed);
    return out;
}

Fronts TapSearch::searchPlans(Worker &w, const Group &g, const std::vector<int> &vars)
{
    w.coster.useGradientFlow(g.flowVariant);
    Fronts all;
    for (std::size_t p = 0; p < std::size(kPartialWays); ++p) {
        w.coster.setPartialResolution(kPartialWays[p]);
        const Fronts f = m_options.decompose ? searchBlocks(w, g, vars, static_cast<int>(p))
                                             : searchGroupExhaustively(w, g, vars, static_cast<int>(p));
        all.time.insert(all.time.end(), f.time.begin(), f.time.end());
        all.comm.insert(all.comm.end(), f.comm.begin(), f.comm.end());
        // No op stored a partial sum: another way would cost the same.
        if (!w.coster.partialsStored())
            break;
    }
    return {paretoFront(std::move(all.time), Metric::Time), paretoFront(std::move(all.comm), Metric::Comm)};
}

std::vector<Candidate> TapSearch::mixCopies(const std::vector<Candidate> &front, std::size_t n, Metric metric,
                                            std::vector<Candidate> plans) const
{
    // Per copy, a front point costs a 1/n-th of its totals (every block
    // was costed once and counted n times, memory included).
    auto share = [&](const Candidate &c, std::size_t k) {
        const auto dn = static_cast<double>(n), dk = static_cast<double>(k);
        return Candidate{c.time / dn * dk, c.comm / dn * dk,
                         c.memory / static_cast<std::int64_t>(n) * static_cast<std::int64_t>(k), {}};  // exact: n divides it
    };
    // Two plans of the front split the copies between them: k copies the
    // first, n - k the second. Least step time under a memory limit over n
    // alike items takes at most two adjacent points of the front's lower
    // convex hull where the split may be fractional (the relaxation's
    // optimum); with whole copies, and few of them, a point above the
    // hull can be the one that fits (two GPT-2 layers, one with its MLP's
    // second linear replicated: 12% faster than the hull's best that
    // fits). So every pair is mixed while the mixes are few, the hull's
    // adjacent pairs past that.
    std::vector<std::pair<std::size_t, std::size_t>> pairs;
    if (front.size() * (front.size() - 1) / 2 * (n - 1) <= kMixEveryPairUpTo) {
        for (std::size_t a = 0; a < front.size(); ++a)
            for (std::size_t b = a + 1; b < front.size(); ++b)
                pairs.emplace_back(a, b);
    }
    else {
        // The front is sorted by the metric rising, memory falling.
        // Its lower convex hull in (memory, metric), memory rising.
        std::vector<std::size_t> hull;
        for (std::size_t r = front.size(); r-- > 0;) {
            const std::size_t i = r;
            auto x = [&](std::size_t j) { return static_cast<double>(front[j].memory); };
            auto y = [&](std::size_t j) { return value(front[j], metric); };
            while (hull.size() >= 2) {
                const std::size_t o = hull[hull.size() - 2], a = hull.back();
                const double cross = (x(a) - x(o)) * (y(i) - y(o)) - (y(a) - y(o)) * (x(i) - x(o));
                if (cross > 0)
                    break;
                hull.pop_back();
            }
            hull.push_back(i);
        }
        for (std::size_t h = 0; h + 1 < hull.size(); ++h)
            pairs.emplace_back(hull[h], hull[h + 1]);
    }
    for (const auto &[a, b] : pairs)
        for (std::size_t k = 1; k < n; ++k) {
            // A split over the device's memory is of no use: the other
            // groups only add to it, and where nothing fits, the copies
            // alike hold the least memory already.
            const Candidate x = share(front[a], k), y = share(front[b], n - k);
            if (x.memory + y.memory > m_capacity)
                continue;
            plans.push_back(split(static_cast<std::int64_t>(k), x.time + y.time, x.comm + y.comm,
                                  x.memory + y.memory, front[a], front[b]));
        }
    return paretoFront(std::move(plans), metric);
}

Fronts TapSearch::searchBlocks(Worker &w, const Group &g, const std::vector<int> &vars, int partial)
{
    // Weights one block decides and a later block reads again (a tied
    // embedding the LM head reads): carried from block to block with the
    // spec the first chose, as the link's layout is, so that the later
    // block is costed on it.
    std::vector<ir::TensorId> carried;
    for (std::size_t k = 1; k < g.blocks.size(); ++k)
        for (ir::TensorId t : g.blocks[k].inputs)
            if (m_graph.tensor(t).role == ir::Role::Parameter &&
                std::find(carried.begin(), carried.end(), t) == carried.end())
                for (std::size_t j = 0; j < k; ++j)
                    if (std::find(g.blocks[j].weights.begin(), g.blocks[j].weights.end(), t) !=
                        g.blocks[j].weights.end())
                        carried.push_back(t);
    // Per layout after the last block searched and specs of the carried
    // weights (an empty spec for one not decided yet): the plans so far.
    using Key = std::pair<int, std::vector<ShardingSpec>>;
    const Candidate start{0, 0, 0, {partial}};
    std::map<Key, Fronts> front{{Key{-1, std::vector<ShardingSpec>(carried.size())}, Fronts{{start}, {start}}}};
    for (std::size_t k = 0; k < g.blocks.size(); ++k) {
        const Segment &block = g.blocks[k];
        std::vector<int> afters{-1};
        if (k < g.links.size()) {
            afters.clear();
            for (std::size_t l = 0; l < m_layouts.size(); ++l)
                afters.push_back(static_cast<int>(l));
        }
        // Where this block decides a carried weight: its index among the
        // block's weights.
        std::vector<std::pair<std::size_t, std::size_t>> decides;  // (carried, weight)
        for (std::size_t c = 0; c < carried.size(); ++c)
            for (std::size_t w = 0; w < block.weights.size(); ++w)
                if (block.weights[w] == carried[c])
                    decides.emplace_back(c, w);
        std::vector<ir::TensorId> readLater;
        for (const auto &[c, w] : decides)
            readLater.push_back(carried[c]);
        ir::TensorId link;
        std::vector<ShardingSpec> linkSpecs;
        if (k < g.links.size()) {
            link = g.links[k];
            for (int after : afters)
                linkSpecs.push_back(m_layouts[static_cast<std::size_t>(after)].specFor(m_graph.tensor(link), m_mesh));
        }
        std::map<Key, Fronts> next;
        for (const auto &[key, previous] : front) {
            const auto &[before, specs] = key;
            // One search per layout before the block serves every layout after it.
            auto boundary = boundaryOf(g, block, vars, before, -1, k);
            for (std::size_t c = 0; c < carried.size(); ++c)
                if (!specs[c].placements.empty() &&
                    std::find(block.inputs.begin(), block.inputs.end(), carried[c]) != block.inputs.end())
                    boundary[carried[c]] = specs[c];
            const auto &found = blockAnswer(w, g, block, partial, boundary, link, linkSpecs, readLater);
            for (std::size_t a = 0; a < afters.size(); ++a) {
                std::map<std::vector<ShardingSpec>, std::vector<Candidate>> own;
                for (const WeightChoice &c : found[a]) {
                    auto decided = specs;
                    if (!decides.empty()) {
                        const auto chosen = chosenSpecs(block, c.choice);
                        for (const auto &[ci, w] : decides)
                            decided[ci] = chosen[w];
                    }
                    own[decided].push_back(Candidate{c.time * block.instances, c.comm * block.instances,
                                                     c.memory * block.instances, {afters[a], keep(c.choice)}});
                }
                for (auto &[decided, candidates] : own) {
                    const Fronts sums = sum(previous, frontsOf(std::move(candidates)));
                    auto &slot = next[Key{afters[a], decided}];
                    slot.time.insert(slot.time.end(), sums.time.begin(), sums.time.end());
                    slot.comm.insert(slot.comm.end(), sums.comm.begin(), sums.comm.end());
                }
            }
        }
        for (auto &[key, fs] : next)
            fs = {paretoFront(std::move(fs.time), Metric::Time), paretoFront(std::move(fs.comm), Metric::Comm)};
        front = std::move(next);
    }
    Fronts all;
    for (auto &[key, fs] : front) {
        all.time.insert(all.time.end(), fs.time.begin(), fs.time.end());
        all.comm.insert(all.comm.end(), fs.comm.begin(), fs.comm.end());
    }
    return {paretoFront(std::move(all.time), Metric::Time), paretoFront(std::move(all.comm), Metric::Comm)};
}

const std::vector<std::vector<WeightChoice>> &
TapSearch::blockAnswer(Worker &w, const Group &g, const Segment &block, int partial,
                       const std::map<ir::TensorId, ShardingSpec> &boundary, ir::TensorId link,
                       const std::vector<ShardingSpec> &linkSpecs, const std::vector<ir::TensorId> &readLater)
{
    // Answers kept, in WeightChoices: a few hundred MB at the most.
    constexpr std::size_t kMostKept = 1'000'000;
    const std::int64_t bound = copyBound(block, block.instances);
    auto spec = [](std::vector<std::int64_t> &key, const ShardingSpec &s) {
        std::int64_t code = 0;
        for (const auto &p : s.placements)
            code = code * 256 + static_cast<std::int64_t>(p.kind) * 64 + (p.dim + 1);
        key.push_back(code);
    };
    std::vector<std::int64_t> key{reinterpret_cast<std::intptr_t>(&block), partial, g.flowVariant, bound,
                                  link.valid() ? link.value : -1};
    for (const auto &s : linkSpecs)
        spec(key, s);
    key.push_back(-1);
    for (ir::TensorId t : readLater)
        key.push_back(t.value);
    key.push_back(-1);
    for (const auto &[t, s] : boundary) {
        key.push_back(t.value);
        spec(key, s);
    }
    // What the search reads of the working specs: inputs the boundary leaves out.
    for (ir::TensorId t : block.inputs)
        if (!boundary.count(t)) {
            key.push_back(t.value);
            spec(key, w.coster.spec(t));
        }
    // Found before, or being found by another worker (wait for it), or
    // this worker's to find, announced so that no other searches it too.
    std::shared_ptr<SharedAnswer> entry;
    bool mine = false;
    {
        const std::lock_guard lock(m_answersMutex);
        if (const auto it = m_blockAnswers.find(key); it != m_blockAnswers.end()) {
            entry = it->second;
        } else if (m_blockAnswerChoices < kMostKept) {
            entry = std::make_shared<SharedAnswer>();
            m_blockAnswers.emplace(key, entry);
            mine = true;
        }
    }
    if (entry && !mine) {
        std::unique_lock lock(entry->mutex);
        entry->ready.wait(lock, [&] { return entry->done; });
        if (!entry->failed) {
            if (entry->answer.partialsStored)
                w.coster.notePartialsStored();
            w.current = entry;  // keeps the answer while the caller reads it
            return entry->answer.found;
        }
        entry.reset();  // the worker finding it failed: this one tries (and fails alike)
    }
    auto found = std::make_shared<SharedAnswer>();
    try {
        // Whether this search stores a partial sum, not one before it: the
        // flag is cleared (setting the same way again) and restored after.
        const bool storedBefore = w.coster.partialsStored();
        w.coster.setPartialResolution(kPartialWays[static_cast<std::size_t>(partial)]);
        found->answer = {w.coster.searchWeights(block, boundary, bound, link, linkSpecs, readLater), false};
        found->answer.partialsStored = w.coster.partialsStored();
        if (storedBefore)
            w.coster.notePartialsStored();
    } catch (...) {
        if (mine) {
            const std::lock_guard lock(entry->mutex);
            entry->done = entry->failed = true;
            entry->ready.notify_all();
        }
        throw;
    }
    if (!mine) {
        w.current = std::move(found);
        return w.current->answer.found;
    }
    std::size_t choices = 0;
    for (const auto &f : found->answer.found)
        choices += f.size();
    {
        const std::lock_guard lock(m_answersMutex);
        m_blockAnswerChoices += choices;
    }
    {
        const std::lock_guard lock(entry->mutex);
        entry->answer = std::move(found->answer);
        entry->done = true;
        entry->ready.notify_all();
    }
    w.current = entry;
    return entry->answer.found;
}

Fronts TapSearch::searchGroupExhaustively(Worker &w, const Group &g, const std::vector<int> &vars, int partial)
{
    std::vector<Candidate> all;
    const auto layouts = static_cast<std::int64_t>(m_layouts.size());
    std::int64_t linkCombos = 1;
    for (std::size_t k = 0; k < g.links.size(); ++k)
        linkCombos *= layouts;
    // Enumerating is the yardstick the decomposed search is checked
    // against: exponential in the weights, so bounded.
    constexpr std::int64_t limit = 50'000'000;
    std::int64_t weightCombos = 1;
    for (const auto &b : g.blocks) {
        const std::int64_t n = comboCount(b);
        if (n > limit / weightCombos)
            throw TapestryError(Error{g.whole.name, {}, "tap: " + std::to_string(g.whole.weights.size()) +
                                                            " weights are too many choices to enumerate"});
        weightCombos *= n;
    }
    for (std::int64_t lc = 0; lc < linkCombos; ++lc) {
        std::vector<int> linkLayout;
        for (std::int64_t r = lc, k = 0; k < static_cast<std::int64_t>(g.links.size()); ++k, r /= layouts)
            linkLayout.push_back(static_cast<int>(r % layouts));
        std::map<ir::TensorId, ShardingSpec> links;
        for (std::size_t k = 0; k < g.blocks.size(); ++k)
            for (auto &[t, spec] : boundaryOf(g, g.blocks[k], vars, k > 0 ? linkLayout[k - 1] : -1,
                                              k < g.links.size() ? linkLayout[k] : -1, k))
                links[t] = spec;
        for (std::int64_t wc = 0; wc < weightCombos; ++wc) {
            std::vector<ShardingSpec> weights;
            auto boundary = links;
            Candidate c{0, 0, 0, {partial}};
            std::int64_t rest = wc;
            for (std::size_t k = 0; k < g.blocks.size(); ++k) {
                const std::int64_t n = comboCount(g.blocks[k]);
                const auto choice = comboChoice(g.blocks[k], rest % n);
                const auto specs = chosenSpecs(g.blocks[k], choice);
                weights.insert(weights.end(), specs.begin(), specs.end());
                for (auto &[t, spec] : storedSpecs(g.blocks[k], choice))
                    boundary[t] = spec;
                c.trail.push_back(k < g.links.size() ? linkLayout[k] : -1);
                c.trail.push_back(rest % n);
                rest /= n;
            }
            if (w.coster.weightMemory(g.whole, weights) > copyBound(g.whole, g.instances)) {
                w.capacitySkipped = true;
                continue;
            }
            const SegmentCost cost = w.coster.evaluate(g.whole, boundary, weights);
            c.time = cost.time * g.instances;
            c.comm = cost.comm * g.instances;
            c.memory = cost.memory * g.instances;
            all.push_back(std::move(c));
        }
    }
    // The trails name the kept choices only, not every one enumerated.
    Fronts fronts = frontsOf(std::move(all));
    for (auto *front : {&fronts.time, &fronts.comm})
        for (Candidate &c : *front)
            for (std::size_t k = 0; k < g.blocks.size(); ++k)
                c.trail[1 + 2 * k + 1] = keep(comboChoice(g.blocks[k], c.trail[1 + 2 * k + 1]));
    return fronts;
}

void TapSearch::replay(const Group &g, const std::vector<int> &vars, const std::vector<std::int64_t> &trail,
                       std::map<ir::TensorId, ShardingSpec> &fixed)
{
    m_coster.useGradientFlow(g.flowVariant);
    m_coster.setPartialResolution(kPartialWays[static_cast<std::size_t>(trail[0])]);
    int before = -1;
    for (std::size_t k = 0; k < g.blocks.size(); ++k) {
        const Segment &block = g.blocks[k];
        const int after = static_cast<int>(trail[1 + 2 * k]);
        auto boundary = boundaryOf(g, block, vars, before, after, k);
        for (ir::TensorId t : block.inputs)  // a weight an earlier block decided
            if (m_graph.tensor(t).role == ir::Role::Parameter)
                if (auto it = fixed.find(t); it != fixed.end())
                    boundary[t] = it->second;
        const auto &choice = m_choices[static_cast<std::size_t>(trail[1 + 2 * k + 1])];
        for (auto &[t, spec] : storedSpecs(block, choice))
            boundary[t] = spec;
        const auto weights = chosenSpecs(block, choice);
        m_coster.evaluate(block, boundary, weights);
        for (const auto &[t, spec] : boundary)
            if (m_graph.tensor(t).role != ir::Role::Output)
                fixed[t] = spec;
        // What the block writes is stored as searched (its partial sums as
        // the group's way keeps them), not as propagation would default.
        for (ir::OpId id : block.ops)
            for (ir::TensorId t : m_graph.op(id).outputs)
                if (m_graph.tensor(t).role != ir::Role::Output && !fixed.count(t))
                    fixed[t] = m_coster.spec(t);
        for (auto t : block.weights)
            fixed[t] = m_coster.spec(t);
        for (auto t : block.derived)
            fixed[t] = m_coster.spec(t);
        before = after;
    }
}

std::vector<ShardingSpec> TapSearch::assemble(const std::vector<int> &vars, const Candidate &best,
                                              const std::map<ir::TensorId, ShardingSpec> &inputs)
{
    std::vector<ShardingSpec> specs(m_graph.tensorCount());
    std::vector<bool> fixed(m_graph.tensorCount(), false);
    auto fix = [&](ir::TensorId t, const ShardingSpec &spec) {
        specs[t.index()] = spec;
        fixed[t.index()] = true;
    };
    // Per tensor of the representative: the instance's tensor in its
    // place (the first place it takes, op by op), valid where `mappedFor`
    // names the instance being stamped.
    std::vector<ir::TensorId> mapped(m_graph.tensorCount());
    std::vector<std::int32_t> mappedFor(m_graph.tensorCount(), -1);
    std::size_t at = 0;
    std::int32_t stamp = 0;
    for (const Group &g : m_groups) {
        const std::size_t n = 1 + 2 * g.blocks.size();
        const auto k = best.trail[at];
        auto trail = [&](std::size_t from) {
            const auto begin = best.trail.begin() + static_cast<std::ptrdiff_t>(from);
            return std::vector<std::int64_t>(begin, begin + static_cast<std::ptrdiff_t>(n));
        };
        std::map<ir::TensorId, ShardingSpec> firstFixed, secondFixed, apartFixed;
        replay(g, vars, trail(at + 1), firstFixed);
        if (k < g.instances)
            replay(g, vars, trail(at + 1 + n), secondFixed);
        if (g.apartCopies)  // the same blocks
            replay(*g.apartCopies, vars, trail(at + 1 + 2 * n), apartFixed);
        at += trailLength(g);
        if (g.classIndex < 0) {
            for (const auto &[t, spec] : firstFixed)
                fix(t, spec);
            continue;
        }
        // Every instance stores its tensors as the representative does,
        // matched op by op (instances are structurally identical); a
        // tensor two instances share keeps the first one's spec.
        const auto &cls = m_classes.classes[static_cast<std::size_t>(g.classIndex)];
        const auto &rep = cls.instances[cls.representative];
        std::int64_t others = 0;  // copies of this group before instance i
        for (std::size_t i = 0; i < cls.instances.size(); ++i) {
            const auto &inst = cls.instances[i];
            const bool isApart = g.apartCopies && g.apartInstance[i];
            const auto &groupFixed = isApart ? apartFixed : others++ < k ? firstFixed : secondFixed;
            ++stamp;
            auto map = [&](ir::TensorId a, ir::TensorId b) {
                if (mappedFor[a.index()] != stamp) {
                    mappedFor[a.index()] = stamp;
                    mapped[a.index()] = b;
                }
            };
            for (std::size_t k = 0; k < rep.ops.size() && k < inst.ops.size(); ++k) {
                const ir::Op &a = m_graph.op(rep.ops[k]), &b = m_graph.op(inst.ops[k]);
                for (std::size_t i = 0; i < a.inputs.size() && i < b.inputs.size(); ++i)
                    map(a.inputs[i], b.inputs[i]);
                for (std::size_t o = 0; o < a.outputs.size() && o < b.outputs.size(); ++o)
                    map(a.outputs[o], b.outputs[o]);
            }
            for (const auto &[t, spec] : groupFixed)
                if (mappedFor[t.index()] == stamp && !fixed[mapped[t.index()].index()])
                    fix(mapped[t.index()], spec);
        }
    }
    for (const auto &[t, spec] : inputs)
        fix(t, spec);
    for (const auto &[name, spec] : m_options.pinned)
        fix(*m_graph.findTensor(name), spec);  // checked in the constructor
    return sharding::propagateSpecs(m_graph, m_mesh, std::move(specs), fixed);
}

cost::PlanCoster &TapSearch::planCoster()
{
    return *m_planCoster;
}

std::vector<std::string> TapSearch::copiesApart(const Candidate &best) const
{
    std::vector<std::string> lines;
    std::size_t at = 0;
    for (const Group &g : m_groups) {
        const auto k = best.trail[at];
        at += trailLength(g);
        if (g.classIndex < 0 || (k >= g.instances && !g.apartCopies))
            continue;
        // Copies apart for their gradients that took the others' plan all the same.
        const std::size_t n = 1 + 2 * g.blocks.size();
        auto samePlan = [&](std::size_t a, std::size_t b) {
            for (std::size_t i = 0; i < n; ++i) {
                const auto x = best.trail[a + i], y = best.trail[b + i];
                const bool choice = i > 0 && i % 2 == 0;
                if (choice ? m_choices[static_cast<std::size_t>(x)] != m_choices[static_cast<std::size_t>(y)] : x != y)
                    return false;
            }
            return true;
        };
        const std::size_t start = at - trailLength(g);
        const bool apartAlike = g.apartCopies && g.apartWhy != "pinned" &&
                                (samePlan(start + 1, start + 1 + 2 * n) ||
                                 (k < g.instances && samePlan(start + 1 + n, start + 1 + 2 * n)));
        if (k >= g.instances && apartAlike)
            continue;
        const auto &cls = m_classes.classes[static_cast<std::size_t>(g.classIndex)];
        std::vector<std::string> apart, first, second;
        std::int64_t others = 0;
        for (std::size_t i = 0; i < cls.instances.size(); ++i) {
            const std::string &scope = cls.instances[i].scope;
            if (g.apartCopies && g.apartInstance[i])
                apart.push_back(scope);
            else
                (others++ < k ? first : second).push_back(scope);
        }
        auto names = [](const std::vector<std::string> &list) {
            std::string joined;
            for (const auto &name : list)
                joined += (joined.empty() ? "" : ", ") + name;
            return joined;
        };
        const std::string head = "class of " + cls.instances[cls.representative].scope + " (" +
                                 std::to_string(cls.instances.size()) + " copies): ";
        if (!apart.empty() && !apartAlike)
            lines.push_back(head + names(apart) + " apart from the other " +
                            std::to_string(cls.instances.size() - apart.size()) + " (" + g.apartWhy + ")");
        if (!second.empty()) {
            // The smaller side by name, the larger by count.
            const bool firstFew = first.size() <= second.size();
            lines.push_back(head + names(firstFew ? first : second) + " apart from the other " +
                            std::to_string((firstFew ? second : first).size()) +
                            (apart.empty() ? "" : " of " + std::to_string(first.size() + second.size())));
        }
    }
    return lines;
}

plan::Plan TapSearch::assembleApart(const std::string &modelSource, const std::vector<int> &vars, Candidate &best,
                                    const plan::Plan *previous)
{
    auto specs = assemble(vars, best);
    auto totals = planCoster().totals(specs);
    auto objective = cost::Objective::of(totals);
    // Assembles another way and keeps it where the whole plan's cost ranks
    // it first.
    std::map<ir::TensorId, ShardingSpec> inputs;
    auto better = [&](const Candidate &candidate, const std::map<ir::TensorId, ShardingSpec> &stored) {
        auto other = assemble(vars, candidate, stored);
        auto otherTotals = planCoster().totals(other);
        const auto theirs = cost::Objective::of(otherTotals);
        if (!(theirs < objective))
            return false;
        specs = std::move(other);
        totals = std::move(otherTotals);
        objective = theirs;
        return true;
    };
    std::size_t at = 0;
    for (const Group &g : m_groups) {
        const std::size_t n = 1 + 2 * g.blocks.size();
        const auto k = best.trail[at];
        if (k > 0 && k < g.instances) {
            Candidate swapped = best;
            swapped.trail[at] = g.instances - k;
            const auto first = swapped.trail.begin() + static_cast<std::ptrdiff_t>(at + 1);
            std::swap_ranges(first, first + static_cast<std::ptrdiff_t>(n), first + static_cast<std::ptrdiff_t>(n));
            if (better(swapped, inputs))
                best = std::move(swapped);
        }
        at += trailLength(g);
    }
    const ShardingSpec whole = ShardingSpec::replicated(m_mesh.rank());
    for (ir::TensorId t : m_classGraphInputs) {
        if (specs[t.index()] == whole)
            continue;
        auto tried = inputs;
        tried[t] = whole;
        if (better(best, tried))
            inputs = std::move(tried);
    }
    if (previous && specs == m_assembledSpecs)
        return *previous;
    if (m_options.rankedPlans) {
        auto plan = plan::rankedPlan(m_graph, modelSource, specs, "tap", planCoster(), std::move(totals));
        for (const auto &[name, spec] : m_options.pinned)
            plan.specs[name] = {specs[m_graph.findTensor(name)->index()], plan::SpecSource::Override};
        m_assembledSpecs = std::move(specs);
        return plan;
    }
    if (m_fingerprint.empty())
        m_fingerprint = plan::modelFingerprint(m_graph);
    auto plan =
        plan::makePlan(m_graph, modelSource, specs, plan::SpecSource::Search, "tap", planCoster(), m_fingerprint);
    for (const auto &[name, spec] : m_options.pinned)
        plan.specs[name].source = plan::SpecSource::Override;
    m_assembledSpecs = std::move(specs);
    return plan;
}

std::int64_t TapSearch::leastWeightMemory(const Segment &block) const
{
    std::vector<ShardingSpec> smallest;
    for (std::size_t w = 0; w < block.weights.size(); ++w) {
        const auto &shape = m_graph.tensor(block.weights[w]).shape;
        smallest.push_back(*std::min_element(block.choices[w].begin(), block.choices[w].end(),
                                             [&](const ShardingSpec &a, const ShardingSpec &b) {
                                                 return a.localElements(shape, m_mesh) < b.localElements(shape, m_mesh);
                                             }));
    }
    return m_coster.weightMemory(block, smallest);
}

std::int64_t TapSearch::copyBound(const Segment &block, std::int64_t instances) const
{
    if (m_bound == std::numeric_limits<std::int64_t>::max() || instances <= 1)
        return m_bound;
    if (!m_copiesApart || block.classIndex < 0)
        return m_bound / instances;
    return std::max<std::int64_t>(0, m_bound - (instances - 1) * leastWeightMemory(block));
}

bool TapSearch::interchangeable(std::size_t a, std::size_t b) const
{
    if (a == b)
        return true;
    if (!m_options.interchangeableAxes || !m_options.pinned.empty())
        return false;
    const auto &x = m_mesh.axes[a], &y = m_mesh.axes[b];
    const bool roleless = (a >= m_options.axisRoles.size() || !m_options.axisRoles[a]) &&
                          (b >= m_options.axisRoles.size() || !m_options.axisRoles[b]);
    return roleless && x.size == y.size && x.link == y.link;
}

std::vector<std::vector<int>> TapSearch::layoutPermutations() const
{
    const std::size_t rank = m_mesh.axes.size();
    std::vector<std::size_t> order(rank);
    for (std::size_t a = 0; a < rank; ++a)
        order[a] = a;
    std::vector<std::vector<int>> maps;
    while (std::next_permutation(order.begin(), order.end())) {
        bool keeps = true;
        for (std::size_t a = 0; a < rank && keeps; ++a)
            keeps = interchangeable(a, order[a]);
        if (!keeps)
            continue;
        std::vector<int> map(m_layouts.size(), -1);
        for (std::size_t l = 0; l < m_layouts.size(); ++l) {
            ActivationLayout moved = m_layouts[l];
            for (std::size_t a = 0; a < rank; ++a)
                moved.axes[order[a]] = m_layouts[l].axes[a];
            const auto it = std::find(m_layouts.begin(), m_layouts.end(), moved);
            map[l] = it == m_layouts.end() ? -1 : static_cast<int>(it - m_layouts.begin());
        }
        maps.push_back(std::move(map));
    }
    return maps;
}

SearchResult TapSearch::run(const std::string &modelSource)
{
    const auto start = std::chrono::steady_clock::now();
    const auto layouts = static_cast<int>(m_layouts.size());
    // Every combination of the classes' boundary layouts while there are
    // few; past that (many classes, a 2D or 3D mesh: layouts^variables
    // grows past billions) the layouts are improved one variable at a time.
    // The side variables (m_sideVariable) are not combined: each takes its
    // class's layout in the combinations, and is then changed one at a time
    // from the best of them while that improves it. Combining them would
    // search the ops outside classes, which read and write them all, once
    // per combination of twice the variables.
    const int classes = static_cast<int>(m_classes.classes.size());
    const int sides = static_cast<int>(m_sides.size());
    auto isSide = [&](int v) { return v >= classes && v < classes + sides; };
    std::size_t tuples = 1;
    for (int v = 0; v < m_variables && tuples <= m_options.layoutCombinations; ++v)
        if (!isSide(v))
            tuples *= static_cast<std::size_t>(layouts);
    const bool exhaustive = tuples <= m_options.layoutCombinations;
    // Axes of one size and one link, with no role and no pin telling them
    // apart, are interchangeable: permuting them maps any plan to one of
    // the same cost (a reshard's too: sharding::reshardAxisOrder takes like
    // steps in one order whichever axes they are on). So a combination of
    // layouts need only be tried in one order of such axes: on a 2x2x2
    // mesh of one link, 10 of the 27 layouts of one class, 165 of the 729
    // combinations of two.
    const auto permutations = layoutPermutations();
    // A combination is tried when no permutation maps it to one the
    // enumeration meets first (the variables read as digits, the last
    // most significant).
    auto first = [&](const std::vector<int> &vars) {
        for (const auto &map : permutations) {
            for (std::size_t v = vars.size(); v-- > 0;) {
                const int image = map[static_cast<std::size_t>(vars[v])];
                if (image < 0 || image > vars[v])
                    break;
                if (image < vars[v])
                    return false;
            }
        }
        return true;
    };
    auto combination = [&](std::size_t tuple) {
        std::vector<int> vars(static_cast<std::size_t>(m_variables));
        for (std::size_t r = tuple, v = 0; v < static_cast<std::size_t>(m_variables); ++v)
            if (!isSide(static_cast<int>(v))) {
                vars[v] = static_cast<int>(r % static_cast<std::size_t>(layouts));
                r /= static_cast<std::size_t>(layouts);
            }
        for (int side = 0; side < sides; ++side) {
            const int owner = m_sides[static_cast<std::size_t>(side)].owner;
            vars[static_cast<std::size_t>(classes + side)] = vars[static_cast<std::size_t>(owner)];
        }
        return vars;
    };
    std::size_t enumerated = tuples;
    if (exhaustive && !permutations.empty()) {
        enumerated = 0;
        for (std::size_t tuple = 0; tuple < tuples; ++tuple)
            enumerated += first(combination(tuple)) ? 1 : 0;
    }
    const std::size_t planned =
        (exhaustive ? enumerated + 2 * static_cast<std::size_t>(layouts * sides)
                    : static_cast<std::size_t>(layouts) * (1 + 4 * static_cast<std::size_t>(m_variables))) *
        m_groups.size();

    struct Best {
        std::vector<int> vars;
        Candidate candidate;
        bool found = false;
    };
    Best fastest, leastComm, leastMemory;
    double fastestOfAll = std::numeric_limits<double>::max();  // memory aside
    auto objectiveOf = [&](const Candidate &c) { return cost::Objective::of(c.time, c.memory, m_capacity); };
    std::map<std::pair<std::size_t, std::vector<int>>, Fronts> memo;  // by group and its variables' layouts
    std::size_t done = 0, reported = 0;
    auto report = [&](std::size_t at) {
        reported = std::max(reported, std::min(at, planned));
        if (m_options.progress)
            m_options.progress(reported, planned);
    };
    auto keyOf = [&](std::size_t gi, const std::vector<int> &vars) {
        std::vector<int> key;
        for (int v : m_groups[gi].variables)
            key.push_back(vars[static_cast<std::size_t>(v)]);
        return std::make_pair(gi, std::move(key));
    };
    // The groups' searches `combinations` need and the memo has not,
    // run on the workers at once (evaluate then finds them there).
    auto prefetch = [&](const std::vector<std::vector<int>> &combinations) {
        std::vector<std::pair<std::size_t, std::vector<int>>> tasks;
        std::vector<std::pair<std::size_t, std::vector<int>>> keys;
        std::set<std::pair<std::size_t, std::vector<int>>> seen;
        for (const auto &vars : combinations)
            for (std::size_t gi = 0; gi < m_groups.size(); ++gi) {
                auto key = keyOf(gi, vars);
                if (memo.count(key) || !seen.insert(key).second)
                    continue;
                tasks.emplace_back(gi, vars);
                keys.push_back(std::move(key));
            }
        if (tasks.size() < 2)
            return;
        const std::size_t base = done, span = combinations.size() * m_groups.size();
        auto fronts = searchGroups(tasks, [&](std::size_t completed) {
            if (m_options.cancelled && m_options.cancelled())
                throw TapestryError(Error{modelSource, {}, "tap: cancelled"});
            report(base + completed * span / tasks.size());
        });
        for (std::size_t i = 0; i < tasks.size(); ++i)
            memo.emplace(std::move(keys[i]), std::move(fronts[i]));
    };
    // The plans of one combination of layouts, summed over groups; the
    // best of them are kept.
    auto evaluate = [&](const std::vector<int> &vars) {
        Fronts total{{Candidate{}}, {Candidate{}}};
        for (std::size_t gi = 0; gi < m_groups.size(); ++gi) {
            if (m_options.cancelled && m_options.cancelled())
                throw TapestryError(Error{modelSource, {}, "tap: cancelled"});
            const Group &g = m_groups[gi];
            auto key = keyOf(gi, vars);
            auto it = memo.find(key);
            if (it == memo.end())
                it = memo.emplace(std::move(key), searchGroup(m_main, g, vars)).first;
            total = sum(total, it->second);
            report(++done);
        }
        for (const auto &c : total.time) {
            fastestOfAll = std::min(fastestOfAll, c.time);
            if (c.memory <= m_capacity && (!fastest.found || c.time < fastest.candidate.time))
                fastest = {vars, c, true};
            // While nothing fits: the least overshoot, then the least step time.
            if (!leastMemory.found || objectiveOf(c) < objectiveOf(leastMemory.candidate))
                leastMemory = {vars, c, true};
        }
        for (const auto &c : total.comm)
            if (c.memory <= m_capacity && (!leastComm.found || c.comm < leastComm.candidate.comm))
                leastComm = {vars, c, true};
    };
    std::set<std::vector<int>> tried;
    // Per side variable and layout, the first layout that gives its
    // tensors the same specs (a position bias of batch 1 takes many
    // layouts alike): the descent tries one layout of each such set.
    std::vector<std::vector<int>> sideLayout;
    for (const SideVariable &side : m_sides) {
        std::map<std::vector<ShardingSpec>, int> seen;
        sideLayout.emplace_back();
        for (int l = 0; l < layouts; ++l) {
            std::vector<ShardingSpec> specs;
            for (ir::TensorId t : side.tensors)
                specs.push_back(m_layouts[static_cast<std::size_t>(l)].specFor(m_graph.tensor(t), m_mesh));
            sideLayout.back().push_back(seen.emplace(std::move(specs), l).first->second);
        }
    }
    auto firstAlike = [&](int v, int l) {
        return sideLayout[static_cast<std::size_t>(v - classes)][static_cast<std::size_t>(l)];
    };
    auto explore = [&] {
        memo.clear();
        tried.clear();
        done = reported = 0;
        retireWorkers();  // the workers copy the main coster as this search starts
        // Change one of `which` variables' layout at a time while that
        // improves the fastest plan (the least memory while none fits),
        // then the least-communication one.
        auto descend = [&](const std::vector<int> &which) {
            for (const bool byComm : {false, true}) {
                const Best &goal = byComm ? leastComm : fastest;
                auto score = [&]() -> std::pair<int, double> {
                    if (goal.found)
                        return {0, byComm ? goal.candidate.comm : goal.candidate.time};
                    return {1, static_cast<double>(leastMemory.candidate.memory)};
                };
                for (bool improved = true; improved;) {
                    improved = false;
                    const std::vector<int> current = (goal.found ? goal : leastMemory).vars;
                    // Every neighbour not tried yet is searched on the
                    // workers at once; they are then evaluated in order
                    // until one improves, as one at a time would.
                    // `current` with variable v in layout l, where that is
                    // another combination worth a try.
                    auto moved = [&](int v, int l) -> std::optional<std::vector<int>> {
                        const int now = current[static_cast<std::size_t>(v)];
                        if (now == l ||
                            (isSide(v) && (firstAlike(v, l) != l || firstAlike(v, l) == firstAlike(v, now))))
                            return std::nullopt;
                        auto next = current;
                        next[static_cast<std::size_t>(v)] = l;
                        return next;
                    };
                    std::vector<std::vector<int>> neighbours;
                    for (int v : which)
                        for (int l = 0; l < layouts; ++l)
                            if (auto next = moved(v, l); next && !tried.count(*next))
                                neighbours.push_back(std::move(*next));
                    if (threadCount() > 1)
                        prefetch(neighbours);
                    for (auto w = which.begin(); w != which.end() && !improved; ++w)
                        for (int v = *w, l = 0; l < layouts && !improved; ++l) {
                            auto next = moved(v, l);
                            if (!next || !tried.insert(*next).second)
                                continue;
                            const auto before = score();
                            evaluate(*next);
                            improved = score() < before;
                        }
                }
            }
        };
        std::vector<int> sideVariables, every;
        for (int v = 0; v < m_variables; ++v) {
            every.push_back(v);
            if (isSide(v))
                sideVariables.push_back(v);
        }
        if (exhaustive) {
            std::vector<std::vector<int>> combinations;
            for (std::size_t tuple = 0; tuple < tuples; ++tuple) {
                std::vector<int> vars = combination(tuple);
                if (!permutations.empty() && !first(vars))
                    continue;
                combinations.push_back(std::move(vars));
            }
            prefetch(combinations);
            for (const auto &vars : combinations) {
                tried.insert(vars);
                evaluate(vars);
            }
            descend(sideVariables);
            return;
        }
        // From the best of the uniform combinations (one layout everywhere).
        std::vector<std::vector<int>> uniform;
        for (int l = 0; l < layouts; ++l)
            uniform.emplace_back(static_cast<std::size_t>(m_variables), l);
        prefetch(uniform);
        for (const auto &vars : uniform) {
            tried.insert(vars);
            evaluate(vars);
        }
        descend(every);
    };
    // Where some block's weights cannot fit even split as far as they go,
    // the bounded search would find nothing: go to the unbounded one at once.
    // Every group, and the pinned copies searched apart.
    std::vector<const Group *> groups;
    for (const Group &g : m_groups) {
        groups.push_back(&g);
        if (g.apartCopies)
            groups.push_back(g.apartCopies.get());
    }
    auto weightsCanFit = [&] {
        for (const Group *group : groups)
            for (const Segment &block : group->blocks)
                if (leastWeightMemory(block) > m_capacity / block.instances)
                    return false;
        return true;
    };
    m_bound = weightsCanFit() ? m_capacity : std::numeric_limits<std::int64_t>::max();
    // Where even the plan that shards nothing fits (activations and weights
    // whole on every device, the most memory any plan takes), memory cannot
    // decide between plans: the per-op search then keeps per state only its
    // fastest and its least-communication partial plan instead of every
    // trade-off against memory, which on 2D and 3D meshes are thousands.
    auto shardingNothingFits = [&] {
        if (m_capacity == std::numeric_limits<std::int64_t>::max())
            return true;
        const std::vector<int> replicated(static_cast<std::size_t>(m_variables), 0);  // allLayouts' first
        std::int64_t total = 0;
        for (const Group *group : groups)
            for (std::size_t k = 0; k < group->blocks.size(); ++k) {
                const Group &g = *group;
                m_coster.useGradientFlow(g.flowVariant);
                const Segment &block = g.blocks[k];
                const auto boundary =
                    boundaryOf(g, block, replicated, k > 0 ? 0 : -1, k < g.links.size() ? 0 : -1, k);
                const std::vector<ShardingSpec> weights(block.weights.size(), ShardingSpec::replicated(m_mesh.rank()));
                total += m_coster.evaluate(block, boundary, weights).memory * block.instances;
                if (total > m_capacity)
                    return false;
            }
        return true;
    };
    m_coster.setMemoryBinds(!shardingNothingFits());
    m_coster.setDropDominatedCharges(m_options.dropDominatedCharges);
    m_coster.setRepeatsOnce(m_options.repeatsOnce);
    m_coster.setCancelled(m_options.cancelled);
    m_copiesApart = m_options.copiesApart && m_coster.memoryBinds();
    explore();
    if (!leastMemory.found && m_bound != std::numeric_limits<std::int64_t>::max()) {
        // Some block has no choice of weights that fits (a model too large
        // for the mesh): search again without the bound, so that the plan
        // shown is the one that needs the least memory, marked as not fitting.
        m_bound = std::numeric_limits<std::int64_t>::max();
        explore();
    }
    if (!leastMemory.found)
        throw TapestryError(Error{modelSource, {}, "tap: no plan found (no block has a legal choice of weights)"});
    std::vector<std::string> warnings;
    if (!fastest.found) {
        warnings.push_back("tap: no plan fits in device memory; the plan shown needs the least memory");
        fastest = leastMemory;
        leastComm = leastMemory;
    }
    SearchResult result;
    result.stats.algorithm = "tap";
    retireWorkers();
    bool capacitySkipped = m_main.capacitySkipped;
    std::size_t capacitySkips = m_coster.capacitySkips();
    result.stats.plansEvaluated = m_coster.evaluations();
    result.stats.peakStates = m_coster.peakStates();
    for (const auto &w : m_retired) {
        result.stats.plansEvaluated += w.evaluations;
        result.stats.peakStates = std::max(result.stats.peakStates, w.peakStates);
        capacitySkips += w.capacitySkips;
        capacitySkipped = capacitySkipped || w.capacitySkipped;
    }
    result.stats.classes = m_classes.classes.size();
    result.stats.layoutsExhaustive = exhaustive;
    // The plan is the fastest of the space, memory aside, when every
    // layout combination was tried, no choice was dropped for its weights'
    // memory, and no plan left out for its memory was faster.
    result.stats.memoryBound = !exhaustive || capacitySkipped || capacitySkips > 0 ||
                               !fastest.found || fastestOfAll < fastest.candidate.time;
    for (const auto &g : m_groups)
        result.stats.segments += g.blocks.size();
    result.stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    result.plan = assembleApart(modelSource, fastest.vars, fastest.candidate);
    if (m_options.rankedPlans)
        result.planSpecs = m_assembledSpecs;
    result.stats.copiesApart = copiesApart(fastest.candidate);
    result.leastCommunication = assembleApart(modelSource, leastComm.vars, leastComm.candidate, &result.plan);
    if (m_options.rankedPlans)
        result.leastCommunicationSpecs = m_assembledSpecs;
    for (auto *p : {&result.plan, &result.leastCommunication}) {
        p->searchWarnings = warnings;
        // Searched without a memory limit (the memory techniques' probes),
        // nothing was held to one: the caller costs the plan on its mesh.
        if (!p->cost.fitsMemory && p->cost.memoryCapacity > 0 && p->searchWarnings.empty())
            p->searchWarnings.push_back("tap: the plan's memory, costed on the whole graph, exceeds the device's");
    }
    result.leastCommunication.method = "tap";
    return result;
}

// The classes tap searches once for all their copies: all but those whose
// copies are each one coarse node with a weight to split. A class of
// single linears (an MLP whose two linears have one shape, a model of one
// layer) is no subgraph worth sharing a plan: its copies read and write
// different layouts (the first column-parallel, the second row-parallel),
// which one plan for every copy cannot say, and searching each where it
// is costs as little. Its ops are searched with the ops outside classes.
// A class of single norms goes too where the blocks around it store
// every coarse output as searched (`everySingleNode`: meshes of at most
// kStoredLayoutsUpTo layouts), and stays otherwise: its boundary is a
// layout the search chooses, which the block around it would leave to
// the strategy rules. (The pruner's classes are kept as they are: the
// studio shows them.)
// Empty where every class stays.
std::optional<passes::SubgraphClasses> searchedClasses(const ir::Graph &graph, const passes::SubgraphClasses &pruned,
                                                       bool everySingleNode)
{
    auto single = [&](const passes::SubgraphClass &c) {
        return std::all_of(c.instances.begin(), c.instances.end(), [&](const passes::SubgraphInstance &i) {
            return i.nodes.size() <= 1 &&
                   (everySingleNode ||
                    std::any_of(i.parameters.begin(), i.parameters.end(),
                                [&](ir::TensorId t) { return graph.tensor(t).shape.size() >= 2; }));
        });
    };
    if (std::none_of(pruned.classes.begin(), pruned.classes.end(), single))
        return std::nullopt;
    passes::SubgraphClasses kept = pruned;
    kept.classes.clear();
    std::vector<passes::ClassId> renumbered(pruned.classes.size());
    for (std::size_t c = 0; c < pruned.classes.size(); ++c) {
        if (single(pruned.classes[c]))
            continue;
        renumbered[c] = passes::ClassId(static_cast<std::int32_t>(kept.classes.size()));
        kept.classes.push_back(pruned.classes[c]);
        kept.classes.back().id = renumbered[c];
    }
    for (auto &id : kept.classOfOp)
        if (id.valid())
            id = renumbered[id.index()];
    return kept;
}

// With CostOptions::overlap, the searches run after the first to find the
// weights of the backward pass' two sides (overlappedSearch).
constexpr int kOverlapBisections = 3;

// A class's copies mixed between two plans (overlappedSearch): every k
// of the first or last k copies up to this many copies, else a grid of
// this many refined around its best.
constexpr int kMixGrid = 16;

// The blocks (cut at the residual stream, as tap searches them) of each
// class's copies and of the ops outside classes, as units a plan's specs
// are mixed by (overlappedSearch).
struct BlockUnits {
    // Per tensor, the unit whose op writes it or, for a parameter, reads
    // it first; graph inputs and whatever no op writes, a unit of their own.
    std::vector<int> owner;
    int count = 0;
    std::vector<std::vector<int>> copiesOf;  // per class and block: its copies' units in order
    std::vector<int> outside;                // the outside blocks' units, and the unowned tensors'
};

BlockUnits blockUnits(const ir::Graph &graph, const passes::SubgraphClasses &classes)
{
    BlockUnits u;
    u.owner.assign(graph.tensorCount(), -1);
    auto own = [&](const std::vector<ir::OpId> &ops) {
        for (ir::OpId id : ops) {
            const ir::Op &op = graph.op(id);
            for (ir::TensorId t : op.outputs)
                u.owner[t.index()] = u.count;
            for (ir::TensorId t : op.inputs)
                if (u.owner[t.index()] < 0 && graph.tensor(t).role == ir::Role::Parameter)
                    u.owner[t.index()] = u.count;
        }
        return u.count++;
    };
    for (const auto &cls : classes.classes) {
        const std::size_t first = u.copiesOf.size();
        for (const auto &instance : cls.instances) {
            const auto blocks = splitAtResidualCuts(graph, instance.ops);
            if (u.copiesOf.size() < first + blocks.size())
                u.copiesOf.resize(first + blocks.size());
            for (std::size_t b = 0; b < blocks.size(); ++b)
                u.copiesOf[first + b].push_back(own(blocks[b]));
        }
    }
    std::vector<ir::OpId> outsideOps;
    for (std::size_t o = 0; o < graph.opCount(); ++o)
        if (o >= classes.classOfOp.size() || !classes.classOfOp[o].valid())
            outsideOps.push_back(ir::OpId(static_cast<std::int32_t>(o)));
    for (const auto &block : splitAtResidualCuts(graph, outsideOps))
        u.outside.push_back(own(block));
    const int unowned = u.count++;
    for (auto &o : u.owner)
        if (o < 0)
            o = unowned;
    u.outside.push_back(unowned);
    return u;
}

// `base` (costing `baseCost`) with some of its units taking `side`'s specs,
// while that improves the whole plan under the objective: per outside
// block, one or the other; per block of a class, the first or the last k
// copies from `side` (every k on short stacks, else a grid of k refined
// around its best). The specs and cost of the best mixture, or nothing
// where none beats `base`.
std::optional<std::pair<std::vector<sharding::ShardingSpec>, cost::PlanCost>>
mixBlockByBlock(const BlockUnits &units, const std::vector<sharding::ShardingSpec> &base, const cost::PlanCost &baseCost,
                const std::vector<sharding::ShardingSpec> &side, cost::PlanCoster &coster)
{
    std::vector<bool> differs(static_cast<std::size_t>(units.count), false);
    for (std::size_t t = 0; t < base.size(); ++t)
        if (base[t] != side[t])
            differs[static_cast<std::size_t>(units.owner[t])] = true;
    auto differing = [&](int u) { return differs[static_cast<std::size_t>(u)]; };
    std::optional<std::pair<std::vector<sharding::ShardingSpec>, cost::PlanCost>> best;
    std::vector<sharding::ShardingSpec> specs = base;
    // The mixture `from` says, costed; kept when it is the best yet.
    auto tryMix = [&](const std::vector<bool> &from) {
        for (std::size_t t = 0; t < base.size(); ++t)
            specs[t] = from[static_cast<std::size_t>(units.owner[t])] ? side[t] : base[t];
        cost::PlanCost c = coster.totals(specs);
        if (cost::Objective::of(c) < cost::Objective::of(best ? best->second : baseCost)) {
            best = {specs, std::move(c)};
            return true;
        }
        return false;
    };
    std::vector<bool> fromSide(static_cast<std::size_t>(units.count), false);
    for (int pass = 0; pass < 3; ++pass) {
        bool improved = false;
        for (const int u : units.outside) {
            if (!differing(u))
                continue;
            auto next = fromSide;
            next[static_cast<std::size_t>(u)] = !next[static_cast<std::size_t>(u)];
            if (tryMix(next)) {
                fromSide = std::move(next);
                improved = true;
            }
        }
        for (const auto &copies : units.copiesOf) {
            if (std::none_of(copies.begin(), copies.end(), differing))
                continue;
            const auto n = static_cast<int>(copies.size());
            std::vector<bool> kept = fromSide;
            auto mixK = [&](int k, bool last) {
                auto next = fromSide;
                for (int i = 0; i < n; ++i)
                    next[static_cast<std::size_t>(copies[static_cast<std::size_t>(i)])] = last ? i >= n - k : i < k;
                if (!tryMix(next))
                    return false;
                kept = std::move(next);
                return true;
            };
            for (const bool last : {false, true}) {
                const int stride = std::max(1, n / kMixGrid);
                int bestK = -1;
                for (int k = 0; k <= n; k += stride)
                    if (mixK(k, last))
                        bestK = k;
                for (int step = stride / 2; bestK >= 0 && step >= 1; step /= 2)
                    for (const int k : {bestK - step, bestK + step})
                        if (k >= 0 && k <= n && mixK(k, last))
                            bestK = k;
            }
            if (kept != fromSide) {
                fromSide = std::move(kept);
                improved = true;
            }
        }
        if (!improved)
            break;
    }
    return best;
}

// With CostOptions::overlap a step is forward + max(backward compute,
// backward communication) + the update (cost::stepSeconds), which no sum of
// per-block costs gives: a search summing both counts the most a step can
// take, and ranks a data-parallel plan whose gradient all-reduces the
// backward pass hides behind one that communicates nothing. For every plan
// and every l in [0, 1], forward + l x backward compute + (1 - l) x
// backward communication is at most its step, and equal where l weighs
// the side that outlasts the other (l = 1: the compute hides the
// communication). The plan minimising that sum for a larger l computes
// less and communicates more, so the best step lies where the two sides
// meet: after the summed search, l is bisected towards it (a plan whose
// compute outlasts its communication asks for a larger l), each plan
// costed whole. Where the sides meet between two plans, the fastest is
// mixed with the last plans found on either side, block by block (cut at
// the residual stream, as tap searches them): per block of a class, the
// first or the last k copies taking the other plan's specs (as copies
// apart do under memory); per block of the ops outside classes, one or
// the other; while that improves the step. exact balances the sides node
// by node, which one weighted sum cannot. The least-communication plan is
// the summed search's.
SearchResult overlappedSearch(const ir::Graph &graph, const passes::CoarseGraph &coarse,
                              const passes::SubgraphClasses &classes, const std::string &modelSource,
                              const sharding::Mesh &mesh, const SearchOptions &options)
{
    SearchOptions ranked = options;
    ranked.rankedPlans = true;
    auto once = [&](double backwardCompute, double backwardComm) {
        return TapSearch(graph, coarse, classes, mesh, ranked, backwardCompute, backwardComm).run(modelSource);
    };
    SearchResult result = once(1, 1);
    auto backwardOf = [](const plan::Plan &p) {
        const auto it = p.cost.byPhase.find("backward");
        return it == p.cost.byPhase.end() ? cost::CostTotals{} : it->second;
    };
    auto better = [](const plan::Plan &a, const plan::Plan &b) {
        return cost::Objective::of(a.cost) < cost::Objective::of(b.cost);
    };
    // The last plans found on either side of the meeting point.
    std::vector<sharding::ShardingSpec> computeSide, commSide;
    // A weighted search; true when its plan's compute outlasts its communication.
    auto weighted = [&](double l) {
        SearchResult r = once(l, 1 - l);
        result.stats.seconds += r.stats.seconds;
        result.stats.plansEvaluated += r.stats.plansEvaluated;
        const cost::CostTotals backward = backwardOf(r.plan);
        const bool computeBound = backward.compute > backward.comm;
        (computeBound ? computeSide : commSide) = r.planSpecs;
        if (better(r.plan, result.plan)) {
            result.plan = std::move(r.plan);
            result.planSpecs = std::move(r.planSpecs);
            result.stats.copiesApart = std::move(r.stats.copiesApart);
            result.stats.memoryBound = r.stats.memoryBound;
        }
        return computeBound;
    };
    // The least-communication plan is a plan of the same space: with the
    // backward communication hidden, it may be the fastest.
    if (better(result.leastCommunication, result.plan)) {
        result.plan = result.leastCommunication;
        result.planSpecs = result.leastCommunicationSpecs;
    }
    // First the side that outlasts the other in the summed plan, alone:
    // where its plan still outlasts the other side, that plan's step is
    // its weighted sum, which no plan's undercuts (for l = 1: no plan
    // computes less), and the search is done.
    const cost::CostTotals summed = backwardOf(result.plan);
    const bool computeFirst = summed.compute > summed.comm;
    if (weighted(computeFirst ? 1.0 : 0.0) != computeFirst) {
        double low = 0, high = 1;
        for (int step = 0; step < kOverlapBisections; ++step) {
            const double l = (low + high) / 2;
            (weighted(l) ? low : high) = l;
        }
    }

    const auto start = std::chrono::steady_clock::now();
    cost::PlanCoster coster(graph, mesh, options.cost);
    std::optional<BlockUnits> units;
    for (const auto *side : {&computeSide, &commSide}) {
        if (side->empty() || *side == result.planSpecs)
            continue;
        if (!units)
            units = blockUnits(graph, classes);
        if (auto mixed = mixBlockByBlock(*units, result.planSpecs, result.plan.cost, *side, coster)) {
            result.plan.cost = std::move(mixed->second);
            result.plan.axisCarries = plan::axisCarries(graph, mesh, mixed->first);
            result.planSpecs = std::move(mixed->first);
            result.stats.copiesApart.clear();
        }
    }
    result.stats.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!options.rankedPlans) {
        plan::completePlan(result.plan, graph, result.planSpecs, plan::SpecSource::Search, coster);
        result.leastCommunication.model.fingerprint = result.plan.model.fingerprint;
        plan::completePlan(result.leastCommunication, graph, result.leastCommunicationSpecs, plan::SpecSource::Search,
                           coster);
        result.planSpecs.clear();
        result.leastCommunicationSpecs.clear();
    }
    return result;
}

} // namespace

SearchResult tapSearch(const ir::Graph &graph, const passes::SubgraphClasses &classes,
                       const std::string &modelSource, const sharding::Mesh &mesh, const SearchOptions &options)
{
    return tapSearch(graph, passes::Coarsen().run(graph), classes, modelSource, mesh, options);
}

SearchResult tapSearch(const ir::Graph &graph, const passes::CoarseGraph &coarse,
                       const passes::SubgraphClasses &pruned, const std::string &modelSource,
                       const sharding::Mesh &mesh, const SearchOptions &options)
{
    const auto apart = searchedClasses(
        graph, pruned, options.storedLayouts && allowedLayouts(mesh.rank(), options.axisRoles).size() <= kStoredLayoutsUpTo);
    const passes::SubgraphClasses &classes = apart ? *apart : pruned;
    SearchResult result = options.cost.overlap ? overlappedSearch(graph, coarse, classes, modelSource, mesh, options)
                                               : TapSearch(graph, coarse, classes, mesh, options).run(modelSource);
    result.plan.axesConstrained = result.leastCommunication.axesConstrained = anyRole(options.axisRoles);
    return result;
}

} // namespace tapestry::search
