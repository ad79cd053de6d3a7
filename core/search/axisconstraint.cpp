#include "search/axisconstraint.h"

#include "ir/error.h"

#include <algorithm>

namespace tapestry::search {

AxisRoles axisRolesFromNames(const std::vector<std::string> &names, const std::string &option)
{
    AxisRoles roles;
    for (const auto &name : names) {
        if (plan::isExpertAxisName(name))
            throw TapestryError(Error{option, {}, "axis '" + name +
                                                      "': expert parallelism is not in the plan space (each expert "
                                                      "is weights of its own, split like any other); name the axis "
                                                      "data, model or sequence, or anything else to leave it free"});
        roles.push_back(plan::axisRoleFromName(name));
    }
    return roles;
}

bool anyRole(const AxisRoles &roles)
{
    return std::any_of(roles.begin(), roles.end(), [](const auto &r) { return r.has_value(); });
}

std::optional<int> brokenAxis(const AxisRoles &roles, const sharding::ShardingSpec &weightSpec)
{
    for (std::size_t a = 0; a < roles.size() && a < weightSpec.placements.size(); ++a)
        if (roles[a] && *roles[a] != plan::AxisRole::Tensor && !weightSpec.placements[a].isReplicate())
            return static_cast<int>(a);
    return std::nullopt;
}

bool allows(const AxisRoles &roles, const ActivationLayout &layout)
{
    using Split = ActivationLayout::Split;
    for (std::size_t a = 0; a < roles.size() && a < layout.axes.size(); ++a) {
        if (!roles[a])
            continue;
        const Split s = layout.axes[a];
        const bool ok = *roles[a] == plan::AxisRole::Data     ? s == Split::Replicate || s == Split::Batch
                        : *roles[a] == plan::AxisRole::Sequence ? s == Split::Replicate || s == Split::Sequence
                                                                : s != Split::Batch;
        if (!ok)
            return false;
    }
    return true;
}

std::vector<ActivationLayout> allowedLayouts(int rank, const AxisRoles &roles)
{
    auto layouts = allLayouts(rank);
    std::erase_if(layouts, [&](const ActivationLayout &l) { return !allows(roles, l); });
    return layouts;
}

std::vector<ActivationLayout> boundaryLayouts(int rank, const AxisRoles &roles)
{
    std::vector<int> tensorAxes;
    for (std::size_t a = 0; rank >= 2 && a < roles.size(); ++a)
        if (roles[a] == plan::AxisRole::Tensor)
            tensorAxes.push_back(static_cast<int>(a));
    auto layouts = allLayouts(rank, tensorAxes);
    std::erase_if(layouts, [&](const ActivationLayout &l) { return !allows(roles, l); });
    return layouts;
}

void keepToRoles(Segment &segment, const AxisRoles &roles)
{
    if (!anyRole(roles))
        return;
    for (auto &choices : segment.choices)
        std::erase_if(choices, [&](const sharding::ShardingSpec &s) { return brokenAxis(roles, s).has_value(); });
}

} // namespace tapestry::search
