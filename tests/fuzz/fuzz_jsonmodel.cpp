// libFuzzer target for the tapestry.model reader: any bytes must give a
// graph or one TapestryError, never a crash, a hang, a leak or another
// exception. A graph it accepts must write and read back to the same text.
#include "io/jsonmodel.h"
#include "ir/error.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    using namespace tapestry;
    const std::string text(reinterpret_cast<const char *>(data), size);
    ir::Graph graph;
    try {
        graph = io::readModelJson(text, "fuzz.json");
    } catch (const TapestryError &) {
        return 0;
    }
    // Outside the try: a graph the reader accepted whose text it cannot read
    // back is a finding, reported by libFuzzer as an uncaught exception.
    const std::string written = io::writeModelJson(graph);
    if (io::writeModelJson(io::readModelJson(written, "written.json")) != written) {
        std::fputs("fuzz_jsonmodel: the written model reads back to another text\n", stderr);
        std::abort();
    }
    return 0;
}
