#pragma once

#include "ir/graph.h"

#include <string>
#include <vector>

namespace tapestry::io::zoo {

// Builds op-level graphs with module-style names. Ops and tensors are named
// after the current scope ("h.3/attn/c_attn/MatMul"), so the pruning pass sees
// the same hierarchy an exported PyTorch model has.
class GraphBuilder {
public:
    explicit GraphBuilder(std::string modelName, ir::DType dtype = ir::DType::F32);

    void push(const std::string &scope);  // enter a module ("h.3", "attn")
    void pop();
    std::string scoped(const std::string &leaf) const;

    ir::TensorId input(const std::string &name, ir::Shape shape, ir::DType dtype);
    ir::TensorId parameter(const std::string &leaf, ir::Shape shape);
    // Adds an op named scope/type (with a counter when the scope already has
    // one) writing one new activation of `shape`.
    ir::TensorId op(const std::string &type, std::vector<ir::TensorId> inputs, ir::Shape shape,
                    ir::Attributes attributes = {});
    std::vector<ir::TensorId> opMulti(const std::string &type, std::vector<ir::TensorId> inputs,
                                      std::vector<ir::Shape> shapes, ir::Attributes attributes = {});

    // Common pieces.
    ir::TensorId linear(const std::string &module, ir::TensorId x, std::int64_t out, bool bias);
    ir::TensorId matmul(ir::TensorId a, ir::TensorId b);
    ir::TensorId reshape(ir::TensorId x, ir::Shape shape);
    ir::TensorId transpose(ir::TensorId x, std::vector<std::int64_t> perm);

    const ir::Shape &shape(ir::TensorId t) const { return m_graph.tensor(t).shape; }
    void markOutput(ir::TensorId t) { m_graph.tensor(t).role = ir::Role::Output; }
    ir::Graph take();

private:
    ir::Graph m_graph;
    ir::DType m_dtype;
    std::vector<std::string> m_scope;
    std::string m_prefix;
};

} // namespace tapestry::io::zoo
