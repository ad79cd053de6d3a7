#include "io/onnx/shapeevaluator.h"

#include "io/onnx/tensorvalue.h"
#include "ir/sizes.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>

namespace tapestry::io::onnximport {

namespace {

// An integer tensor under evaluation.
struct Ints {
    std::vector<std::int64_t> dims;
    std::vector<std::int64_t> v;
    int type = ::onnx::TensorProto_DataType_INT64;
};

std::optional<Ints> known(const KnownValues &values, const std::string &name)
{
    if (name.empty())
        return std::nullopt;
    auto it = values.find(name);
    if (it == values.end())
        return std::nullopt;
    auto v = tensorInts(it->second);
    if (!v)
        return std::nullopt;
    Ints t;
    t.dims.assign(it->second.dims().begin(), it->second.dims().end());
    t.v = std::move(*v);
    t.type = it->second.data_type();
    return t;
}

std::optional<std::vector<std::int64_t>> concreteDims(const ::onnx::TypeProto *type)
{
    if (!type || !type->has_tensor_type() || !type->tensor_type().has_shape())
        return std::nullopt;
    std::vector<std::int64_t> dims;
    for (const auto &d : type->tensor_type().shape().dim()) {
        if (!d.has_dim_value() || d.dim_value() < 0)
            return std::nullopt;
        dims.push_back(d.dim_value());
    }
    return dims;
}

std::optional<std::int64_t> elementCount(const std::vector<std::int64_t> &dims)
{
    std::int64_t n = 1;
    for (auto d : dims) {
        if (d < 0 || (d > 0 && n > kMaxEvaluatedElements / d))
            return std::nullopt;
        n *= d;
    }
    return n;
}

::onnx::TensorProto toTensor(const Ints &t)
{
    ::onnx::TensorProto out;
    out.set_data_type(t.type);
    for (auto d : t.dims)
        out.add_dims(d);
    for (auto x : t.v) {
        if (t.type == ::onnx::TensorProto_DataType_INT64)
            out.add_int64_data(x);
        else
            out.add_int32_data(static_cast<std::int32_t>(x));
    }
    return out;
}

std::int64_t intAttribute(const ::onnx::NodeProto &node, const std::string &name, std::int64_t fallback)
{
    for (const auto &a : node.attribute())
        if (a.name() == name && a.type() == ::onnx::AttributeProto_AttributeType_INT)
            return a.i();
    return fallback;
}

const ::onnx::AttributeProto *attribute(const ::onnx::NodeProto &node, const std::string &name)
{
    for (const auto &a : node.attribute())
        if (a.name() == name)
            return &a;
    return nullptr;
}

bool isIntegerType(int type)
{
    return type == ::onnx::TensorProto_DataType_INT64 || type == ::onnx::TensorProto_DataType_INT32 ||
           type == ::onnx::TensorProto_DataType_INT8 || type == ::onnx::TensorProto_DataType_UINT8 ||
           type == ::onnx::TensorProto_DataType_BOOL;
}

// Broadcast of two tensors of rank <= 1 (shape arithmetic never needs more);
// `f` gives nothing where the result is not defined.
template <typename T, typename F>
std::optional<T> binary(const T &a, const T &b, F f, int resultType)
{
    if (a.dims.size() > 1 || b.dims.size() > 1)
        return std::nullopt;
    const std::size_t n = std::max(a.v.size(), b.v.size());
    if ((a.v.size() != n && a.v.size() != 1) || (b.v.size() != n && b.v.size() != 1))
        return std::nullopt;
    T out;
    out.dims = a.dims.size() >= b.dims.size() ? a.dims : b.dims;
    if (!out.dims.empty())
        out.dims[0] = static_cast<std::int64_t>(n);
    out.type = resultType;
    for (std::size_t i = 0; i < n; ++i) {
        auto r = f(a.v[a.v.size() == 1 ? 0 : i], b.v[b.v.size() == 1 ? 0 : i]);
        if (!r)
            return std::nullopt;
        out.v.push_back(*r);
    }
    return out;
}

using ir::checkedAdd;

std::optional<std::int64_t> checkedSub(std::int64_t a, std::int64_t b)
{
    std::int64_t r;
    if (__builtin_sub_overflow(a, b, &r))
        return std::nullopt;
    return r;
}

using ir::checkedMul;

std::optional<std::int64_t> checkedDiv(std::int64_t a, std::int64_t b)
{
    if (b == 0 || (a == std::numeric_limits<std::int64_t>::min() && b == -1))
        return std::nullopt;
    return a / b;
}

// ONNX Mod: with fmod 0 the result takes the divisor's sign (Python's %),
// with fmod 1 the dividend's (C's %).
std::optional<std::int64_t> modulo(std::int64_t a, std::int64_t b, bool fmod)
{
    if (b == 0 || (a == std::numeric_limits<std::int64_t>::min() && b == -1))
        return std::nullopt;
    std::int64_t r = a % b;
    if (!fmod && r != 0 && ((r < 0) != (b < 0)))
        r += b;
    return r;
}

std::optional<Ints> evaluateInts(const ::onnx::NodeProto &node,
                                 const std::vector<const ::onnx::TypeProto *> &inputTypes, const KnownValues &values)
{
    const std::string &op = node.op_type();
    auto in = [&](int i) { return i < node.input_size() ? known(values, node.input(i)) : std::nullopt; };

    if (op == "Shape") {
        auto dims = inputTypes.empty() ? std::nullopt : concreteDims(inputTypes[0]);
        if (!dims)
            return std::nullopt;
        const auto rank = static_cast<std::int64_t>(dims->size());
        auto clamp = [&](std::int64_t i) { return std::clamp(i < 0 ? i + rank : i, std::int64_t{0}, rank); };
        const std::int64_t start = clamp(intAttribute(node, "start", 0));
        const std::int64_t end = clamp(intAttribute(node, "end", rank));
        Ints out;
        for (std::int64_t i = start; i < end; ++i)
            out.v.push_back((*dims)[static_cast<std::size_t>(i)]);
        out.dims = {static_cast<std::int64_t>(out.v.size())};
        return out;
    }
    if (op == "Size") {
        auto dims = inputTypes.empty() ? std::nullopt : concreteDims(inputTypes[0]);
        if (!dims)
            return std::nullopt;
        const auto n = ir::checkedElementCount(*dims);
        if (!n)
            return std::nullopt;
        return Ints{{}, {*n}};
    }
    if (op == "Cast") {
        auto x = in(0);
        const int to = static_cast<int>(intAttribute(node, "to", 0));
        if (!x || !isIntegerType(to) || to == ::onnx::TensorProto_DataType_BOOL)
            return std::nullopt;
        x->type = to == ::onnx::TensorProto_DataType_INT64 ? to : ::onnx::TensorProto_DataType_INT32;
        return x;
    }
    if (op == "Gather") {
        auto data = in(0), idx = in(1);
        if (!data || !idx || data->dims.size() != 1 || intAttribute(node, "axis", 0) != 0)
            return std::nullopt;
        Ints out;
        out.dims = idx->dims;
        out.type = data->type;
        const auto n = static_cast<std::int64_t>(data->v.size());
        for (auto i : idx->v) {
            if (i < -n || i >= n)
                return std::nullopt;
            out.v.push_back(data->v[static_cast<std::size_t>(i < 0 ? i + n : i)]);
        }
        return out;
    }
    if (op == "Concat") {
        Ints out;
        for (int i = 0; i < node.input_size(); ++i) {
            auto x = in(i);
            if (!x || x->dims.size() != 1)
                return std::nullopt;
            out.type = x->type;
            out.v.insert(out.v.end(), x->v.begin(), x->v.end());
        }
        out.dims = {static_cast<std::int64_t>(out.v.size())};
        return out;
    }
    using BinaryFn = std::optional<std::int64_t> (*)(std::int64_t, std::int64_t);
    static const std::vector<std::pair<std::string, BinaryFn>> kArithmetic{
        {"Add", checkedAdd}, {"Sub", checkedSub}, {"Mul", checkedMul}, {"Div", checkedDiv},
        {"Max", [](std::int64_t a, std::int64_t b) -> std::optional<std::int64_t> { return std::max(a, b); }},
        {"Min", [](std::int64_t a, std::int64_t b) -> std::optional<std::int64_t> { return std::min(a, b); }},
    };
    for (const auto &[name, fn] : kArithmetic) {
        if (op != name)
            continue;
        auto a = in(0), b = in(1);
        if (!a || !b || node.input_size() != 2 || a->type == ::onnx::TensorProto_DataType_BOOL)
            return std::nullopt;
        return binary(*a, *b, fn, a->type);
    }
    if (op == "Mod") {
        auto a = in(0), b = in(1);
        if (!a || !b || a->type == ::onnx::TensorProto_DataType_BOOL)
            return std::nullopt;
        const bool fmod = intAttribute(node, "fmod", 0) != 0;
        return binary(*a, *b, [fmod](std::int64_t x, std::int64_t y) { return modulo(x, y, fmod); }, a->type);
    }
    static const std::vector<std::pair<std::string, BinaryFn>> kComparisons{
        {"Equal", [](std::int64_t a, std::int64_t b) -> std::optional<std::int64_t> { return a == b; }},
        {"Less", [](std::int64_t a, std::int64_t b) -> std::optional<std::int64_t> { return a < b; }},
        {"Greater", [](std::int64_t a, std::int64_t b) -> std::optional<std::int64_t> { return a > b; }},
    };
    for (const auto &[name, fn] : kComparisons) {
        if (op != name)
            continue;
        auto a = in(0), b = in(1);
        if (!a || !b)
            return std::nullopt;
        return binary(*a, *b, fn, ::onnx::TensorProto_DataType_BOOL);
    }
    if (op == "Neg" || op == "Abs") {
        auto x = in(0);
        if (!x)
            return std::nullopt;
        for (auto &e : x->v) {
            if (e == std::numeric_limits<std::int64_t>::min())
                return std::nullopt;
            e = op == "Neg" ? -e : std::abs(e);
        }
        return x;
    }
    if (op == "Where") {
        auto c = in(0), a = in(1), b = in(2);
        if (!c || !a || !b || c->dims.size() > 1 || a->dims != b->dims)
            return std::nullopt;
        auto pick = binary(*c, *a, [](std::int64_t, std::int64_t x) -> std::optional<std::int64_t> { return x; },
                           a->type);
        if (!pick || (pick->v.size() != b->v.size() && b->v.size() != 1))
            return std::nullopt;
        for (std::size_t i = 0; i < pick->v.size(); ++i)
            if (!c->v[c->v.size() == 1 ? 0 : i])
                pick->v[i] = b->v[b->v.size() == 1 ? 0 : i];
        return pick;
    }
    if (op == "Slice") {
        // Of any rank, along any axes: torch's F.pad lowers its pads list
        // to a [k, 2] tensor whose rows a Slice of step -1 reverses (a
        // shifted-window attention pads its input with sizes computed so).
        auto data = in(0), starts = in(1), ends = in(2);
        if (!data || !starts || !ends || starts->v.size() != ends->v.size())
            return std::nullopt;
        const auto rank = static_cast<std::int64_t>(data->dims.size());
        const auto size = elementCount(data->dims);
        if (rank == 0 || !size || *size != static_cast<std::int64_t>(data->v.size()))
            return std::nullopt;
        std::vector<std::int64_t> axes;
        if (node.input_size() > 3 && !node.input(3).empty()) {
            auto given = in(3);
            if (!given || given->v.size() != starts->v.size())
                return std::nullopt;
            axes = given->v;
        } else {
            for (std::size_t i = 0; i < starts->v.size(); ++i)
                axes.push_back(static_cast<std::int64_t>(i));
        }
        std::vector<std::int64_t> steps(axes.size(), 1);
        if (node.input_size() > 4 && !node.input(4).empty()) {
            auto given = in(4);
            if (!given || given->v.size() != axes.size())
                return std::nullopt;
            steps = given->v;
        }
        // Per dim, the indices it keeps, in order.
        std::vector<std::vector<std::int64_t>> kept(static_cast<std::size_t>(rank));
        for (std::int64_t d = 0; d < rank; ++d)
            for (std::int64_t i = 0; i < data->dims[static_cast<std::size_t>(d)]; ++i)
                kept[static_cast<std::size_t>(d)].push_back(i);
        std::vector<bool> sliced(static_cast<std::size_t>(rank), false);
        for (std::size_t k = 0; k < axes.size(); ++k) {
            const std::int64_t axis = axes[k] < 0 ? axes[k] + rank : axes[k];
            if (axis < 0 || axis >= rank || sliced[static_cast<std::size_t>(axis)] || steps[k] == 0)
                return std::nullopt;
            sliced[static_cast<std::size_t>(axis)] = true;
            const std::int64_t n = data->dims[static_cast<std::size_t>(axis)], step = steps[k];
            auto norm = [&](std::int64_t i, std::int64_t lo, std::int64_t hi) {
                return std::clamp(i < 0 ? std::max(i, -n - 1) + n : i, lo, hi);
            };
            auto &picked = kept[static_cast<std::size_t>(axis)];
            picked.clear();
            if (step > 0) {
                for (std::int64_t i = norm(starts->v[k], 0, n), e = norm(ends->v[k], 0, n); i < e; i += step)
                    picked.push_back(i);
            } else {
                for (std::int64_t i = norm(starts->v[k], -1, n - 1), e = norm(ends->v[k], -1, n - 1); i > e;
                     i += step)
                    picked.push_back(i);
            }
        }
        Ints out;
        out.type = data->type;
        for (const auto &picked : kept)
            out.dims.push_back(static_cast<std::int64_t>(picked.size()));
        const auto count = elementCount(out.dims);
        if (!count)
            return std::nullopt;
        std::vector<std::int64_t> index(static_cast<std::size_t>(rank), 0);  // into kept, per dim
        for (std::int64_t e = 0; e < *count; ++e) {
            std::int64_t at = 0;
            for (std::int64_t d = 0; d < rank; ++d)
                at = at * data->dims[static_cast<std::size_t>(d)] +
                     kept[static_cast<std::size_t>(d)][static_cast<std::size_t>(index[static_cast<std::size_t>(d)])];
            out.v.push_back(data->v[static_cast<std::size_t>(at)]);
            for (std::int64_t d = rank - 1; d >= 0; --d) {
                if (++index[static_cast<std::size_t>(d)] < out.dims[static_cast<std::size_t>(d)])
                    break;
                index[static_cast<std::size_t>(d)] = 0;
            }
        }
        return out;
    }
    if (op == "Transpose") {
        auto data = in(0);
        const auto size = data ? elementCount(data->dims) : std::nullopt;
        if (!size || *size != static_cast<std::int64_t>(data->v.size()))
            return std::nullopt;
        const auto rank = data->dims.size();
        std::vector<std::int64_t> perm;
        if (const auto *a = attribute(node, "perm"))
            perm.assign(a->ints().begin(), a->ints().end());
        else
            for (std::size_t d = rank; d-- > 0;)
                perm.push_back(static_cast<std::int64_t>(d));
        if (perm.size() != rank)
            return std::nullopt;
        std::vector<bool> seen(rank, false);
        for (auto p : perm) {
            if (p < 0 || p >= static_cast<std::int64_t>(rank) || seen[static_cast<std::size_t>(p)])
                return std::nullopt;
            seen[static_cast<std::size_t>(p)] = true;
        }
        // Row-major strides of the input, read in the output's dim order.
        std::vector<std::int64_t> strides(rank, 1);
        for (std::size_t d = rank; d-- > 1;)
            strides[d - 1] = strides[d] * data->dims[d];
        Ints out;
        out.type = data->type;
        for (auto p : perm)
            out.dims.push_back(data->dims[static_cast<std::size_t>(p)]);
        std::vector<std::int64_t> index(rank, 0);
        for (std::size_t e = 0; e < data->v.size(); ++e) {
            std::int64_t at = 0;
            for (std::size_t d = 0; d < rank; ++d)
                at += index[d] * strides[static_cast<std::size_t>(perm[d])];
            out.v.push_back(data->v[static_cast<std::size_t>(at)]);
            for (std::size_t d = rank; d-- > 0;) {
                if (++index[d] < out.dims[d])
                    break;
                index[d] = 0;
            }
        }
        return out;
    }
    if (op == "Range") {
        auto start = in(0), limit = in(1), delta = in(2);
        if (!start || !limit || !delta || start->v.size() != 1 || limit->v.size() != 1 || delta->v.size() != 1 ||
            delta->v[0] == 0)
            return std::nullopt;
        const std::int64_t s = start->v[0], l = limit->v[0], d = delta->v[0];
        const double count = std::ceil((static_cast<double>(l) - static_cast<double>(s)) / static_cast<double>(d));
        if (count > static_cast<double>(kMaxEvaluatedElements))
            return std::nullopt;
        Ints out;
        out.type = start->type;
        for (std::int64_t i = 0; i < static_cast<std::int64_t>(std::max(0.0, count)); ++i)
            out.v.push_back(s + i * d);
        out.dims = {static_cast<std::int64_t>(out.v.size())};
        return out;
    }
    if (op == "ConstantOfShape") {
        auto shape = in(0);
        if (!shape || shape->dims.size() != 1 || !elementCount(shape->v))
            return std::nullopt;
        Ints out;
        out.dims = shape->v;
        std::int64_t fill = 0;
        if (const auto *value = attribute(node, "value")) {
            auto v = value->has_t() ? tensorInts(value->t()) : std::nullopt;
            if (!v || v->size() != 1)
                return std::nullopt;
            fill = v->front();
            out.type = value->t().data_type();
        } else {
            // Without a value ConstantOfShape makes float zeros: data, not shape arithmetic.
            return std::nullopt;
        }
        out.v.assign(static_cast<std::size_t>(*elementCount(shape->v)), fill);
        return out;
    }
    return std::nullopt;
}

// A floating-point tensor under evaluation: the factors PyTorch computes
// from shapes, such as attention's scale 1/sqrt(head_dim) from a Shape.
struct Reals {
    std::vector<std::int64_t> dims;
    std::vector<double> v;
    int type = ::onnx::TensorProto_DataType_FLOAT;
};

bool isRealType(int type)
{
    return type == ::onnx::TensorProto_DataType_FLOAT || type == ::onnx::TensorProto_DataType_DOUBLE;
}

// A known value as reals: floats as they are, integers converted (the input
// of a Cast to float).
std::optional<Reals> knownReals(const KnownValues &values, const std::string &name)
{
    if (name.empty())
        return std::nullopt;
    auto it = values.find(name);
    if (it == values.end())
        return std::nullopt;
    Reals t;
    t.dims.assign(it->second.dims().begin(), it->second.dims().end());
    t.type = it->second.data_type();
    if (auto ints = tensorInts(it->second)) {
        t.v.assign(ints->begin(), ints->end());
        return t;
    }
    if (!isRealType(t.type))
        return std::nullopt;
    const auto value = tensorValue(it->second);
    if (!value)
        return std::nullopt;
    if (const auto *d = std::get_if<double>(&*value))
        t.v = {*d};
    else if (const auto *l = std::get_if<std::vector<double>>(&*value))
        t.v = *l;
    else
        return std::nullopt;
    return t;
}

// Rounds every result to its element type; infinities and NaNs are never
// kept, they would only stand for a division by zero.
std::optional<Reals> finished(Reals t)
{
    for (auto &x : t.v) {
        if (t.type == ::onnx::TensorProto_DataType_FLOAT)
            x = static_cast<double>(static_cast<float>(x));
        if (!std::isfinite(x))
            return std::nullopt;
    }
    return t;
}

::onnx::TensorProto toTensor(const Reals &t)
{
    ::onnx::TensorProto out;
    out.set_data_type(t.type);
    for (auto d : t.dims)
        out.add_dims(d);
    for (auto x : t.v) {
        if (t.type == ::onnx::TensorProto_DataType_DOUBLE)
            out.add_double_data(x);
        else
            out.add_float_data(static_cast<float>(x));
    }
    return out;
}

std::optional<::onnx::TensorProto> evaluateReals(const ::onnx::NodeProto &node, const KnownValues &values)
{
    const std::string &op = node.op_type();
    auto in = [&](int i) { return i < node.input_size() ? knownReals(values, node.input(i)) : std::nullopt; };

    if (op == "Cast") {
        auto x = in(0);
        const int to = static_cast<int>(intAttribute(node, "to", 0));
        if (!x)
            return std::nullopt;
        if (isRealType(to)) {
            x->type = to;
            auto r = finished(*x);
            return r ? std::optional(toTensor(*r)) : std::nullopt;
        }
        // Float to integer truncates toward zero; out of range is undefined
        // in ONNX, so such a value stays unknown.
        if ((to != ::onnx::TensorProto_DataType_INT64 && to != ::onnx::TensorProto_DataType_INT32) ||
            !isRealType(x->type))
            return std::nullopt;
        Ints out;
        out.dims = x->dims;
        out.type = to;
        const double limit = to == ::onnx::TensorProto_DataType_INT64 ? 9.2e18 : 2.1e9;
        for (auto e : x->v) {
            if (!std::isfinite(e) || std::abs(e) > limit)
                return std::nullopt;
            out.v.push_back(static_cast<std::int64_t>(std::trunc(e)));
        }
        return toTensor(out);
    }
    using UnaryFn = double (*)(double);
    static const std::vector<std::pair<std::string, UnaryFn>> kUnary{
        {"Sqrt", [](double x) { return x < 0 ? std::nan("") : std::sqrt(x); }},
        {"Reciprocal", [](double x) { return 1.0 / x; }},
        {"Neg", [](double x) { return -x; }},
        {"Abs", [](double x) { return std::abs(x); }},
        {"Floor", [](double x) { return std::floor(x); }},
        {"Ceil", [](double x) { return std::ceil(x); }},
    };
    for (const auto &[name, fn] : kUnary) {
        if (op != name)
            continue;
        auto x = in(0);
        if (!x || !isRealType(x->type))
            return std::nullopt;
        for (auto &e : x->v)
            e = fn(e);
        auto r = finished(*x);
        return r ? std::optional(toTensor(*r)) : std::nullopt;
    }
    using BinaryFn = std::optional<double> (*)(double, double);
    static const std::vector<std::pair<std::string, BinaryFn>> kArithmetic{
        {"Add", [](double a, double b) -> std::optional<double> { return a + b; }},
        {"Sub", [](double a, double b) -> std::optional<double> { return a - b; }},
        {"Mul", [](double a, double b) -> std::optional<double> { return a * b; }},
        {"Div", [](double a, double b) -> std::optional<double> { return a / b; }},
        {"Pow", [](double a, double b) -> std::optional<double> { return std::pow(a, b); }},
        {"Max", [](double a, double b) -> std::optional<double> { return std::max(a, b); }},
        {"Min", [](double a, double b) -> std::optional<double> { return std::min(a, b); }},
    };
    for (const auto &[name, fn] : kArithmetic) {
        if (op != name)
            continue;
        auto a = in(0), b = in(1);
        // Pow may raise a float to an integer exponent; elsewhere both are of one type.
        if (!a || !b || node.input_size() != 2 || !isRealType(a->type) ||
            (op != "Pow" && a->type != b->type))
            return std::nullopt;
        auto r = binary(*a, *b, fn, a->type);
        if (r)
            r = finished(*r);
        return r ? std::optional(toTensor(*r)) : std::nullopt;
    }
    return std::nullopt;
}

// Ops that keep the values and change only the dims, which inference
// already knows; of any element type.
std::optional<::onnx::TensorProto> redimensioned(const ::onnx::NodeProto &node,
                                                 const std::vector<const ::onnx::TypeProto *> &outputTypes,
                                                 const KnownValues &values)
{
    const std::string &op = node.op_type();
    if (op != "Unsqueeze" && op != "Squeeze" && op != "Reshape" && op != "Flatten")
        return std::nullopt;
    auto it = node.input_size() > 0 ? values.find(node.input(0)) : values.end();
    auto dims = outputTypes.empty() ? std::nullopt : concreteDims(outputTypes[0]);
    if (it == values.end() || !dims)
        return std::nullopt;
    const std::vector<std::int64_t> from(it->second.dims().begin(), it->second.dims().end());
    if (elementCount(from) != elementCount(*dims))
        return std::nullopt;
    ::onnx::TensorProto out = it->second;
    out.clear_dims();
    for (auto d : *dims)
        out.add_dims(d);
    return out;
}

} // namespace

void evaluateNode(const ::onnx::NodeProto &node, const std::vector<const ::onnx::TypeProto *> &inputTypes,
                  const std::vector<const ::onnx::TypeProto *> &outputTypes, KnownValues &values)
{
    if (!node.domain().empty() && node.domain() != "ai.onnx")
        return;
    if (node.op_type() == "Constant") {
        if (node.output_size() != 1 || node.attribute_size() != 1)
            return;
        const auto &a = node.attribute(0);
        ::onnx::TensorProto t;
        if (a.name() == "value" && a.has_t()) {
            const std::vector<std::int64_t> dims(a.t().dims().begin(), a.t().dims().end());
            if (!elementCount(dims))
                return;
            t = a.t();
        } else if (a.name() == "value_int") {
            t.set_data_type(::onnx::TensorProto_DataType_INT64);
            t.add_int64_data(a.i());
        } else if (a.name() == "value_ints") {
            t.set_data_type(::onnx::TensorProto_DataType_INT64);
            t.add_dims(a.ints_size());
            for (auto i : a.ints())
                t.add_int64_data(i);
        } else if (a.name() == "value_float") {
            t.set_data_type(::onnx::TensorProto_DataType_FLOAT);
            t.add_float_data(a.f());
        } else if (a.name() == "value_floats") {
            t.set_data_type(::onnx::TensorProto_DataType_FLOAT);
            t.add_dims(a.floats_size());
            for (auto f : a.floats())
                t.add_float_data(f);
        } else {
            return;
        }
        if (tensorValue(t))
            values.emplace(node.output(0), std::move(t));
        return;
    }
    if (node.op_type() == "Identity" && node.input_size() == 1 && node.output_size() == 1) {
        // Also floats: an Identity of a constant is the constant.
        auto it = values.find(node.input(0));
        if (it != values.end()) {
            ::onnx::TensorProto copy = it->second;
            values.emplace(node.output(0), std::move(copy));
        }
        return;
    }
    if (node.output_size() != 1 || node.output(0).empty())
        return;
    std::optional<::onnx::TensorProto> result = redimensioned(node, outputTypes, values);
    if (!result)
        if (auto ints = evaluateInts(node, inputTypes, values))
            result = toTensor(*ints);
    if (!result)
        result = evaluateReals(node, values);
    // Kept only when the values fill the dims exactly and stay small.
    const std::vector<std::int64_t> dims = result ? std::vector<std::int64_t>(result->dims().begin(), result->dims().end())
                                                  : std::vector<std::int64_t>{};
    if (!result || !elementCount(dims) || !tensorValue(*result))
        return;
    values.emplace(node.output(0), std::move(*result));
}

} // namespace tapestry::io::onnximport
