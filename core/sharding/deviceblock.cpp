#include "sharding/deviceblock.h"

namespace tapestry::sharding {

std::int64_t DeviceBlock::linearIndex() const
{
    std::int64_t key = 0;
    for (std::size_t d = 0; d < index.size(); ++d)
        key = key * blocks[d] + index[d];
    return key;
}

std::vector<int> meshCoordinate(const Mesh &mesh, int device)
{
    std::vector<int> c(mesh.axes.size(), 0);
    for (std::size_t k = mesh.axes.size(); k-- > 0;) {
        c[k] = device % mesh.axes[k].size;
        device /= mesh.axes[k].size;
    }
    return c;
}

DeviceBlock deviceBlock(const ShardingSpec &spec, int tensorRank, const Mesh &mesh, int device)
{
    DeviceBlock b;
    b.coordinate = meshCoordinate(mesh, device);
    b.index.assign(static_cast<std::size_t>(tensorRank), 0);
    b.blocks.assign(static_cast<std::size_t>(tensorRank), 1);
    for (std::size_t a = 0; a < spec.placements.size() && a < mesh.axes.size(); ++a) {
        const Placement &p = spec.placements[a];
        if (p.isPartial())
            b.partialAxes.push_back(static_cast<int>(a));
        if (!p.isShard() || p.dim < 0 || p.dim >= tensorRank)
            continue;
        const auto d = static_cast<std::size_t>(p.dim);
        b.index[d] = b.index[d] * mesh.axes[a].size + b.coordinate[a];
        b.blocks[d] *= mesh.axes[a].size;
    }
    return b;
}

std::string blockNotation(const std::string &tensor, const ShardingSpec &spec, int tensorRank, const Mesh &mesh,
                          const std::vector<std::string> &dims)
{
    std::string s = tensor + "[";
    for (int d = 0; d < tensorRank; ++d) {
        if (d)
            s += ", ";
        s += d < static_cast<int>(dims.size()) ? dims[static_cast<std::size_t>(d)]
                                               : std::string(1, static_cast<char>('I' + d));
        std::string axes;
        for (std::size_t a = 0; a < spec.placements.size() && a < mesh.axes.size(); ++a)
            if (spec.placements[a].isShard() && spec.placements[a].dim == d)
                axes += (axes.empty() ? "" : ",") + mesh.axes[a].name;
        if (!axes.empty())
            s += "_" + axes;
    }
    s += "]";
    std::string partial;
    for (std::size_t a = 0; a < spec.placements.size() && a < mesh.axes.size(); ++a)
        if (spec.placements[a].isPartial())
            partial += (partial.empty() ? "" : ",") + mesh.axes[a].name;
    if (!partial.empty())
        s += "{U_" + partial + "}";
    return s;
}

} // namespace tapestry::sharding
