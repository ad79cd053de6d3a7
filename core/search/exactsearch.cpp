#include "search/exactsearch.h"

#include "ir/error.h"
#include "sharding/legalspecs.h"
#include "plan/plan.h"
#include "search/activationlayout.h"
#include "search/axisconstraint.h"
#include "search/segmentcost.h"
#include "sharding/propagation.h"

#include <coin/Cbc_C_Interface.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace tapestry::search {

namespace {

using sharding::Placement;
using sharding::ShardingSpec;
using Clock = std::chrono::steady_clock;

// One way to run a coarse node: its weights' choice and the stored spec of
// every tensor it shares with other nodes, with what that costs.
struct Strategy {
    std::int64_t weightCombo = 0;
    std::vector<ShardingSpec> shared;  // per NodeSpace::shared tensor
    double time = 0;
    double comm = 0;
    std::int64_t memory = 0;
    // The backward pass' compute and communication within time, which
    // CostOptions::overlap runs side by side.
    double backwardCompute = 0, backwardComm = 0;
};

struct NodeSpace {
    Segment segment;
    // Tensors other nodes also touch: what it reads, what it writes for
    // them, then the parameters it owns that another node reads (a tied
    // embedding).
    std::vector<ir::TensorId> shared;
    std::size_t inputs = 0;   // shared[0, inputs) are read
    std::size_t outputs = 0;  // shared[inputs, inputs + outputs) are written
    std::vector<Strategy> strategies;
};

// Mixed-radix counter over lists of sizes.
bool advance(std::vector<std::size_t> &digits, const std::vector<std::size_t> &sizes)
{
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (++digits[i] < sizes[i])
            return true;
        digits[i] = 0;
    }
    return false;
}

// Of strategies sharing every shared spec, only those no other beats in
// both time and memory can be part of an optimum; with `overlap`, in the
// forward time, the backward compute, the backward communication and the
// memory together (a step takes the larger of the backward pass' two
// sides, so less of either may decide it).
void keepFront(std::vector<Strategy> &strategies, bool overlap)
{
    std::stable_sort(strategies.begin(), strategies.end(), [](const Strategy &a, const Strategy &b) {
        if (a.shared != b.shared)
            return a.shared < b.shared;
        return a.time != b.time ? a.time < b.time : a.memory < b.memory;
    });
    std::vector<Strategy> kept;
    std::size_t group = 0;  // where kept's strategies of the current shared specs begin
    auto forward = [](const Strategy &s) { return s.time - s.backwardCompute - s.backwardComm; };
    for (auto &s : strategies) {
        if (kept.empty() || kept.back().shared != s.shared) {
            group = kept.size();
            kept.push_back(std::move(s));
            continue;
        }
        if (!overlap) {
            if (s.memory < kept.back().memory)
                kept.push_back(std::move(s));
            continue;
        }
        const bool beaten = std::any_of(kept.begin() + static_cast<std::ptrdiff_t>(group), kept.end(), [&](const Strategy &k) {
            return forward(k) <= forward(s) && k.backwardCompute <= s.backwardCompute &&
                   k.backwardComm <= s.backwardComm && k.memory <= s.memory;
        });
        if (!beaten)
            kept.push_back(std::move(s));
    }
    strategies = std::move(kept);
}

class ExactSearch {
public:
    ExactSearch(const ir::Graph &graph, const passes::CoarseGraph &coarse, const sharding::Mesh &mesh,
                const SearchOptions &options)
        : m_graph(graph), m_coarse(coarse), m_mesh(mesh), m_options(options), m_coster(graph, mesh, options.cost)
    {
    }

    SearchResult run(const std::string &modelSource);

private:
    void buildSpaces();
    void enumerate(NodeSpace &node);
    struct Solution {
        std::vector<std::size_t> chosen;  // strategy per node
        bool optimal = false;
    };
    // Minimises sum(objective(strategy)) subject to the one-hot and
    // agreement constraints and, when `capacity` is positive, memory.
    // With `backward` (a weight), plus that weight times the larger of the
    // sums of the backward compute and of the backward communication: the
    // step of CostOptions::overlap, linear in one more variable bounded
    // below by both sums.
    std::optional<Solution> solve(const std::function<double(const Strategy &)> &objective, std::int64_t capacity,
                                  double seconds, double backward = 0) const;
    plan::Plan assemble(const std::string &modelSource, const Solution &solution);

    const ir::Graph &m_graph;
    const passes::CoarseGraph &m_coarse;
    const sharding::Mesh &m_mesh;
    const SearchOptions &m_options;
    SegmentCoster m_coster;
    std::vector<NodeSpace> m_nodes;  // in topological order of the coarse graph
    // Per shared tensor: the specs the nodes enumerated so far may store it in.
    std::map<ir::TensorId, std::vector<ShardingSpec>> m_candidates;
};

void ExactSearch::buildSpaces()
{
    for (passes::NodeId id : m_coarse.topologicalOrder()) {
        const auto &node = m_coarse.node(id);
        NodeSpace space;
        space.segment = makeSegment(m_graph, m_mesh, std::string(node.name), -1, 1, {node.ops.begin(), node.ops.end()});
        keepToRoles(space.segment, m_options.axisRoles);
        m_nodes.push_back(std::move(space));
    }
    std::set<ir::TensorId> sharedParameters;
    for (const auto &n : m_nodes)
        for (auto t : n.segment.inputs)
            if (m_graph.tensor(t).role == ir::Role::Parameter)
                sharedParameters.insert(t);
    for (auto &n : m_nodes) {
        n.shared = n.segment.inputs;
        n.inputs = n.shared.size();
        n.shared.insert(n.shared.end(), n.segment.outputs.begin(), n.segment.outputs.end());
        n.outputs = n.segment.outputs.size();
        for (const auto *list : {&n.segment.weights, &n.segment.derived})
            for (auto t : *list)
                if (sharedParameters.count(t))
                    n.shared.push_back(t);
    }
}

void ExactSearch::enumerate(NodeSpace &node)
{
    const Segment &seg = node.segment;
    // What each read tensor may be stored as: what its writer offers, the
    // activation layouts for graph inputs, any legal spec otherwise.
    std::vector<std::vector<ShardingSpec>> inputChoices;
    for (std::size_t i = 0; i < node.inputs; ++i) {
        const ir::TensorId t = node.shared[i];
        auto it = m_candidates.find(t);
        if (it != m_candidates.end()) {
            inputChoices.push_back(it->second);
            continue;
        }
        const ir::Tensor &tensor = m_graph.tensor(t);
        std::vector<ShardingSpec> specs;
        if (tensor.role == ir::Role::Input) {
            for (const auto &layout : allowedLayouts(m_mesh.rank(), m_options.axisRoles))
                specs.push_back(layout.specFor(tensor, m_mesh));
            std::sort(specs.begin(), specs.end());
            specs.erase(std::unique(specs.begin(), specs.end()), specs.end());
        } else {
            specs = sharding::legalSpecs(tensor.shape, m_mesh);
            if (tensor.role == ir::Role::Parameter)
                std::erase_if(specs, [&](const ShardingSpec &s) { return brokenAxis(m_options.axisRoles, s).has_value(); });
        }
        inputChoices.push_back(specs);
    }
    // Where a written tensor may be stored besides as produced: the
    // activation layouts tap links blocks and classes with. Graph outputs
    // stay as they come out.
    std::vector<std::vector<ShardingSpec>> outputLayouts;
    for (std::size_t o = 0; o < node.outputs; ++o) {
        const ir::Tensor &tensor = m_graph.tensor(node.shared[node.inputs + o]);
        std::vector<ShardingSpec> specs;
        if (tensor.role != ir::Role::Output && !tensor.consumers.empty())
            for (const auto &layout : allowedLayouts(m_mesh.rank(), m_options.axisRoles))
                specs.push_back(layout.specFor(tensor, m_mesh));
        std::sort(specs.begin(), specs.end());
        specs.erase(std::unique(specs.begin(), specs.end()), specs.end());
        outputLayouts.push_back(std::move(specs));
    }

    std::vector<std::size_t> inputSizes;
    double planned = static_cast<double>(comboCount(seg));
    for (const auto &c : inputChoices) {
        inputSizes.push_back(c.size());
        planned *= static_cast<double>(c.size());
    }
    std::vector<std::size_t> outputSizes;
    for (const auto &c : outputLayouts) {
        outputSizes.push_back(c.size() + 1);  // 0: as produced
        planned *= static_cast<double>(c.size() + 1);
    }
    if (planned > 2e6)
        throw TapestryError(Error{seg.name, {}, "exact: too many strategies for one coarse node (" +
                                                    std::to_string(static_cast<long long>(planned)) + ")"});

    std::vector<std::size_t> in(inputSizes.size(), 0);
    do {
        std::map<ir::TensorId, ShardingSpec> boundary;
        for (std::size_t i = 0; i < node.inputs; ++i)
            boundary[node.shared[i]] = inputChoices[i][in[i]];
        for (std::int64_t combo = 0; combo < comboCount(seg); ++combo) {
            const auto weights = chosenSpecs(seg, comboChoice(seg, combo));
            std::vector<ShardingSpec> produced;
            std::vector<std::size_t> out(outputSizes.size(), 0);
            do {
                auto b = boundary;
                bool duplicate = false;
                for (std::size_t o = 0; o < out.size(); ++o)
                    if (out[o] > 0) {
                        const ShardingSpec &spec = outputLayouts[o][out[o] - 1];
                        duplicate = duplicate || spec == produced[o];
                        b[node.shared[node.inputs + o]] = spec;
                    }
                if (duplicate)
                    continue;  // the same as storing it as produced
                const SegmentCost c = m_coster.evaluate(seg, b, weights);
                Strategy s{combo, {}, c.time, c.comm, c.memory, c.backwardCompute, c.backwardComm};
                for (auto t : node.shared)
                    s.shared.push_back(m_coster.spec(t));
                if (produced.empty())
                    for (std::size_t o = 0; o < node.outputs; ++o)
                        produced.push_back(m_coster.spec(node.shared[node.inputs + o]));
                node.strategies.push_back(std::move(s));
            } while (advance(out, outputSizes));
        }
    } while (advance(in, inputSizes));
    keepFront(node.strategies, m_options.cost.overlap);

    for (std::size_t k = node.inputs; k < node.shared.size(); ++k) {
        std::set<ShardingSpec> specs;
        for (const auto &s : node.strategies)
            specs.insert(s.shared[k]);
        m_candidates[node.shared[k]].assign(specs.begin(), specs.end());
    }
}

// CBC's C model, deleted on every path out.
struct CbcModel {
    Cbc_Model *model = Cbc_newModel();
    ~CbcModel() { Cbc_deleteModel(model); }
    CbcModel() = default;
    CbcModel(const CbcModel &) = delete;
    CbcModel &operator=(const CbcModel &) = delete;
};

std::optional<ExactSearch::Solution> ExactSearch::solve(const std::function<double(const Strategy &)> &objective,
                                                        std::int64_t capacity, double seconds, double backward) const
{
    // The program is gathered first and handed to CBC in one piece: adding
    // rows one by one to its column-ordered matrix moves every column each
    // time, which on a 2D mesh took minutes before the solver started.
    std::vector<double> objectives, upper;
    std::vector<char> integer;
    auto addColumn = [&](double cost, bool isInteger, double upperBound = 1.0) {
        objectives.push_back(cost);
        upper.push_back(upperBound);
        integer.push_back(isInteger ? 1 : 0);
        return static_cast<int>(objectives.size() - 1);
    };
    struct Entry {
        int column;
        int row;
        double value;
    };
    std::vector<Entry> entries;
    std::vector<double> rowLower, rowUpper;
    auto addRow = [&](const std::vector<int> &cols, const std::vector<double> &coefs, double lower, double upperBound) {
        const int row = static_cast<int>(rowLower.size());
        for (std::size_t i = 0; i < cols.size(); ++i)
            entries.push_back({cols[i], row, coefs[i]});
        rowLower.push_back(lower);
        rowUpper.push_back(upperBound);
    };

    std::vector<std::vector<int>> column(m_nodes.size());  // per node and strategy
    for (std::size_t n = 0; n < m_nodes.size(); ++n)
        for (const auto &s : m_nodes[n].strategies)
            column[n].push_back(addColumn(objective(s), true));
    for (std::size_t n = 0; n < m_nodes.size(); ++n)
        addRow(column[n], std::vector<double>(column[n].size(), 1.0), 1.0, 1.0);

    // Per shared tensor, one-hot variables over its specs; every node that
    // touches it picks strategies storing it in the same one.
    std::map<ir::TensorId, std::vector<std::pair<std::size_t, std::size_t>>> touching;  // node, shared index
    for (std::size_t n = 0; n < m_nodes.size(); ++n)
        for (std::size_t k = 0; k < m_nodes[n].shared.size(); ++k)
            touching[m_nodes[n].shared[k]].push_back({n, k});
    for (const auto &[t, nodes] : touching) {
        if (nodes.size() < 2)
            continue;
        std::set<ShardingSpec> specs;
        for (const auto &[n, k] : nodes)
            for (const auto &s : m_nodes[n].strategies)
                specs.insert(s.shared[k]);
        for (const auto &spec : specs) {
            const int y = addColumn(0, false);
            for (const auto &[n, k] : nodes) {
                std::vector<int> cols{y};
                std::vector<double> coefs{-1.0};
                for (std::size_t s = 0; s < m_nodes[n].strategies.size(); ++s)
                    if (m_nodes[n].strategies[s].shared[k] == spec) {
                        cols.push_back(column[n][s]);
                        coefs.push_back(1.0);
                    }
                addRow(cols, coefs, 0.0, 0.0);
            }
        }
    }
    if (backward > 0) {
        // z >= sum of backward compute, z >= sum of backward communication,
        // in microseconds as the objective's seconds are.
        const int z = addColumn(backward, false, std::numeric_limits<double>::max());
        for (const bool compute : {true, false}) {
            std::vector<int> cols{z};
            std::vector<double> coefs{-1.0};
            for (std::size_t n = 0; n < m_nodes.size(); ++n)
                for (std::size_t s = 0; s < m_nodes[n].strategies.size(); ++s) {
                    const Strategy &strategy = m_nodes[n].strategies[s];
                    cols.push_back(column[n][s]);
                    coefs.push_back(1e6 * (compute ? strategy.backwardCompute : strategy.backwardComm));
                }
            addRow(cols, coefs, -std::numeric_limits<double>::max(), 0.0);
        }
    }
    if (capacity > 0) {
        // In MiB, so that the row's coefficients stay within the solver's
        // tolerances.
        std::vector<int> cols;
        std::vector<double> coefs;
        for (std::size_t n = 0; n < m_nodes.size(); ++n)
            for (std::size_t s = 0; s < m_nodes[n].strategies.size(); ++s) {
                cols.push_back(column[n][s]);
                coefs.push_back(static_cast<double>(m_nodes[n].strategies[s].memory) / (1 << 20));
            }
        addRow(cols, coefs, -std::numeric_limits<double>::max(), static_cast<double>(capacity) / (1 << 20));
    }

    // Column by column, as CBC stores the matrix.
    const auto columns = objectives.size();
    std::vector<CoinBigIndex> start(columns + 1, 0);
    for (const Entry &e : entries)
        ++start[static_cast<std::size_t>(e.column) + 1];
    for (std::size_t c = 0; c < columns; ++c)
        start[c + 1] += start[c];
    std::vector<int> index(entries.size());
    std::vector<double> value(entries.size());
    std::vector<CoinBigIndex> fill(start.begin(), start.end() - 1);
    for (const Entry &e : entries) {
        const auto at = static_cast<std::size_t>(fill[static_cast<std::size_t>(e.column)]++);
        index[at] = e.row;
        value[at] = e.value;
    }
    const std::vector<double> lower(columns, 0.0);
    CbcModel cbc;
    Cbc_Model *model = cbc.model;
    Cbc_setLogLevel(model, 0);
    Cbc_loadProblem(model, static_cast<int>(columns), static_cast<int>(rowLower.size()), start.data(), index.data(),
                    value.data(), lower.data(), upper.data(), objectives.data(), rowLower.data(), rowUpper.data());
    for (std::size_t c = 0; c < columns; ++c)
        if (integer[c])
            Cbc_setInteger(model, static_cast<int>(c));
    Cbc_setMaximumSeconds(model, std::max(seconds, 0.1));

    Cbc_solve(model);
    const double *x = Cbc_bestSolution(model);
    if (!x)
        return std::nullopt;
    Solution solution;
    solution.optimal = Cbc_isProvenOptimal(model) != 0;
    for (std::size_t n = 0; n < m_nodes.size(); ++n) {
        std::size_t best = 0;
        for (std::size_t s = 1; s < column[n].size(); ++s)
            if (x[column[n][s]] > x[column[n][best]])
                best = s;
        solution.chosen.push_back(best);
    }
    return solution;
}

plan::Plan ExactSearch::assemble(const std::string &modelSource, const Solution &solution)
{
    std::map<ir::TensorId, ShardingSpec> fixed;
    for (std::size_t n = 0; n < m_nodes.size(); ++n) {
        const NodeSpace &node = m_nodes[n];
        const Strategy &s = node.strategies[solution.chosen[n]];
        std::map<ir::TensorId, ShardingSpec> boundary;
        for (std::size_t k = 0; k < node.inputs + node.outputs; ++k)
            boundary[node.shared[k]] = s.shared[k];
        m_coster.evaluate(node.segment, boundary, chosenSpecs(node.segment, comboChoice(node.segment, s.weightCombo)));
        for (ir::OpId id : node.segment.ops) {
            const ir::Op &op = m_graph.op(id);
            for (const auto *list : {&op.inputs, &op.outputs})
                for (auto t : *list)
                    if (!fixed.count(t) && m_graph.tensor(t).role != ir::Role::Output)
                        fixed[t] = m_coster.spec(t);
        }
        for (std::size_t k = 0; k < node.inputs + node.outputs; ++k)
            if (m_graph.tensor(node.shared[k]).role != ir::Role::Output)
                fixed[node.shared[k]] = s.shared[k];
    }
    const auto specs = sharding::propagateSpecs(m_graph, m_mesh, fixed);
    return plan::makePlan(m_graph, modelSource, m_mesh, specs, plan::SpecSource::Search, "exact", m_options.cost);
}

SearchResult ExactSearch::run(const std::string &modelSource)
{
    const auto start = Clock::now();
    const double limit = m_options.timeLimitSeconds > 0 ? m_options.timeLimitSeconds : 60;
    auto remaining = [&] { return limit - std::chrono::duration<double>(Clock::now() - start).count(); };
    buildSpaces();
    for (std::size_t n = 0; n < m_nodes.size(); ++n) {
        enumerate(m_nodes[n]);
        if (m_options.progress)
            m_options.progress(n + 1, m_nodes.size() + 2);
        // The limit covers the whole search, the tables the program is
        // made of too.
        if (remaining() <= 0) {
            std::ostringstream message;
            message << "exact: costing the strategies of " << n + 1 << " of " << m_nodes.size()
                    << " coarse nodes took the whole time limit (" << limit << " s); raise it";
            throw TapestryError(Error{modelSource, {}, message.str()});
        }
    }
    for (const auto &node : m_nodes)
        if (node.strategies.empty())
            throw TapestryError(Error{modelSource, node.segment.name, "exact: the node has no legal strategy"});

    const std::int64_t capacity = m_mesh.device.memoryBytes;  // none when not positive
    // Seconds scaled to microseconds, so that the objective is not lost in
    // the solver's tolerances; ties broken by the other metric.
    // With overlap, the forward time and the update here, the larger of
    // the backward pass' sides through solve's extra variable.
    const bool overlap = m_options.cost.overlap;
    auto fastestOf = [overlap](const Strategy &s) {
        const double time = overlap ? s.time - s.backwardCompute - s.backwardComm : s.time;
        return 1e6 * time + 1e-3 * s.comm;
    };
    const double backward = overlap ? 1.0 : 0.0;
    auto leastComm = [](const Strategy &s) { return 1e6 * s.comm + 1e-3 * s.time; };

    std::vector<std::string> warnings;
    // The least-communication solve gets what the first leaves, but never
    // less than a tenth of the limit.
    auto best = solve(fastestOf, capacity, remaining() - 0.1 * limit, backward);
    std::optional<Solution> comm;
    if (best) {
        if (m_options.progress)
            m_options.progress(m_nodes.size() + 1, m_nodes.size() + 2);
        comm = solve(leastComm, capacity, std::max(remaining(), 0.1 * limit));
    } else {
        // The objective (cost/objective.h) when nothing fits: the least
        // overshoot, then the least step time among plans that small.
        best = solve([](const Strategy &s) { return static_cast<double>(s.memory) / (1 << 20); }, 0,
                     std::max(remaining(), 0.1 * limit));
        if (best) {
            std::int64_t least = 0;
            for (std::size_t n = 0; n < m_nodes.size(); ++n)
                least += m_nodes[n].strategies[best->chosen[n]].memory;
            if (auto faster = solve(fastestOf, least, std::max(remaining(), 0.1 * limit), backward)) {
                faster->optimal = faster->optimal && best->optimal;
                best = faster;
            }
        }
        if (!best) {
            std::ostringstream message;
            message << "exact: CBC found no plan within the time limit (" << limit
                    << " s, the strategy tables included); raise it";
            throw TapestryError(Error{modelSource, {}, message.str()});
        }
        warnings.push_back("exact: no plan fits in device memory; the plan shown needs the least memory");
    }
    if (m_options.progress)
        m_options.progress(m_nodes.size() + 2, m_nodes.size() + 2);

    SearchResult result;
    result.stats.algorithm = "exact";
    result.stats.plansEvaluated = m_coster.evaluations();
    result.stats.segments = m_nodes.size();
    result.stats.optimal = best->optimal && (!comm || comm->optimal);
    result.stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    result.plan = assemble(modelSource, *best);
    result.leastCommunication = comm ? assemble(modelSource, *comm) : result.plan;
    if (!result.stats.optimal)
        warnings.push_back("exact: the time limit stopped CBC before it proved the plan optimal");
    for (auto *p : {&result.plan, &result.leastCommunication}) {
        p->searchWarnings = warnings;
        // Searched without a memory limit (the memory techniques' probes),
        // nothing was held to one: the caller costs the plan on its mesh.
        if (!p->cost.fitsMemory && p->cost.memoryCapacity > 0 && warnings.empty())
            p->searchWarnings.push_back("exact: the plan's memory, costed on the whole graph, exceeds the device's");
    }
    return result;
}

} // namespace

SearchResult exactSearch(const ir::Graph &graph, const passes::CoarseGraph &coarse, const std::string &modelSource,
                         const sharding::Mesh &mesh, const SearchOptions &options)
{
    ExactSearch search(graph, coarse, mesh, options);
    auto result = search.run(modelSource);
    result.plan.axesConstrained = result.leastCommunication.axesConstrained = anyRole(options.axisRoles);
    return result;
}

} // namespace tapestry::search
