#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace tapestry::io::onnximport {

// A file mapped read-only into memory. Pages are read by the kernel only when
// touched, so the weight bytes that the ONNX walk skips never count toward
// the loader's memory. Throws TapestryError naming the path when the file
// cannot be opened or mapped.
class MappedFile {
public:
    explicit MappedFile(const std::string &path);
    ~MappedFile();
    MappedFile(const MappedFile &) = delete;
    MappedFile &operator=(const MappedFile &) = delete;

    std::span<const std::uint8_t> bytes() const { return {m_data, m_size}; }

private:
    const std::uint8_t *m_data = nullptr;
    std::size_t m_size = 0;
};

} // namespace tapestry::io::onnximport
