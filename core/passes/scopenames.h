#pragma once

#include <cctype>
#include <string_view>

namespace tapestry::passes {

// How op names carry scopes: components separated by '/' or '.'
// ("transformer/h.3/attn/MatMul"), empty components skipped.
inline bool isScopeSeparator(char c) { return c == '/' || c == '.'; }

// "layer3" -> "layer", "3" -> "": siblings sharing a stem are one stack.
inline std::string_view stemOf(std::string_view s)
{
    std::size_t end = s.size();
    while (end > 0 && std::isdigit(static_cast<unsigned char>(s[end - 1])))
        --end;
    return s.substr(0, end);
}

} // namespace tapestry::passes
