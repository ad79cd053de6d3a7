#include "ir/attribute.h"

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
} // namespace

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
