#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

namespace tapestry::ir {

// The first record of each name, for the graph's ops or its tensors: an
// open-addressing table of each name's hash and record id, the names read
// from the records themselves (`records[id].name`). A hash map of strings
// kept a copy of every name in a node of its own: on a deep model, hundreds
// of thousands of allocations to make when it is loaded and to free after.
template <typename Id>
class NameIndex {
public:
    // Adds `name` for `id` (whose record may not exist yet) unless a record
    // has it already: false then.
    template <typename Records>
    bool insert(std::string_view name, Id id, const Records &records)
    {
        if (2 * (m_size + 1) > m_slots.size())
            grow();
        const std::uint64_t h = hashOf(name);
        std::size_t i = h & mask();
        for (; m_slots[i].id >= 0; i = (i + 1) & mask())
            if (m_slots[i].hash == h && records[static_cast<std::size_t>(m_slots[i].id)].name == name)
                return false;
        m_slots[i] = {h, id.value};
        ++m_size;
        return true;
    }

    template <typename Records>
    std::optional<Id> find(std::string_view name, const Records &records) const
    {
        if (m_slots.empty())
            return std::nullopt;
        const std::uint64_t h = hashOf(name);
        for (std::size_t i = h & mask(); m_slots[i].id >= 0; i = (i + 1) & mask())
            if (m_slots[i].hash == h && records[static_cast<std::size_t>(m_slots[i].id)].name == name)
                return Id(m_slots[i].id);
        return std::nullopt;
    }

    // Removes `name` where `id` holds it: true then.
    bool erase(std::string_view name, Id id)
    {
        if (m_slots.empty())
            return false;
        const std::uint64_t h = hashOf(name);
        std::size_t i = h & mask();
        while (m_slots[i].id >= 0 && !(m_slots[i].hash == h && m_slots[i].id == id.value))
            i = (i + 1) & mask();
        if (m_slots[i].id < 0)
            return false;
        // Backward-shift deletion: later slots of the run move up where
        // their home allows, so that no probe stops short.
        for (std::size_t j = (i + 1) & mask(); m_slots[j].id >= 0; j = (j + 1) & mask()) {
            const std::size_t home = m_slots[j].hash & mask();
            if (((j - home) & mask()) >= ((j - i) & mask())) {
                m_slots[i] = m_slots[j];
                i = j;
            }
        }
        m_slots[i] = {};
        --m_size;
        return true;
    }

private:
    struct Slot {
        std::uint64_t hash = 0;
        std::int32_t id = -1;  // -1: empty
    };

    static std::uint64_t hashOf(std::string_view name) { return std::hash<std::string_view>{}(name); }
    std::size_t mask() const { return m_slots.size() - 1; }
    void grow()
    {
        std::vector<Slot> previous(m_slots.empty() ? 16 : 2 * m_slots.size());
        previous.swap(m_slots);
        for (const Slot &s : previous)
            if (s.id >= 0) {
                std::size_t i = s.hash & mask();
                while (m_slots[i].id >= 0)
                    i = (i + 1) & mask();
                m_slots[i] = s;
            }
    }

    std::vector<Slot> m_slots;  // a power of two of them, at most half full
    std::size_t m_size = 0;
};

} // namespace tapestry::ir
