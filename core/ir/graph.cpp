#include "ir/graph.h"

#include <array>
#include <queue>

namespace tapestry::ir {

namespace {
constexpr std::array<std::pair<DType, std::string_view>, 9> kDTypes{{
    {DType::F32, "float32"},
    {DType::F16, "float16"},
    {DType::BF16, "bfloat16"},
    {DType::F64, "float64"},
    {DType::I64, "int64"},
    {DType::I32, "int32"},
    {DType::I8, "int8"},
    {DType::U8, "uint8"},
    {DType::Bool, "bool"},
}};
constexpr std::array<std::pair<Role, std::string_view>, 4> kRoles{{
    {Role::Parameter, "parameter"},
    {Role::Input, "input"},
    {Role::Activation, "activation"},
    {Role::Output, "output"},
}};
} // namespace

std::string_view toString(DType dtype)
{
    for (auto [d, s] : kDTypes)
        if (d == dtype)
            return s;
    return "float32";
}

std::optional<DType> dtypeFromString(std::string_view s)
{
    for (auto [d, name] : kDTypes)
        if (name == s)
            return d;
    return std::nullopt;
}

std::int64_t byteSize(DType dtype)
{
    switch (dtype) {
    case DType::F64:
    case DType::I64:
        return 8;
    case DType::F32:
    case DType::I32:
        return 4;
    case DType::F16:
    case DType::BF16:
        return 2;
    case DType::I8:
    case DType::U8:
    case DType::Bool:
        return 1;
    }
    return 4;
}

std::string_view toString(Role role)
{
    for (auto [r, s] : kRoles)
        if (r == role)
            return s;
    return "activation";
}

std::optional<Role> roleFromString(std::string_view s)
{
    for (auto [r, name] : kRoles)
        if (name == s)
            return r;
    return std::nullopt;
}

std::int64_t elementCount(std::span<const std::int64_t> shape)
{
    std::int64_t n = 1;
    for (auto d : shape)
        n *= d;
    return n;
}

std::int64_t Tensor::elementCount() const
{
    return ir::elementCount(shape);
}

std::vector<std::string> splitName(std::string_view name)
{
    std::vector<std::string> parts;
    std::string current;
    for (char c : name) {
        if (c == '/' || c == '.') {
            if (!current.empty())
                parts.push_back(std::move(current));
            current.clear();
        } else {
            current.push_back(c);
        }
    }
    if (!current.empty())
        parts.push_back(std::move(current));
    return parts;
}

std::vector<std::string> Op::scope() const
{
    auto parts = splitName(name);
    if (!parts.empty())
        parts.pop_back();
    return parts;
}

GraphArrays::GraphArrays(std::vector<std::string> typeNames) : m_typeNames(std::move(typeNames))
{
    for (std::size_t i = 0; i < m_typeNames.size(); ++i)
        m_typeNumber.emplace(m_typeNames[i], static_cast<std::uint32_t>(i));
}

void GraphArrays::reserve(std::size_t ops, std::size_t tensors)
{
    m_type.reserve(ops);
    m_attributeHash.reserve(ops);
    m_inputStart.reserve(ops + 1);
    m_outputStart.reserve(ops + 1);
    m_name.reserve(ops);
    m_producer.reserve(tensors);
    m_role.reserve(tensors);
    m_dtype.reserve(tensors);
    m_dimStart.reserve(tensors + 1);
}

TensorId GraphArrays::addTensor(std::span<const std::int64_t> shape, DType dtype, Role role)
{
    const TensorId id(static_cast<std::int32_t>(m_producer.size()));
    m_producer.emplace_back();
    m_role.push_back(role);
    m_dtype.push_back(dtype);
    m_dims.insert(m_dims.end(), shape.begin(), shape.end());
    m_dimStart.push_back(static_cast<std::int32_t>(m_dims.size()));
    return id;
}

OpId GraphArrays::addOp(std::uint32_t type, std::uint64_t attributeHash, std::span<const TensorId> inputs,
                        std::span<const TensorId> outputs, std::string_view name)
{
    const OpId id(static_cast<std::int32_t>(m_type.size()));
    for (TensorId t : outputs)
        if (t.valid() && t.index() < m_producer.size() && !m_producer[t.index()].valid())
            m_producer[t.index()] = id;
    m_type.push_back(type);
    m_attributeHash.push_back(attributeHash);
    m_inputs.insert(m_inputs.end(), inputs.begin(), inputs.end());
    m_inputStart.push_back(static_cast<std::int32_t>(m_inputs.size()));
    m_outputs.insert(m_outputs.end(), outputs.begin(), outputs.end());
    m_outputStart.push_back(static_cast<std::int32_t>(m_outputs.size()));
    m_name.emplace_back(static_cast<std::uint32_t>(m_names.size()), static_cast<std::uint32_t>(name.size()));
    m_names.insert(m_names.end(), name.begin(), name.end());
    return id;
}

TensorId Graph::addTensor(std::string tensorName, Shape shape, DType dtype, Role role)
{
    TensorId id(static_cast<std::int32_t>(m_tensors.size()));
    if (!m_tensorByName.insert(tensorName, id, m_tensors))
        m_duplicateNames = true;
    GraphArrays &a = m_arrays;
    a.m_producer.emplace_back();
    a.m_role.push_back(role);
    a.m_dtype.push_back(dtype);
    a.m_dims.insert(a.m_dims.end(), shape.begin(), shape.end());
    a.m_dimStart.push_back(static_cast<std::int32_t>(a.m_dims.size()));
    m_tensors.push_back(Tensor{std::move(tensorName), std::move(shape), dtype, role, {}, {}});
    return id;
}

OpId Graph::addOp(std::string type, std::string opName, std::vector<TensorId> inputs,
                  std::vector<TensorId> outputs, Attributes attributes)
{
    OpId id(static_cast<std::int32_t>(m_ops.size()));
    GraphArrays &a = m_arrays;
    for (TensorId t : inputs)
        if (t.valid() && t.index() < m_tensors.size())
            m_tensors[t.index()].consumers.push_back(id);
    for (TensorId t : outputs)
        if (t.valid() && t.index() < m_tensors.size() && !m_tensors[t.index()].producer.valid()) {
            m_tensors[t.index()].producer = a.m_producer[t.index()] = id;
            // Read before it is written (or by this very op): id order is
            // no longer a topological order.
            if (!m_tensors[t.index()].consumers.empty())
                a.m_idOrderIsTopological = false;
        }
    if (!m_opByName.insert(opName, id, m_ops))
        m_duplicateNames = true;

    auto [number, fresh] = a.m_typeNumber.try_emplace(type, static_cast<std::uint32_t>(a.m_typeNames.size()));
    if (fresh)
        a.m_typeNames.push_back(type);
    a.m_type.push_back(number->second);
    a.m_attributeHash.push_back(hashAttributes({}, attributes));
    a.m_inputs.insert(a.m_inputs.end(), inputs.begin(), inputs.end());
    a.m_inputStart.push_back(static_cast<std::int32_t>(a.m_inputs.size()));
    a.m_outputs.insert(a.m_outputs.end(), outputs.begin(), outputs.end());
    a.m_outputStart.push_back(static_cast<std::int32_t>(a.m_outputs.size()));
    a.m_name.emplace_back();
    appendName(id, opName);

    m_ops.push_back(Op{std::move(type), std::move(opName), {}, std::move(inputs), std::move(outputs),
                       std::move(attributes)});
    return id;
}

void Graph::appendName(OpId op, std::string_view opName)
{
    GraphArrays &a = m_arrays;
    a.m_name[op.index()] = {static_cast<std::uint32_t>(a.m_names.size()), static_cast<std::uint32_t>(opName.size())};
    a.m_names.insert(a.m_names.end(), opName.begin(), opName.end());
}

void Graph::setDomain(OpId op, std::string domain)
{
    Op &o = m_ops[op.index()];
    o.domain = std::move(domain);
    m_arrays.m_attributeHash[op.index()] = hashAttributes(o.domain, o.attributes);
}

namespace {
// Gives `id` the name `to` in a name map whose records are `records`. When
// `id` held its old name in the map, the name passes to the next record that
// has it too (only possible once some name was given twice).
template <typename Records, typename Id>
void moveName(NameIndex<Id> &byName, const Records &records, Id id, const std::string &to, bool &duplicateNames)
{
    const std::string &from = records[id.index()].name;
    if (byName.erase(from, id) && duplicateNames)
        for (std::size_t i = 0; i < records.size(); ++i)
            if (i != id.index() && records[i].name == from) {
                byName.insert(from, Id(static_cast<std::int32_t>(i)), records);
                break;
            }
    if (!byName.insert(to, id, records))
        duplicateNames = true;
}
} // namespace

void Graph::renameOp(OpId op, std::string opName)
{
    moveName(m_opByName, m_ops, op, opName, m_duplicateNames);
    appendName(op, opName);  // the old name's characters stay behind, unused
    m_ops[op.index()].name = std::move(opName);
}

void Graph::renameTensor(TensorId t, std::string tensorName)
{
    moveName(m_tensorByName, m_tensors, t, tensorName, m_duplicateNames);
    m_tensors[t.index()].name = std::move(tensorName);
}

void Graph::setDType(TensorId t, DType dtype)
{
    m_tensors[t.index()].dtype = m_arrays.m_dtype[t.index()] = dtype;
}

void Graph::setRole(TensorId t, Role role)
{
    m_tensors[t.index()].role = m_arrays.m_role[t.index()] = role;
}

std::optional<TensorId> Graph::findTensor(std::string_view tensorName) const
{
    return m_tensorByName.find(tensorName, m_tensors);
}

std::optional<OpId> Graph::findOp(std::string_view opName) const
{
    return m_opByName.find(opName, m_ops);
}

std::optional<std::vector<OpId>> Graph::topologicalOrder() const
{
    if (m_arrays.idOrderIsTopological()) {
        std::vector<OpId> order(m_ops.size());
        for (std::size_t i = 0; i < order.size(); ++i)
            order[i] = OpId(static_cast<std::int32_t>(i));
        return order;
    }
    std::vector<int> pending(m_ops.size(), 0);
    for (std::size_t i = 0; i < m_ops.size(); ++i)
        for (TensorId t : m_ops[i].inputs)
            if (t.valid() && t.index() < m_tensors.size() && m_tensors[t.index()].producer.valid())
                ++pending[i];
    std::priority_queue<std::int32_t, std::vector<std::int32_t>, std::greater<>> ready;
    for (std::size_t i = 0; i < m_ops.size(); ++i)
        if (pending[i] == 0)
            ready.push(static_cast<std::int32_t>(i));
    std::vector<OpId> order;
    order.reserve(m_ops.size());
    while (!ready.empty()) {
        OpId id(ready.top());
        ready.pop();
        order.push_back(id);
        for (TensorId t : m_ops[id.index()].outputs) {
            if (!t.valid() || t.index() >= m_tensors.size() || m_tensors[t.index()].producer != id)
                continue;
            for (OpId c : m_tensors[t.index()].consumers)
                if (--pending[c.index()] == 0)
                    ready.push(c.value);
        }
    }
    if (order.size() != m_ops.size())
        return std::nullopt;
    return order;
}

std::int64_t Graph::parameterCount() const
{
    std::int64_t n = 0;
    for (const auto &t : m_tensors)
        if (t.role == Role::Parameter)
            n += t.elementCount();
    return n;
}

std::int64_t Graph::parameterBytes() const
{
    std::int64_t n = 0;
    for (const auto &t : m_tensors)
        if (t.role == Role::Parameter)
            n += t.byteCount();
    return n;
}

std::vector<TensorId> Graph::tensorsWithRole(Role role) const
{
    std::vector<TensorId> ids;
    for (std::size_t i = 0; i < m_tensors.size(); ++i)
        if (m_tensors[i].role == role)
            ids.emplace_back(static_cast<std::int32_t>(i));
    return ids;
}

} // namespace tapestry::ir
