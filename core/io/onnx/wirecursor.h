#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace tapestry::io::onnximport {

using Bytes = std::span<const std::uint8_t>;

// Raised while walking the file; the loader turns it into a TapestryError
// naming the file. The kind tells a file cut short (a field running past the
// end) from bytes that are not an ONNX model and from valid ONNX that uses a
// feature Tapestry does not read.
struct WireError {
    enum Kind { Malformed, Truncated, Unsupported };
    std::string problem;
    std::uint64_t offset = 0;
    Kind kind = Malformed;
};

// One field of a protobuf message as it lies in the file.
struct WireField {
    int number = 0;
    int wireType = 0;           // google::protobuf::internal::WireFormatLite::WireType
    std::uint64_t varint = 0;   // value of a varint, fixed32 or fixed64 field
    Bytes payload;              // contents of a length-delimited field
    Bytes whole;                // the field's bytes including its tag
};

// Walks the fields of one message over a byte range with 64-bit offsets.
// protobuf's CodedInputStream counts in int and stops at 2 GB, so the walk
// itself is done here and CodedInputStream only decodes each varint; a
// length-delimited field is returned as a view and never copied, which is how
// weight bytes are skipped without being read.
class WireCursor {
public:
    // `base` is the offset of `bytes` in the file, for error messages.
    // `wholeFile` says the range ends where the file ends, so a field running
    // past it means the file was cut short; inside a message it means the
    // message is malformed.
    WireCursor(Bytes bytes, std::uint64_t base, bool wholeFile = false);

    bool atEnd() const { return m_pos == m_bytes.size(); }
    WireField next();
    std::uint64_t fileOffset() const { return m_base + m_pos; }

private:
    std::uint64_t readVarint(const char *what);

    Bytes m_bytes;
    std::uint64_t m_base;
    bool m_wholeFile;
    std::size_t m_pos = 0;
};

// File offset of `inner`, a view inside `outer` that starts at `outerBase`.
std::uint64_t offsetOf(Bytes inner, Bytes outer, std::uint64_t outerBase);

} // namespace tapestry::io::onnximport
