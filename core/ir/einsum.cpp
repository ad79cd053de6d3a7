#include "ir/einsum.h"

#include <algorithm>
#include <array>
#include <string>

namespace tapestry::ir {

bool EinsumLabels::contracted(int label) const
{
    return std::find(output.begin(), output.end(), label) == output.end();
}

namespace {

// One operand's term: its letters, with -1 where the ellipsis stands.
std::optional<std::vector<int>> term(std::string_view text)
{
    std::vector<int> letters;
    bool ellipsis = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c == ' ')
            continue;
        if (c == '.') {
            if (ellipsis || text.substr(i, 3) != "...")
                return std::nullopt;
            ellipsis = true;
            letters.push_back(-1);
            i += 2;
            continue;
        }
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
            return std::nullopt;
        letters.push_back(static_cast<unsigned char>(c));
    }
    return letters;
}

} // namespace

std::optional<EinsumLabels> parseEinsum(std::string_view equation, const std::vector<Shape> &inputs)
{
    const std::size_t arrow = equation.find("->");
    const std::string_view left = equation.substr(0, arrow);
    std::vector<std::vector<int>> terms;
    for (std::size_t start = 0;;) {
        const std::size_t comma = left.find(',', start);
        auto t = term(left.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
        if (!t)
            return std::nullopt;
        terms.push_back(std::move(*t));
        if (comma == std::string_view::npos)
            break;
        start = comma + 1;
    }
    if (terms.size() != inputs.size())
        return std::nullopt;

    // Labels: letters first as met, then the ellipsis' dims (from its right end).
    EinsumLabels e;
    std::array<int, 256> letterLabel;
    letterLabel.fill(-1);
    std::size_t ellipsisRank = 0;
    for (std::size_t i = 0; i < terms.size(); ++i) {
        const auto &t = terms[i];
        const std::size_t named = static_cast<std::size_t>(std::count_if(t.begin(), t.end(), [](int c) { return c >= 0; }));
        const bool hasEllipsis = named != t.size();
        if (named > inputs[i].size() || (!hasEllipsis && named != inputs[i].size()))
            return std::nullopt;
        if (hasEllipsis)
            ellipsisRank = std::max(ellipsisRank, inputs[i].size() - named);
    }
    std::vector<int> ellipsisLabels(ellipsisRank, -1);  // by position from the right
    auto setSize = [&](int label, std::int64_t size) {
        auto &s = e.sizes[static_cast<std::size_t>(label)];
        if (s == 1 || s == size)
            s = size;
        else if (size != 1)
            return false;
        return true;
    };
    auto ellipsisLabel = [&](std::size_t fromRight) {
        if (ellipsisLabels[fromRight] < 0) {
            ellipsisLabels[fromRight] = e.labelCount();
            e.sizes.push_back(1);
        }
        return ellipsisLabels[fromRight];
    };
    std::array<int, 256> seen{};
    for (std::size_t i = 0; i < terms.size(); ++i) {
        const auto &t = terms[i];
        const Shape &shape = inputs[i];
        const std::size_t spread = shape.size() - static_cast<std::size_t>(std::count_if(t.begin(), t.end(), [](int c) { return c >= 0; }));
        std::vector<int> dims;
        std::size_t d = 0;
        for (int c : t) {
            if (c < 0) {
                for (std::size_t k = 0; k < spread; ++k, ++d) {
                    const int label = ellipsisLabel(spread - 1 - k);
                    if (!setSize(label, shape[d]))
                        return std::nullopt;
                    dims.push_back(label);
                }
                continue;
            }
            if (letterLabel[static_cast<std::size_t>(c)] < 0) {
                letterLabel[static_cast<std::size_t>(c)] = e.labelCount();
                e.sizes.push_back(1);
            }
            ++seen[static_cast<std::size_t>(c)];
            const int label = letterLabel[static_cast<std::size_t>(c)];
            if (!setSize(label, shape[d]))
                return std::nullopt;
            dims.push_back(label);
            ++d;
        }
        e.inputs.push_back(std::move(dims));
    }

    if (arrow != std::string_view::npos) {
        auto out = term(equation.substr(arrow + 2));
        if (!out)
            return std::nullopt;
        for (int c : *out) {
            if (c < 0) {
                for (std::size_t k = ellipsisRank; k-- > 0;)
                    e.output.push_back(ellipsisLabel(k));
                continue;
            }
            const int label = letterLabel[static_cast<std::size_t>(c)];
            if (label < 0 || std::find(e.output.begin(), e.output.end(), label) != e.output.end())
                return std::nullopt;
            e.output.push_back(label);
        }
    } else {
        // Implicit: the ellipsis' dims, then the letters seen once, alphabetically.
        for (std::size_t k = ellipsisRank; k-- > 0;)
            e.output.push_back(ellipsisLabel(k));
        for (int c = 0; c < 256; ++c)
            if (seen[static_cast<std::size_t>(c)] == 1)
                e.output.push_back(letterLabel[static_cast<std::size_t>(c)]);
    }
    return e;
}

} // namespace tapestry::ir
