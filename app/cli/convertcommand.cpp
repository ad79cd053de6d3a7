#include "cli/command.h"
#include "cli/modelargs.h"

#include "io/files.h"
#include "io/jsonmodel.h"

#include <iostream>

namespace tapestry::cli {

namespace {

int runConvert(const Args &args)
{
    if (args.positional.size() != 1 || !args.value("-o")) {
        std::cerr << "tapestry-cli convert: expected MODEL and -o FILE (try 'tapestry-cli convert --help')\n";
        return BadInput;
    }
    const auto graph = loadModelFromArgs(args.positional[0], args);
    const std::string out = *args.value("-o");
    io::writeOutputFile(out, io::writeModelJson(graph));
    return Ok;
}

Registration convert([] {
    Command c;
    c.name = "convert";
    c.usage = "convert MODEL -o FILE.json [--batch B] [--seq S]";
    c.summary = "save any model (zoo preset, ONNX, config.json) as a tapestry.model JSON file";
    c.details = "The file keeps structure, names and shapes (no weights); shapes are bound with\n"
                "--batch/--seq. Use -o - to print to stdout.\n";
    c.options = modelOptions();
    c.options.push_back({"-o", "FILE", "where to write the model (written whole or not at all; - for stdout)"});
    c.run = runConvert;
    return c;
}());

} // namespace
} // namespace tapestry::cli
