#pragma once

// Element-wise float math on 8 lanes at once (GCC's vector extensions): exp as
// Cephes' expf (range reduction by ln 2 and a degree-6 polynomial, no
// branches), tanh from it, erf by Abramowitz and Stegun 7.1.26. A function
// marked TAPESTRY_VECTOR_CLONES is compiled for AVX-512, for AVX with FMA (the
// "fma" target; a clone for "avx2" alone multiplies and adds apart, and exp's
// polynomial is a chain of both) and for any x86-64 (SSE2, two halves per
// vector), the clone chosen when the program loads (GCC's function
// multi-versioning); glibc's scalar expf and
// tanhf took most of a GELU's or a softmax's time. forEach8() runs a body over
// a buffer 8 floats at a time, the tail padded.
//
// Accuracy against the double-precision functions (tests/tst_kernels.cpp):
// exp within 2 ulp where the result is a normal float, 0 below that and
// infinity above; tanh within 2e-7 absolute; erf within 2e-7 absolute.

#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TAPESTRY_VECTOR_CLONES __attribute__((target_clones("avx512f", "fma", "default")))
#else
#define TAPESTRY_VECTOR_CLONES
#endif

namespace tapestry::exec::kernels::vec {

using F8 = float __attribute__((vector_size(32)));
using I8 = std::int32_t __attribute__((vector_size(32)));

[[gnu::always_inline]] inline F8 splat(float v)
{
    return F8{v, v, v, v, v, v, v, v};
}

// The lane numbers 0..7, to mask a short tail.
[[gnu::always_inline]] inline I8 iota()
{
    return I8{0, 1, 2, 3, 4, 5, 6, 7};
}

[[gnu::always_inline]] inline F8 select(I8 mask, F8 yes, F8 no)
{
    return mask ? yes : no;
}

[[gnu::always_inline]] inline F8 exp(F8 x)
{
    const F8 kMax = splat(88.72283905206835f);   // ln(FLT_MAX)
    const F8 kMin = splat(-87.33654475055310f);  // ln(FLT_MIN): smaller results would be subnormal
    F8 c = select(x > splat(88.0f), splat(88.0f), x);  // 2^n stays a normal float: n <= 127
    c = select(c < kMin, kMin, c);
    F8 f = c * splat(1.44269504088896341f);
    f += select(f >= splat(0.0f), splat(0.5f), splat(-0.5f));
    const I8 n = __builtin_convertvector(f, I8);  // round to nearest
    const F8 fn = __builtin_convertvector(n, F8);
    F8 r = c - fn * splat(0.693359375f);
    r -= fn * splat(-2.12194440e-4f);
    F8 p = splat(1.9875691500e-4f);
    p = p * r + splat(1.3981999507e-3f);
    p = p * r + splat(8.3334519073e-3f);
    p = p * r + splat(4.1665795894e-2f);
    p = p * r + splat(1.6666665459e-1f);
    p = p * r + splat(5.0000001201e-1f);
    p = p * r * r + r + splat(1.0f);
    const F8 y = p * std::bit_cast<F8>((n + 127) << 23);
    const F8 big = select(x > kMax, splat(std::numeric_limits<float>::infinity()), y);
    return select(x < kMin, splat(0.0f), big);
}

[[gnu::always_inline]] inline F8 tanh(F8 x)
{
    return splat(1.0f) - splat(2.0f) / (vec::exp(splat(2.0f) * x) + splat(1.0f));
}

[[gnu::always_inline]] inline F8 erf(F8 x)
{
    const F8 a = select(x < splat(0.0f), -x, x);
    const F8 t = splat(1.0f) / (splat(1.0f) + splat(0.3275911f) * a);
    F8 p = splat(1.061405429f);
    p = p * t - splat(1.453152027f);
    p = p * t + splat(1.421413741f);
    p = p * t - splat(0.284496736f);
    p = p * t + splat(0.254829592f);
    const F8 y = splat(1.0f) - p * t * vec::exp(-a * a);
    return select(x < splat(0.0f), -y, y);
}

// body(i, count) for i = 0, 8, 16, ... with count = min(8, n - i): the
// callers load and store with load()/store(), which pad a short tail.
[[gnu::always_inline]] inline F8 load(const float *p, std::int64_t count)
{
    F8 v = splat(0.0f);
    std::memcpy(&v, p, static_cast<std::size_t>(count) * sizeof(float));
    return v;
}

[[gnu::always_inline]] inline void store(float *p, F8 v, std::int64_t count)
{
    std::memcpy(p, &v, static_cast<std::size_t>(count) * sizeof(float));
}

template <typename Body> [[gnu::always_inline]] inline void forEach8(std::int64_t n, Body body)
{
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        body(i, std::int64_t(8));
    if (i < n)
        body(i, n - i);
}

// Σ exp(p[i] − shift) over n floats: 8 float lanes, folded into a double
// every 256 elements (a softmax's or a loss's row of many classes loses
// digits in one float sum); a short tail adds nothing.
[[gnu::always_inline]] inline double sumExp(const float *p, std::int64_t n, float shift)
{
    const F8 sv = splat(shift);
    F8 lanes = splat(0.0f);
    double sum = 0.0;
    int folded = 0;
    forEach8(n, [&](std::int64_t i, std::int64_t count) {
        const F8 e = vec::exp(load(p + i, count) - sv);
        lanes += count == 8 ? e : select(iota() < static_cast<int>(count), e, splat(0.0f));
        if (++folded == 32) {
            for (int k = 0; k < 8; ++k)
                sum += lanes[k];
            lanes = splat(0.0f);
            folded = 0;
        }
    });
    for (int k = 0; k < 8; ++k)
        sum += lanes[k];
    return sum;
}

} // namespace tapestry::exec::kernels::vec
