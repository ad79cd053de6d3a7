#include "io/modelloader.h"
#include "io/zoo/zoo.h"
#include "ir/error.h"
#include "ir/validate.h"

#include <QTest>

#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <variant>

using namespace tapestry;

namespace {

// Index of the layer an op belongs to when its name is PREFIX<digits>/...,
// or -1.
long layerIndex(const std::string &opName, const std::string &prefix)
{
    if (opName.compare(0, prefix.size(), prefix) != 0)
        return -1;
    const auto slash = opName.find('/', prefix.size());
    if (slash == std::string::npos || slash == prefix.size())
        return -1;
    const std::string digits = opName.substr(prefix.size(), slash - prefix.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos)
        return -1;
    return std::stol(digits);
}

std::string attributesToString(const ir::Attributes &attributes)
{
    std::ostringstream out;
    for (const auto &[key, value] : attributes) {
        out << key << '=';
        std::visit(
            [&](const auto &v) {
                using T = std::decay_t<decltype(v)>;
                if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, double> ||
                              std::is_same_v<T, std::string>)
                    out << v;
                else
                    for (const auto &e : v)
                        out << e << ',';
            },
            value);
        out << ';';
    }
    return out.str();
}

// One line per op of each layer under `prefix`: the op's name inside the
// layer, type, attributes, output shapes, and per input either the op of the
// same layer that produces it (by position in the layer) or, for tensors from
// outside the layer, role and shape. Layers are structurally identical when
// their lines are.
std::map<long, std::vector<std::string>> layerSignatures(const ir::Graph &g, const std::string &prefix)
{
    std::map<long, std::vector<std::string>> layers;
    std::map<long, std::map<std::int32_t, std::size_t>> positionInLayer;  // op id -> position
    for (std::size_t i = 0; i < g.opCount(); ++i) {
        const ir::Op &op = g.ops()[i];
        const long layer = layerIndex(op.name, prefix);
        if (layer < 0)
            continue;
        auto &positions = positionInLayer[layer];
        std::ostringstream line;
        line << op.name.substr(op.name.find('/', prefix.size())) << ' ' << op.type << " {"
             << attributesToString(op.attributes) << "} in:";
        for (ir::TensorId t : op.inputs) {
            const ir::Tensor &tensor = g.tensor(t);
            auto producer = tensor.producer.valid() ? positions.find(tensor.producer.value) : positions.end();
            if (producer != positions.end())
                line << " op" << producer->second;
            else
                line << ' ' << ir::toString(tensor.role) << ir::shapeToString(tensor.shape);
        }
        line << " out:";
        for (ir::TensorId t : op.outputs)
            line << ' ' << ir::shapeToString(g.tensor(t).shape) << ir::toString(g.tensor(t).dtype);
        positions[static_cast<std::int32_t>(i)] = layers[layer].size();
        layers[layer].push_back(line.str());
    }
    return layers;
}

std::string errorOf(const std::string &spec)
{
    try {
        io::loadModel("zoo:" + spec);
    } catch (const TapestryError &e) {
        return e.what();
    }
    return "no error";
}

} // namespace

class TestZoo : public QObject {
    Q_OBJECT
private slots:
    void parameterCountMatchesPublished_data()
    {
        QTest::addColumn<QString>("preset");
        QTest::addColumn<double>("published");
        QTest::newRow("gpt2") << "gpt2" << 124.4e6;
        QTest::newRow("gpt2-medium") << "gpt2-medium" << 355e6;
        QTest::newRow("gpt2-large") << "gpt2-large" << 774e6;
        QTest::newRow("gpt2-xl") << "gpt2-xl" << 1.558e9;
        QTest::newRow("gpt3-6.7b") << "gpt3-6.7b" << 6.7e9;
        QTest::newRow("gpt3-175b") << "gpt3-175b" << 175e9;
        QTest::newRow("bert-base") << "bert-base" << 110e6;
        QTest::newRow("bert-large") << "bert-large" << 335e6;
        QTest::newRow("t5-base") << "t5-base" << 223e6;
        QTest::newRow("t5-large") << "t5-large" << 738e6;
        QTest::newRow("llama2-7b") << "llama2-7b" << 6.74e9;
        QTest::newRow("llama2-70b") << "llama2-70b" << 69.0e9;
        QTest::newRow("llama3-8b") << "llama3-8b" << 8.03e9;
        QTest::newRow("llama3-70b") << "llama3-70b" << 70.6e9;
        QTest::newRow("mixtral-8x7b") << "mixtral-8x7b" << 46.7e9;
    }
    void parameterCountMatchesPublished()
    {
        QFETCH(QString, preset);
        QFETCH(double, published);
        const auto g = io::zoo::build(preset.toStdString());
        const auto count = static_cast<double>(g.parameterCount());
        QVERIFY2(std::abs(count - published) <= 0.01 * published,
                 qPrintable(QStringLiteral("%1 parameters, published %2").arg(count, 0, 'f', 0).arg(published, 0, 'f', 0)));
    }

    void presetValidatesWithScalarLoss_data()
    {
        QTest::addColumn<QString>("preset");
        for (const auto &p : io::zoo::presets())
            QTest::newRow(p.name.c_str()) << QString::fromStdString(p.name);
    }
    void presetValidatesWithScalarLoss()
    {
        QFETCH(QString, preset);
        const auto g = io::loadModel("zoo:" + preset.toStdString());  // validates
        QVERIFY(g.opCount() > 0);
        const std::string family = io::zoo::findPreset(preset.toStdString())->family;
        if (family == "mlp" || family == "abc")
            return;  // teaching models end in their activations, no loss
        const auto outputs = g.tensorsWithRole(ir::Role::Output);
        QCOMPARE(outputs.size(), std::size_t(1));
        QCOMPARE(g.tensor(outputs[0]).shape, ir::Shape{});
        std::size_t losses = 0;
        for (const auto &op : g.ops())
            losses += op.type == "SoftmaxCrossEntropyLoss";
        QVERIFY(losses >= 1);
    }

    void layersAreStructurallyIdentical_data()
    {
        QTest::addColumn<QString>("spec");
        QTest::addColumn<QString>("prefix");
        QTest::addColumn<int>("layers");
        QTest::newRow("gpt2") << "gpt2" << "transformer/h." << 12;
        QTest::newRow("gpt3-175b") << "gpt3-175b" << "transformer/h." << 96;
        QTest::newRow("bert-base") << "bert-base" << "bert/encoder/layer." << 12;
        QTest::newRow("t5 encoder") << "t5-base" << "encoder/block." << 12;
        QTest::newRow("t5 decoder") << "t5-base" << "decoder/block." << 12;
        QTest::newRow("llama2-7b (MHA)") << "llama2-7b?layers=3" << "model/layers." << 3;
        QTest::newRow("llama3-8b (GQA)") << "llama3-8b?layers=3" << "model/layers." << 3;
        QTest::newRow("mixtral layers") << "mixtral-8x7b?layers=3" << "model/layers." << 3;
        QTest::newRow("mixtral experts")
            << "mixtral-8x7b?layers=1" << "model/layers.0/block_sparse_moe/experts." << 8;
    }
    void layersAreStructurallyIdentical()
    {
        QFETCH(QString, spec);
        QFETCH(QString, prefix);
        QFETCH(int, layers);
        const auto g = io::zoo::build(spec.toStdString());
        const auto signatures = layerSignatures(g, prefix.toStdString());
        QCOMPARE(signatures.size(), std::size_t(layers));
        const auto &first = signatures.begin()->second;
        QVERIFY(first.size() > 3);
        for (const auto &[layer, lines] : signatures) {
            QCOMPARE(lines.size(), first.size());
            for (std::size_t i = 0; i < lines.size(); ++i)
                QVERIFY2(lines[i] == first[i],
                         qPrintable(QStringLiteral("layer %1 op %2: %3 vs layer 0: %4")
                                        .arg(layer)
                                        .arg(i)
                                        .arg(QString::fromStdString(lines[i]), QString::fromStdString(first[i]))));
        }
    }

    void knobsChangeLayerCount_data()
    {
        QTest::addColumn<QString>("spec");
        QTest::addColumn<QString>("prefix");
        QTest::addColumn<int>("layers");
        QTest::newRow("gpt2 layers=2") << "gpt2?layers=2" << "transformer/h." << 2;
        QTest::newRow("bert layers=3") << "bert-base?layers=3" << "bert/encoder/layer." << 3;
        QTest::newRow("t5 encoder layers=3") << "t5-base?layers=3&decoder_layers=2" << "encoder/block." << 3;
        QTest::newRow("t5 decoder_layers=2") << "t5-base?layers=3&decoder_layers=2" << "decoder/block." << 2;
        QTest::newRow("llama layers=2") << "llama3-70b?layers=2" << "model/layers." << 2;
        QTest::newRow("mixtral experts=4")
            << "mixtral-8x7b?layers=1&experts=4&top_k=1" << "model/layers.0/block_sparse_moe/experts." << 4;
    }
    void knobsChangeLayerCount()
    {
        QFETCH(QString, spec);
        QFETCH(QString, prefix);
        QFETCH(int, layers);
        const auto g = io::loadModel("zoo:" + spec.toStdString());
        std::set<long> seen;
        for (const auto &op : g.ops())
            if (const long layer = layerIndex(op.name, prefix.toStdString()); layer >= 0)
                seen.insert(layer);
        QCOMPARE(seen.size(), std::size_t(layers));
        QCOMPARE(*seen.rbegin(), long(layers - 1));
    }

    void knobsChangeShapes_data()
    {
        QTest::addColumn<QString>("spec");
        QTest::addColumn<QString>("tensor");
        QTest::addColumn<QString>("shape");
        QTest::newRow("gpt2 hidden, ffn") << "gpt2?layers=1&hidden=256&heads=4&ffn=1000"
                                          << "transformer.h.0.mlp.c_fc.weight" << "[256, 1000]";
        // hidden alone: heads keep the preset's width, the MLP its ratio,
        // LLaMA its query heads per key/value head.
        QTest::newRow("gpt2 hidden alone: heads") << "gpt2?layers=1&hidden=256&batch=2&seq=128"
                                                  << "transformer/h.0/attn/Softmax:0" << "[2, 4, 128, 128]";
        QTest::newRow("gpt2 hidden alone: ffn") << "gpt2?layers=1&hidden=256" << "transformer.h.0.mlp.c_fc.weight"
                                                << "[256, 1024]";
        QTest::newRow("llama hidden alone: kv heads") << "llama3-8b?layers=1&hidden=1024"
                                                      << "model.layers.0.self_attn.k_proj.weight" << "[1024, 256]";
        QTest::newRow("llama hidden alone: ffn") << "llama3-8b?layers=1&hidden=1024"
                                                 << "model.layers.0.mlp.up_proj.weight" << "[1024, 3584]";
        QTest::newRow("gpt2 vocab") << "gpt2?layers=1&vocab=1000" << "transformer.wte.weight" << "[1000, 768]";
        QTest::newRow("gpt2 batch, seq") << "gpt2?layers=1&batch=2&seq=128" << "input_ids" << "[2, 128]";
        QTest::newRow("gpt2 attention scores") << "gpt2?layers=1&batch=2&seq=128"
                                               << "transformer/h.0/attn/Softmax:0" << "[2, 12, 128, 128]";
        QTest::newRow("bert type_vocab") << "bert-base?layers=1&type_vocab=4"
                                         << "bert.embeddings.token_type_embeddings.weight" << "[4, 768]";
        QTest::newRow("t5 head_dim") << "t5-base?layers=1&decoder_layers=1&head_dim=32"
                                     << "encoder.block.0.layer.0.SelfAttention.q.weight" << "[768, 384]";
        QTest::newRow("t5 cross-attention") << "t5-base?layers=1&decoder_layers=1&seq=64&target_seq=16"
                                            << "decoder/block.0/layer.1/EncDecAttention/Softmax:0"
                                            << "[8, 12, 16, 64]";
        QTest::newRow("llama kv_heads") << "llama3-8b?layers=1&kv_heads=4"
                                        << "model.layers.0.self_attn.k_proj.weight" << "[4096, 512]";
        QTest::newRow("llama GQA expanded") << "llama3-8b?layers=1&seq=256"
                                            << "model/layers.0/self_attn/Expand:0" << "[8, 8, 4, 256, 128]";
        QTest::newRow("llama rotary seq") << "llama3-8b?layers=1&seq=256" << "rotary_cos" << "[1, 1, 256, 128]";
        QTest::newRow("mixtral experts, ffn") << "mixtral-8x7b?layers=1&experts=4&ffn=1000"
                                              << "model.layers.0.block_sparse_moe.experts.3.w1.weight"
                                              << "[4096, 1000]";
        QTest::newRow("mixtral router") << "mixtral-8x7b?layers=1&experts=4"
                                        << "model.layers.0.block_sparse_moe.gate.weight" << "[4096, 4]";
        QTest::newRow("mixtral capacity") << "mixtral-8x7b?layers=1&batch=2&seq=64"
                                          << "model/layers.0/block_sparse_moe/MoEDispatch:7" << "[32, 4096]";
        QTest::newRow("mixtral top_k") << "mixtral-8x7b?layers=1&batch=2&seq=64&top_k=3"
                                       << "model/layers.0/block_sparse_moe/TopK:1" << "[128, 3]";
    }
    void knobsChangeShapes()
    {
        QFETCH(QString, spec);
        QFETCH(QString, tensor);
        QFETCH(QString, shape);
        const auto g = io::loadModel("zoo:" + spec.toStdString());
        const auto id = g.findTensor(tensor.toStdString());
        QVERIFY2(id, qPrintable(tensor));
        QCOMPARE(QString::fromStdString(ir::shapeToString(g.tensor(*id).shape)), shape);
    }

    void loadOptionsBindBatchAndSeq()
    {
        io::LoadOptions options;
        options.batch = 3;
        options.seq = 96;
        const auto g = io::loadModel("zoo:llama3-8b?layers=1&batch=5", options);
        QCOMPARE(g.tensor(*g.findTensor("input_ids")).shape, (ir::Shape{3, 96}));
    }

    void badSpecIsRejected_data()
    {
        QTest::addColumn<QString>("spec");
        QTest::addColumn<QString>("message");
        QTest::newRow("unknown preset") << "gpt5" << "unknown zoo preset 'gpt5'";
        QTest::newRow("unknown knob") << "gpt2?depth=3" << "depth: unknown knob for gpt2";
        QTest::newRow("knob of another family") << "t5-base?kv_heads=2" << "kv_heads: unknown knob for t5-base";
        QTest::newRow("zero") << "gpt2?layers=0" << "layers: expects a positive integer, got 0";
        QTest::newRow("negative") << "bert-base?hidden=-8" << "hidden: expects a positive integer";
        QTest::newRow("not a number") << "gpt2?heads=twelve" << "heads: expects a positive integer";
        QTest::newRow("no value") << "gpt2?layers" << "expected knob=value";
        QTest::newRow("heads not dividing hidden") << "gpt2?heads=5" << "heads: heads=5 does not divide hidden=768";
        QTest::newRow("bert heads") << "bert-large?heads=12&hidden=1000" << "heads: heads=12 does not divide hidden=1000";
        QTest::newRow("kv_heads not dividing heads")
            << "llama3-8b?kv_heads=5" << "kv_heads: kv_heads=5 does not divide heads=32";
        QTest::newRow("odd rotary head") << "llama2-7b?hidden=4160&heads=64" << "heads: head size";
        QTest::newRow("seq beyond positions") << "gpt2?seq=2048" << "seq: seq=2048 exceeds positions=1024";
        QTest::newRow("top_k beyond experts") << "mixtral-8x7b?top_k=9" << "top_k: top_k=9 exceeds experts=8";
    }
    void badSpecIsRejected()
    {
        QFETCH(QString, spec);
        QFETCH(QString, message);
        const std::string error = errorOf(spec.toStdString());
        QVERIFY2(error.rfind("zoo:" + spec.toStdString(), 0) == 0, error.c_str());
        QVERIFY2(error.find(message.toStdString()) != std::string::npos, error.c_str());
    }

    void thousandLayerGptBuilds()
    {
        const auto g = io::loadModel("zoo:gpt2?layers=1000&hidden=64&heads=2&ffn=256&vocab=1000&seq=64");
        std::set<long> layers;
        for (const auto &op : g.ops())
            if (const long layer = layerIndex(op.name, "transformer/h."); layer >= 0)
                layers.insert(layer);
        QCOMPARE(layers.size(), std::size_t(1000));
        QVERIFY(g.findOp("transformer/h.999/mlp/c_proj/MatMul"));
    }

    void gpt2TiesLmHeadToTokenEmbedding()
    {
        const auto g = io::zoo::build("gpt2?layers=1");
        const auto wte = g.findTensor("transformer.wte.weight");
        QVERIFY(wte);
        QCOMPARE(g.tensor(*wte).consumers.size(), std::size_t(2));
        QCOMPARE(g.op(g.tensor(*wte).consumers[1]).name, std::string("lm_head/Transpose"));
        QVERIFY(!g.findTensor("lm_head.weight"));
    }
};

QTEST_APPLESS_MAIN(TestZoo)
#include "tst_zoo.moc"
