#include "configsample.h"
#include "io/modelloader.h"
#include "io/zoo/graphbuilder.h"
#include "ir/error.h"
#include "search/referenceplan.h"
#include "search/techniquesearch.h"
#include "sharding/batchflow.h"
#include "sharding/meshprofile.h"

#include <QtTest>

#include <regex>
#include <set>

using namespace tapestry;

namespace {

sharding::Mesh mesh(std::vector<int> sizes)
{
    return sharding::findMeshProfile("dgx-h100").mesh(sizes, sharding::defaultAxisNames(sizes.size()));
}

// "transformer/h.3/attn/..." -> 3; -1 outside the layers.
int layerOf(const std::string &op)
{
    static const std::regex layer(R"((?:^|/)(?:h|layers)\.(\d+)/)");
    std::smatch m;
    return std::regex_search(op, m, layer) ? std::stoi(m[1]) : -1;
}

struct LayerCount {
    int forward = 0, backward = 0;
    std::set<std::int64_t> bytes;
    std::int64_t wireBytes = 0;
};

// Collectives of one kind charged to ops of transformer layers, per layer.
std::map<int, LayerCount> perLayer(const plan::Plan &p, sharding::CollectiveKind kind, std::int64_t minBytes)
{
    std::map<int, LayerCount> layers;
    for (const auto &c : p.cost.collectives) {
        const int l = layerOf(c.op);
        if (l < 0 || c.kind != kind || c.bytes < minBytes)
            continue;
        auto &lc = layers[l];
        (c.phase == cost::Phase::Forward ? lc.forward : lc.backward) += 1;
        lc.bytes.insert(c.bytes);
        lc.wireBytes += c.wireBytes;
    }
    return layers;
}

} // namespace

class TestReferencePlans : public QObject {
    Q_OBJECT

private slots:
    // Megatron's plan of the config.json families whose projections are
    // fused per key/value head (GPT-NeoX's query_key_value, InternLM2's
    // wqkv): the fused weight and its bias split by heads (dim 0), the
    // attention output and the MLP's second linear by rows, the MLP's first
    // by columns, the embedding by vocabulary; at batch 1 on 8 devices the
    // plan takes less than half the replicated plan's step.
    void megatronOfFusedFamilies_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QStringList>("specs");  // name=placements
        QTest::newRow("gpt_neox") << "pythia-1b.json"
                                  << QStringList{"gpt_neox.layers.1.attention.query_key_value.weight=[Shard(0)]",
                                                 "gpt_neox.layers.1.attention.query_key_value.bias=[Shard(0)]",
                                                 "gpt_neox.layers.1.attention.dense.weight=[Shard(0)]",
                                                 "gpt_neox.layers.1.mlp.dense_h_to_4h.weight=[Shard(1)]",
                                                 "gpt_neox.layers.1.mlp.dense_4h_to_h.weight=[Shard(0)]",
                                                 "gpt_neox.embed_in.weight=[Shard(0)]",
                                                 "embed_out.weight=[Shard(1)]"};
        QTest::newRow("internlm2") << "internlm2-7b.json"
                                   << QStringList{"model.layers.1.attention.wqkv.weight=[Shard(0)]",
                                                  "model.layers.1.attention.wo.weight=[Shard(0)]",
                                                  "model.layers.1.feed_forward.w1.weight=[Shard(1)]",
                                                  "model.layers.1.feed_forward.w3.weight=[Shard(1)]",
                                                  "model.layers.1.feed_forward.w2.weight=[Shard(0)]",
                                                  "model.tok_embeddings.weight=[Shard(0)]",
                                                  "output.weight=[Shard(1)]"};
    }
    void megatronOfFusedFamilies()
    {
        QFETCH(QString, file);
        QFETCH(QStringList, specs);
        QTemporaryDir dir;
        const std::string path = testing::editedConfig(dir, file, QStringLiteral(R"({"num_hidden_layers": 2})"));
        io::LoadOptions options;
        options.batch = 1;
        const auto g = io::loadModel(path, options);
        const auto m = mesh({8});
        const auto p = search::referencePlan(g, path, m, search::ReferenceMethod::Megatron);
        for (const auto &entry : specs) {
            const std::string name = entry.section(QLatin1Char('='), 0, 0).toStdString();
            QVERIFY2(p.specs.count(name), name.c_str());
            QCOMPARE(QString::fromStdString(p.specs.at(name).spec.toPlacements()), entry.section(QLatin1Char('='), 1));
        }
        const auto replicated = search::referencePlan(g, path, m, search::ReferenceMethod::Replicate);
        QVERIFY(p.cost.stepTime < 0.5 * replicated.cost.stepTime);
    }

    void megatronRoles_data()
    {
        QTest::addColumn<QString>("name");
        QTest::addColumn<QString>("role");
        QTest::newRow("gpt qkv") << "transformer.h.3.attn.c_attn.weight" << "column-parallel";
        QTest::newRow("gpt qkv bias") << "transformer.h.3.attn.c_attn.bias" << "column-parallel";
        QTest::newRow("gpt out") << "transformer.h.3.attn.c_proj.weight" << "row-parallel";
        QTest::newRow("gpt c_fc") << "transformer.h.0.mlp.c_fc.weight" << "column-parallel";
        QTest::newRow("gpt c_proj") << "transformer.h.0.mlp.c_proj.weight" << "row-parallel";
        QTest::newRow("llama gate") << "model.layers.1.mlp.gate_proj.weight" << "column-parallel";
        QTest::newRow("llama down") << "model.layers.1.mlp.down_proj.weight" << "row-parallel";
        QTest::newRow("llama o") << "model.layers.1.self_attn.o_proj.weight" << "row-parallel";
        QTest::newRow("mixtral w1") << "model.layers.0.block_sparse_moe.experts.3.w1.weight" << "column-parallel";
        QTest::newRow("mixtral w2") << "model.layers.0.block_sparse_moe.experts.3.w2.weight" << "row-parallel";
        QTest::newRow("embedding") << "transformer.wte.weight" << "vocabulary-parallel embedding";
        QTest::newRow("llama embedding") << "model.embed_tokens.weight" << "vocabulary-parallel embedding";
        QTest::newRow("lm head") << "lm_head.weight" << "column-parallel";
        QTest::newRow("bert intermediate") << "bert.encoder.layer.0.intermediate.dense.weight" << "column-parallel";
        QTest::newRow("bert output") << "bert.encoder.layer.0.output.dense.weight" << "row-parallel";
        QTest::newRow("bert attention output") << "bert.encoder.layer.0.attention.output.dense.weight"
                                               << "row-parallel";
        QTest::newRow("t5 wi") << "encoder.block.0.layer.1.DenseReluDense.wi.weight" << "column-parallel";
        QTest::newRow("teaching fc1") << "mlp.fc1.weight" << "column-parallel";
        QTest::newRow("teaching fc2") << "mlp.fc2.weight" << "row-parallel";
        QTest::newRow("abc first") << "first.weight" << "column-parallel";
        QTest::newRow("abc second") << "second.weight" << "row-parallel";
        QTest::newRow("layer norm") << "transformer.h.0.ln_1.weight" << "replicated";
        QTest::newRow("positions") << "transformer.wpe.weight" << "replicated";
        QTest::newRow("router") << "model.layers.0.block_sparse_moe.gate.weight" << "replicated";
    }
    void megatronRoles()
    {
        QFETCH(QString, name);
        QFETCH(QString, role);
        QCOMPARE(QString::fromLatin1(search::toString(search::megatronRole(name.toStdString())).data()), role);
    }

    // Megatron on --mesh 8: 2 forward + 2 backward all-reduces of b·s·h per
    // layer; predicted communication 8·b·s·h·(t−1)/t elements per layer;
    // with sequence parallelism 4 all-gathers + 4 reduce-scatters instead.
    // Presets whose head count 8 does not divide are refused, naming both.
    void gptMegatron_data()
    {
        QTest::addColumn<QString>("preset");
        QTest::addColumn<int>("hidden");
        QTest::addColumn<int>("heads");
        QTest::addColumn<int>("elementBytes");
        QTest::newRow("gpt2") << "gpt2" << 768 << 12 << 4;
        QTest::newRow("gpt2-medium") << "gpt2-medium" << 1024 << 16 << 4;
        QTest::newRow("gpt2-large") << "gpt2-large" << 1280 << 20 << 4;
        QTest::newRow("gpt2-xl") << "gpt2-xl" << 1600 << 25 << 4;
        QTest::newRow("gpt3-6.7b") << "gpt3-6.7b" << 4096 << 32 << 2;
        QTest::newRow("gpt3-175b") << "gpt3-175b" << 12288 << 96 << 2;
    }
    void gptMegatron()
    {
        QFETCH(QString, preset);
        QFETCH(int, hidden);
        QFETCH(int, heads);
        QFETCH(int, elementBytes);
        const std::int64_t b = 2, s = 64, layers = 2, t = 8;
        const std::string source = "zoo:" + preset.toStdString() + "?layers=2&batch=2&seq=64";
        const auto g = io::loadModel(source);
        const auto m = mesh({8});
        if (heads % 8 != 0) {
            try {
                search::referencePlan(g, source, m, search::ReferenceMethod::Megatron);
                QFAIL("expected a refusal");
            } catch (const TapestryError &e) {
                const std::string msg = e.what();
                QVERIFY2(msg.find(std::to_string(heads) + " attention heads") != std::string::npos, msg.c_str());
                QVERIFY2(msg.find("'model' of size 8") != std::string::npos, msg.c_str());
            }
            return;
        }
        const std::int64_t bsh = b * s * hidden * elementBytes;
        const auto p = search::referencePlan(g, source, m, search::ReferenceMethod::Megatron);
        const auto allReduces = perLayer(p, sharding::CollectiveKind::AllReduce, 0);
        QCOMPARE(static_cast<std::int64_t>(allReduces.size()), layers);
        for (const auto &[layer, lc] : allReduces) {
            QCOMPARE(lc.forward, 2);
            QCOMPARE(lc.backward, 2);
            QVERIFY(lc.bytes == std::set<std::int64_t>{bsh});
            QCOMPARE(lc.wireBytes, 8 * bsh * (t - 1) / t);
        }
        QVERIFY(perLayer(p, sharding::CollectiveKind::AllGather, 0).empty());

        // Model states: 16 bytes per local parameter, split ones divided by t.
        std::int64_t split = 0, whole = 0;
        for (const auto &[name, entry] : p.specs) {
            const auto &tensor = g.tensor(*g.findTensor(name));
            if (tensor.role != ir::Role::Parameter)
                continue;
            (entry.spec.isReplicated() ? whole : split) += tensor.elementCount();
        }
        QVERIFY(split > 0 && whole > 0);
        const auto &mem = p.cost.memory;
        QCOMPARE(mem.parameters + mem.gradients + mem.optimizer, 16 * (split / t + whole));
        QCOMPARE(mem.activationModel, std::string("korthikanti"));

        search::ReferenceOptions sp;
        sp.sequenceParallel = true;
        const auto q = search::referencePlan(g, source, m, search::ReferenceMethod::Megatron, sp);
        QVERIFY(q.sequenceParallel);
        const auto gathers = perLayer(q, sharding::CollectiveKind::AllGather, 0);
        const auto scatters = perLayer(q, sharding::CollectiveKind::ReduceScatter, 0);
        QCOMPARE(static_cast<std::int64_t>(gathers.size()), layers);
        for (int l = 0; l < layers; ++l) {
            QCOMPARE(gathers.at(l).forward + gathers.at(l).backward, 4);
            QCOMPARE(scatters.at(l).forward + scatters.at(l).backward, 4);
            QVERIFY(gathers.at(l).bytes == std::set<std::int64_t>{bsh});
            QVERIFY(scatters.at(l).bytes == std::set<std::int64_t>{bsh});
            QCOMPARE(gathers.at(l).wireBytes + scatters.at(l).wireBytes, 8 * bsh * (t - 1) / t);
            // No activation all-reduce is left in a layer (only norm and bias gradients, of h elements).
            QVERIFY(perLayer(q, sharding::CollectiveKind::AllReduce, hidden * elementBytes + 1).empty());
        }
        QVERIFY(q.cost.memory.activations < p.cost.memory.activations);
    }

    // LESSONS.md case 2 on the teaching models: one all-reduce forward, none between.
    void teachingModels_data()
    {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("secondOp");
        QTest::newRow("mlp") << "zoo:mlp" << "mlp/fc2/MatMul";
        QTest::newRow("abc") << "zoo:abc" << "second/MatMul";
    }
    void teachingModels()
    {
        QFETCH(QString, model);
        QFETCH(QString, secondOp);
        const auto g = io::loadModel(model.toStdString());
        const auto p = search::referencePlan(g, model.toStdString(), mesh({4}), search::ReferenceMethod::Megatron);
        QCOMPARE(p.cost.collectives.size(), std::size_t{1});
        QCOMPARE(QString::fromStdString(p.cost.collectives[0].op), secondOp);
        QVERIFY(p.cost.collectives[0].kind == sharding::CollectiveKind::AllReduce);
        QVERIFY(p.cost.collectives[0].phase == cost::Phase::Forward);
        QVERIFY(p.searchWarnings.empty());
    }

    // dp: the gradient all-reduce is the parameter bytes.
    void dataParallel_data()
    {
        QTest::addColumn<QString>("model");
        QTest::newRow("mlp") << "zoo:mlp";
        // (GPT-2's learned positions broadcast over the batch: their gradient
        // is cheaper to reduce as the [1, s, h] lookup than as the table.)
        QTest::newRow("llama") << "zoo:llama2-7b?layers=1&batch=8&seq=32&hidden=256&heads=4&kv_heads=4&ffn=512&vocab=1000";
    }
    void dataParallel()
    {
        QFETCH(QString, model);
        const auto g = io::loadModel(model.toStdString());
        const auto p = search::referencePlan(g, model.toStdString(), mesh({8}), search::ReferenceMethod::DataParallel);
        std::int64_t gradients = 0;
        for (const auto &c : p.cost.collectives)
            if (c.phase == cost::Phase::Backward && c.kind == sharding::CollectiveKind::AllReduce &&
                c.reason.starts_with("weight gradient"))
                gradients += c.bytes;
        QCOMPARE(gradients, g.parameterBytes());
        for (const auto &c : p.cost.collectives)
            QVERIFY2(c.phase == cost::Phase::Backward || c.bytes <= 4, c.op.c_str());  // forward: the loss scalar at most
    }

    // The batch is the leading dim most inputs share: T5's relative position
    // buckets ([s, s] integer inputs) are not split as if s were a batch.
    void dataParallelSplitsTheBatchOnly()
    {
        const std::string source = "zoo:t5-base?layers=1&decoder_layers=1&batch=8&seq=64";
        const auto g = io::loadModel(source);
        const auto p = search::referencePlan(g, source, mesh({2, 4}), search::ReferenceMethod::DataParallel);
        for (const char *input : {"input_ids", "decoder_input_ids", "labels", "attention_mask"})
            QCOMPARE(p.specs.at(input).spec.toPlacements(), std::string("[Shard(0), Shard(0)]"));
        for (const char *input : {"relative_position_bucket", "decoder_relative_position_bucket"})
            QVERIFY(p.specs.at(input).spec.isReplicated());
        for (const auto &c : p.cost.collectives)
            QVERIFY2(c.phase == cost::Phase::Backward || c.bytes <= 4, (c.op + " " + c.tensor).c_str());
    }

    // torchvision's ResNet-18 exported for training (BatchNormalization with
    // its running statistics as inputs of the channels' size): dp splits the
    // images, not the statistics a vote over the inputs' leading dims took
    // for the batch (64 channels outvote one image input), and every op has
    // a rule, so that nothing runs gathered: the forward pass exchanges
    // only the batch norms' per-channel sums.
    void dataParallelResNetSplitsTheImages()
    {
        const std::string source = TAPESTRY_SOURCE_DIR "/samples/onnx/resnet18-train-shapes.onnx";
        io::LoadOptions options;
        options.batch = 32;
        const auto g = io::loadModel(source, options);
        const auto p = search::referencePlan(g, source, mesh({4}), search::ReferenceMethod::DataParallel);
        QCOMPARE(p.specs.at("images").spec.toPlacements(), std::string("[Shard(0)]"));
        int statistics = 0;
        for (auto t : g.tensorsWithRole(ir::Role::Input))
            if (g.tensor(t).shape.size() == 1) {
                ++statistics;
                QVERIFY2(p.specs.at(g.tensor(t).name).spec.isReplicated(), g.tensor(t).name.c_str());
            }
        QCOMPARE(statistics, 2 * 20);  // running mean and variance of 20 batch norms
        QVERIFY2(p.cost.warnings.empty(), p.cost.warnings.empty() ? "" : p.cost.warnings.front().c_str());
        for (const auto &c : p.cost.collectives)
            if (c.phase == cost::Phase::Forward)
                QVERIFY2(c.kind == sharding::CollectiveKind::AllReduce && c.bytes <= 8 * 512,
                         (c.op + " " + c.tensor).c_str());
    }

    // The batch found by data flow: the token ids' dim 0 in every preset
    // (the dim the old rule took), the input of an export whose batch leads.
    void batchFoundByDataFlow_data()
    {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("input");
        QTest::addColumn<int>("batch");
        QTest::newRow("gpt2") << "zoo:gpt2?layers=2&batch=4" << "input_ids" << 4;
        QTest::newRow("bert") << "zoo:bert-base?layers=2&batch=4" << "input_ids" << 4;
        QTest::newRow("t5") << "zoo:t5-base?layers=1&decoder_layers=1&batch=8&seq=64" << "input_ids" << 8;
        QTest::newRow("llama") << "zoo:llama3-8b?layers=2&batch=2" << "input_ids" << 2;
        QTest::newRow("mixtral") << "zoo:mixtral-8x7b?layers=1&experts=2&batch=2" << "input_ids" << 2;
        QTest::newRow("mlp") << "zoo:mlp?batch=8" << "x" << 8;
        // torch 2's nn.Transformer export merges its batch under the
        // sequence ([s, b, h] -> [s·b, h] before out_proj): no dim passes
        // whole, and the batch is taken by position (dim 0 of src, 8).
        QTest::newRow("nn.Transformer export") << TAPESTRY_SOURCE_DIR "/samples/onnx/transformer-2x3.onnx" << "" << 8;
    }
    void batchFoundByDataFlow()
    {
        QFETCH(QString, model);
        QFETCH(QString, input);
        QFETCH(int, batch);
        const auto g = io::loadModel(model.toStdString());
        const auto flow = sharding::batchByDataFlow(g);
        if (input.isEmpty()) {
            QVERIFY(!flow);
            QCOMPARE(search::modelBatch(g), std::int64_t(batch));
            return;
        }
        QVERIFY(flow);
        QCOMPARE(QString::fromStdString(g.tensor(flow->input).name), input);
        QCOMPARE(flow->dim, 0);
        QCOMPARE(flow->size, std::int64_t(batch));
    }

    // torch.nn.MultiheadAttention's default layout, sequence first: src
    // [s, b, h], heads merged with the batch ([s, b·heads, d]). Its dim 0 is
    // the sequence (the attention's keys, which no split may cut); the data
    // flow finds the batch in dim 1, and dp splits it there, with the labels
    // the loss reads beside the output.
    void dataParallelOfASequenceFirstModel()
    {
        const std::int64_t s = 8, b = 4, heads = 2, d = 4, h = heads * d;
        io::zoo::GraphBuilder g("seqfirst");
        auto x = g.input("src", {s, b, h}, ir::DType::F32);
        auto target = g.input("target", {s, b, h}, ir::DType::F32);
        auto split = [&](const std::string &module) {
            auto y = g.linear(module, x, h, true);
            return g.transpose(g.reshape(y, {s, b * heads, d}), {1, 0, 2});
        };
        auto q = split("q"), k = split("k"), v = split("v");
        auto scores = g.matmul(q, g.transpose(k, {0, 2, 1}));
        auto probs = g.op("Softmax", {scores}, g.shape(scores), {{"axis", std::int64_t{-1}}});
        auto context = g.reshape(g.transpose(g.matmul(probs, v), {1, 0, 2}), {s, b, h});
        auto y = g.linear("out", context, h, true);
        auto error = g.op("Sub", {y, target}, g.shape(y));
        auto squared = g.op("Mul", {error, error}, g.shape(y));
        g.markOutput(g.op("ReduceMean", {squared}, {}, {{"keepdims", std::int64_t{0}}}));
        const auto graph = g.take();

        const auto flow = sharding::batchByDataFlow(graph);
        QVERIFY(flow);
        QCOMPARE(flow->dim, 1);
        QCOMPARE(flow->size, b);
        QCOMPARE(flow->inputs.size(), std::size_t{2});
        const auto p = search::referencePlan(graph, "seqfirst", mesh({2}), search::ReferenceMethod::DataParallel);
        QCOMPARE(p.specs.at("src").spec.toPlacements(), std::string("[Shard(1)]"));
        QCOMPARE(p.specs.at("target").spec.toPlacements(), std::string("[Shard(1)]"));
        // Split so, nothing moves forward: each device runs its sequences.
        for (const auto &c : p.cost.collectives)
            QVERIFY2(c.phase == cost::Phase::Backward || c.bytes <= 4, (c.op + " " + c.tensor).c_str());
    }

    void dataParallelRefusesIndivisibleBatch()
    {
        const auto g = io::loadModel("zoo:mlp?batch=6");
        try {
            search::referencePlan(g, "zoo:mlp?batch=6", mesh({4}), search::ReferenceMethod::DataParallel);
            QFAIL("expected a refusal");
        } catch (const TapestryError &e) {
            const std::string msg = e.what();
            QVERIFY2(msg.find("batch 6 of input 'x'") != std::string::npos, msg.c_str());
        }
    }

    // An ONNX model's symbolic batch is 1 unless bound: the refusal says so
    // and names the option; bound, the batch splits.
    void dataParallelNamesAnUnboundBatch()
    {
        const std::string source = TAPESTRY_SOURCE_DIR "/samples/onnx/gpt-tiny.onnx";
        try {
            search::referencePlan(io::loadModel(source), source, mesh({4}), search::ReferenceMethod::DataParallel);
            QFAIL("expected a refusal");
        } catch (const TapestryError &e) {
            const std::string msg = e.what();
            QVERIFY2(msg.find("batch is 1") != std::string::npos && msg.find("--batch") != std::string::npos,
                     msg.c_str());
        }
        io::LoadOptions options;
        options.batch = 8;
        const auto p = search::referencePlan(io::loadModel(source, options), source, mesh({4}),
                                             search::ReferenceMethod::DataParallel);
        QVERIFY(p.cost.fitsMemory);
    }

    void replicateHasNoCommunication()
    {
        const auto g = io::loadModel("zoo:gpt2?layers=1&batch=2&seq=32");
        const auto p = search::referencePlan(g, "g", mesh({8}), search::ReferenceMethod::Replicate);
        QVERIFY(p.cost.collectives.empty());
        for (const auto &[name, entry] : p.specs)
            QVERIFY(entry.spec.isReplicated());
    }

    // 2D: tensor parallel on "model", data parallel on "data".
    void megatronOnTwoAxes()
    {
        const std::string source = "zoo:gpt2-medium?layers=1&batch=4&seq=32";
        const auto g = io::loadModel(source);
        const auto p = search::referencePlan(g, source, mesh({2, 8}), search::ReferenceMethod::Megatron);
        // GPT-2's fused q/k/v weight, [3, in, out]: each of q, k and v split by heads.
        const auto &q = p.specs.at("transformer.h.0.attn.c_attn.weight").spec;
        QCOMPARE(q.toPlacements(), std::string("[Replicate(), Shard(2)]"));
        QCOMPARE(p.specs.at("input_ids").spec.toPlacements(), std::string("[Shard(0), Replicate()]"));
        int dataGradients = 0, modelActivations = 0;
        for (const auto &c : p.cost.collectives) {
            if (c.axis == "data" && c.reason.starts_with("weight gradient"))
                ++dataGradients;
            if (c.axis == "model" && layerOf(c.op) == 0 && c.kind == sharding::CollectiveKind::AllReduce)
                ++modelActivations;
        }
        QVERIFY(dataGradients > 0);
        QCOMPARE(modelActivations, 4);
    }

    // An export whose linears lost their names to constant folding
    // (torch.nn.TransformerEncoder: linear1 and linear2 read onnx::MatMul_N,
    // which the loader names after their modules again):
    // the MLP's pair is found by structure, column then row, its first
    // bias split with it. The attention's query, key and value are slices
    // of one fused in_proj, which the loader holds as its three parts
    // stacked ([3, 64, 64]): it is column-parallel by heads in every part,
    // its bias with it, and out_proj (a Gemm of transB) row-parallel.
    // Loaded with the fused weight as exported ([64, 192]), no column split
    // keeps q, k and v whole by heads: the attention stays replicated,
    // out_proj too although it is named row-parallel (split alone, it only
    // added an all-reduce).
    void megatronFoundByStructure()
    {
        const std::string source = std::string(TAPESTRY_SOURCE_DIR) + "/samples/onnx/transformer-encoder.onnx";
        for (const bool stacked : {true, false}) {
            io::LoadOptions options;
            options.stackFusedProjections = stacked;
            const auto g = io::loadModel(source, options);
            const auto p = search::referencePlan(g, source, mesh({4}), search::ReferenceMethod::Megatron);
            auto weightOf = [&](const std::string &op) {
                for (const auto &o : g.ops())
                    if (o.name == op)
                        return g.tensor(o.inputs[1]).name;
                return std::string();
            };
            auto placement = [&](const std::string &tensor) {
                return QString::fromStdString(p.specs.at(tensor).spec.toPlacements());
            };
            for (int layer = 0; layer < 3; ++layer) {
                const std::string l = std::to_string(layer);
                const std::string fc1 = weightOf("/layers." + l + "/linear1/MatMul");
                const std::string fc2 = weightOf("/layers." + l + "/linear2/MatMul");
                QCOMPARE(fc1, "layers." + l + ".linear1.weight");
                QCOMPARE(placement(fc1), QStringLiteral("[Shard(1)]"));
                QCOMPARE(placement(fc2), QStringLiteral("[Shard(0)]"));
                QCOMPARE(placement("layers." + l + ".linear1.bias"), QStringLiteral("[Shard(0)]"));
                QCOMPARE(placement("layers." + l + ".linear2.bias"), QStringLiteral("[Replicate()]"));
                const std::string inProj = weightOf("/layers." + l + "/self_attn/MatMul");
                if (stacked) {
                    QCOMPARE(g.tensor(*g.findTensor(inProj)).shape, (ir::Shape{3, 64, 64}));
                    QCOMPARE(placement(inProj), QStringLiteral("[Shard(2)]"));
                    QCOMPARE(placement("layers." + l + ".self_attn.in_proj_bias"), QStringLiteral("[Shard(2)]"));
                    QCOMPARE(placement("layers." + l + ".self_attn.out_proj.weight"), QStringLiteral("[Shard(1)]"));
                } else {
                    QCOMPARE(placement(inProj), QStringLiteral("[Replicate()]"));
                    QCOMPARE(placement("layers." + l + ".self_attn.out_proj.weight"),
                             QStringLiteral("[Replicate()]"));
                }
            }
        }
    }

    // Unnamed linears around an attention core: the three whose outputs the
    // core reads are column-parallel, the one reading its output row-parallel.
    void megatronFindsAttentionByStructure()
    {
        io::zoo::GraphBuilder b("plain");
        const std::int64_t batch = 2, seq = 8, heads = 4, d = 8, h = heads * d;
        auto x = b.input("x", {batch, seq, h}, ir::DType::F32);
        auto split = [&](const std::string &module) {
            auto y = b.linear(module, x, h, true);
            return b.transpose(b.reshape(y, {batch, seq, heads, d}), {0, 2, 1, 3});
        };
        auto q = split("a"), k = split("b"), v = split("c");
        auto scores = b.matmul(q, b.transpose(k, {0, 1, 3, 2}));
        auto probs = b.op("Softmax", {scores}, b.shape(scores), {{"axis", std::int64_t{-1}}});
        auto context = b.reshape(b.transpose(b.matmul(probs, v), {0, 2, 1, 3}), {batch, seq, h});
        b.markOutput(b.linear("d", context, h, true));
        const auto g = b.take();
        const auto p = search::referencePlan(g, "plain", mesh({4}), search::ReferenceMethod::Megatron);
        for (const char *column : {"a.weight", "b.weight", "c.weight"})
            QCOMPARE(QString::fromStdString(p.specs.at(column).spec.toPlacements()), QStringLiteral("[Shard(1)]"));
        QCOMPARE(QString::fromStdString(p.specs.at("c.bias").spec.toPlacements()), QStringLiteral("[Shard(0)]"));
        QCOMPARE(QString::fromStdString(p.specs.at("d.weight").spec.toPlacements()), QStringLiteral("[Shard(0)]"));
        QCOMPARE(QString::fromStdString(p.specs.at("d.bias").spec.toPlacements()), QStringLiteral("[Replicate()]"));
        QVERIFY(p.searchWarnings.empty());
    }

    void megatronWithoutKnownNamesWarns()
    {
        io::zoo::GraphBuilder b("plain");
        auto x = b.input("x", {8, 16}, ir::DType::F32);
        b.markOutput(b.linear("proj", x, 16, false));
        const auto g = b.take();
        const auto p = search::referencePlan(g, "plain", mesh({4}), search::ReferenceMethod::Megatron);
        QCOMPARE(p.searchWarnings.size(), std::size_t{1});
        QVERIFY(p.searchWarnings[0].find("no parameter has a Megatron module name") != std::string::npos);
    }

    void methodNames()
    {
        QVERIFY(search::referenceMethodFromString("dp") == search::ReferenceMethod::DataParallel);
        QVERIFY(!search::referenceMethodFromString("tap"));
    }
};

QTEST_APPLESS_MAIN(TestReferencePlans)
#include "tst_referenceplans.moc"
