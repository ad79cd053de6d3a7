// Deep graphs for checking that a pass's stamped result (Repeats::Stamp,
// passes/repeats.h) is the one walking every op gives: runs of like layers,
// and graphs made to cut a run short or to leave none.
#pragma once

#include "io/jsonmodel.h"
#include "io/modelloader.h"
#include "io/zoo/zoo.h"
#include "ir/graph.h"
#include "passes/repeats.h"

#include <functional>
#include <string>
#include <vector>

namespace tapestry::testing {

struct RepeatCase {
    std::string name;
    std::function<ir::Graph()> build;
    bool stamps = true;  // some layers are stamped rather than walked
    int minCopies = passes::ReducedGraph::kMinCopies;  // lower to stamp shallower stacks
    bool scoped = true;  // copies are scopes, so pruning stamps too
};

inline std::vector<RepeatCase> repeatCases()
{
    auto zoo = [](std::string spec) { return [spec] { return io::zoo::build(spec); }; };
    return {
        {"gpt2, 40 layers", zoo("gpt2?layers=40")},
        {"gpt3-175b", zoo("gpt3-175b")},
        {"bert-base, 40 layers", zoo("bert-base?layers=40")},
        {"llama2-7b", zoo("llama2-7b")},
        {"mixtral-8x7b", zoo("mixtral-8x7b")},
        // Two runs: the decoder's in the graph, the encoder's in its reduced graph.
        {"t5-base, 40 and 40 layers", zoo("t5-base?layers=40&decoder_layers=40")},
        // Read back from tapestry.model JSON, with the reader's own ids.
        {"gpt2, 40 layers, through JSON",
         [] { return io::readModelJson(io::writeModelJson(io::zoo::build("gpt2?layers=40")), "gpt2.json"); }},
        {"gpt2, 40 layers, opaque names",
         [] {
             auto g = io::zoo::build("gpt2?layers=40");
             for (std::size_t i = 0; i < g.opCount(); ++i)
                 g.renameOp(ir::OpId(static_cast<std::int32_t>(i)), "node_" + std::to_string(i));
             return g;
         },
         true, passes::ReducedGraph::kMinCopies, false},
        // Layer 30 computes its MLP in half precision: the run ends before it.
        {"gpt2, 40 layers, layer 30 differs",
         [] {
             auto g = io::zoo::build("gpt2?layers=40");
             g.setDType(g.op(*g.findOp("transformer/h.30/mlp/Gelu")).outputs[0], ir::DType::F16);
             return g;
         }},
        // An op after the stack reads layer 20: its copy cannot be left out.
        {"gpt2, 40 layers, read from a middle layer",
         [] {
             auto g = io::zoo::build("gpt2?layers=40");
             const ir::TensorId mid = g.op(*g.findOp("transformer/h.20/Add_1")).outputs[0];
             const ir::Tensor &t = g.tensor(mid);
             const ir::TensorId out = g.addTensor("probe:0", t.shape, t.dtype, ir::Role::Output);
             g.addOp("Identity", "probe/Identity", {mid}, {out});
             return g;
         },
         false},
        // Too few layers to stamp by default; stamped from eight copies up.
        {"gpt2, 12 layers", zoo("gpt2"), false},
        {"gpt2, 12 layers, stamped from 8", zoo("gpt2"), true, 8},
        {"bert-base, stamped from 8", zoo("bert-base"), true, 8},
        {"t5-base, stamped from 8", zoo("t5-base"), true, 8},
        // A PyTorch export: ONNX ids, names and decomposed LayerNorms.
        {"gpt2-external.onnx, stamped from 8",
         [] { return io::loadModel(std::string(TAPESTRY_SOURCE_DIR) + "/samples/onnx/gpt2-external.onnx"); }, true, 8},
    };
}

} // namespace tapestry::testing
