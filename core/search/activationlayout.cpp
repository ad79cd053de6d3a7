#include "search/activationlayout.h"

#include <algorithm>

namespace tapestry::search {

sharding::ShardingSpec ActivationLayout::specFor(const ir::Tensor &tensor, const sharding::Mesh &mesh) const
{
    using sharding::Placement;
    sharding::ShardingSpec spec = sharding::ShardingSpec::replicated(mesh.rank());
    const auto &shape = tensor.shape;
    const bool integer = tensor.dtype == ir::DType::I64 || tensor.dtype == ir::DType::I32;
    for (std::size_t a = 0; a < axes.size() && a < spec.placements.size(); ++a) {
        int dim = -1;
        if (axes[a] == Split::Batch && !shape.empty() && shape[0] > 1)
            dim = 0;
        else if (axes[a] == Split::Sequence && (shape.size() >= 3 || (shape.size() == 2 && integer)) && shape[1] > 1)
            dim = 1;
        else if (axes[a] == Split::Hidden && (shape.size() == 2 || shape.size() == 3) && !integer && shape.back() > 1)
            dim = static_cast<int>(shape.size()) - 1;
        if (dim < 0)
            continue;
        spec.placements[a] = Placement::shard(dim);
        if (spec.problem(shape, mesh))
            spec.placements[a] = Placement::replicate();
    }
    return spec;
}

std::string ActivationLayout::toString(const sharding::Mesh &mesh) const
{
    std::string s;
    for (std::size_t a = 0; a < axes.size(); ++a) {
        s += s.empty() ? "" : ", ";
        s += (a < mesh.axes.size() ? mesh.axes[a].name : "axis " + std::to_string(a)) + ": ";
        s += axes[a] == Split::Replicate ? "replicate"
             : axes[a] == Split::Batch   ? "batch"
             : axes[a] == Split::Sequence ? "sequence"
                                          : "hidden";
    }
    return s;
}

std::vector<ActivationLayout> allLayouts(int rank, const std::vector<int> &hiddenAxes)
{
    using Split = ActivationLayout::Split;
    std::vector<ActivationLayout> layouts{ActivationLayout{}};
    for (int a = 0; a < rank; ++a) {
        std::vector<Split> splits{Split::Replicate, Split::Batch, Split::Sequence};
        if (rank == 1 || std::find(hiddenAxes.begin(), hiddenAxes.end(), a) != hiddenAxes.end())
            splits.push_back(Split::Hidden);
        std::vector<ActivationLayout> next;
        for (const auto &l : layouts)
            for (auto split : splits) {
                ActivationLayout n = l;
                n.axes.push_back(split);
                next.push_back(n);
            }
        layouts = std::move(next);
    }
    return layouts;
}

} // namespace tapestry::search
