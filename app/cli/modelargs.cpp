#include "cli/modelargs.h"

#include "io/modelloader.h"
#include "ir/error.h"
#include "ir/validate.h"

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
    return io::loadModel(model, options);
}

std::string shapeString(const ir::Shape &shape)
{
    return ir::shapeToString(shape);
}

} // namespace tapestry::cli
