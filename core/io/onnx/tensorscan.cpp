#include "io/onnx/tensorscan.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <climits>
#include <string>

namespace tapestry::io::onnximport {

namespace {

using google::protobuf::internal::WireFormatLite;

// TensorProto field numbers (onnx.proto).
enum : int { kDims = 1, kDataType = 2, kName = 8, kDataLocation = 14 };

void readPackedDims(Bytes payload, std::uint64_t base, ::onnx::TensorProto &tensor)
{
    if (payload.size() > INT_MAX)
        throw WireError{"tensor dims are larger than 2 GB", base};
    google::protobuf::io::CodedInputStream in(payload.data(), static_cast<int>(payload.size()));
    while (in.BytesUntilLimit() > 0) {
        std::uint64_t d = 0;
        if (!in.ReadVarint64(&d))
            throw WireError{"malformed tensor dims", base};
        tensor.add_dims(static_cast<std::int64_t>(d));
    }
}

// Element count when every dim is known and small; -1 otherwise.
std::int64_t smallElementCount(const ::onnx::TensorProto &tensor)
{
    std::int64_t n = 1;
    for (auto d : tensor.dims()) {
        if (d < 0 || d > kSmallTensorElements)
            return -1;
        n *= d;
        if (n > kSmallTensorElements)
            return -1;
    }
    return n;
}

} // namespace

bool scanTensor(Bytes message, std::uint64_t base, ::onnx::TensorProto &tensor)
{
    tensor.Clear();
    bool external = false;
    WireCursor cursor(message, base);
    while (!cursor.atEnd()) {
        const std::uint64_t at = cursor.fileOffset();
        const WireField f = cursor.next();
        if (f.number == kDims && f.wireType == WireFormatLite::WIRETYPE_VARINT)
            tensor.add_dims(static_cast<std::int64_t>(f.varint));
        else if (f.number == kDims && f.wireType == WireFormatLite::WIRETYPE_LENGTH_DELIMITED)
            readPackedDims(f.payload, at, tensor);
        else if (f.number == kDataType && f.wireType == WireFormatLite::WIRETYPE_VARINT)
            tensor.set_data_type(static_cast<std::int32_t>(f.varint));
        else if (f.number == kName && f.wireType == WireFormatLite::WIRETYPE_LENGTH_DELIMITED)
            tensor.set_name(reinterpret_cast<const char *>(f.payload.data()), f.payload.size());
        else if (f.number == kDataLocation && f.wireType == WireFormatLite::WIRETYPE_VARINT)
            external = f.varint == ::onnx::TensorProto_DataLocation_EXTERNAL;
    }
    if (!external && smallElementCount(tensor) >= 0 && message.size() <= 64 * 1024) {
        // Parsed from the same bytes again, whole: at most a few hundred bytes.
        if (!tensor.ParseFromArray(message.data(), static_cast<int>(message.size())))
            throw WireError{"malformed tensor '" + tensor.name() + "'", base};
        return true;
    }
    tensor.set_data_location(::onnx::TensorProto_DataLocation_EXTERNAL);
    return false;
}

} // namespace tapestry::io::onnximport
