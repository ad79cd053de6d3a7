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

// How one step of a program touches a slot: reads it, writes it whole
// (what it held before is dead), or adds to what it holds.
enum class Access { Read, Write, Update };

// One access of a program, at `position` in the program's step order.
struct SlotAccess {
    std::int64_t position = 0;
    Slot slot = kNoSlot;
    Access access = Access::Read;
};

// The slots of one program in one arena: reserved while the program is
// built, laid out and allocated once, then only viewed (no allocation inside
// a step). Two slots share memory when their lifetimes do not overlap, as
// llm.c's offsets are computed up front from the shapes, but from the
// program's accesses: a slot's value lives from each write to the last read
// before the next write. A slot read before any write, or kept, holds its
// memory for the whole run (parameters, optimizer state, accumulators); one
// no step touches has none (its view must not be read or written).
class BufferTable {
public:
    Slot reserve(ir::Shape shape);
    // A view of the first elements of `base` in another shape (a parameter
    // shard padded to a multiple of its ZeRO degree, seen without the padding).
    Slot alias(Slot base, ir::Shape shape);
    // Makes `slot`, a reserved buffer no alias refers to, a view of `base`
    // instead (the same elements or fewer): a gradient reduced in place in
    // the buffer its one contribution was summed in.
    void rebase(Slot slot, Slot base);
    void keep(Slot slot);
    // Lays out the slots from `accesses` and allocates the arena on `device`,
    // or in host memory, zeroed (the single-process interpreter).
    void allocate(Device &device, const std::vector<SlotAccess> &accesses);
    void allocate(const std::vector<SlotAccess> &accesses);
    // kNoSlot gives a view without data, as kernels expect for "no gradient".
    const TensorView &view(Slot slot) const { return slot == kNoSlot ? m_none : m_views[static_cast<std::size_t>(slot)]; }
    const ir::Shape &shape(Slot slot) const { return m_slots[static_cast<std::size_t>(slot)].shape; }
    Slot base(Slot slot) const { return slot == kNoSlot ? kNoSlot : m_slots[static_cast<std::size_t>(slot)].base; }
    // Bytes of the slot's memory (its base's, for an alias).
    std::int64_t slotBytes(Slot slot) const;
    std::size_t slotCount() const { return m_slots.size(); }
    bool kept(Slot slot) const { return m_slots[static_cast<std::size_t>(base(slot))].kept; }
    // Whether the slot holds its memory for the whole run.
    bool held(Slot slot) const { return m_slots[static_cast<std::size_t>(base(slot))].held; }
    // The arena's size: the high-water mark of the laid-out slots.
    std::int64_t bytes() const { return m_arena.size() * static_cast<std::int64_t>(sizeof(float)); }
    // The largest sum of the bytes of the slots live at one step, which the
    // arena's size reaches unless the layout leaves gaps.
    std::int64_t liveBytes() const { return m_liveBytes; }
    // Whether the slot is live where liveBytes() is reached.
    bool liveAtPeak(Slot slot) const;

private:
    // Lays out the slots; returns the arena's size in floats.
    std::int64_t place(const std::vector<SlotAccess> &accesses);
    void makeViews();
    struct Entry {
        ir::Shape shape;
        Slot base;
        std::int64_t floats = 0;  // rounded up to the arena's alignment (bases only)
        std::int64_t offset = 0;
        bool kept = false, held = false;
        std::vector<std::pair<std::int64_t, std::int64_t>> lifetimes;  // [first, last] positions
    };
    Arena m_arena;
    std::vector<Entry> m_slots;
    std::vector<TensorView> m_views;
    TensorView m_none;
    std::int64_t m_liveBytes = 0;
    std::int64_t m_peakPosition = 0;
};

} // namespace tapestry::exec
