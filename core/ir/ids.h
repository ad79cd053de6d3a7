#pragma once

#include <cstdint>
#include <functional>

namespace tapestry::ir {

// Typed index into one of the Graph's flat vectors. Stages pass ids, never
// pointers, so a graph can be copied or rebuilt without dangling references.
template <typename Tag>
struct Id {
    std::int32_t value = -1;

    constexpr Id() = default;
    constexpr explicit Id(std::int32_t v) : value(v) {}
    constexpr bool valid() const { return value >= 0; }
    constexpr std::size_t index() const { return static_cast<std::size_t>(value); }
    friend constexpr bool operator==(Id a, Id b) { return a.value == b.value; }
    friend constexpr auto operator<=>(Id a, Id b) { return a.value <=> b.value; }
};

struct OpTag {};
struct TensorTag {};
using OpId = Id<OpTag>;
using TensorId = Id<TensorTag>;

} // namespace tapestry::ir

template <typename Tag>
struct std::hash<tapestry::ir::Id<Tag>> {
    std::size_t operator()(tapestry::ir::Id<Tag> id) const noexcept
    {
        return std::hash<std::int32_t>{}(id.value);
    }
};
