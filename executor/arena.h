#pragma once

#include "tensorview.h"

#include <cstdint>
#include <memory>

namespace tapestry::exec {

class Device;

// One float buffer for everything a step touches (values, gradients, saved
// statistics, optimizer state), as in llm.c: offsets are reserved up front
// from the shapes, the memory is allocated once, and a step never allocates.
class Arena {
public:
    // Reserves `count` floats, 64-byte aligned; returns their offset.
    std::int64_t reserve(std::int64_t count);
    // Allocates the reserved floats, zeroed, in host memory (the reference
    // interpreter) or on `device` (a rank's program). Call once, after every
    // reserve.
    void allocate();
    void allocate(Device &device);

    float *at(std::int64_t offset) const { return m_data.get() + offset; }
    TensorView view(std::int64_t offset, ir::Shape shape) const { return {at(offset), std::move(shape)}; }
    std::int64_t size() const { return m_size; }
    bool allocated() const { return m_data != nullptr; }

private:
    struct Free {
        Device *device;  // null: host memory from aligned_alloc (value-initialised)
        void operator()(float *p) const;
    };
    std::int64_t m_size = 0;
    std::unique_ptr<float, Free> m_data;
};

} // namespace tapestry::exec
