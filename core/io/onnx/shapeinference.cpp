#include "io/onnx/shapeinference.h"

#include "io/onnx/tensorvalue.h"
#include "ir/einsum.h"
#include "ir/error.h"

#include "onnx/defs/schema.h"
#include "onnx/shape_inference/implementation.h"

#include <algorithm>

namespace tapestry::io::onnximport {

namespace {

namespace si = ::onnx::shape_inference;

// ONNX error text is multi-line; the user sees one line.
std::string oneLine(std::string s)
{
    std::replace(s.begin(), s.end(), '\n', ' ');
    while (!s.empty() && s.back() == ' ')
        s.pop_back();
    return s;
}

// Moves initializers without data to the graph inputs, typed by their dims.
void exposeDatalessInitializers(::onnx::GraphProto &graph, const std::unordered_set<std::string> &dataless)
{
    if (dataless.empty())
        return;
    std::unordered_set<std::string> inputs;
    for (const auto &in : graph.input())
        inputs.insert(in.name());
    google::protobuf::RepeatedPtrField<::onnx::TensorProto> kept;
    for (auto &t : *graph.mutable_initializer()) {
        if (!dataless.count(t.name())) {
            *kept.Add() = std::move(t);
            continue;
        }
        if (inputs.count(t.name()))
            continue;
        auto &in = *graph.add_input();
        in.set_name(t.name());
        auto &tensorType = *in.mutable_type()->mutable_tensor_type();
        tensorType.set_elem_type(t.data_type());
        auto &shape = *tensorType.mutable_shape();
        for (auto d : t.dims())
            shape.add_dim()->set_dim_value(d);
    }
    graph.mutable_initializer()->Swap(&kept);
}

std::string normalDomain(const std::string &domain)
{
    return domain == "ai.onnx" ? std::string() : domain;
}

class Driver {
public:
    Driver(::onnx::ModelProto &model, const std::string &input)
        : m_model(model), m_graph(*model.mutable_graph()), m_input(input)
    {
        for (const auto &o : model.opset_import())
            m_opsets[normalDomain(o.domain())] = static_cast<int>(o.version());
        for (const auto &f : model.functions())
            m_functions[f.domain() + ":" + f.name()] = &f;
        for (auto &vi : *m_graph.mutable_input())
            m_types.emplace(vi.name(), vi.mutable_type());
        for (auto &vi : *m_graph.mutable_value_info())
            m_declared.emplace(vi.name(), &vi);
        for (auto &vi : *m_graph.mutable_output())
            m_declared.emplace(vi.name(), &vi);
        for (const auto &t : m_graph.initializer()) {
            auto &type = m_initializerTypes[t.name()];
            type.mutable_tensor_type()->set_elem_type(t.data_type());
            auto &shape = *type.mutable_tensor_type()->mutable_shape();
            for (auto d : t.dims())
                shape.add_dim()->set_dim_value(d);
            m_types.emplace(t.name(), &type);
            if (tensorValue(t))
                m_values.emplace(t.name(), t);
        }
        m_symbols.addFromGraph(m_graph);
    }

    KnownValues run()
    {
        si::GraphInferenceContext graphContext(m_types, m_opsets, &m_symbols, m_functions,
                                               ::onnx::OpSchemaRegistry::Instance(), nullptr,
                                               static_cast<int>(m_model.ir_version()));
        for (auto &node : *m_graph.mutable_node()) {
            try {
                inferNode(node, graphContext);
            } catch (const TapestryError &) {
                throw;
            } catch (const std::exception &e) {
                throw TapestryError(Error{m_input, where(node), "shape inference failed: " + oneLine(e.what())});
            }
        }
        return std::move(m_values);
    }

private:
    std::string where(const ::onnx::NodeProto &node) const
    {
        return "node '" + node.name() + "' (" + node.op_type() + ")";
    }

    // ONNX's shape functions trust some attributes: convolutions and
    // pooling divide by strides and dilations, and norms and softmax index
    // dims by `axis` without a range check. A zero stride or a wild axis
    // would end the process (a division by zero, a read out of bounds)
    // instead of giving an error, so they are checked here first.
    void checkAttributes(const ::onnx::NodeProto &node) const
    {
        int rank = -1;  // of the first input, where known
        if (node.input_size() > 0)
            if (auto it = m_types.find(node.input(0)); it != m_types.end() && it->second->has_tensor_type() &&
                                                       it->second->tensor_type().has_shape())
                rank = it->second->tensor_type().shape().dim_size();
        const std::string &op = node.op_type();
        const bool strictAxis = op == "LayerNormalization" || op == "RMSNormalization" ||
                                op == "SimplifiedLayerNormalization" || op == "Softmax" || op == "LogSoftmax" ||
                                op == "Hardmax" || op == "Concat" || op == "Gather" || op == "GatherElements" ||
                                op == "Split" || op == "CumSum" || op == "ArgMax" || op == "ArgMin";
        // Their axis, given or the default, names a dim of the input: a
        // scalar has none (ONNX's inference would index outside the shape).
        if (strictAxis && rank == 0)
            throw TapestryError(Error{m_input, where(node), "its input has rank 0; " + op + " works along an axis of it"});
        for (const auto &a : node.attribute()) {
            const std::string &name = a.name();
            if (name == "strides" || name == "dilations" || name == "kernel_shape") {
                for (auto v : a.ints())
                    if (v < 1)
                        throw TapestryError(Error{m_input, where(node), "attribute " + name + " holds " +
                                                                            std::to_string(v) +
                                                                            "; every entry must be at least 1"});
            } else if ((name == "group" || name == "blocksize") && a.has_i() && a.i() < 1) {
                throw TapestryError(Error{m_input, where(node), "attribute " + name + " is " + std::to_string(a.i()) +
                                                                    "; it must be at least 1"});
            } else if (name == "axis" && a.has_i() && rank >= 0) {
                // [-rank, rank) where the axis names a dim of the input;
                // one more either side for ops that insert a dim (Flatten,
                // OneHot, Unsqueeze-like ops).
                const std::int64_t low = strictAxis ? -rank : -rank - 1, high = strictAxis ? rank - 1 : rank;
                if (a.i() < low || a.i() > high)
                    throw TapestryError(Error{m_input, where(node),
                                              "attribute axis is " + std::to_string(a.i()) + ", outside " +
                                                  std::to_string(low) + ".." + std::to_string(high) +
                                                  " for an input of rank " + std::to_string(rank)});
            }
        }
    }

    // ONNX 1.12 infers an Einsum's rank only; its dims follow from the
    // equation and the operands' dims (MaxViT's attention, "B G H I D, B G
    // H J D -> B G H I J").
    static void inferEinsum(const ::onnx::NodeProto &node, const std::vector<const ::onnx::TypeProto *> &inputTypes,
                            ::onnx::TypeProto &output)
    {
        std::string equation;
        for (const auto &a : node.attribute())
            if (a.name() == "equation")
                equation = a.s();
        std::vector<ir::Shape> shapes;
        int elemType = 0;
        for (const auto *type : inputTypes) {
            if (!type || !type->has_tensor_type() || !type->tensor_type().has_shape())
                return;
            elemType = type->tensor_type().elem_type();
            ir::Shape dims;
            for (const auto &d : type->tensor_type().shape().dim()) {
                if (!d.has_dim_value() || d.dim_value() < 0)
                    return;
                dims.push_back(d.dim_value());
            }
            shapes.push_back(std::move(dims));
        }
        const auto labels = ir::parseEinsum(equation, shapes);
        if (!labels)
            return;
        auto &tensor = *output.mutable_tensor_type();
        if (tensor.elem_type() == 0)
            tensor.set_elem_type(elemType);
        auto &shape = *tensor.mutable_shape();
        shape.clear_dim();
        for (int label : labels->output)
            shape.add_dim()->set_dim_value(labels->sizes[static_cast<std::size_t>(label)]);
    }

    void inferNode(::onnx::NodeProto &node, si::GraphInferenceContext &graphContext)
    {
        const std::string domain = normalDomain(node.domain());
        auto version = m_opsets.find(domain);
        if (version == m_opsets.end())
            throw TapestryError(Error{m_input, where(node), "its domain '" + domain + "' has no opset_import"});
        const auto *schema = ::onnx::OpSchemaRegistry::Schema(node.op_type(), version->second, domain);
        auto function = m_functions.find(node.domain() + ":" + node.op_type());

        std::vector<const ::onnx::TypeProto *> inputTypes;
        for (const auto &name : node.input()) {
            auto it = m_types.find(name);
            inputTypes.push_back(it == m_types.end() ? nullptr : it->second);
        }

        checkAttributes(node);
        std::vector<::onnx::TypeProto> inferred(static_cast<std::size_t>(node.output_size()));
        if (schema || function != m_functions.end()) {
            if (schema)
                schema->Verify(node);
            std::unordered_map<std::string, const ::onnx::TensorProto *> data;
            for (const auto &name : node.input())
                if (auto it = m_values.find(name); it != m_values.end())
                    data.emplace(name, &it->second);
            si::InferenceContextImpl ctx(node, m_types, data, {}, nullptr, &graphContext);
            const ::onnx::ShapeInferenceOptions options(false, 1, false);
            if (schema && schema->has_type_and_shape_inference_function())
                schema->GetTypeAndShapeInferenceFunction()(ctx);
            else if (schema && schema->HasFunction())
                si::InferShapeForFunctionNode(*schema->GetFunction(), m_opsets, ::onnx::OpSchemaRegistry::Instance(),
                                              ctx, options, m_functions, &m_symbols, nullptr);
            else if (!schema)
                si::InferShapeForFunctionNode(*function->second, m_opsets, ::onnx::OpSchemaRegistry::Instance(), ctx,
                                              options, m_functions, &m_symbols, nullptr);
            for (std::size_t i = 0; i < inferred.size(); ++i)
                inferred[i] = *ctx.getOutputType(i);
        }
        // Ops without a schema (custom domains, unknown ops) keep what the
        // file declares for their outputs.
        if (node.op_type() == "Einsum" && normalDomain(node.domain()).empty() && inferred.size() == 1)
            inferEinsum(node, inputTypes, inferred[0]);

        std::vector<const ::onnx::TypeProto *> outputTypes;
        for (int i = 0; i < node.output_size(); ++i) {
            const std::string &name = node.output(i);
            const ::onnx::TypeProto &type = inferred[static_cast<std::size_t>(i)];
            if (name.empty()) {
                outputTypes.push_back(nullptr);
                continue;
            }
            ::onnx::ValueInfoProto *vi = nullptr;
            if (auto it = m_declared.find(name); it != m_declared.end()) {
                vi = it->second;
                if (type.value_case() != ::onnx::TypeProto::VALUE_NOT_SET)
                    si::mergeShapesAndTypes(type, vi->mutable_type());
            } else if (type.value_case() != ::onnx::TypeProto::VALUE_NOT_SET) {
                vi = m_graph.add_value_info();
                vi->set_name(name);
                *vi->mutable_type() = type;
                m_declared.emplace(name, vi);
            }
            if (vi)
                m_types[name] = vi->mutable_type();
            outputTypes.push_back(vi ? &vi->type() : nullptr);
        }
        evaluateNode(node, inputTypes, outputTypes, m_values);
    }

    ::onnx::ModelProto &m_model;
    ::onnx::GraphProto &m_graph;
    const std::string &m_input;
    std::unordered_map<std::string, int> m_opsets;
    si::ModelLocalFunctionsMap m_functions;
    std::unordered_map<std::string, ::onnx::TypeProto> m_initializerTypes;
    std::unordered_map<std::string, ::onnx::TypeProto *> m_types;
    std::unordered_map<std::string, ::onnx::ValueInfoProto *> m_declared;
    si::SymbolTableImpl m_symbols;
    KnownValues m_values;
};

} // namespace

KnownValues inferShapes(::onnx::ModelProto &model, const std::unordered_set<std::string> &datalessInitializers,
                        const std::string &input)
{
    exposeDatalessInitializers(*model.mutable_graph(), datalessInitializers);
    return Driver(model, input).run();
}

} // namespace tapestry::io::onnximport
