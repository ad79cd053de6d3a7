#pragma once

#include "ir/attribute.h"
#include "ir/ids.h"
#include "ir/nameindex.h"

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tapestry::ir {

using Shape = std::vector<std::int64_t>;

enum class DType { F32, F16, BF16, F64, I64, I32, I8, U8, Bool };
enum class Role { Parameter, Input, Activation, Output };

std::string_view toString(DType dtype);
std::optional<DType> dtypeFromString(std::string_view s);
std::int64_t byteSize(DType dtype);
std::string_view toString(Role role);
std::optional<Role> roleFromString(std::string_view s);

// Elements of a tensor of this shape.
std::int64_t elementCount(std::span<const std::int64_t> shape);

struct Tensor {
    std::string name;
    Shape shape;
    DType dtype = DType::F32;
    Role role = Role::Activation;
    OpId producer;                // invalid for parameters and inputs
    std::vector<OpId> consumers;  // in the order they were added

    std::int64_t elementCount() const;
    std::int64_t byteCount() const { return elementCount() * byteSize(dtype); }
};

struct Op {
    std::string type;    // ONNX-style op type: MatMul, Add, Softmax, LayerNorm, ...
    std::string name;    // hierarchical: "transformer/h.3/attn/c_attn/MatMul"
    std::string domain;  // empty for the standard op set; custom ops keep theirs
    std::vector<TensorId> inputs;
    std::vector<TensorId> outputs;
    Attributes attributes;

    // Scope path of the op: its name split on '/' and '.', without the last
    // component (the op's own leaf name).
    std::vector<std::string> scope() const;
    // A layer or RMS norm (LayerNormalization, RMSNorm).
    bool isNorm() const { return type == "LayerNormalization" || type == "RMSNorm"; }
};

// Splits a hierarchical name on '/' and '.', dropping empty parts.
std::vector<std::string> splitName(std::string_view name);

// The graph's structure once more, in flat arrays: each op's type number,
// domain-and-attributes hash, inputs, outputs and name, and each tensor's
// producer, role, dtype and shape, laid out in id order. Every Op and Tensor
// keeps its fields in heap blocks of its own, scattered as the graph grew;
// on a deep model they no longer fit in cache and a sweep over them waits on
// memory for every op. Passes that read every op (coarsening, pruning) read
// these arrays instead. The Graph keeps them in step with every change: its
// records are changed only through its own methods.
class GraphArrays {
public:
    // The arrays as views, which stay valid while the graph lives unchanged,
    // moved or not: an index over the graph can hold one instead of copies.
    class View {
    public:
        std::size_t opCount() const { return m_type.size(); }
        std::size_t tensorCount() const { return m_producer.size(); }

        // The op's type as a small number, the same for every op of that type.
        std::uint32_t type(OpId op) const { return m_type[op.index()]; }
        // ir::hashAttributes of the op's domain and attributes.
        std::uint64_t attributeHash(OpId op) const { return m_attributeHash[op.index()]; }
        std::span<const TensorId> inputs(OpId op) const
        {
            return m_inputs.subspan(static_cast<std::size_t>(m_inputStart[op.index()]),
                                    static_cast<std::size_t>(m_inputStart[op.index() + 1] - m_inputStart[op.index()]));
        }
        std::span<const TensorId> outputs(OpId op) const
        {
            return m_outputs.subspan(
                static_cast<std::size_t>(m_outputStart[op.index()]),
                static_cast<std::size_t>(m_outputStart[op.index() + 1] - m_outputStart[op.index()]));
        }
        std::string_view name(OpId op) const
        {
            const auto [begin, size] = m_name[op.index()];
            return {m_names.data() + begin, size};
        }

        OpId producer(TensorId t) const { return m_producer[t.index()]; }
        Role role(TensorId t) const { return m_role[t.index()]; }
        DType dtype(TensorId t) const { return m_dtype[t.index()]; }
        std::span<const std::int64_t> shape(TensorId t) const
        {
            return m_dims.subspan(static_cast<std::size_t>(m_dimStart[t.index()]),
                                  static_cast<std::size_t>(m_dimStart[t.index() + 1] - m_dimStart[t.index()]));
        }

    private:
        friend class GraphArrays;
        std::span<const std::uint32_t> m_type;
        std::span<const std::uint64_t> m_attributeHash;
        std::span<const std::int32_t> m_inputStart, m_outputStart;
        std::span<const TensorId> m_inputs, m_outputs;
        std::span<const std::pair<std::uint32_t, std::uint32_t>> m_name;
        std::span<const char> m_names;
        std::span<const OpId> m_producer;
        std::span<const Role> m_role;
        std::span<const DType> m_dtype;
        std::span<const std::int32_t> m_dimStart;
        std::span<const std::int64_t> m_dims;
    };

    View view() const
    {
        View v;
        v.m_type = m_type;
        v.m_attributeHash = m_attributeHash;
        v.m_inputStart = m_inputStart;
        v.m_outputStart = m_outputStart;
        v.m_inputs = m_inputs;
        v.m_outputs = m_outputs;
        v.m_name = m_name;
        v.m_names = m_names;
        v.m_producer = m_producer;
        v.m_role = m_role;
        v.m_dtype = m_dtype;
        v.m_dimStart = m_dimStart;
        v.m_dims = m_dims;
        return v;
    }

    std::size_t opCount() const { return m_type.size(); }
    std::size_t tensorCount() const { return m_producer.size(); }

    // Arrays built without a Graph and its records: a reduced graph
    // (passes/repeats.h), which the passes read as they read a graph's.
    // Types are numbered as in `typeNames`; ops are added after the
    // producers of what they read, so id order stays topological.
    GraphArrays() = default;
    explicit GraphArrays(std::vector<std::string> typeNames);
    TensorId addTensor(std::span<const std::int64_t> shape, DType dtype, Role role);
    OpId addOp(std::uint32_t type, std::uint64_t attributeHash, std::span<const TensorId> inputs,
               std::span<const TensorId> outputs, std::string_view name);
    void reserve(std::size_t ops, std::size_t tensors);

    // The type names by number.
    const std::vector<std::string> &typeNames() const { return m_typeNames; }
    // True while every op was added after the producers of what it reads:
    // then id order is a topological order, and the one Kahn's algorithm
    // with ties broken by id yields.
    bool idOrderIsTopological() const { return m_idOrderIsTopological; }

private:
    friend class Graph;
    bool m_idOrderIsTopological = true;
    std::vector<std::uint32_t> m_type;
    std::vector<std::string> m_typeNames;
    std::unordered_map<std::string, std::uint32_t> m_typeNumber;
    std::vector<std::uint64_t> m_attributeHash;
    std::vector<std::int32_t> m_inputStart{0}, m_outputStart{0};
    std::vector<TensorId> m_inputs, m_outputs;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> m_name;  // begin and size in m_names
    std::vector<char> m_names;  // not a std::string: views of it survive moving the graph

    std::vector<OpId> m_producer;
    std::vector<Role> m_role;
    std::vector<DType> m_dtype;
    std::vector<std::int32_t> m_dimStart{0};
    std::vector<std::int64_t> m_dims;
};

// The model: ops and tensors in flat vectors addressed by ids. Producer and
// consumer links are kept by addOp; validate() (validate.h) checks the rest.
// Ops and tensors are read through const references and changed only by the
// graph's methods, which keep the links, the name lookups and arrays() in step.
class Graph {
public:
    std::string name;

    TensorId addTensor(std::string name, Shape shape, DType dtype, Role role);
    // Adds an op reading `inputs` and writing `outputs`; links producers and
    // consumers. Ids must already exist.
    OpId addOp(std::string type, std::string name, std::vector<TensorId> inputs,
               std::vector<TensorId> outputs, Attributes attributes = {});

    // Changes to an op or tensor after it was added.
    void setDomain(OpId op, std::string domain);
    void renameOp(OpId op, std::string name);
    void renameTensor(TensorId t, std::string name);
    void setDType(TensorId t, DType dtype);
    void setRole(TensorId t, Role role);

    std::size_t opCount() const { return m_ops.size(); }
    std::size_t tensorCount() const { return m_tensors.size(); }
    const Op &op(OpId id) const { return m_ops[id.index()]; }
    const Tensor &tensor(TensorId id) const { return m_tensors[id.index()]; }
    const std::vector<Op> &ops() const { return m_ops; }
    const std::vector<Tensor> &tensors() const { return m_tensors; }
    const GraphArrays &arrays() const { return m_arrays; }

    // First tensor with this name (names are unique in a valid graph).
    std::optional<TensorId> findTensor(std::string_view name) const;
    std::optional<OpId> findOp(std::string_view name) const;
    // True when no name was ever given to two tensors or two ops: then every
    // name is unique, and validate() need not look each one up.
    bool namesKnownUnique() const { return !m_duplicateNames; }

    // Kahn's algorithm, ties broken by id so the order is deterministic.
    // Empty optional when the graph has a cycle.
    std::optional<std::vector<OpId>> topologicalOrder() const;

    std::int64_t parameterCount() const;   // elements of all parameter tensors
    std::int64_t parameterBytes() const;
    std::vector<TensorId> tensorsWithRole(Role role) const;

private:
    void appendName(OpId op, std::string_view name);

    std::vector<Op> m_ops;
    std::vector<Tensor> m_tensors;
    // Each name maps to the first tensor or op that has it.
    NameIndex<TensorId> m_tensorByName;
    NameIndex<OpId> m_opByName;
    bool m_duplicateNames = false;  // some name was ever given twice
    GraphArrays m_arrays;
};

} // namespace tapestry::ir
