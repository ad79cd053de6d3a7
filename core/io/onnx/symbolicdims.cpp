#include "io/onnx/symbolicdims.h"

#include "ir/error.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace tapestry::io::onnximport {

namespace {

std::string lower(std::string_view s)
{
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
}

// The model's own maximum sequence length, where its metadata records one
// under a name Hugging Face configs and exporters use.
std::optional<std::int64_t> recordedMaxSequence(const ::onnx::ModelProto &model)
{
    static const std::array<std::string_view, 5> kKeys{
        "max_position_embeddings", "n_positions", "max_sequence_length", "max_seq_len", "n_ctx"};
    for (const auto &entry : model.metadata_props()) {
        if (std::find(kKeys.begin(), kKeys.end(), entry.key()) == kKeys.end())
            continue;
        try {
            std::size_t used = 0;
            const long long v = std::stoll(entry.value(), &used);
            if (used == entry.value().size() && v > 0)
                return v;
        } catch (const std::exception &) {
        }
    }
    return std::nullopt;
}

} // namespace

DimKind classifyDim(std::string_view name)
{
    const std::string n = lower(name);
    if (n.find("batch") != std::string::npos || n == "n" || n == "b" || n == "bs" || n == "bsz")
        return DimKind::Batch;
    if (n.find("seq") != std::string::npos || n.find("len") != std::string::npos || n == "s" ||
        n == "t")
        return DimKind::Sequence;
    return DimKind::Other;
}

void bindSymbolicDims(::onnx::ModelProto &model, const LoadOptions &options, const std::string &input)
{
    auto &graph = *model.mutable_graph();
    std::unordered_set<std::string> initializers;
    for (const auto &t : graph.initializer())
        initializers.insert(t.name());

    const std::int64_t batch = options.batch.value_or(1);
    const std::optional<std::int64_t> seq = options.seq ? options.seq : recordedMaxSequence(model);

    auto bind = [&](const ::onnx::TensorShapeProto_Dimension &d) -> std::optional<std::int64_t> {
        switch (classifyDim(d.dim_param())) {
        case DimKind::Batch:
            return batch;
        case DimKind::Sequence:
            return seq;
        case DimKind::Other:
            break;
        }
        return std::nullopt;
    };

    std::unordered_map<std::string, std::int64_t> bound;
    bool batchBound = false, seqBound = false;
    std::string fixedInputs;  // "src [1, 512, 64]": what a refusal names
    for (auto &in : *graph.mutable_input()) {
        if (initializers.count(in.name()) || !in.type().has_tensor_type() ||
            !in.type().tensor_type().has_shape())
            continue;
        auto &dims = *in.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim();
        if (fixedInputs.size() < 120) {
            std::string shape;
            for (const auto &d : dims)
                shape += (shape.empty() ? "" : ", ") + (d.has_dim_value() ? std::to_string(d.dim_value()) : d.dim_param());
            fixedInputs += (fixedInputs.empty() ? "" : ", ") + in.name() + " [" + shape + "]";
        }
        for (int i = 0; i < dims.size(); ++i) {
            auto &d = dims[i];
            const std::string where = "input '" + in.name() + "'";
            if (d.has_dim_value())
                continue;
            if (!d.has_dim_param())
                throw TapestryError(Error{input, where, "dim " + std::to_string(i) + " has neither a size nor a name"});
            const std::string name = d.dim_param();
            if (auto v = bind(d)) {
                (classifyDim(name) == DimKind::Batch ? batchBound : seqBound) = true;
                bound[name] = *v;
                d.set_dim_value(*v);
                continue;
            }
            if (classifyDim(name) == DimKind::Sequence)
                throw TapestryError(Error{input, where,
                                          "symbolic dim '" + name +
                                              "' is the sequence length and the model records no "
                                              "maximum: pass --seq"});
            throw TapestryError(Error{input, where,
                                      "symbolic dim '" + name +
                                          "' is not bound (Tapestry binds dims named like batch "
                                          "with --batch and seq/sequence/len with --seq)"});
        }
    }

    // An option the model has no dim for would be silently ignored: the
    // user asked for a size the plan would not have.
    auto refuse = [&](const char *option, const char *dim) {
        throw TapestryError(Error{input, option,
                                  std::string("the model's inputs have no symbolic ") + dim + " dim to bind (" +
                                      fixedInputs + "); export it with a dynamic " + dim +
                                      " axis (torch.onnx.export's dynamic_axes) to set it"});
    };
    if (options.batch && !batchBound)
        refuse("--batch", "batch");
    if (options.seq && !seqBound)
        refuse("--seq", "sequence");
    // A symbol names the same size wherever it appears, so declared shapes
    // that use an input's symbol are bound with it and agree with what
    // inference derives. Other symbols stay; inference replaces them.
    auto bindDeclared = [&](::onnx::ValueInfoProto &vi) {
        if (!vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape())
            return;
        for (auto &d : *vi.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim())
            if (d.has_dim_param())
                if (auto it = bound.find(d.dim_param()); it != bound.end())
                    d.set_dim_value(it->second);
    };
    for (auto &vi : *graph.mutable_output())
        bindDeclared(vi);
    for (auto &vi : *graph.mutable_value_info())
        bindDeclared(vi);
}

} // namespace tapestry::io::onnximport
