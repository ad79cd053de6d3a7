#include "io/onnx/tensorvalue.h"

#include <cstring>
#include <limits>

namespace tapestry::io::onnximport {

namespace {

template <typename T>
std::vector<T> littleEndian(const std::string &raw)
{
    // ONNX stores raw_data little-endian, as this (x86-64, aarch64) host does.
    std::vector<T> v(raw.size() / sizeof(T));
    if (!v.empty())
        std::memcpy(v.data(), raw.data(), v.size() * sizeof(T));
    return v;
}

template <typename Out, typename In>
ir::Attribute shaped(const std::vector<In> &values, bool scalar)
{
    std::vector<Out> v(values.begin(), values.end());
    if (scalar)
        return v.front();
    return v;
}

} // namespace

std::optional<ir::Attribute> tensorValue(const ::onnx::TensorProto &t)
{
    if (t.data_location() == ::onnx::TensorProto_DataLocation_EXTERNAL)
        return std::nullopt;
    std::int64_t count = 1;
    for (auto d : t.dims()) {
        if (d < 0 || (d > 0 && count > std::numeric_limits<std::int32_t>::max() / d))
            return std::nullopt;
        count *= d;
    }
    const bool scalar = t.dims_size() == 0;
    const bool raw = t.has_raw_data();
    auto fits = [&](std::size_t n) { return static_cast<std::int64_t>(n) == count; };
    switch (t.data_type()) {
    case ::onnx::TensorProto_DataType_INT64: {
        auto v = raw ? littleEndian<std::int64_t>(t.raw_data())
                     : std::vector<std::int64_t>(t.int64_data().begin(), t.int64_data().end());
        if (!fits(v.size()) || (raw && t.raw_data().size() % 8))
            return std::nullopt;
        return shaped<std::int64_t>(v, scalar);
    }
    case ::onnx::TensorProto_DataType_INT32:
    case ::onnx::TensorProto_DataType_INT8:
    case ::onnx::TensorProto_DataType_UINT8:
    case ::onnx::TensorProto_DataType_BOOL: {
        std::vector<std::int64_t> v;
        if (raw && t.data_type() == ::onnx::TensorProto_DataType_INT32) {
            if (t.raw_data().size() % 4)
                return std::nullopt;
            for (auto x : littleEndian<std::int32_t>(t.raw_data()))
                v.push_back(x);
        } else if (raw && t.data_type() == ::onnx::TensorProto_DataType_INT8) {
            for (auto x : littleEndian<std::int8_t>(t.raw_data()))
                v.push_back(x);
        } else if (raw) {
            for (auto x : littleEndian<std::uint8_t>(t.raw_data()))
                v.push_back(x);
        } else {
            v.assign(t.int32_data().begin(), t.int32_data().end());
        }
        if (!fits(v.size()))
            return std::nullopt;
        return shaped<std::int64_t>(v, scalar);
    }
    case ::onnx::TensorProto_DataType_FLOAT: {
        auto v = raw ? littleEndian<float>(t.raw_data())
                     : std::vector<float>(t.float_data().begin(), t.float_data().end());
        if (!fits(v.size()) || (raw && t.raw_data().size() % 4))
            return std::nullopt;
        return shaped<double>(v, scalar);
    }
    case ::onnx::TensorProto_DataType_DOUBLE: {
        auto v = raw ? littleEndian<double>(t.raw_data())
                     : std::vector<double>(t.double_data().begin(), t.double_data().end());
        if (!fits(v.size()) || (raw && t.raw_data().size() % 8))
            return std::nullopt;
        return shaped<double>(v, scalar);
    }
    default:
        return std::nullopt;
    }
}

std::optional<std::vector<std::int64_t>> tensorInts(const ::onnx::TensorProto &tensor)
{
    const auto v = tensorValue(tensor);
    if (!v)
        return std::nullopt;
    if (const auto *i = std::get_if<std::int64_t>(&*v))
        return std::vector<std::int64_t>{*i};
    if (const auto *l = std::get_if<std::vector<std::int64_t>>(&*v))
        return *l;
    return std::nullopt;
}

} // namespace tapestry::io::onnximport
