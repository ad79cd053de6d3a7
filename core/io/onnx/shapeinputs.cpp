#include "io/onnx/shapeinputs.h"

#include <map>
#include <vector>

namespace tapestry::io::onnximport {

namespace {

using Table = std::map<std::string, std::vector<ShapeInput>, std::less<>>;

// The same table is written out in samples/onnx/export.py, which computes
// the samples' expected op counts independently.
const Table &table()
{
    static const Table kTable = [] {
        Table t{
            {"Reshape", {{1, "shape", true}}},
            {"Expand", {{1, "shape", true}}},
            {"ConstantOfShape", {{0, "shape", true}}},
            {"Tile", {{1, "repeats", false}}},
            {"Slice", {{1, "starts", false}, {2, "ends", false}, {3, "axes", false}, {4, "steps", false}}},
            {"Range", {{0, "start", false}, {1, "limit", false}, {2, "delta", false}}},
            {"Unsqueeze", {{1, "axes", false}}},
            {"Squeeze", {{1, "axes", false}}},
            {"Split", {{1, "split", false}}},
            {"Pad", {{1, "pads", false}, {2, "constant_value", false}, {3, "axes", false}}},
            {"Resize", {{1, "roi", false}, {2, "scales", false}, {3, "sizes", false}}},
            {"Upsample", {{1, "scales", false}}},
            {"TopK", {{1, "k", false}}},
            {"OneHot", {{1, "depth", false}}},
            {"CumSum", {{1, "axis", false}}},
            {"Clip", {{1, "min", false}, {2, "max", false}}},
            {"Dropout", {{1, "ratio", false}, {2, "training_mode", false}}},
            {"Trilu", {{1, "k", false}}},
        };
        // Reductions take their axes as an input from opset 13 (ReduceSum)
        // or 18 (the rest).
        for (const char *r : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                              "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                              "ReduceSumSquare"})
            t.emplace(r, std::vector<ShapeInput>{{1, "axes", false}});
        return t;
    }();
    return kTable;
}

} // namespace

std::span<const ShapeInput> shapeInputs(const std::string &opType)
{
    auto it = table().find(opType);
    if (it == table().end())
        return {};
    return it->second;
}

const ShapeInput *findShapeInput(const std::string &opType, int slot)
{
    for (const auto &s : shapeInputs(opType))
        if (s.slot == slot)
            return &s;
    return nullptr;
}

} // namespace tapestry::io::onnximport
