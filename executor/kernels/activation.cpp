#include "kernels/activation.h"

#include "kernels/vecmath.h"

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

// GELU and SiLU run 8 lanes at a time in vectorised clones (kernels/vecmath.h).
TAPESTRY_VECTOR_CLONES
void geluForward(GeluForm form, const TensorView &out, const TensorView &x)
{
    using namespace vec;
    const float *in = x.data;
    float *o = out.data;
    if (form == GeluForm::Erf) {
        forEach8(x.size(), [&](std::int64_t i, std::int64_t n) {
            const F8 v = load(in + i, n);
            store(o + i, splat(0.5f) * v * (splat(1.0f) + vec::erf(v * splat(kInvSqrt2))), n);
        });
        return;
    }
    forEach8(x.size(), [&](std::int64_t i, std::int64_t n) {
        const F8 v = load(in + i, n);
        const F8 u = splat(kSqrt2OverPi) * (v + splat(kGeluCubic) * v * v * v);
        store(o + i, splat(0.5f) * v * (splat(1.0f) + vec::tanh(u)), n);
    });
}

TAPESTRY_VECTOR_CLONES
void geluBackward(GeluForm form, const TensorView &dout, const TensorView &x, const TensorView &dx)
{
    using namespace vec;
    const float *in = x.data, *g = dout.data;
    float *d = dx.data;
    if (form == GeluForm::Erf) {
        forEach8(x.size(), [&](std::int64_t i, std::int64_t n) {
            const F8 v = load(in + i, n);
            const F8 cdf = splat(0.5f) * (splat(1.0f) + vec::erf(v * splat(kInvSqrt2)));
            const F8 pdf = splat(kInvSqrt2Pi) * vec::exp(splat(-0.5f) * v * v);
            store(d + i, load(d + i, n) + load(g + i, n) * (cdf + v * pdf), n);
        });
        return;
    }
    forEach8(x.size(), [&](std::int64_t i, std::int64_t n) {
        const F8 v = load(in + i, n);
        const F8 u = splat(kSqrt2OverPi) * (v + splat(kGeluCubic) * v * v * v);
        const F8 t = vec::tanh(u);
        const F8 du = splat(kSqrt2OverPi) * (splat(1.0f) + splat(3.0f * kGeluCubic) * v * v);
        const F8 grad = splat(0.5f) * (splat(1.0f) + t) + splat(0.5f) * v * (splat(1.0f) - t * t) * du;
        store(d + i, load(d + i, n) + load(g + i, n) * grad, n);
    });
}

TAPESTRY_VECTOR_CLONES
void siluForward(const TensorView &out, const TensorView &x)
{
    using namespace vec;
    const float *in = x.data;
    float *o = out.data;
    forEach8(x.size(), [&](std::int64_t i, std::int64_t n) {
        const F8 v = load(in + i, n);
        store(o + i, v / (splat(1.0f) + vec::exp(-v)), n);
    });
}

TAPESTRY_VECTOR_CLONES
void siluBackward(const TensorView &dout, const TensorView &x, const TensorView &dx)
{
    using namespace vec;
    const float *in = x.data, *g = dout.data;
    float *d = dx.data;
    forEach8(x.size(), [&](std::int64_t i, std::int64_t n) {
        const F8 v = load(in + i, n);
        const F8 s = splat(1.0f) / (splat(1.0f) + vec::exp(-v));
        store(d + i, load(d + i, n) + load(g + i, n) * s * (splat(1.0f) + v * (splat(1.0f) - s)), n);
    });
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
