#pragma once

#include "ir/attribute.h"
#include "ir/ids.h"

#include <cstdint>
#include <map>
#include <optional>
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
};

// Splits a hierarchical name on '/' and '.', dropping empty parts.
std::vector<std::string> splitName(std::string_view name);

// The model: ops and tensors in flat vectors addressed by ids. Producer and
// consumer links are kept by addOp; validate() (validate.h) checks the rest.
class Graph {
public:
    std::string name;

    TensorId addTensor(std::string name, Shape shape, DType dtype, Role role);
    // Adds an op reading `inputs` and writing `outputs`; links producers and
    // consumers. Ids must already exist.
    OpId addOp(std::string type, std::string name, std::vector<TensorId> inputs,
               std::vector<TensorId> outputs, Attributes attributes = {});

    std::size_t opCount() const { return m_ops.size(); }
    std::size_t tensorCount() const { return m_tensors.size(); }
    const Op &op(OpId id) const { return m_ops[id.index()]; }
    Op &op(OpId id) { return m_ops[id.index()]; }
    const Tensor &tensor(TensorId id) const { return m_tensors[id.index()]; }
    Tensor &tensor(TensorId id) { return m_tensors[id.index()]; }
    const std::vector<Op> &ops() const { return m_ops; }
    const std::vector<Tensor> &tensors() const { return m_tensors; }

    // First tensor with this name (names are unique in a valid graph).
    std::optional<TensorId> findTensor(std::string_view name) const;
    std::optional<OpId> findOp(std::string_view name) const;

    // Kahn's algorithm, ties broken by id so the order is deterministic.
    // Empty optional when the graph has a cycle.
    std::optional<std::vector<OpId>> topologicalOrder() const;

    std::int64_t parameterCount() const;   // elements of all parameter tensors
    std::int64_t parameterBytes() const;
    std::vector<TensorId> tensorsWithRole(Role role) const;

    // Rebuilds producer/consumer links from the ops' input and output lists
    // (after ops were edited or removed by a pass).
    void relink();

private:
    std::vector<Op> m_ops;
    std::vector<Tensor> m_tensors;
    std::unordered_map<std::string, TensorId> m_tensorByName;
    std::unordered_map<std::string, OpId> m_opByName;
};

} // namespace tapestry::ir
