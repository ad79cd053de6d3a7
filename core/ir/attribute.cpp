#include "ir/attribute.h"

#include "ir/hash.h"

#include <functional>
#include <type_traits>

namespace tapestry::ir {

namespace {
template <typename T>
std::optional<T> get(const Attributes &attrs, const std::string &key)
{
    auto it = attrs.find(key);
    if (it == attrs.end())
        return std::nullopt;
    if (const T *v = std::get_if<T>(&it->second))
        return *v;
    return std::nullopt;
}
std::uint64_t hashString(std::string_view s)
{
    return std::hash<std::string_view>{}(s);
}

std::uint64_t hashValue(std::uint64_t h, const Attribute &a)
{
    h = hashMix(h, a.index());
    std::visit(
        [&](const auto &v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, std::int64_t>) {
                h = hashMix(h, static_cast<std::uint64_t>(v));
            } else if constexpr (std::is_same_v<T, double>) {
                h = hashMix(h, std::hash<double>{}(v));
            } else if constexpr (std::is_same_v<T, std::string>) {
                h = hashMix(h, hashString(v));
            } else {
                h = hashMix(h, v.size());
                for (const auto &x : v) {
                    using X = std::decay_t<decltype(x)>;
                    if constexpr (std::is_same_v<X, std::string>)
                        h = hashMix(h, hashString(x));
                    else if constexpr (std::is_same_v<X, double>)
                        h = hashMix(h, std::hash<double>{}(x));
                    else
                        h = hashMix(h, static_cast<std::uint64_t>(x));
                }
            }
        },
        a);
    return h;
}
} // namespace

std::uint64_t hashAttributes(std::string_view domain, const Attributes &attrs)
{
    std::uint64_t h = hashMix(domain.empty() ? 0 : hashString(domain), attrs.size());
    for (const auto &[key, value] : attrs)  // a std::map: in key order
        h = hashValue(hashMix(h, hashString(key)), value);
    return h;
}

std::optional<std::int64_t> intAttr(const Attributes &attrs, const std::string &key)
{
    return get<std::int64_t>(attrs, key);
}

std::optional<double> floatAttr(const Attributes &attrs, const std::string &key)
{
    if (auto d = get<double>(attrs, key))
        return d;
    if (auto i = get<std::int64_t>(attrs, key))
        return static_cast<double>(*i);
    return std::nullopt;
}

std::optional<std::vector<std::int64_t>> intsAttr(const Attributes &attrs, const std::string &key)
{
    return get<std::vector<std::int64_t>>(attrs, key);
}

std::optional<std::string> stringAttr(const Attributes &attrs, const std::string &key)
{
    return get<std::string>(attrs, key);
}

} // namespace tapestry::ir
