#pragma once

#include "plan/plan.h"

#include <string>

namespace tapestry::plan {

// tapestry.plan v1 (core/plan/README.md). Writing is deterministic and
// reading keeps every field, so writePlanJson(readPlanJson(writePlanJson(p)))
// is byte-identical. Reading checks the JSON's structure and names `input`
// and the JSON path of any problem; whether the plan fits a model is
// planSpecs()'s job.
std::string writePlanJson(const Plan &plan);
Plan readPlanJson(const std::string &text, const std::string &input);

Plan readPlanFile(const std::string &path);
// Through io::writeOutputFile: no half-written plan is ever left behind.
void writePlanFile(const std::string &path, const Plan &plan);

} // namespace tapestry::plan
