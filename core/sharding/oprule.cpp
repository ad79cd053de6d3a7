#include "sharding/oprule.h"

#include <functional>

namespace tapestry::sharding {

int DimMap::addLoop(bool canSplit, bool isContracted)
{
    splittable.push_back(canSplit);
    contracted.push_back(isContracted);
    return loopCount() - 1;
}

int DimMap::inputDim(std::size_t i, int loop) const
{
    for (std::size_t d = 0; d < inputs[i].size(); ++d)
        if (inputs[i][d] == loop)
            return static_cast<int>(d);
    return -1;
}

int DimMap::outputDim(std::size_t o, int loop) const
{
    for (std::size_t d = 0; d < outputs[o].size(); ++d)
        if (outputs[o][d] == loop)
            return static_cast<int>(d);
    return -1;
}

std::string DimMap::toString() const
{
    auto letters = [&](const std::vector<int> &dims) {
        std::string s;
        for (int l : dims) {
            if (l < 0)
                s += '1';
            else {
                const char c = static_cast<char>('a' + l % 26);
                s += splittable[static_cast<std::size_t>(l)] ? c : static_cast<char>(c - 'a' + 'A');
            }
        }
        return s;
    };
    std::string s;
    for (std::size_t i = 0; i < inputs.size(); ++i)
        s += (i ? "," : "") + (i < ignored.size() && ignored[i] ? std::string("~") : letters(inputs[i]));
    s += "->";
    for (std::size_t o = 0; o < outputs.size(); ++o)
        s += (o ? "," : "") + letters(outputs[o]);
    return s;
}

DimMap emptyDimMap(const ir::Op &op)
{
    DimMap m;
    m.inputs.resize(op.inputs.size());
    m.outputs.resize(op.outputs.size());
    m.ignored.assign(op.inputs.size(), false);
    m.additive.assign(op.inputs.size(), false);
    return m;
}

std::int64_t elementCount(const ir::Shape &shape)
{
    std::int64_t n = 1;
    for (auto d : shape)
        n *= d;
    return n;
}

std::size_t normaliseAxis(std::int64_t axis, std::size_t rank)
{
    return static_cast<std::size_t>(axis < 0 ? axis + static_cast<std::int64_t>(rank) : axis);
}

std::optional<DimMap> opRule(const ir::Graph &graph, const ir::Op &op)
{
    using Rule = std::function<std::optional<DimMap>(const ir::Graph &, const ir::Op &)>;
    static const std::map<std::string, Rule> kRules = [] {
        std::map<std::string, Rule> rules{
            {"MatMul", matmulRule},
            {"Gemm", gemmRule},
            {"Einsum", einsumRule},
            {"Conv", convRule},
            {"Reshape", reshapeRule},
            {"Flatten", reshapeRule},
            {"Squeeze", reshapeRule},
            {"Unsqueeze", reshapeRule},
            {"Transpose", transposeRule},
            {"Expand", expandRule},
            {"Softmax", normRule},
            {"LogSoftmax", normRule},
            {"LayerNormalization", normRule},
            {"RMSNorm", normRule},
            {"SimplifiedLayerNormalization", normRule},
            {"ReduceSum", reduceRule},
            {"ReduceMean", reduceRule},
            {"ReduceMax", reduceRule},
            {"Gather", gatherRule},
            {"Concat", concatRule},
            {"Split", splitRule},
            {"Slice", sliceRule},
            {"SoftmaxCrossEntropyLoss", lossRule},
            {"TopK", topKRule},
            {"MoEDispatch", moeRule},
            {"MoECombine", moeRule},
            {"BatchNormalization", batchNormRule},
            {"MaxPool", poolRule},
            {"AveragePool", poolRule},
            {"LpPool", poolRule},
            {"GlobalAveragePool", globalPoolRule},
            {"GlobalMaxPool", globalPoolRule},
            {"Pad", padRule},
            {"ScatterND", scatterNDRule},
            {"InstanceNormalization", instanceNormRule},
            {"ConstantOfShape", generatorRule},
            {"Range", generatorRule},
        };
        for (const char *t : {"Add", "Sub", "Mul", "Div", "Pow", "Relu", "Gelu", "Silu", "Tanh", "Sigmoid", "Erf",
                              "Neg", "Sqrt", "Exp", "Dropout", "Identity", "Cast", "Where", "Max", "Min", "Abs",
                              "Reciprocal", "FastGelu", "LeakyRelu", "Clip", "Softplus", "HardSigmoid", "HardSwish",
                              "Log", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Equal", "Less", "Greater",
                              "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor", "IsNaN", "IsInf"})
            rules.emplace(t, elementwiseRule);
        return rules;
    }();
    auto it = kRules.find(op.type);
    if (it == kRules.end())
        return std::nullopt;
    return it->second(graph, op);
}

} // namespace tapestry::sharding
