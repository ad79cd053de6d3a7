#include "io/onnx/irbuild.h"

#include "io/onnx/onnxattributes.h"
#include "io/onnx/onnxtypes.h"
#include "io/onnx/shapefolding.h"
#include "io/onnx/shapeinputs.h"
#include "io/onnx/tensorvalue.h"
#include "ir/error.h"

#include "onnx/defs/schema.h"

#include <unordered_map>

namespace tapestry::io::onnximport {

namespace {

bool isStandardDomain(const std::string &domain)
{
    return domain.empty() || domain == "ai.onnx";
}

class Builder {
public:
    Builder(const ::onnx::ModelProto &model, const std::unordered_set<std::string> &dataless,
            const KnownValues &values, const std::string &input)
        : m_graph(model.graph()), m_input(input), m_values(values)
    {
        for (const auto &o : model.opset_import())
            if (isStandardDomain(o.domain()))
                m_opset = static_cast<int>(o.version());
        for (const auto &t : m_graph.initializer()) {
            m_initializers.insert(t.name());
            ::onnx::TypeProto type;
            type.mutable_tensor_type()->set_elem_type(t.data_type());
            auto &shape = *type.mutable_tensor_type()->mutable_shape();
            for (auto d : t.dims())
                shape.add_dim()->set_dim_value(d);
            m_initializerTypes.emplace(t.name(), std::move(type));
        }
        m_initializers.insert(dataless.begin(), dataless.end());
        for (const auto &vi : m_graph.input())
            m_types.emplace(vi.name(), &vi.type());
        for (const auto &vi : m_graph.value_info())
            m_types.emplace(vi.name(), &vi.type());
        for (const auto &vi : m_graph.output()) {
            m_types.emplace(vi.name(), &vi.type());
            m_outputs.insert(vi.name());
        }
        for (const auto &[name, type] : m_initializerTypes)
            m_types.emplace(name, &type);
        for (const auto &node : m_graph.node())
            for (const auto &out : node.output())
                m_producers.emplace(out, &node);
    }

    ir::Graph build()
    {
        m_ir.name = m_graph.name();
        for (const auto &in : m_graph.input())
            if (!m_initializers.count(in.name()))
                addTensor(in.name(), ir::Role::Input, nullptr);

        const std::vector<bool> folded = foldedNodes(m_graph, m_values, m_initializers);
        const std::vector<bool> keep = computeNodes(m_graph, folded);
        for (int i = 0; i < m_graph.node_size(); ++i) {
            const auto &node = m_graph.node(i);
            if (!keep[static_cast<std::size_t>(i)])
                continue;
            if (folded[static_cast<std::size_t>(i)]) {
                m_constantNodes.emplace(node.output(0), &node);
                continue;
            }
            addOp(node);
        }
        return std::move(m_ir);
    }

private:
    static std::string nodeWhere(const ::onnx::NodeProto &node)
    {
        return "node '" + node.name() + "' (" + node.op_type() + ")";
    }

    // Where a value that sizes an op (a Reshape's target) could not be had:
    // following the unknown inputs back, the first node that gives none
    // from known inputs, or the graph input the value depends on.
    std::string missingValue(std::string name) const
    {
        for (int depth = 0; depth < 64; ++depth) {
            auto producer = m_producers.find(name);
            if (producer == m_producers.end())
                return "it depends on the values of '" + name + "'";
            const auto &node = *producer->second;
            std::string unknown;
            if (node.op_type() != "Shape" && node.op_type() != "Size")
                for (const auto &in : node.input())
                    if (!in.empty() && !m_values.count(in)) {
                        unknown = in;
                        break;
                    }
            if (unknown.empty())
                return nodeWhere(node) + " cannot be evaluated";
            name = unknown;
        }
        return "it is computed by a chain too long to follow";
    }

    // Why `producer` gives an output without a concrete shape, where one of
    // its shape inputs has no value; empty otherwise.
    std::string unknownShapeInput(const ::onnx::NodeProto *producer) const
    {
        if (!producer)
            return {};
        for (int slot = 0; slot < producer->input_size(); ++slot) {
            const std::string &name = producer->input(slot);
            if (!name.empty() && isShapeEdge(*producer, slot) && !m_values.count(name))
                return ": its " + std::string(findShapeInput(producer->op_type(), slot)->attribute) + " input '" +
                       name + "' is not known at load time (" + missingValue(name) + ")";
        }
        return {};
    }

    ir::TensorId addTensor(const std::string &name, ir::Role role, const ::onnx::NodeProto *producer)
    {
        const std::string where =
            "tensor '" + name + "'" + (producer ? " (output of " + nodeWhere(*producer) + ")" : "");
        auto type = m_types.find(name);
        if (type == m_types.end() || !type->second->has_tensor_type() ||
            !type->second->tensor_type().has_shape()) {
            const std::string why = unknownShapeInput(producer);
            throw TapestryError(Error{m_input, where,
                                      why.empty() ? "has no shape: ONNX shape inference cannot derive it and the "
                                                    "file declares none in value_info"
                                                  : "has no shape" + why});
        }
        const ShapeResult shape = concreteShape(*type->second);
        if (!shape.problem.empty())
            throw TapestryError(Error{m_input, where, shape.problem + unknownShapeInput(producer)});
        const int elemType = type->second->tensor_type().elem_type();
        const auto dtype = dtypeFromOnnx(elemType);
        if (!dtype)
            throw TapestryError(Error{m_input, where,
                                      "has element type " + onnxTypeName(elemType) +
                                          ", which Tapestry does not model"});
        return m_ir.addTensor(name, shape.shape, *dtype, role);
    }

    ir::TensorId dataInput(const std::string &name)
    {
        if (auto id = m_ir.findTensor(name))
            return *id;
        // Not yet seen: an initializer or a folded node (foldedNodes), met
        // at its first reader. Everything else was added by its producer, which comes first.
        auto constant = m_constantNodes.find(name);
        return addTensor(name, ir::Role::Parameter,
                         constant == m_constantNodes.end() ? nullptr : constant->second);
    }

    void addOp(const ::onnx::NodeProto &node)
    {
        ir::Attributes attrs = convertAttributes(node);
        std::vector<ir::TensorId> inputs;
        std::vector<const ShapeInput *> fromOutputShape;
        for (int slot = 0; slot < node.input_size(); ++slot) {
            const std::string &name = node.input(slot);
            if (name.empty())
                continue;
            if (!isShapeEdge(node, slot)) {
                inputs.push_back(dataInput(name));
                continue;
            }
            const ShapeInput *s = findShapeInput(node.op_type(), slot);
            if (s->outputShape)
                fromOutputShape.push_back(s);
            else if (auto it = m_values.find(name); it != m_values.end())
                if (auto value = tensorValue(it->second))
                    attrs.emplace(s->attribute, std::move(*value));
        }
        std::vector<ir::TensorId> outputs;
        for (const auto &name : node.output())
            if (!name.empty())
                outputs.push_back(addTensor(name, m_outputs.count(name) ? ir::Role::Output : ir::Role::Activation,
                                            &node));
        for (const ShapeInput *s : fromOutputShape)
            if (!outputs.empty())
                attrs.emplace(s->attribute, m_ir.tensor(outputs.front()).shape);

        const ir::OpId op = m_ir.addOp(node.op_type(), node.name(), std::move(inputs), std::move(outputs),
                                       std::move(attrs));
        if (!isStandardDomain(node.domain()))
            m_ir.setDomain(op, node.domain());
        else if (!::onnx::OpSchemaRegistry::Schema(node.op_type(), m_opset, ""))
            m_ir.setDomain(op, "ai.onnx");
    }

    const ::onnx::GraphProto &m_graph;
    const std::string &m_input;
    const KnownValues &m_values;
    int m_opset = 0;
    std::unordered_set<std::string> m_initializers;
    std::unordered_map<std::string, ::onnx::TypeProto> m_initializerTypes;
    std::unordered_map<std::string, const ::onnx::TypeProto *> m_types;
    std::unordered_set<std::string> m_outputs;
    std::unordered_map<std::string, const ::onnx::NodeProto *> m_constantNodes;
    std::unordered_map<std::string, const ::onnx::NodeProto *> m_producers;
    ir::Graph m_ir;
};

} // namespace

ir::Graph buildGraph(const ::onnx::ModelProto &model, const std::unordered_set<std::string> &datalessInitializers,
                     const KnownValues &values, const std::string &input)
{
    return Builder(model, datalessInitializers, values, input).build();
}

} // namespace tapestry::io::onnximport
