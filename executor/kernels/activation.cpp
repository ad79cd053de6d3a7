#include "kernels/activation.h"

#include <cmath>

namespace tapestry::exec::kernels {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;
constexpr float kGeluCubic = 0.044715f;
} // namespace

void reluForward(const TensorView &out, const TensorView &x)
{
    const std::int64_t n = x.size();
    for (std::int64_t i = 0; i < n; ++i)
        out.data[i] = x.data[i] > 0.0f ? x.data[i] : 0.0f;
}

void reluBackward(const TensorView &dout, const TensorView &x, const TensorView &dx)
{
    const std::int64_t n = x.size();
    for (std::int64_t i = 0; i < n; ++i)
        if (x.data[i] > 0.0f)
            dx.data[i] += dout.data[i];
}

void geluForward(GeluForm form, const TensorView &out, const TensorView &x)
{
    const std::int64_t n = x.size();
    if (form == GeluForm::Erf) {
        for (std::int64_t i = 0; i < n; ++i) {
            const float v = x.data[i];
            out.data[i] = 0.5f * v * (1.0f + std::erf(v * kInvSqrt2));
        }
        return;
    }
    for (std::int64_t i = 0; i < n; ++i) {
        const float v = x.data[i];
        out.data[i] = 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v)));
    }
}

void geluBackward(GeluForm form, const TensorView &dout, const TensorView &x, const TensorView &dx)
{
    const std::int64_t n = x.size();
    if (form == GeluForm::Erf) {
        for (std::int64_t i = 0; i < n; ++i) {
            const float v = x.data[i];
            const float cdf = 0.5f * (1.0f + std::erf(v * kInvSqrt2));
            const float pdf = kInvSqrt2Pi * std::exp(-0.5f * v * v);
            dx.data[i] += dout.data[i] * (cdf + v * pdf);
        }
        return;
    }
    for (std::int64_t i = 0; i < n; ++i) {
        const float v = x.data[i];
        const float u = kSqrt2OverPi * (v + kGeluCubic * v * v * v);
        const float t = std::tanh(u);
        const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
        dx.data[i] += dout.data[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
    }
}

void siluForward(const TensorView &out, const TensorView &x)
{
    const std::int64_t n = x.size();
    for (std::int64_t i = 0; i < n; ++i) {
        const float v = x.data[i];
        out.data[i] = v / (1.0f + std::exp(-v));
    }
}

void siluBackward(const TensorView &dout, const TensorView &x, const TensorView &dx)
{
    const std::int64_t n = x.size();
    for (std::int64_t i = 0; i < n; ++i) {
        const float v = x.data[i];
        const float s = 1.0f / (1.0f + std::exp(-v));
        dx.data[i] += dout.data[i] * s * (1.0f + v * (1.0f - s));
    }
}

void negForward(const TensorView &out, const TensorView &x)
{
    const std::int64_t n = x.size();
    for (std::int64_t i = 0; i < n; ++i)
        out.data[i] = -x.data[i];
}

void negBackward(const TensorView &dout, const TensorView &dx)
{
    const std::int64_t n = dout.size();
    for (std::int64_t i = 0; i < n; ++i)
        dx.data[i] -= dout.data[i];
}

} // namespace tapestry::exec::kernels
