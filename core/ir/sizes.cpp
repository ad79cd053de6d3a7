#include "ir/sizes.h"

#include "ir/validate.h"

#include <array>
#include <cstdio>

namespace tapestry::ir {

std::optional<std::int64_t> checkedMul(std::int64_t a, std::int64_t b)
{
    std::int64_t r = 0;
    if (__builtin_mul_overflow(a, b, &r))
        return std::nullopt;
    return r;
}

std::optional<std::int64_t> checkedAdd(std::int64_t a, std::int64_t b)
{
    std::int64_t r = 0;
    if (__builtin_add_overflow(a, b, &r))
        return std::nullopt;
    return r;
}

std::optional<std::int64_t> checkedElementCount(std::span<const std::int64_t> shape)
{
    std::int64_t n = 1;
    for (std::int64_t d : shape) {
        if (d < 0)
            return std::nullopt;
        const auto next = checkedMul(n, d);
        if (!next)
            return std::nullopt;
        n = *next;
    }
    return n;
}

std::optional<std::string> tensorSizeProblem(std::span<const std::int64_t> shape, std::int64_t elementBytes,
                                             std::int64_t &bytes)
{
    const Shape dims(shape.begin(), shape.end());
    for (std::int64_t d : shape)
        if (d < 0)
            return "negative dim in shape " + shapeToString(dims);
    const auto elements = checkedElementCount(shape);
    const auto total = elements ? checkedMul(*elements, elementBytes) : std::nullopt;
    if (!elements)
        return "shape " + shapeToString(dims) + " has more elements than a 64-bit count holds";
    if (!total || *total > kMaxModelBytes)
        return "shape " + shapeToString(dims) + " holds more than " + limitBytesText(kMaxModelBytes) +
               ", the most a model may hold";
    bytes = *total;
    return std::nullopt;
}

std::string limitBytesText(std::int64_t bytes)
{
    static constexpr std::array<const char *, 6> kUnits{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024)
        return std::to_string(bytes) + " B";
    double value = static_cast<double>(bytes);
    std::size_t unit = 0;
    value /= 1024.0;
    while (value >= 1024.0 && unit + 1 < kUnits.size()) {
        value /= 1024.0;
        ++unit;
    }
    char text[32];
    std::snprintf(text, sizeof text, value == static_cast<double>(static_cast<std::int64_t>(value)) ? "%.0f %s" : "%.1f %s",
                  value, kUnits[unit]);
    return text;
}

} // namespace tapestry::ir
