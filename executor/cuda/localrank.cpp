#include "cuda/localrank.h"

namespace tapestry::exec::gpu {

std::optional<int> localRankFromEnvironment(
    const std::function<const char *(const char *)> &lookup, std::string *skipped)
{
    for (const char *name : kLocalRankVariables) {
        const char *value = lookup(name);
        if (!value)
            continue;
        const std::string text = value;
        std::size_t used = 0;
        long v = -1;
        try {
            v = std::stol(text, &used);
        } catch (const std::exception &) {
            used = 0;
        }
        if (!text.empty() && used == text.size() && v >= 0 && v <= 1 << 20)
            return static_cast<int>(v);
        if (skipped)
            *skipped += std::string(skipped->empty() ? "" : ", ") + name + "='" + text + "'";
    }
    return std::nullopt;
}

int deviceForLocalRank(int localRank, int deviceCount)
{
    return deviceCount > 0 ? localRank % deviceCount : 0;
}

} // namespace tapestry::exec::gpu
