// libFuzzer target for the Hugging Face config.json reader and the zoo
// builders behind it: any bytes must give a graph or one TapestryError, never
// a crash, a hang, a leak or another exception. Sizes that make no model that
// fits in memory must be refused, not allocated (the test runs with
// -rss_limit_mb). A graph it builds must pass ir::validate.
#include "io/hfconfig.h"
#include "ir/error.h"
#include "ir/validate.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    using namespace tapestry;
    const std::string text(reinterpret_cast<const char *>(data), size);
    // What the model loader asks of every .json before choosing its reader.
    io::isHfConfig(text);
    ir::Graph graph;
    try {
        graph = io::readHfConfig(text, "config.json", {});
    } catch (const TapestryError &) {
        return 0;
    }
    if (auto problem = ir::validate(graph, "config.json")) {
        std::fprintf(stderr, "fuzz_hfconfig: the built graph is not valid: %s\n", problem->toString().c_str());
        std::abort();
    }
    return 0;
}
