#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tapestry::io {

// Every file Tapestry reads is opened through InputFile and every file it
// writes goes through writeOutputFile: the CLI's commands, the studio's saves
// and image exports, the autosave.

// The most bytes a JSON input (a model, a plan, a config.json, a mesh
// profile) may have; the parsed document takes several times its size.
inline constexpr std::int64_t kMaxJsonInputBytes = std::int64_t{1} << 30;

// A regular file open for reading. The open never blocks (a FIFO named
// model.onnx is refused, not waited on), and anything but a regular file (a
// directory, a FIFO, a device, a socket) is refused. Throws TapestryError
// naming the path and the problem.
class InputFile {
public:
    explicit InputFile(const std::string &path);
    ~InputFile();
    InputFile(const InputFile &) = delete;
    InputFile &operator=(const InputFile &) = delete;

    int descriptor() const { return m_fd; }
    std::int64_t size() const { return m_size; }

private:
    int m_fd = -1;
    std::int64_t m_size = 0;
};

// The whole of a regular file of at most kMaxJsonInputBytes, through
// InputFile. Throws TapestryError naming the path.
std::string readFile(const std::string &path);

// Writes `contents` so that no one ever sees a half-written file:
// - "-" writes to standard output;
// - a new or a regular file is replaced by renaming a complete temporary file
//   written beside it (an existing file's permissions are kept);
// - a symbolic link is followed, and its target replaced the same way, as
//   editors do;
// - anything else (a directory, a device such as /dev/full or /dev/stdout, a
//   FIFO) is refused, and left as it was.
// Throws TapestryError naming the path and the problem (a full disk, a
// read-only directory, ...); the temporary file is removed then.
void writeOutputFile(const std::string &path, std::string_view contents);

// What a stat mode is, for messages: "a directory", "a FIFO", ...
std::string fileKindText(unsigned mode);

} // namespace tapestry::io
