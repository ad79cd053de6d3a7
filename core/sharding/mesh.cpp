#include "sharding/mesh.h"

#include "ir/error.h"

namespace tapestry::sharding {

double DeviceProfile::peak(ir::DType dtype) const
{
    auto it = peakFlops.find(std::string(ir::toString(dtype)));
    if (it == peakFlops.end())
        it = peakFlops.find("float32");
    return it == peakFlops.end() ? 0.0 : it->second;
}

int Mesh::deviceCount() const
{
    int n = 1;
    for (const auto &a : axes)
        n *= a.size;
    return n;
}

std::optional<int> Mesh::axisIndex(const std::string &name) const
{
    for (std::size_t i = 0; i < axes.size(); ++i)
        if (axes[i].name == name)
            return static_cast<int>(i);
    return std::nullopt;
}

std::vector<int> Mesh::shape() const
{
    std::vector<int> s;
    for (const auto &a : axes)
        s.push_back(a.size);
    return s;
}

std::string Mesh::toString() const
{
    std::string sizes, names;
    for (const auto &a : axes) {
        sizes += (sizes.empty() ? "" : "x") + std::to_string(a.size);
        names += (names.empty() ? "" : ", ") + a.name;
    }
    return sizes + " (" + names + ")";
}

std::vector<int> parseMeshShape(const std::string &text)
{
    std::vector<int> sizes;
    std::size_t pos = 0;
    auto bad = [&] {
        return TapestryError(Error{"--mesh", {}, "expects sizes like 8, 2x8 or 4x2, got '" + text + "'"});
    };
    while (pos <= text.size()) {
        auto x = text.find('x', pos);
        std::string part = text.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
        if (part.empty() || part.size() > 6 || part.find_first_not_of("0123456789") != std::string::npos)
            throw bad();
        const int n = std::stoi(part);
        if (n <= 0)
            throw TapestryError(Error{"--mesh", {}, "axis sizes must be positive, got '" + text + "'"});
        sizes.push_back(n);
        if (x == std::string::npos)
            break;
        pos = x + 1;
    }
    return sizes;
}

std::vector<std::string> defaultAxisNames(std::size_t rank)
{
    if (rank == 1)
        return {"model"};
    if (rank == 2)
        return {"data", "model"};
    throw TapestryError(Error{"--mesh", {}, "a mesh of " + std::to_string(rank) +
                                                " axes needs its axis names (--axes a,b,c)"});
}

} // namespace tapestry::sharding
