#include "io/files.h"

#include "ir/error.h"
#include "ir/sizes.h"

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <iostream>
#include <random>
#include <sys/stat.h>
#include <unistd.h>

namespace tapestry::io {

namespace {

[[noreturn]] void fail(const std::string &path, const std::string &problem)
{
    throw TapestryError(Error{path, {}, problem});
}

std::string systemError(const char *what, int err)
{
    return std::string(what) + ": " + std::strerror(err);
}

// Writes all of `data` to `fd`; false with errno set when a write fails.
bool writeAll(int fd, std::string_view data)
{
    while (!data.empty()) {
        const ssize_t n = ::write(fd, data.data(), data.size());
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return false;
        }
        data.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
}

std::string directoryOf(const std::string &path)
{
    const auto slash = path.rfind('/');
    if (slash == std::string::npos)
        return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
}

std::string baseNameOf(const std::string &path)
{
    const auto slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Where the bytes for `path` go: `path` itself, or the file a symbolic link
// at `path` leads to. Refuses what is there and is not a regular file.
std::string writeTarget(const std::string &path)
{
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
        if (errno == ENOENT)
            return path;
        fail(path, systemError("cannot write file", errno));
    }
    std::string target = path;
    if (S_ISLNK(st.st_mode)) {
        char resolved[PATH_MAX];
        if (!::realpath(path.c_str(), resolved)) {
            if (errno == ENOENT)
                fail(path, "is a symbolic link to a file that does not exist; give its target or a new name");
            fail(path, systemError("cannot follow symbolic link", errno));
        }
        target = resolved;
        if (::stat(target.c_str(), &st) != 0)
            fail(path, systemError("cannot write file", errno));
    }
    if (!S_ISREG(st.st_mode))
        fail(path, "is " + fileKindText(st.st_mode) +
                       ", not a regular file; give a file name, or '-' for standard output");
    return target;
}

} // namespace

std::string fileKindText(unsigned mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISLNK(mode))
        return "a symbolic link";
    return "not a regular file";
}

InputFile::InputFile(const std::string &path)
{
    // O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer.
    m_fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (m_fd < 0)
        fail(path, systemError("cannot open file", errno));
    struct stat st {};
    if (::fstat(m_fd, &st) != 0) {
        const int err = errno;
        ::close(m_fd);
        fail(path, systemError("cannot read file", err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(m_fd);
        fail(path, "is " + fileKindText(st.st_mode) + ", not a regular file");
    }
    // Reads of a regular file never block; clear the flag all the same so
    // the descriptor behaves as any other.
    const int flags = ::fcntl(m_fd, F_GETFL);
    if (flags >= 0)
        ::fcntl(m_fd, F_SETFL, flags & ~O_NONBLOCK);
    m_size = static_cast<std::int64_t>(st.st_size);
}

InputFile::~InputFile()
{
    if (m_fd >= 0)
        ::close(m_fd);
}

std::string readFile(const std::string &path)
{
    const InputFile file(path);
    if (file.size() > kMaxJsonInputBytes)
        fail(path, "is " + ir::limitBytesText(file.size()) + "; Tapestry reads JSON files of at most " +
                       ir::limitBytesText(kMaxJsonInputBytes));
    std::string text(static_cast<std::size_t>(file.size()), '\0');
    std::size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = ::read(file.descriptor(), text.data() + done, text.size() - done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            fail(path, systemError("read error", errno));
        }
        if (n == 0)
            break;  // the file shrank while it was read
        done += static_cast<std::size_t>(n);
    }
    text.resize(done);
    return text;
}

void writeOutputFile(const std::string &path, std::string_view contents)
{
    if (path.empty())
        fail("-o", "an empty file name");
    if (path == "-") {
        std::cout.flush();  // what the command printed before comes first
        std::fflush(stdout);
        if (!writeAll(STDOUT_FILENO, contents))
            fail("standard output", systemError("write failed", errno));
        return;
    }
    const std::string target = writeTarget(path);
    struct stat existing {};
    const bool replacing = ::stat(target.c_str(), &existing) == 0;

    // The temporary file is created, never opened if it exists: a name
    // planted beside the target (a link elsewhere) is skipped, not written
    // through. The mode is 0666 less the umask, as for any new file.
    static std::atomic<unsigned> counter{0};
    std::random_device random;
    const std::string stem = directoryOf(target) + "/." + baseNameOf(target) + ".tmp-" + std::to_string(::getpid()) + "-";
    std::string tmp;
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
        tmp = stem + std::to_string(counter++) + "-" + std::to_string(random() % 1000000);
        fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
        if (fd < 0 && errno != EEXIST)
            fail(path, systemError("cannot write file", errno));
    }
    if (fd < 0)
        fail(path, "cannot create a temporary file beside it");
    auto abandon = [&](const char *what, int err) {
        ::close(fd);
        ::unlink(tmp.c_str());
        fail(path, systemError(what, err));
    };
    if (replacing && ::fchmod(fd, existing.st_mode & 07777) != 0)
        abandon("cannot keep the file's permissions", errno);
    if (!writeAll(fd, contents))
        abandon("write failed", errno);
    if (::fsync(fd) != 0)
        abandon("write failed", errno);
    if (::close(fd) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        fail(path, systemError("write failed", err));
    }
    if (::rename(tmp.c_str(), target.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        fail(path, systemError("cannot put the file in place", err));
    }
}

} // namespace tapestry::io
