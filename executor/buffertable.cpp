#include "buffertable.h"

namespace tapestry::exec {

Slot BufferTable::reserve(ir::Shape shape)
{
    std::int64_t n = 1;
    for (auto d : shape)
        n *= d;
    m_slots.emplace_back(m_arena.reserve(n), std::move(shape));
    return static_cast<Slot>(m_slots.size() - 1);
}

void BufferTable::allocate(Device &device)
{
    m_arena.allocate(device);
    m_views.clear();
    for (const auto &[offset, shape] : m_slots)
        m_views.push_back(m_arena.view(offset, shape));
}

} // namespace tapestry::exec
