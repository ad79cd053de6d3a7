#include "buffertable.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace tapestry::exec {

namespace {

constexpr std::int64_t kAlignFloats = 16;  // as the arena's: 64 bytes
constexpr std::int64_t kWhole = std::numeric_limits<std::int64_t>::max();

bool overlap(const std::vector<std::pair<std::int64_t, std::int64_t>> &a,
             const std::vector<std::pair<std::int64_t, std::int64_t>> &b)
{
    std::size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
        if (a[i].second < b[j].first)
            ++i;
        else if (b[j].second < a[i].first)
            ++j;
        else
            return true;
    }
    return false;
}

} // namespace

Slot BufferTable::reserve(ir::Shape shape)
{
    std::int64_t n = 1;
    for (auto d : shape)
        n *= d;
    const auto slot = static_cast<Slot>(m_slots.size());
    Entry e;
    e.shape = std::move(shape);
    e.base = slot;
    e.floats = (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
    m_slots.push_back(std::move(e));
    return slot;
}

Slot BufferTable::alias(Slot base, ir::Shape shape)
{
    const auto slot = static_cast<Slot>(m_slots.size());
    Entry e;
    e.shape = std::move(shape);
    e.base = this->base(base);
    m_slots.push_back(std::move(e));
    return slot;
}

void BufferTable::rebase(Slot slot, Slot base)
{
    Entry &e = m_slots[static_cast<std::size_t>(slot)];
    e.base = this->base(base);
    e.floats = 0;
    e.kept = false;
}

void BufferTable::keep(Slot slot)
{
    m_slots[static_cast<std::size_t>(base(slot))].kept = true;
}

std::int64_t BufferTable::slotBytes(Slot slot) const
{
    return m_slots[static_cast<std::size_t>(base(slot))].floats * static_cast<std::int64_t>(sizeof(float));
}

bool BufferTable::liveAtPeak(Slot slot) const
{
    const Entry &e = m_slots[static_cast<std::size_t>(base(slot))];
    return std::any_of(e.lifetimes.begin(), e.lifetimes.end(), [&](const auto &l) {
        return l.first <= m_peakPosition && m_peakPosition <= l.second;
    });
}

void BufferTable::allocate(Device &device, const std::vector<SlotAccess> &accesses)
{
    m_arena.reserve(place(accesses));
    m_arena.allocate(device);
    makeViews();
}

void BufferTable::allocate(const std::vector<SlotAccess> &accesses)
{
    m_arena.reserve(place(accesses));
    m_arena.allocate();
    makeViews();
}

std::int64_t BufferTable::place(const std::vector<SlotAccess> &accesses)
{
    // Lifetimes: each write opens one, reads and updates extend it; a read
    // or update with none open means the value comes from outside the
    // steps (initialised, or carried from one step to the next): held.
    const std::size_t n = m_slots.size();
    std::vector<bool> open(n, false), touched(n, false);
    for (const SlotAccess &a : accesses) {
        Entry &e = m_slots[static_cast<std::size_t>(base(a.slot))];
        const auto b = static_cast<std::size_t>(e.base);
        touched[b] = true;
        if (a.access == Access::Write) {
            e.lifetimes.emplace_back(a.position, a.position);
            open[b] = true;
        } else if (open[b]) {
            e.lifetimes.back().second = a.position;
        } else {
            e.held = true;
        }
    }
    for (std::size_t s = 0; s < n; ++s) {
        Entry &e = m_slots[s];
        if (e.base != static_cast<Slot>(s))
            continue;
        // A slot no step touches needs no memory (a gradient buffer of a
        // parameter whose gradient only ever arrives in other specs).
        e.held = e.held || e.kept;
        if (e.held)
            e.lifetimes = {{0, kWhole}};
    }

    // Largest first, each at the lowest offset free of every placed slot
    // whose lifetime it overlaps.
    std::vector<std::size_t> order;
    for (std::size_t s = 0; s < n; ++s)
        if (m_slots[s].base == static_cast<Slot>(s) && !m_slots[s].lifetimes.empty())
            order.push_back(s);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        if (m_slots[a].held != m_slots[b].held)
            return m_slots[a].held;
        return m_slots[a].floats > m_slots[b].floats;
    });
    std::vector<std::size_t> placed;
    std::int64_t top = 0;
    std::vector<std::pair<std::int64_t, std::int64_t>> taken;
    for (std::size_t s : order) {
        Entry &e = m_slots[s];
        taken.clear();
        for (std::size_t p : placed)
            if (overlap(e.lifetimes, m_slots[p].lifetimes))
                taken.emplace_back(m_slots[p].offset, m_slots[p].offset + m_slots[p].floats);
        std::sort(taken.begin(), taken.end());
        std::int64_t at = 0;
        for (const auto &[begin, end] : taken) {
            if (begin >= at + e.floats)
                break;
            at = std::max(at, end);
        }
        e.offset = at;
        top = std::max(top, at + e.floats);
        placed.push_back(s);
    }

    // The most bytes live at once: held slots plus the others live at each position.
    std::vector<std::pair<std::int64_t, std::int64_t>> events;  // position, +/- floats
    std::int64_t held = 0;
    for (std::size_t s : order) {
        const Entry &e = m_slots[s];
        if (e.held) {
            held += e.floats;
            continue;
        }
        for (const auto &[first, last] : e.lifetimes) {
            events.emplace_back(first, e.floats);
            events.emplace_back(last + 1, -e.floats);
        }
    }
    std::sort(events.begin(), events.end(),
              [](const auto &a, const auto &b) { return a.first != b.first ? a.first < b.first : a.second < b.second; });
    std::int64_t live = 0, most = 0, at = 0;
    for (const auto &[position, delta] : events) {
        live += delta;
        if (live > most) {
            most = live;
            at = position;
        }
    }
    m_peakPosition = at;
    m_liveBytes = (held + most) * static_cast<std::int64_t>(sizeof(float));
    return top;
}

void BufferTable::makeViews()
{
    m_views.clear();
    for (const Entry &e : m_slots)
        m_views.push_back(m_arena.view(m_slots[static_cast<std::size_t>(e.base)].offset, e.shape));
}

} // namespace tapestry::exec
