#pragma once

#include "arena.h"
#include "tensorview.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace tapestry::exec {

// A numbered buffer of the arena. A program is built before its memory
// exists, so its steps name buffers by slot and read the views once the
// arena is allocated.
using Slot = std::int32_t;
inline constexpr Slot kNoSlot = -1;

// The slots of one program in one arena: reserved while the program is
// built, allocated once, then only viewed (no allocation inside a step).
class BufferTable {
public:
    Slot reserve(ir::Shape shape);
    void allocate(Device &device);
    // kNoSlot gives a view without data, as kernels expect for "no gradient".
    const TensorView &view(Slot slot) const { return slot == kNoSlot ? m_none : m_views[static_cast<std::size_t>(slot)]; }
    const ir::Shape &shape(Slot slot) const { return m_slots[static_cast<std::size_t>(slot)].second; }
    std::int64_t bytes() const { return m_arena.size() * static_cast<std::int64_t>(sizeof(float)); }

private:
    Arena m_arena;
    std::vector<std::pair<std::int64_t, ir::Shape>> m_slots;
    std::vector<TensorView> m_views;
    TensorView m_none;
};

} // namespace tapestry::exec
