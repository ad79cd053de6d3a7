#include "io/onnx/mappedfile.h"

#include "ir/error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tapestry::io::onnximport {

MappedFile::MappedFile(const std::string &path)
{
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        throw TapestryError(Error{path, {}, std::string("cannot open file: ") + std::strerror(errno)});
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        throw TapestryError(Error{path, {}, "not a regular file"});
    }
    m_size = static_cast<std::size_t>(st.st_size);
    if (m_size > 0) {
        void *p = ::mmap(nullptr, m_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const int err = errno;
            ::close(fd);
            throw TapestryError(Error{path, {}, std::string("cannot map file: ") + std::strerror(err)});
        }
        m_data = static_cast<const std::uint8_t *>(p);
    }
    // The mapping stays valid after the descriptor is closed.
    ::close(fd);
}

MappedFile::~MappedFile()
{
    if (m_data)
        ::munmap(const_cast<std::uint8_t *>(m_data), m_size);
}

} // namespace tapestry::io::onnximport
