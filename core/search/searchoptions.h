#pragma once

#include "cost/costoptions.h"
#include "plan/axisroles.h"
#include "sharding/shardingspec.h"

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tapestry::search {

// Knobs shared by the searches.
struct SearchOptions {
    cost::CostOptions cost;
    // tap: search each class block by block, linked by the layout of the
    // residual stream between blocks, keeping only the plans no other beats
    // in time, communication and memory together. false: enumerate every
    // combination of a class' weights and link layouts and cost the class
    // as a whole each time -- the exhaustive answer the tests hold tap to.
    bool decompose = true;
    // tap: store the coarse-node outputs inside a block as searched (as
    // produced or in any activation layout, as exact may), on meshes with
    // few layouts, on 2D meshes in blocks without an attention core
    // (tapsearch.cpp, kStoredLayoutsUpTo). false: they follow
    // the strategy rules, a smaller space the enumeration of decompose =
    // false can still cover on a transformer block.
    bool storedLayouts = true;
    // tap: where memory binds, a class's copies may split between two of
    // the class's plans (k copies one, the rest another: under a tight
    // limit, a few layers sharded and the rest replicated), as exact may
    // plan every copy apart. false: every copy takes the class's one plan.
    bool copiesApart = true;
    // tap: the most combinations of the classes' boundary layouts (one per
    // class and one for the graph inputs, each any activation layout of
    // the mesh) tried one by one. With more, the search starts from the
    // uniform ones and changes one class' layout at a time while that
    // improves the plan.
    std::size_t layoutCombinations = 20'000;
    // tap: axes of one size and one link that no role or pin tells apart
    // are interchangeable (permuting them keeps every plan's cost), so the
    // classes' layouts are tried in one order of them only. false: every
    // combination (the yardstick the tests hold the reduction to).
    bool interchangeableAxes = true;
    // tap: the per-op search drops partial plans that a state having paid
    // for more reshards already dominates (segmentcost.cpp,
    // dropDominatedByCharges). false: every state is carried (the
    // yardstick the tests hold the pruning to).
    bool dropDominatedCharges = true;
    // tap: the per-op search runs a mixture's experts as the first expert,
    // its costs counted once per expert, where every expert follows the
    // first op by op (segmentcost.cpp, Repeats). false: every expert's ops
    // are searched (the yardstick the tests hold the reduction to).
    bool repeatsOnce = true;
    // tap: the threads the searches of the classes' layout combinations
    // run on (each combination's searches are independent; the plan found
    // is the same on any number); 0: one per hardware thread.
    std::size_t threads = 0;
    // exact: the wall-clock limit of the whole search: costing the strategy
    // tables, then the solver.
    double timeLimitSeconds = 60;
    // Specs the user pinned, by tensor name: the plan keeps each of them
    // (marked override). tap searches a class' weights with the pins held,
    // so the rest of the plan is chosen around them: pins of every copy in
    // the class's one plan; pins of some copies only in a plan of those
    // copies, the others searched free. Other pins (activations, copies
    // pinned differently from one another) are applied to the plan found
    // and the specs after them derived again. A pin that is not a legal
    // spec of its tensor is an error.
    std::map<std::string, sharding::ShardingSpec> pinned;
    // tap and exact: per mesh axis, the role the user's name for it asks
    // for (axisRolesFromNames); an axis with none, and every axis when
    // empty, is free. The search keeps each named axis to its role
    // (search/axisconstraint.h): a data axis splits no weight, and so on.
    std::vector<std::optional<plan::AxisRole>> axisRoles;
    // tap: the plans returned are ranked, not whole: costed in totals
    // (cost::PlanCoster::totals: no collectives nor breakdowns), holding
    // no spec by tensor name but the pinned ones, and no model
    // fingerprint; their specs by tensor id are in SearchResult. For a
    // caller that runs several searches and keeps one plan
    // (searchTechniques), which makes that one whole (plan::completePlan):
    // on a deep model the specs by name and the breakdowns are most of a
    // plan's making. exact returns whole plans either way.
    bool rankedPlans = false;
    // Called now and then with work done and work planned (units of the
    // search's choosing), from the searching thread.
    std::function<void(std::size_t done, std::size_t total)> progress;
    // Polled from the searching thread between steps of the search (a
    // combination of layouts, at most about a second apart); when it turns
    // true tap stops with a TapestryError saying it was cancelled.
    std::function<bool()> cancelled;
};

} // namespace tapestry::search
