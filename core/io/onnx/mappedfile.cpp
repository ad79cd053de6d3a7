#include "io/onnx/mappedfile.h"

#include "io/files.h"
#include "ir/error.h"

#include <cerrno>
#include <cstring>
#include <sys/mman.h>

namespace tapestry::io::onnximport {

MappedFile::MappedFile(const std::string &path)
{
    const InputFile file(path);
    m_size = static_cast<std::size_t>(file.size());
    if (m_size > 0) {
        void *p = ::mmap(nullptr, m_size, PROT_READ, MAP_PRIVATE, file.descriptor(), 0);
        if (p == MAP_FAILED)
            throw TapestryError(Error{path, {}, std::string("cannot map file: ") + std::strerror(errno)});
        m_data = static_cast<const std::uint8_t *>(p);
    }
    // The mapping stays valid after the descriptor is closed.
}

MappedFile::~MappedFile()
{
    if (m_data)
        ::munmap(const_cast<std::uint8_t *>(m_data), m_size);
}

} // namespace tapestry::io::onnximport
