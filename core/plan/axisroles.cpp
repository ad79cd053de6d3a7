#include "plan/axisroles.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <utility>

namespace tapestry::plan {

namespace {

std::string lowered(std::string_view s)
{
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
    return out;
}

} // namespace

std::string_view toString(AxisRole role)
{
    switch (role) {
    case AxisRole::Data:
        return "data";
    case AxisRole::Tensor:
        return "tensor";
    case AxisRole::Sequence:
        return "sequence";
    }
    return "?";
}

std::optional<AxisRole> axisRoleFromName(std::string_view name)
{
    static const std::array<std::pair<std::string_view, AxisRole>, 12> names{{
        {"data", AxisRole::Data},
        {"dp", AxisRole::Data},
        {"batch", AxisRole::Data},
        {"model", AxisRole::Tensor},
        {"tensor", AxisRole::Tensor},
        {"tp", AxisRole::Tensor},
        {"mp", AxisRole::Tensor},
        {"sequence", AxisRole::Sequence},
        {"seq", AxisRole::Sequence},
        {"sp", AxisRole::Sequence},
        {"cp", AxisRole::Sequence},
        {"context", AxisRole::Sequence},
    }};
    const std::string n = lowered(name);
    for (const auto &[text, role] : names)
        if (n == text)
            return role;
    return std::nullopt;
}

bool isExpertAxisName(std::string_view name)
{
    const std::string n = lowered(name);
    return n == "expert" || n == "experts" || n == "ep";
}

bool AxisCarries::has(AxisRole role) const
{
    switch (role) {
    case AxisRole::Data:
        return data;
    case AxisRole::Tensor:
        return tensor;
    case AxisRole::Sequence:
        return sequence;
    }
    return false;
}

std::string AxisCarries::toString() const
{
    std::string s;
    for (auto role : {AxisRole::Data, AxisRole::Tensor, AxisRole::Sequence})
        if (has(role))
            s += (s.empty() ? "" : "+") + std::string(plan::toString(role));
    return s.empty() ? "replicated" : s;
}

std::optional<AxisCarries> AxisCarries::fromString(std::string_view text)
{
    AxisCarries c;
    if (text == "replicated")
        return c;
    std::size_t pos = 0;
    while (pos <= text.size()) {
        const auto plus = std::min(text.find('+', pos), text.size());
        const auto part = text.substr(pos, plus - pos);
        if (part == "data")
            c.data = true;
        else if (part == "tensor")
            c.tensor = true;
        else if (part == "sequence")
            c.sequence = true;
        else
            return std::nullopt;
        pos = plus + 1;
    }
    return c;
}

std::vector<AxisCarries> axisCarries(const ir::Graph &graph, const sharding::Mesh &mesh,
                                     const std::vector<sharding::ShardingSpec> &specs)
{
    const auto rank = static_cast<std::size_t>(mesh.rank());
    std::vector<double> weightSplit(rank, 0), batchSplit(rank, 0), sequenceSplit(rank, 0);
    double weights = 0, activations = 0, sequenceShaped = 0;
    for (std::size_t t = 0; t < graph.tensorCount() && t < specs.size(); ++t) {
        const ir::Tensor &tensor = graph.tensors()[t];
        const auto bytes = static_cast<double>(tensor.byteCount());
        const auto &placements = specs[t].placements;
        const bool parameter = tensor.role == ir::Role::Parameter;
        (parameter ? weights : activations) += bytes;
        const bool integer = tensor.dtype == ir::DType::I64 || tensor.dtype == ir::DType::I32;
        const bool sequenced = !parameter && (tensor.shape.size() == 3 || (tensor.shape.size() == 2 && integer));
        sequenceShaped += sequenced ? bytes : 0;
        for (std::size_t a = 0; a < rank && a < placements.size(); ++a) {
            const auto &p = placements[a];
            if (!p.isShard())
                continue;
            if (parameter)
                weightSplit[a] += bytes;
            else if (p.dim == 0)
                batchSplit[a] += bytes;
            else if (p.dim == 1 && sequenced)
                sequenceSplit[a] += bytes;
        }
    }
    std::vector<AxisCarries> out(rank);
    for (std::size_t a = 0; a < rank; ++a) {
        AxisCarries &c = out[a];
        c.weightShare = weights > 0 ? weightSplit[a] / weights : 0;
        c.batchShare = activations > 0 ? batchSplit[a] / activations : 0;
        c.sequenceShare = sequenceShaped > 0 ? sequenceSplit[a] / sequenceShaped : 0;
        c.tensor = c.weightShare >= kCarriesThreshold;
        c.data = c.batchShare >= kCarriesThreshold;
        c.sequence = c.sequenceShare >= kCarriesThreshold;
    }
    return out;
}

bool carriesMatchName(const AxisCarries &carries, std::string_view name)
{
    const auto role = axisRoleFromName(name);
    if (!role)
        return true;
    // Megatron's sequence parallelism runs on the tensor-parallel axis.
    switch (*role) {
    case AxisRole::Data:
        return !carries.tensor && !carries.sequence;
    case AxisRole::Tensor:
        return !carries.data;
    case AxisRole::Sequence:
        return !carries.data && !carries.tensor;
    }
    return true;
}

} // namespace tapestry::plan
