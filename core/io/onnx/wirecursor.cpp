#include "io/onnx/wirecursor.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>

namespace tapestry::io::onnximport {

using google::protobuf::internal::WireFormatLite;

WireCursor::WireCursor(Bytes bytes, std::uint64_t base, bool wholeFile)
    : m_bytes(bytes), m_base(base), m_wholeFile(wholeFile)
{
}

std::uint64_t WireCursor::readVarint(const char *what)
{
    const std::size_t left = m_bytes.size() - m_pos;
    // A varint takes at most 10 bytes; decoding it from a window of that
    // size keeps CodedInputStream's int-sized counters out of the 64-bit walk.
    const int window = static_cast<int>(std::min<std::size_t>(left, 10));
    google::protobuf::io::CodedInputStream in(m_bytes.data() + m_pos, window);
    std::uint64_t value = 0;
    if (!in.ReadVarint64(&value)) {
        const bool cut = m_wholeFile && left < 10 &&
                         (left == 0 || (m_bytes[m_bytes.size() - 1] & 0x80) != 0);
        throw WireError{std::string("malformed ") + what, fileOffset(),
                        cut ? WireError::Truncated : WireError::Malformed};
    }
    m_pos += static_cast<std::size_t>(in.CurrentPosition());
    return value;
}

WireField WireCursor::next()
{
    const std::size_t start = m_pos;
    const std::uint64_t tag = readVarint("field tag");
    if (tag == 0 || tag > 0xffffffffu)
        throw WireError{"invalid field tag", m_base + start};
    WireField f;
    f.number = WireFormatLite::GetTagFieldNumber(static_cast<std::uint32_t>(tag));
    f.wireType = WireFormatLite::GetTagWireType(static_cast<std::uint32_t>(tag));
    if (f.number == 0)
        throw WireError{"field number 0", m_base + start};
    auto take = [&](std::uint64_t n) {
        if (n > m_bytes.size() - m_pos)
            throw WireError{"field " + std::to_string(f.number) + " needs " + std::to_string(n) + " bytes, " +
                                std::to_string(m_bytes.size() - m_pos) + " left,",
                            m_base + start, m_wholeFile ? WireError::Truncated : WireError::Malformed};
        Bytes b = m_bytes.subspan(m_pos, static_cast<std::size_t>(n));
        m_pos += static_cast<std::size_t>(n);
        return b;
    };
    switch (f.wireType) {
    case WireFormatLite::WIRETYPE_VARINT:
        f.varint = readVarint("varint");
        break;
    case WireFormatLite::WIRETYPE_FIXED64: {
        Bytes b = take(8);
        for (int i = 7; i >= 0; --i)
            f.varint = (f.varint << 8) | b[static_cast<std::size_t>(i)];
        break;
    }
    case WireFormatLite::WIRETYPE_FIXED32: {
        Bytes b = take(4);
        for (int i = 3; i >= 0; --i)
            f.varint = (f.varint << 8) | b[static_cast<std::size_t>(i)];
        break;
    }
    case WireFormatLite::WIRETYPE_LENGTH_DELIMITED:
        f.payload = take(readVarint("length"));
        break;
    default:
        // Groups (wire types 3 and 4) are not used by ONNX; 6 and 7 do not exist.
        throw WireError{"unsupported wire type " + std::to_string(f.wireType) + " in field " +
                            std::to_string(f.number),
                        m_base + start};
    }
    f.whole = m_bytes.subspan(start, m_pos - start);
    return f;
}

std::uint64_t offsetOf(Bytes inner, Bytes outer, std::uint64_t outerBase)
{
    return outerBase + static_cast<std::uint64_t>(inner.data() - outer.data());
}

} // namespace tapestry::io::onnximport
