#include "initializer.h"

#include "kernels/strided.h"

#include <cctype>
#include <algorithm>
#include <cmath>
#include <numbers>

namespace tapestry::exec {

namespace {

// SplitMix64's finaliser: a bijective mix with good avalanche, so
// consecutive counters give independent-looking outputs.
std::uint64_t mix(std::uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

std::uint64_t bitsAt(std::uint64_t key, std::uint64_t index)
{
    return mix(key + (index + 1) * 0x9e3779b97f4a7c15ULL);
}

constexpr float kMasked = -1e9f;

float valueAt(InitRule rule, std::uint64_t key, std::uint64_t flat, std::int64_t row,
              std::int64_t col)
{
    switch (rule.kind) {
    case InitKind::Zeros:
        return 0.0f;
    case InitKind::Ones:
        return 1.0f;
    case InitKind::Constant:
        return rule.scale;
    case InitKind::Normal:
        return static_cast<float>(rule.scale * normalAt(key, flat));
    case InitKind::Uniform:
        return static_cast<float>(rule.scale * (2.0 * uniformAt(key, flat) - 1.0));
    case InitKind::CausalMask:
        return col <= row ? 0.0f : kMasked;
    case InitKind::RotaryCos:
    case InitKind::RotarySin: {
        // rule.scale holds the head dim d.
        const double half = rule.scale / 2.0;
        const double theta = std::pow(10000.0, -static_cast<double>(col % static_cast<std::int64_t>(half)) / half);
        const double angle = static_cast<double>(row) * theta;
        return static_cast<float>(rule.kind == InitKind::RotaryCos ? std::cos(angle) : std::sin(angle));
    }
    }
    return 0.0f;
}

// 1/√d for a scalar scale input: d is the contraction dim of the MatMul that
// makes the other operand of the Mul reading the scale.
float attentionScale(const ir::Graph &graph, ir::TensorId scale)
{
    for (ir::OpId c : graph.tensor(scale).consumers) {
        const ir::Op &mul = graph.op(c);
        for (ir::TensorId other : mul.inputs) {
            const ir::OpId p = graph.tensor(other).producer;
            if (other == scale || !p.valid() || graph.op(p).type != "MatMul")
                continue;
            const ir::Shape &q = graph.tensor(graph.op(p).inputs[0]).shape;
            return static_cast<float>(1.0 / std::sqrt(static_cast<double>(q.back())));
        }
    }
    return 1.0f;
}

bool endsWith(std::string_view s, std::string_view suffix)
{
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool containsNoCase(std::string_view s, std::string_view word)
{
    for (std::size_t i = 0; i + word.size() <= s.size(); ++i) {
        bool match = true;
        for (std::size_t k = 0; k < word.size() && match; ++k)
            match = std::tolower(static_cast<unsigned char>(s[i + k])) == word[k];
        if (match)
            return true;
    }
    return false;
}

} // namespace

std::uint64_t streamKey(std::uint64_t seed, std::string_view tensorName)
{
    std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a of the name
    for (char c : tensorName) {
        h ^= static_cast<unsigned char>(c);
        h *= 0x100000001b3ULL;
    }
    return mix(h ^ mix(seed));
}

double uniformAt(std::uint64_t key, std::uint64_t index)
{
    return static_cast<double>(bitsAt(key, index) >> 11) * 0x1.0p-53;
}

double normalAt(std::uint64_t key, std::uint64_t index)
{
    // Box–Muller on two counters of this element only (2i and 2i+1), so an
    // element's value never depends on its neighbours.
    const double u1 = (static_cast<double>(bitsAt(key, 2 * index) >> 11) + 0.5) * 0x1.0p-53;
    const double u2 = uniformAt(key, 2 * index + 1);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

InitRule initRuleFor(const ir::Graph &graph, ir::TensorId id)
{
    const ir::Tensor &t = graph.tensor(id);
    if (t.role == ir::Role::Input) {
        const float lastDim = t.shape.empty() ? 1.0f : static_cast<float>(t.shape.back());
        if (containsNoCase(t.name, "mask"))
            return {InitKind::CausalMask, 1.0f};
        if (containsNoCase(t.name, "cos") && t.shape.size() >= 2)
            return {InitKind::RotaryCos, lastDim};
        if (containsNoCase(t.name, "sin") && t.shape.size() >= 2)
            return {InitKind::RotarySin, lastDim};
        if (containsNoCase(t.name, "scale") && t.shape.empty())
            return {InitKind::Constant, attentionScale(graph, id)};
        return {InitKind::Uniform, 1.0f};
    }
    // Biases start at zero whatever their rank (GPT-2's fused c_attn bias is [3, h]).
    if (endsWith(t.name, "bias"))
        return {InitKind::Zeros, 0.0f};
    if (t.shape.size() >= 2)
        return {InitKind::Normal,
                static_cast<float>(1.0 / std::sqrt(static_cast<double>(t.shape[t.shape.size() - 2])))};
    for (ir::OpId c : t.consumers) {
        const ir::Op &op = graph.op(c);
        const bool norm = op.type == "LayerNormalization" || op.type == "RMSNorm" ||
                          op.type == "SimplifiedLayerNormalization";
        if (norm && op.inputs.size() > 1 && op.inputs[1] == id)
            return {InitKind::Ones, 1.0f};
    }
    return {InitKind::Normal, 0.02f};
}

void initializeBlock(const TensorView &block, std::span<const std::int64_t> offset,
                     const ir::Shape &fullShape, std::uint64_t key, InitRule rule)
{
    const std::size_t r = fullShape.size();
    const std::int64_t n = block.size();
    if (r == 0) {
        if (n)
            block.data[0] = valueAt(rule, key, 0, 0, 0);
        return;
    }
    const kernels::Dims full = kernels::contiguousStrides(fullShape);
    kernels::Dims idx{};
    for (std::int64_t i = 0; i < n; ++i) {
        std::uint64_t flat = 0;
        for (std::size_t d = 0; d < r; ++d)
            flat += static_cast<std::uint64_t>((offset[d] + idx[d]) * full[d]);
        const std::int64_t col = offset[r - 1] + idx[r - 1];
        const std::int64_t row = r >= 2 ? offset[r - 2] + idx[r - 2] : 0;
        block.data[i] = valueAt(rule, key, flat, row, col);
        for (std::size_t d = r; d-- > 0;) {
            if (++idx[d] < block.shape[d])
                break;
            idx[d] = 0;
        }
    }
}

IndexRule indexRuleFor(const ir::Graph &graph, ir::TensorId id)
{
    const ir::Tensor &t = graph.tensor(id);
    IndexRule rule;
    for (ir::OpId c : t.consumers) {
        const ir::Op &op = graph.op(c);
        if (op.inputs.size() < 2 || op.inputs[1] != id)
            continue;
        const ir::Shape &s = graph.tensor(op.inputs[0]).shape;
        std::int64_t range = 0;
        if (op.type == "Gather" && !s.empty())
            range = s.front();
        else if (op.type == "SoftmaxCrossEntropyLoss" && !s.empty())
            range = s.back();
        if (range > 0)
            rule.range = rule.range == 0 ? range : std::min(rule.range, range);
    }
    rule.positions = containsNoCase(t.name, "position") && !t.shape.empty();
    rule.period = t.shape.empty() ? 1 : t.shape.back();
    return rule;
}

void initializeIndices(std::int64_t *out, std::int64_t count, std::int64_t first,
                       std::uint64_t key, const IndexRule &rule)
{
    for (std::int64_t i = 0; i < count; ++i) {
        const auto flat = static_cast<std::uint64_t>(first + i);
        out[i] = rule.positions
                     ? static_cast<std::int64_t>(flat % static_cast<std::uint64_t>(rule.period)) % rule.range
                     : static_cast<std::int64_t>(bitsAt(key, flat) % static_cast<std::uint64_t>(rule.range));
    }
}

} // namespace tapestry::exec
