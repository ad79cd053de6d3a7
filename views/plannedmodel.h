#pragma once

#include "loadedmodel.h"
#include "plan/plan.h"
#include "search/techniquesearch.h"
#include "sharding/mesh.h"

#include <QMetaType>
#include <QString>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <vector>

namespace tapestry::views {

// A derived plan as the GUI shows it: the plan, its specs by tensor id, and
// its cost grouped by coarse node and by class. Made on a worker thread.
struct PlannedModel {
    std::shared_ptr<const plan::Plan> plan;
    std::vector<sharding::ShardingSpec> specs;          // by tensor id
    std::map<std::string, cost::CostTotals> byClass;     // "class 0", "(other)"
    std::map<int, cost::CostTotals> byNode;              // by coarse node id
    double searchSeconds = 0;
    QString error;  // set instead of the fields above when deriving failed
    bool cancelled = false;  // and with it, when PlanControl::cancel stopped it
};

struct PlanRequest {
    QString method = QStringLiteral("tap");  // tap, megatron, dp, replicate
    QString meshShape = QStringLiteral("8");  // "8", "2x8", "4x2", "2x2x2 (dp, tp, pp)"
    QString profile = QStringLiteral("dgx-h100");
    // tap only: specs to keep, by tensor name (re-deriving around pins).
    std::map<std::string, sharding::ShardingSpec> pinned;
    // The plan the pins came from: kept where the search finds nothing
    // better around them (search::keepPinnedPlanIfBetter).
    std::shared_ptr<const plan::Plan> pinnedFrom;
    // The memory techniques the plan must use; those left empty are chosen
    // with the plan (search::searchTechniques, search::chooseTechniques).
    search::TechniqueChoices techniques;
};

// Derives (tap) or builds (reference methods) the plan for `model` and
// groups its cost. Never throws: errors come back in `error`.
// How a caller follows and stops a derivation running in the background.
struct PlanControl {
    // Set to stop a tap search within about a second.
    std::shared_ptr<const std::atomic_bool> cancel;
    // tap's progress (work done, work planned), called from the searching thread.
    std::function<void(std::size_t done, std::size_t total)> progress;
};
PlannedModel derivePlan(const LoadedModel &model, const PlanRequest &request, const PlanControl &control = {});

// Groups an existing plan's cost for `model` (after a load or a recost).
PlannedModel groupPlan(const LoadedModel &model, plan::Plan plan);

} // namespace tapestry::views

Q_DECLARE_METATYPE(tapestry::views::PlannedModel)
