#include "sharding/collective.h"

namespace tapestry::sharding {

std::string_view toString(CollectiveKind kind)
{
    switch (kind) {
    case CollectiveKind::AllReduce:
        return "all-reduce";
    case CollectiveKind::AllGather:
        return "all-gather";
    case CollectiveKind::ReduceScatter:
        return "reduce-scatter";
    case CollectiveKind::AllToAll:
        return "all-to-all";
    }
    return "?";
}

std::optional<CollectiveKind> collectiveKindFromString(std::string_view s)
{
    for (auto k : {CollectiveKind::AllReduce, CollectiveKind::AllGather, CollectiveKind::ReduceScatter,
                   CollectiveKind::AllToAll})
        if (toString(k) == s)
            return k;
    return std::nullopt;
}

std::string Collective::toString(const std::string &axisName) const
{
    std::string s = std::string(sharding::toString(kind)) + " over '" + axisName + "' of " + std::to_string(bytes) +
                    " bytes";
    if (!tensor.empty())
        s += " (" + tensor + ")";
    if (!reason.empty())
        s += ": " + reason;
    return s;
}

} // namespace tapestry::sharding
