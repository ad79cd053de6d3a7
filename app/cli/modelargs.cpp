#include "cli/modelargs.h"

#include "io/modelloader.h"
#include "ir/error.h"
#include "ir/validate.h"

#include <iostream>

namespace tapestry::cli {

ir::Graph loadModelFromArgs(const std::string &model, const Args &args)
{
    io::LoadOptions options;
    for (const char *name : {"--batch", "--seq"}) {
        if (auto v = args.integer(name)) {
            if (*v <= 0)
                throw TapestryError(Error{name, {}, "expects a positive integer"});
            (std::string(name) == "--batch" ? options.batch : options.seq) = *v;
        }
    }
    // What the loader guessed goes to stderr, so that --json output and
    // files written to stdout stay clean.
    options.note = [&model](const std::string &line) { std::cerr << model << ": note: " << line << "\n"; };
    return io::loadModel(model, options);
}

std::string shapeString(const ir::Shape &shape)
{
    return ir::shapeToString(shape);
}

} // namespace tapestry::cli
