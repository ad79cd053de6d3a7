#include "sharding/shardingspec.h"

namespace tapestry::sharding {

std::string Placement::toString() const
{
    switch (kind) {
    case Kind::Replicate:
        return "Replicate()";
    case Kind::Partial:
        return "Partial()";
    case Kind::Shard:
        break;
    }
    return "Shard(" + std::to_string(dim) + ")";
}

std::optional<Placement> Placement::fromString(const std::string &s)
{
    if (s == "Replicate()")
        return replicate();
    if (s == "Partial()")
        return partial();
    if (s.size() > 7 && s.starts_with("Shard(") && s.back() == ')') {
        const std::string digits = s.substr(6, s.size() - 7);
        if (digits.empty() || digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos)
            return std::nullopt;
        return shard(std::stoi(digits));
    }
    return std::nullopt;
}

ShardingSpec ShardingSpec::replicated(int meshRank)
{
    return {PlacementList(static_cast<std::size_t>(meshRank))};
}

bool ShardingSpec::isReplicated() const
{
    for (const auto &p : placements)
        if (!p.isReplicate())
            return false;
    return true;
}

bool ShardingSpec::hasPartial() const
{
    for (const auto &p : placements)
        if (p.isPartial())
            return true;
    return false;
}

std::int64_t ShardingSpec::splitFactor(int dim, const Mesh &mesh) const
{
    std::int64_t f = 1;
    for (std::size_t a = 0; a < placements.size() && a < mesh.axes.size(); ++a)
        if (placements[a].isShard() && placements[a].dim == dim)
            f *= mesh.axes[a].size;
    return f;
}

ir::Shape ShardingSpec::localShape(const ir::Shape &shape, const Mesh &mesh) const
{
    ir::Shape local = shape;
    for (std::size_t d = 0; d < local.size(); ++d)
        local[d] /= splitFactor(static_cast<int>(d), mesh);
    return local;
}

std::int64_t ShardingSpec::localElements(const ir::Shape &shape, const Mesh &mesh) const
{
    std::int64_t n = 1;
    for (std::size_t d = 0; d < shape.size(); ++d)
        n *= shape[d] / splitFactor(static_cast<int>(d), mesh);
    return n;
}

bool ShardingSpec::holds(const ir::Shape &shape, const Mesh &mesh) const
{
    if (placements.size() != mesh.axes.size())
        return false;
    const int rank = static_cast<int>(shape.size());
    for (const Placement &p : placements)
        if (p.isShard() && (p.dim < 0 || p.dim >= rank))
            return false;
    for (int d = 0; d < rank; ++d)
        if (shape[static_cast<std::size_t>(d)] % splitFactor(d, mesh) != 0)
            return false;
    return true;
}

std::optional<std::string> ShardingSpec::problem(const ir::Shape &shape, const Mesh &mesh) const
{
    if (placements.size() != mesh.axes.size())
        return "spec has " + std::to_string(placements.size()) + " placement(s) for a mesh of " +
               std::to_string(mesh.axes.size()) + " axes";
    const int rank = static_cast<int>(shape.size());
    for (std::size_t a = 0; a < placements.size(); ++a) {
        const Placement &p = placements[a];
        if (p.isShard() && (p.dim < 0 || p.dim >= rank))
            return p.toString() + " on axis '" + mesh.axes[a].name + "' is out of range for a tensor of rank " +
                   std::to_string(rank);
    }
    for (int d = 0; d < rank; ++d) {
        const auto f = splitFactor(d, mesh);
        if (shape[static_cast<std::size_t>(d)] % f != 0)
            return "dim " + std::to_string(d) + " of size " + std::to_string(shape[static_cast<std::size_t>(d)]) +
                   " cannot be split into " + std::to_string(f) + " equal pieces";
    }
    return std::nullopt;
}

std::string ShardingSpec::toPlacements() const
{
    std::string s = "[";
    for (std::size_t i = 0; i < placements.size(); ++i)
        s += (i ? ", " : "") + placements[i].toString();
    return s + "]";
}

std::string ShardingSpec::toPartitionSpec(int tensorRank, const Mesh &mesh) const
{
    std::string s = "P(";
    for (int d = 0; d < tensorRank; ++d) {
        std::vector<std::string> names;
        for (std::size_t a = 0; a < placements.size() && a < mesh.axes.size(); ++a)
            if (placements[a].isShard() && placements[a].dim == d)
                names.push_back("'" + mesh.axes[a].name + "'");
        s += d ? ", " : "";
        if (names.empty())
            s += "None";
        else if (names.size() == 1)
            s += names[0];
        else {
            s += "(";
            for (std::size_t i = 0; i < names.size(); ++i)
                s += (i ? ", " : "") + names[i];
            s += ")";
        }
    }
    s += ")";
    for (std::size_t a = 0; a < placements.size() && a < mesh.axes.size(); ++a)
        if (placements[a].isPartial())
            s += " + partial('" + mesh.axes[a].name + "')";
    return s;
}

} // namespace tapestry::sharding
