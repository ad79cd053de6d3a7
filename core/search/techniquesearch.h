#pragma once

#include "cost/costoptions.h"
#include "ir/graph.h"
#include "plan/plan.h"
#include "search/searchoptions.h"
#include "search/searchresult.h"
#include "sharding/mesh.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tapestry::search {

// The memory techniques a plan may use (cost::Techniques), each fixed by
// the user or, left empty, chosen with the plan ("auto").
struct TechniqueChoices {
    std::optional<bool> flashAttention;
    std::optional<cost::Recompute> recompute;  // with it, recomputeLayers is fixed too
    std::map<std::string, cost::Recompute> recomputeLayers;
    std::optional<int> zeroStage;
    std::optional<int> microBatches;
    std::optional<bool> offloadOptimizer;
    std::optional<std::vector<std::string>> zeroAxes;  // cost::Techniques::zeroAxes
};

// The settings worth trying, cheapest first (a setting that costs more
// time for every plan and saves no memory over another is left out):
// - flash attention: as fixed; on where the graph has an attention core
//   (it keeps no s x s tensor, and every LLM job uses it);
// - recomputation: none, then full (selective too without flash
//   attention, which keeps what selective drops already), and between them,
//   on models with two or three kinds of attention layer (an encoder's and
//   a decoder's), full for some kinds only (`kinds`: attentionLayerKinds);
//   none on graphs without an attention core, whose layers the cost model
//   cannot tell;
// - ZeRO: 1, 2, 3 (stage 0 takes more memory than 1 and as much time);
// - micro-batches: the powers of two that divide the model's batch (dim 0
//   of its first input), up to 64; with ZeRO 1 only the most of them (its
//   micro-batches cost no time in the model and save activations);
// - the optimizer offloaded to the host: last, as two settings (ZeRO-3
//   with it, then with full recomputation and the most micro-batches too),
//   for models whose states do not fit otherwise.
// The last setting keeps the least memory of all for every plan.
// `batch` is the model's batch, 0 or 1 when it has none to split.
std::vector<cost::Techniques> techniqueCandidates(const TechniqueChoices &choices, bool hasAttention,
                                                  std::int64_t batch, const std::vector<std::string> &kinds = {});

// The model's batch for micro-batching: dim 0 of its first graph input.
std::int64_t modelBatch(const ir::Graph &graph);
// Why a step of `microBatches` micro-batches cannot run `specs`: a tensor
// whose dim 0 is the model's batch (the graph's inputs' and what follows
// them) that the plan splits more ways than a micro-batch's share of it
// divides into ("tensor 'input_ids' in a micro-batch: dim 0 of size 2
// cannot be split into 4 equal pieces"), as tapestry-exec would refuse it.
// Nothing for one micro-batch, or where every such tensor divides.
std::optional<std::string> microBatchProblem(const ir::Graph &graph, const std::vector<sharding::ShardingSpec> &specs,
                                             const sharding::Mesh &mesh, int microBatches);
// Whether the graph has an attention core the cost model recognises.
bool hasAttentionCore(const ir::Graph &graph);

// Every plan takes at least as long with `b` as with `a` (the time each
// technique adds never shrinks from a to b).
bool noFasterThan(const cost::Techniques &a, const cost::Techniques &b);

// Runs `search` (tap or exact, on options with cost.techniques set) once
// per candidate setting and returns the best plan under cost::Objective
// (ties: the earlier setting). It starts with the first setting and no
// memory limit: a plan that then fits is the fastest of every setting, and
// the search stops there. Else it searches the last setting (the least
// memory for every plan): when that plan does not fit, no setting's does,
// and it is the answer. It stops as soon as a plan that fits is that fast,
// and leaves out the settings no faster than one whose plan fits and is
// the fastest of its space (SearchStats::memoryBound false). Settings are
// searched in parallel, one per hardware thread, the result independent of
// the threads. stats.techniquesTried counts the searches.
SearchResult searchTechniques(const std::function<SearchResult(const sharding::Mesh &, const SearchOptions &)> &search,
                              const ir::Graph &graph, const std::string &modelSource, const sharding::Mesh &mesh,
                              const SearchOptions &options, const TechniqueChoices &choices);

// Drops from the plan's techniques what the user left to the search and
// the plan does as well without (micro-batches, ZeRO stages, recomputation
// that save nothing needed and no time), re-costing it.
void simplifyTechniques(plan::Plan &plan, const ir::Graph &graph, const TechniqueChoices &choices);

// The best setting for a plan whose specs are fixed (a reference plan, a
// plan read from a file): every candidate costed, the best kept.
plan::Plan chooseTechniques(const plan::Plan &plan, const ir::Graph &graph, const TechniqueChoices &choices);

// One line per technique the plan uses: what it saves and costs, measured
// by costing the plan's specs again without it ("ZeRO-3: saves 48.2 GiB
// per device, costs 12.1 ms per step; needed to fit").
std::vector<std::string> techniqueReasons(const plan::Plan &plan, const ir::Graph &graph);

} // namespace tapestry::search
