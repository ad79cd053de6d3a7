// libFuzzer target for the ONNX loader: any bytes must give a graph or one
// TapestryError, never a crash, a hang, a leak or another exception.
#include "io/onnx/onnxloader.h"
#include "ir/error.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size)
{
    tapestry::io::LoadOptions options;
    options.seq = 16;  // so symbolic sequence dims bind and the loader goes past them
    try {
        tapestry::io::loadOnnxFromBuffer({data, size}, "fuzz.onnx", options);
    } catch (const tapestry::TapestryError &) {
    }
    return 0;
}
