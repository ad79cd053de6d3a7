#include "sharding/mesh.h"

#include "ir/error.h"

#include <algorithm>
#include <cmath>

namespace tapestry::sharding {

double DeviceProfile::peak(ir::DType dtype) const
{
    auto it = peakFlops.find(std::string(ir::toString(dtype)));
    if (it == peakFlops.end())
        it = peakFlops.find("float32");
    return it == peakFlops.end() ? 0.0 : it->second;
}

double DeviceProfile::gemmFraction(double callFlops) const
{
    if (gemmEfficiency.empty() || !(callFlops > 0))
        return achievableFraction;
    if (callFlops <= gemmEfficiency.front().flops)
        return gemmEfficiency.front().fraction;
    if (callFlops >= gemmEfficiency.back().flops)
        return gemmEfficiency.back().fraction;
    const auto above = std::upper_bound(gemmEfficiency.begin(), gemmEfficiency.end(), callFlops,
                                        [](double f, const GemmPoint &p) { return f < p.flops; });
    const GemmPoint &lo = *(above - 1), &hi = *above;
    const double t = std::log(callFlops / lo.flops) / std::log(hi.flops / lo.flops);
    return lo.fraction + t * (hi.fraction - lo.fraction);
}

double DeviceProfile::bandwidthOf(std::string_view family) const
{
    if (!family.empty() && !kernelBandwidth.empty())
        if (const auto it = kernelBandwidth.find(std::string(family)); it != kernelBandwidth.end())
            return it->second;
    return memoryBandwidth;
}

bool knownKernelFamily(std::string_view family)
{
    return family == "transpose" || family == "activation" || family == "softmax" || family == "normalization";
}

std::optional<std::string> gemmEfficiencyProblem(const std::vector<DeviceProfile::GemmPoint> &points)
{
    for (std::size_t i = 0; i < points.size(); ++i) {
        const auto &p = points[i];
        if (!(p.flops > 0) || !std::isfinite(p.flops))
            return "point " + std::to_string(i) + ": expected positive FLOPs";
        if (!(p.fraction > 0) || p.fraction > 1)
            return "point " + std::to_string(i) + ": expected a fraction in (0, 1]";
        if (i > 0 && !(p.flops > points[i - 1].flops))
            return "point " + std::to_string(i) + ": FLOPs must ascend";
    }
    return std::nullopt;
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

std::optional<std::string> meshSizesProblem(const std::vector<int> &sizes)
{
    std::int64_t devices = 1;
    for (const int size : sizes) {
        if (size < 1)
            return "axis sizes must be positive, got " + std::to_string(size);
        devices *= size;  // at most kMaxMeshDevices times an int: no overflow
        if (devices > kMaxMeshDevices)
            return "a mesh has at most " + std::to_string(kMaxMeshDevices) + " devices";
    }
    return std::nullopt;
}

namespace {

// The sizes of "8", "2x8", "4x2", each positive, however many devices they
// make.
std::vector<int> axisSizes(const std::string &text)
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

void checkMeshSizes(const std::vector<int> &sizes, const std::string &text)
{
    if (auto problem = meshSizesProblem(sizes))
        throw TapestryError(Error{"--mesh", {}, *problem + ", got '" + text + "'"});
}

} // namespace

std::vector<int> parseMeshShape(const std::string &text)
{
    auto sizes = axisSizes(text);
    checkMeshSizes(sizes, text);
    return sizes;
}

std::vector<std::string> defaultAxisNames(std::size_t rank)
{
    if (rank == 1)
        return {"model"};
    if (rank == 2)
        return {"data", "model"};
    throw TapestryError(Error{"--mesh", {}, "a mesh of " + std::to_string(rank) +
                                                " axes needs its axis names: after the sizes, as in 2x2x2 (dp, tp, pp), "
                                                "or with --axes dp,tp,pp"});
}

namespace {

std::string trimmed(const std::string &s)
{
    const auto first = s.find_first_not_of(" \t");
    if (first == std::string::npos)
        return {};
    return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

} // namespace

MeshText parseMeshText(const std::string &text)
{
    const std::string line = trimmed(text);
    const auto open = line.find('(');
    if (open == std::string::npos)
        return {parseMeshShape(line), {}};
    MeshText out;
    try {
        out.sizes = axisSizes(trimmed(line.substr(0, open)));
    } catch (const TapestryError &) {
        throw TapestryError(Error{"--mesh", {}, "expects sizes and axis names like 2x2x2 (dp, tp, pp), got '" + text +
                                                    "'"});
    }
    checkMeshSizes(out.sizes, text);
    if (line.back() != ')')
        throw TapestryError(Error{"--mesh", {}, "expects axis names in parentheses, as in 2x2x2 (dp, tp, pp), got '" +
                                                    text + "'"});
    const std::string inside = line.substr(open + 1, line.size() - open - 2);
    std::size_t pos = 0;
    while (true) {
        const auto comma = inside.find(',', pos);
        out.names.push_back(trimmed(inside.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos)));
        if (comma == std::string::npos)
            break;
        pos = comma + 1;
    }
    if (out.names.size() != out.sizes.size())
        throw TapestryError(Error{"--mesh", {}, std::to_string(out.names.size()) + " axis name(s) for a mesh of " +
                                                    std::to_string(out.sizes.size()) + " axes in '" + text + "'"});
    return out;
}

std::string meshText(const Mesh &mesh)
{
    std::string sizes, names;
    std::vector<std::string> given;
    for (const auto &a : mesh.axes) {
        sizes += (sizes.empty() ? "" : "x") + std::to_string(a.size);
        names += (names.empty() ? "" : ", ") + a.name;
        given.push_back(a.name);
    }
    if (!given.empty() && given.size() <= 2 && given == defaultAxisNames(given.size()))
        return sizes;
    return sizes + " (" + names + ")";
}

} // namespace tapestry::sharding
