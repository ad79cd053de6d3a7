#include "plan/fingerprint.h"

#include <cstdio>
#include <type_traits>

namespace tapestry::plan {

namespace {

class Fnv1a {
public:
    void bytes(const void *data, std::size_t n)
    {
        const auto *p = static_cast<const unsigned char *>(data);
        for (std::size_t i = 0; i < n; ++i) {
            m_hash ^= p[i];
            m_hash *= 1099511628211ULL;
        }
    }
    void integer(std::int64_t v) { bytes(&v, sizeof v); }
    // Length-prefixed, so that ("ab", "c") and ("a", "bc") differ.
    void text(const std::string &s)
    {
        integer(static_cast<std::int64_t>(s.size()));
        bytes(s.data(), s.size());
    }
    std::uint64_t value() const { return m_hash; }

private:
    std::uint64_t m_hash = 14695981039346656037ULL;
};

void hashAttribute(Fnv1a &h, const ir::Attribute &a)
{
    h.integer(static_cast<std::int64_t>(a.index()));
    std::visit(
        [&](const auto &v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, std::int64_t>)
                h.integer(v);
            else if constexpr (std::is_same_v<T, double>)
                h.bytes(&v, sizeof v);
            else if constexpr (std::is_same_v<T, std::string>)
                h.text(v);
            else {
                h.integer(static_cast<std::int64_t>(v.size()));
                for (const auto &e : v) {
                    if constexpr (std::is_same_v<std::decay_t<decltype(e)>, std::string>)
                        h.text(e);
                    else
                        h.bytes(&e, sizeof e);
                }
            }
        },
        a);
}

} // namespace

std::string modelFingerprint(const ir::Graph &graph)
{
    Fnv1a h;
    h.integer(static_cast<std::int64_t>(graph.tensorCount()));
    for (const auto &t : graph.tensors()) {
        h.text(t.name);
        h.integer(static_cast<std::int64_t>(t.shape.size()));
        for (auto d : t.shape)
            h.integer(d);
        h.integer(static_cast<std::int64_t>(t.dtype));
        h.integer(static_cast<std::int64_t>(t.role));
    }
    h.integer(static_cast<std::int64_t>(graph.opCount()));
    for (const auto &op : graph.ops()) {
        h.text(op.type);
        h.text(op.domain);
        h.integer(static_cast<std::int64_t>(op.inputs.size()));
        for (auto t : op.inputs)
            h.integer(t.value);
        h.integer(static_cast<std::int64_t>(op.outputs.size()));
        for (auto t : op.outputs)
            h.integer(t.value);
        h.integer(static_cast<std::int64_t>(op.attributes.size()));
        for (const auto &[key, value] : op.attributes) {
            h.text(key);
            hashAttribute(h, value);
        }
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", static_cast<unsigned long long>(h.value()));
    return buf;
}

} // namespace tapestry::plan
