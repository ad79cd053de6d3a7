#pragma once

#include "loadedmodel.h"

#include <QString>
#include <vector>

namespace tapestry::views {

// Finds coarse nodes by op name, op type, tensor name or tensor shape
// ("768×3072" or "768x3072"), case-insensitively, in graph order.
std::vector<passes::NodeId> findNodes(const LoadedModel &model, const QString &query);

} // namespace tapestry::views
