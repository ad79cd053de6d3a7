#include "io/onnx/irbuild.h"

#include "io/onnx/onnxattributes.h"
#include "io/onnx/onnxtypes.h"
#include "io/onnx/shapefolding.h"
#include "io/onnx/shapeinputs.h"
#include "io/onnx/tensorvalue.h"
#include "ir/error.h"

#include "onnx/defs/schema.h"

#include <algorithm>
#include <functional>
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
        for (const auto &node : m_graph.node()) {
            for (const auto &out : node.output())
                m_producers.emplace(out, &node);
            for (const auto &in : node.input())
                m_readers[in].push_back(&node);
        }
        promoteWeightInputs();
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

    // The graph inputs that were taken as weights (promoteWeightInputs).
    std::vector<std::string> promoted() const { return m_promoted; }

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
        const auto id = addTensor(name, ir::Role::Parameter,
                                  constant == m_constantNodes.end() ? nullptr : constant->second);
        if (isConstant(name, m_ir.tensor(id)))
            m_ir.setRole(id, ir::Role::Input);
        return id;
    }

    // Whether an initializer or folded value is a constant rather than a
    // trainable weight: one element (GELU's 0.5 and sqrt(2), an attention
    // scale), integers and booleans (indices, masks), a Constant node's
    // value, or an Identity alias of one of these. Constants take the
    // Input role, as the zoo's masks and scales do: no gradient, no
    // optimizer state, no all-reduce. (A trainable scalar such as CLIP's
    // logit_scale is counted out with them.) So is an additive term torch's
    // constant folding computed (named onnx::OP_N, not after a module),
    // broadcast over the batch ([1, ...] of rank 3 or more) and read only
    // by element-wise arithmetic: Swin's relative position bias, gathered
    // from its table by an index buffer into [1, heads, 49, 49] at export.
    // The table is gone from the graph, and the gathered bias trains
    // nothing. What else the folding renamed stays a weight: a MatMul's
    // transposed weight, a slice of a fused bias (torch's cross-attention
    // reads in_proj_bias[h:3h] as onnx::Add_N, rank 1).
    bool isConstant(const std::string &name, const ir::Tensor &tensor) const
    {
        if (tensor.elementCount() <= 1 || !isFloatType(tensor.dtype))
            return true;
        if (name.starts_with("onnx::") && tensor.shape.size() >= 3 && tensor.shape[0] == 1) {
            static const std::unordered_set<std::string> elementwise{"Add", "Sub", "Mul", "Div", "Where"};
            const auto readers = m_readers.find(name);
            if (readers != m_readers.end() &&
                std::all_of(readers->second.begin(), readers->second.end(),
                            [](const ::onnx::NodeProto *r) { return elementwise.count(r->op_type()) > 0; }))
                return true;
        }
        auto folded = m_constantNodes.find(name);
        for (int depth = 0; folded != m_constantNodes.end() && depth < 64; ++depth) {
            const auto &node = *folded->second;
            if (node.op_type() == "Constant")
                return true;
            if (node.op_type() != "Identity" || node.input_size() != 1)
                return false;
            folded = m_constantNodes.find(node.input(0));
        }
        return false;
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
                // BatchNormalization's running mean and variance are buffers
                // the step updates, not weights it trains.
                if (node.op_type() == "BatchNormalization" && slot >= 3 &&
                    m_ir.tensor(inputs.back()).role == ir::Role::Parameter)
                    m_ir.setRole(inputs.back(), ir::Role::Input);
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

    // A graph input read only as a weight is a weight the export left out
    // of the file (torch.onnx.export(..., export_params=False) makes every
    // parameter a graph input): it is read as an initializer is, so that
    // it becomes a Parameter and its Identity aliases (torch merges
    // parameters that hold equal values) parameters of their own. Read as
    // a weight: a MatMul's second operand of rank 2, a Gemm's B or C, a
    // convolution's kernel or bias, a norm's scale or bias, an embedding
    // table (a Gather's data with integer indices), a vector added to one
    // of those products, or through an Identity, Transpose or Cast whose
    // output is read so.
    void promoteWeightInputs()
    {
        std::unordered_map<std::string, std::vector<std::pair<const ::onnx::NodeProto *, int>>> readers;
        for (const auto &node : m_graph.node())
            for (int slot = 0; slot < node.input_size(); ++slot)
                if (!node.input(slot).empty())
                    readers[node.input(slot)].emplace_back(&node, slot);
        auto rankOf = [&](const std::string &name) -> int {
            auto t = m_types.find(name);
            if (t == m_types.end() || !t->second->has_tensor_type() || !t->second->tensor_type().has_shape())
                return -1;
            return t->second->tensor_type().shape().dim_size();
        };
        auto elemType = [&](const std::string &name) {
            auto t = m_types.find(name);
            return t == m_types.end() || !t->second->has_tensor_type() ? 0 : t->second->tensor_type().elem_type();
        };
        auto isFloatElem = [](int type) {
            const auto dtype = dtypeFromOnnx(type);
            return dtype && isFloatType(*dtype);
        };
        auto producedByProduct = [&](const std::string &name) {
            auto p = m_producers.find(name);
            if (p == m_producers.end())
                return false;
            const std::string &type = p->second->op_type();
            return type == "MatMul" || type == "Gemm" || type == "Conv" || type == "ConvTranspose";
        };
        std::function<bool(const std::string &, const ::onnx::NodeProto &, int, int)> readAsWeight =
            [&](const std::string &name, const ::onnx::NodeProto &node, int slot, int depth) -> bool {
            const std::string &type = node.op_type();
            if ((type == "Identity" || type == "Transpose" || type == "Cast") && depth < 8 &&
                node.output_size() == 1) {
                auto next = readers.find(node.output(0));
                return next != readers.end() && std::all_of(next->second.begin(), next->second.end(), [&](const auto &r) {
                           return readAsWeight(node.output(0), *r.first, r.second, depth + 1);
                       });
            }
            const int rank = rankOf(name);
            if (type == "MatMul")
                return slot == 1 && rank == 2;
            if (type == "Gemm" || type == "Conv" || type == "ConvTranspose")
                return slot >= 1;
            if (type == "LayerNormalization" || type == "BatchNormalization" || type == "InstanceNormalization" ||
                type == "GroupNormalization" || type == "RMSNormalization" || type == "SimplifiedLayerNormalization")
                return slot == 1 || slot == 2;
            if (type == "Gather")
                return slot == 0 && node.input_size() > 1 && !isFloatElem(elemType(node.input(1)));
            if (type == "Add" && rank == 1 && node.input_size() == 2)
                return producedByProduct(node.input(1 - slot));
            return false;
        };
        for (const auto &in : m_graph.input()) {
            if (m_initializers.count(in.name()) || !isFloatElem(elemType(in.name())) || rankOf(in.name()) < 1)
                continue;
            auto reads = readers.find(in.name());
            if (reads == readers.end() || !std::all_of(reads->second.begin(), reads->second.end(), [&](const auto &r) {
                    return readAsWeight(in.name(), *r.first, r.second, 0);
                }))
                continue;
            m_initializers.insert(in.name());
            m_promoted.push_back(in.name());
        }
    }

    static bool isFloatType(ir::DType dtype)
    {
        return dtype == ir::DType::F32 || dtype == ir::DType::F16 || dtype == ir::DType::BF16 ||
               dtype == ir::DType::F64;
    }

    std::vector<std::string> m_promoted;
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
    std::unordered_map<std::string, std::vector<const ::onnx::NodeProto *>> m_readers;
    ir::Graph m_ir;
};

} // namespace

ir::Graph buildGraph(const ::onnx::ModelProto &model, const std::unordered_set<std::string> &datalessInitializers,
                     const KnownValues &values, const std::string &input, std::vector<std::string> *weightInputs)
{
    Builder builder(model, datalessInitializers, values, input);
    ir::Graph graph = builder.build();
    if (weightInputs)
        *weightInputs = builder.promoted();
    return graph;
}

} // namespace tapestry::io::onnximport
