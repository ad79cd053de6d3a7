#pragma once

#include <cstdint>

namespace tapestry::ir {

// Folds v into a running hash h: splitmix64's finaliser over the pair, cheap
// and well spread. The structural hashes of ops, tensors and subgraphs are
// built from it.
inline std::uint64_t hashMix(std::uint64_t h, std::uint64_t v)
{
    std::uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

} // namespace tapestry::ir
