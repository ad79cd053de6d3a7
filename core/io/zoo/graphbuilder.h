#pragma once

#include "ir/graph.h"

#include <string>
#include <unordered_map>
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
    // LayerNormalization with weight and bias (GPT, BERT), or RMSNorm with
    // weight only (T5, LLaMA), over the last dim, as module `module`.
    ir::TensorId layerNorm(const std::string &module, ir::TensorId x, double epsilon);
    ir::TensorId rmsNorm(const std::string &module, ir::TensorId x, double epsilon);
    // Embedding lookup: Gather(table, ids) in scope `module`.
    ir::TensorId embedding(const std::string &module, ir::TensorId table, ir::TensorId ids);
    // A training loss: SoftmaxCrossEntropyLoss(logits, labels), a scalar, in
    // scope "loss". The caller marks the graph's final loss as its output.
    ir::TensorId crossEntropyLoss(ir::TensorId logits, ir::TensorId labels);

    const ir::Shape &shape(ir::TensorId t) const { return m_graph.tensor(t).shape; }
    // Ops write activations of the builder's dtype; index outputs (TopK) differ.
    void setDType(ir::TensorId t, ir::DType dtype) { m_graph.setDType(t, dtype); }
    void markOutput(ir::TensorId t) { m_graph.setRole(t, ir::Role::Output); }
    ir::Graph take();

private:
    // Adds a tensor after checking its size and the model's (ir/sizes.h).
    ir::TensorId addTensor(const std::string &name, ir::Shape shape, ir::DType dtype, ir::Role role);
    [[noreturn]] void fail(const std::string &where, const std::string &problem) const;

    ir::Graph m_graph;
    ir::DType m_dtype;
    std::int64_t m_bytes = 0;  // the bytes of every tensor so far
    std::vector<std::string> m_scope;
    std::string m_prefix;
    // Last counter used per op base name, so naming the k-th op of a type in a
    // scope costs O(1) instead of probing _1.._k (a 1000-layer model has
    // thousands of ops per top-level scope).
    std::unordered_map<std::string, int> m_lastSuffix;
};

} // namespace tapestry::io::zoo
