#pragma once

#include "cost/costoptions.h"
#include "cost/pipeline.h"
#include "cost/plancost.h"
#include "ir/graph.h"
#include "plan/axisroles.h"
#include "sharding/mesh.h"
#include "sharding/shardingspec.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tapestry::cost {
class PlanCoster;
}

namespace tapestry::plan {

// Who chose a tensor's spec: a search (tap, exact), the user by hand, or a
// reference plan (megatron, dp, replicate). User overrides are kept as they
// are when a plan is searched again.
enum class SpecSource { Search, Override, Reference };
std::string_view toString(SpecSource source);
std::optional<SpecSource> specSourceFromString(std::string_view s);

struct TensorPlan {
    sharding::ShardingSpec spec;
    SpecSource source = SpecSource::Search;
    friend bool operator==(const TensorPlan &, const TensorPlan &) = default;
};

// The model a plan was made for.
struct PlanModel {
    std::string source;       // as the user named it: "zoo:gpt2?layers=4", "model.onnx"
    std::string name;         // the graph's name
    std::string fingerprint;  // modelFingerprint()
    std::int64_t ops = 0;
    std::int64_t tensors = 0;
    friend bool operator==(const PlanModel &, const PlanModel &) = default;
};

// A plan's pipeline (cost/pipeline.h): the model cut into `stages` runs of
// layers, each on its own copy of the plan's mesh (the plan's specs and
// cost are one stage's), the micro-batches (costOptions' techniques) passed
// between them over `link` as `schedule` orders them; and what it costs.
struct PlanPipeline {
    int stages = 1;
    cost::Schedule schedule = cost::Schedule::OneFOneB;
    int virtualStages = 1;
    std::vector<int> cuts;  // the first layer of each chunk after the first
    int layers = 0;         // the layers cut between
    sharding::LinkProfile link;
    double stepTime = 0;
    double bubbleFraction = 0;
    std::int64_t memoryPerDevice = 0;  // the fullest stage's
    bool fitsMemory = true;
    // As the cost model takes it: the stages, schedule, chunks, link and cuts.
    cost::Pipeline costed() const { return {stages, schedule, virtualStages, link, cuts}; }
    friend bool operator==(const PlanPipeline &, const PlanPipeline &) = default;
};

// A tensor-parallel plan: the mesh, a spec for every tensor of the model
// keyed by tensor name, and what it costs (tapestry.plan, core/plan/README.md).
struct Plan {
    PlanModel model;
    sharding::Mesh mesh;
    std::string method;              // "megatron", "dp", "replicate", "tap", "exact", ...
    bool sequenceParallel = false;
    std::vector<std::string> searchWarnings;  // what the method could not do as asked
    // The mesh's axis names were given by the user and the search kept each
    // axis to the role its name asks for (AxisRole); false: the names are
    // defaults or the method ignores them, and axisCarries says what each
    // axis is used for.
    bool axesConstrained = false;
    // What each mesh axis carries, derived from the specs whenever the plan
    // is made or costed (axisCarries()); empty for a plan read from a file
    // that does not say, until it is costed again.
    std::vector<AxisCarries> axisCarries;
    cost::CostOptions costOptions;
    std::map<std::string, TensorPlan> specs;  // by tensor name, ordered for stable files
    cost::PlanCost cost;
    std::optional<PlanPipeline> pipeline;  // none: one stage, the whole model on the mesh
};

// A plan for `graph` from specs indexed by tensor id, all from `source`,
// costed.
Plan makePlan(const ir::Graph &graph, const std::string &modelSource, const sharding::Mesh &mesh,
              const std::vector<sharding::ShardingSpec> &specs, SpecSource source, const std::string &method,
              const cost::CostOptions &options = {});
// The same costed by `coster` (made for `graph`, with its mesh and cost
// options): a search that makes several plans of one graph derives the
// graph's facts once and costs the second plan by what differs.
Plan makePlan(const ir::Graph &graph, const std::string &modelSource, const std::vector<sharding::ShardingSpec> &specs,
              SpecSource source, const std::string &method, cost::PlanCoster &coster);
// The same with the graph's modelFingerprint() known: computing it walks
// the whole graph, and a search making two plans of one graph does it once.
Plan makePlan(const ir::Graph &graph, const std::string &modelSource, const std::vector<sharding::ShardingSpec> &specs,
              SpecSource source, const std::string &method, cost::PlanCoster &coster, const std::string &fingerprint);

// A plan ranked, not whole: as makePlan, less its specs by tensor name and
// its fingerprint, and costed in totals (cost::PlanCoster::totals). A
// search that makes many plans and keeps one makes the others no further;
// completePlan() makes the one kept whole.
// `totals`: coster.totals(specs), where the caller has them already.
Plan rankedPlan(const ir::Graph &graph, const std::string &modelSource, const std::vector<sharding::ShardingSpec> &specs,
                const std::string &method, cost::PlanCoster &coster, std::optional<cost::PlanCost> totals = {});
// Makes a rankedPlan() whole, as makePlan would have made it from the same
// specs (by tensor id) and `source`: every tensor's spec (the entries the
// plan holds, pins marked override, kept as they are), the fingerprint,
// and the cost with its breakdowns, by `coster` (made for `graph` and the
// plan's mesh; its options are set to the plan's).
void completePlan(Plan &plan, const ir::Graph &graph, const std::vector<sharding::ShardingSpec> &specs,
                  SpecSource source, cost::PlanCoster &coster);

// Checks that `plan` fits `graph` and returns its specs indexed by tensor
// id. Throws TapestryError naming `planInput` and, where it is about one
// tensor, the tensor: another model (fingerprint), a tensor the model does
// not have, a tensor without a spec, a spec with the wrong number of
// placements, a split dim out of range or not divisible, a partial sum
// stored for a parameter or input.
std::vector<sharding::ShardingSpec> planSpecs(const Plan &plan, const ir::Graph &graph,
                                              const std::string &planInput);
// The same with the graph's modelFingerprint() known: a document keeps it,
// and computing it walks the whole graph.
std::vector<sharding::ShardingSpec> planSpecs(const Plan &plan, const ir::Graph &graph, const std::string &planInput,
                                              const std::string &fingerprint);

// Validates (planSpecs) and costs the plan again on its own mesh, and its
// pipeline where it has one.
void recostPlan(Plan &plan, const ir::Graph &graph, const std::string &planInput);
// The pipeline's figures from the plan's cost (costed with breakdowns) and
// its cuts; nothing where the plan has no pipeline. Throws TapestryError
// naming `planInput` where its layers or cuts do not fit the model.
void costPipeline(Plan &plan, const ir::Graph &graph, const std::vector<sharding::ShardingSpec> &specs,
                  const std::string &planInput);

// recostPlan for the plans of one model, edit after edit (the studio, on
// every pin, undo and redo): the model's fingerprint and a cost::PlanCoster
// for the plan's mesh and cost options are kept between calls, so an edit
// costs what it changes. A plan on another mesh or with other cost options
// starts a new coster. Holds a reference to the graph.
class Recoster {
public:
    explicit Recoster(const ir::Graph &graph);
    ~Recoster();
    void recost(Plan &plan, const std::string &planInput);
    // Ops whose strategy the last recost() resolved again.
    std::size_t resolvedOps() const;

private:
    const ir::Graph &m_graph;
    std::string m_fingerprint;
    std::unique_ptr<cost::PlanCoster> m_coster;
};

} // namespace tapestry::plan
