#include "arena.h"

#include "device.h"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstring>
#include <new>

namespace tapestry::exec {

namespace {
constexpr std::int64_t kAlignFloats = 16;  // 64 bytes: one cache line, an AVX-512 vector
}

std::int64_t Arena::reserve(std::int64_t count)
{
    assert(!m_data && "reserve after allocate");
    const std::int64_t offset = m_size;
    m_size += (count + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
    return offset;
}

void Arena::allocate()
{
    const std::size_t bytes = static_cast<std::size_t>(std::max<std::int64_t>(m_size, kAlignFloats)) * sizeof(float);
    auto *p = static_cast<float *>(std::aligned_alloc(kAlignFloats * sizeof(float), bytes));
    if (!p)
        throw std::bad_alloc();
    std::memset(p, 0, bytes);
    m_data = std::unique_ptr<float, Free>(p, Free{nullptr});
}

void Arena::allocate(Device &device)
{
    m_data = std::unique_ptr<float, Free>(device.allocate(m_size), Free{&device});
}

void Arena::Free::operator()(float *p) const
{
    if (device)
        device->release(p);
    else
        std::free(p);
}

} // namespace tapestry::exec
