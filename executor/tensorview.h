#pragma once

#include "ir/graph.h"

#include <cstdint>

namespace tapestry::exec {

// A float32 tensor the executor computes on: a shape and a pointer into the
// arena (arena.h). Views are made once when a program is laid out; kernels
// read and write through them and never own or allocate memory.
struct TensorView {
    float *data = nullptr;
    ir::Shape shape;

    std::int64_t size() const
    {
        std::int64_t n = 1;
        for (auto d : shape)
            n *= d;
        return n;
    }
    std::size_t rank() const { return shape.size(); }
    std::int64_t dim(std::size_t i) const { return shape[i]; }
    // The innermost dim and the count of rows before it (1 for a scalar).
    std::int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
    std::int64_t rows() const { return shape.empty() ? 1 : size() / shape.back(); }
    explicit operator bool() const { return data != nullptr; }
};

// Integer tensor (token ids, labels): read-only input to Gather and the loss.
struct IndexView {
    const std::int64_t *data = nullptr;
    ir::Shape shape;

    std::int64_t size() const
    {
        std::int64_t n = 1;
        for (auto d : shape)
            n *= d;
        return n;
    }
};

} // namespace tapestry::exec
