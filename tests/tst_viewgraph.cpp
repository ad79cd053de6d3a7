#include "cost/pipeline.h"
#include "io/modelloader.h"
#include "io/zoo/graphbuilder.h"
#include "layout/viewgraph.h"
#include "passes/coarsen.h"
#include "passes/prune.h"

#include <QTest>

#include <algorithm>

using namespace tapestry;
using layout::ViewNode;

namespace {

struct Pipeline {
    ir::Graph graph;
    passes::CoarseGraph coarse;
    passes::SubgraphClasses classes;
};

Pipeline run(ir::Graph g)
{
    Pipeline p{std::move(g), {}, {}};
    p.coarse = passes::Coarsen().run(p.graph);
    p.classes = passes::Prune().run(p.graph, p.coarse);
    return p;
}

// L identical residual MLP layers under "net/layers.N".
ir::Graph stack(int layers)
{
    io::zoo::GraphBuilder b("stack");
    auto x = b.input("x", {4, 16}, ir::DType::F32);
    b.push("net");
    for (int i = 0; i < layers; ++i) {
        b.push("layers." + std::to_string(i));
        auto h = b.linear("fc1", x, 32, true);
        h = b.op("Relu", {h}, b.shape(h));
        h = b.linear("fc2", h, 16, true);
        x = b.op("Add", {x, h}, b.shape(x));
        b.pop();
    }
    auto y = b.linear("head", x, 8, false);
    b.pop();
    b.markOutput(y);
    return b.take();
}

int blocks(const layout::ViewGraph &v)
{
    int n = 0;
    for (const auto &node : v.nodes)
        n += node.kind == ViewNode::Kind::Block;
    return n;
}

} // namespace

class TestViewGraph : public QObject {
    Q_OBJECT
private slots:
    void foldsRepeatedLayersIntoOneBlock_data()
    {
        QTest::addColumn<int>("layers");
        QTest::newRow("3") << 3;
        QTest::newRow("12") << 12;
        QTest::newRow("200") << 200;
    }
    void foldsRepeatedLayersIntoOneBlock()
    {
        QFETCH(int, layers);
        const auto p = run(stack(layers));
        const auto view = layout::buildViewGraph(p.graph, p.coarse, p.classes);
        QCOMPARE(blocks(view), 1);
        const auto &block = *std::find_if(view.nodes.begin(), view.nodes.end(),
                                          [](const auto &n) { return n.kind == ViewNode::Kind::Block; });
        QCOMPARE(block.repeat, layers);
        QCOMPARE(block.title, std::string("net/layers.*"));
        // The folded view stays small whatever the depth: block + head.
        QVERIFY(view.nodes.size() <= 3);
        // Block → head edge is labelled with the residual stream's shape.
        bool labelled = false;
        for (const auto &e : view.edges)
            labelled = labelled || e.label == "4\u00d716";
        QVERIFY(labelled);
    }

    void expandingOpensTheFirstInstance()
    {
        const auto p = run(stack(4));
        const auto folded = layout::buildViewGraph(p.graph, p.coarse, p.classes);
        const auto &cls = p.classes.classes.front();
        const auto first = std::find_if(folded.nodes.begin(), folded.nodes.end(),
                                        [](const auto &n) { return n.kind == ViewNode::Kind::Block; })
                               ->instances.front();
        const auto open = layout::buildViewGraph(p.graph, p.coarse, p.classes, {{cls.id.value, first}});
        QCOMPARE(blocks(open), 1);
        int coarseInClass = 0;
        int repeat = 0;
        for (const auto &n : open.nodes) {
            if (n.kind == ViewNode::Kind::Coarse && n.cls.valid())
                ++coarseInClass;
            if (n.kind == ViewNode::Kind::Block)
                repeat = n.repeat;
        }
        QCOMPARE(repeat, 3);
        QCOMPARE(static_cast<std::size_t>(coarseInClass), cls.instances[first].nodes.size());
        // The open instance feeds the folded rest.
        bool feeds = false;
        for (const auto &e : open.edges)
            feeds = feeds || open.nodes[static_cast<std::size_t>(e.to)].kind == ViewNode::Kind::Block;
        QVERIFY(feeds);
    }

    // A pipeline's chunks fold apart: 12 layers cut before layers 3 and 8
    // are three blocks of 3, 5 and 4, each saying its chunk, and the head
    // after the last layer is in the last chunk.
    void pipelineChunksFoldApart()
    {
        const auto p = run(stack(12));
        const auto layers = cost::modelLayers(p.graph, p.classes);
        QCOMPARE(layers.count, 12);
        const std::vector<int> cuts{3, 8};
        const std::vector<int> chunkOfOp = cost::chunkOfOps(layers, cuts);
        const auto view = layout::buildViewGraph(p.graph, p.coarse, p.classes, {}, chunkOfOp);
        std::vector<std::pair<int, int>> folded;  // (chunk, repeat)
        for (const auto &n : view.nodes) {
            if (n.kind == ViewNode::Kind::Block)
                folded.emplace_back(n.chunk, n.repeat);
            else
                QCOMPARE(n.chunk, 2);  // the head reads the last layer
        }
        std::sort(folded.begin(), folded.end());
        QCOMPARE(folded, (std::vector<std::pair<int, int>>{{0, 3}, {1, 5}, {2, 4}}));
        // Without a pipeline: one block, no chunk.
        const auto whole = layout::buildViewGraph(p.graph, p.coarse, p.classes);
        QCOMPARE(blocks(whole), 1);
        for (const auto &n : whole.nodes)
            QCOMPARE(n.chunk, -1);
    }

    void everyCoarseNodeIsShownOnce()
    {
        const auto p = run(stack(5));
        const auto view = layout::buildViewGraph(p.graph, p.coarse, p.classes);
        std::size_t shown = 0;
        for (const auto &n : view.nodes) {
            if (n.kind == ViewNode::Kind::Coarse)
                ++shown;
            else
                for (auto i : n.instances)
                    shown += p.classes.classes[n.cls.index()].instances[i].nodes.size();
        }
        QCOMPARE(shown, p.coarse.nodeCount());
    }

    void scopePatterns_data()
    {
        QTest::addColumn<QStringList>("scopes");
        QTest::addColumn<QString>("pattern");
        QStringList layers;
        for (int i = 0; i < 12; ++i)
            layers << QString("transformer/h.%1").arg(i);
        QTest::newRow("layers") << layers << "transformer/h.*";
        QTest::newRow("ten and eleven") << QStringList{"h.10", "h.11"} << "h.*";
        // Swin's third stage alternates window and shifted-window blocks.
        QTest::newRow("even blocks") << QStringList{"features.5/features.5.0", "features.5/features.5.2",
                                                    "features.5/features.5.4"}
                                     << "features.5/features.5.{0,2,4}";
        QTest::newRow("odd blocks, many") << QStringList{"b.1", "b.3", "b.5", "b.7", "b.9", "b.11"} << "b.{1,3,…,11}";
        QTest::newRow("no one step") << QStringList{"b.0", "b.1", "b.5"} << "b.*";
        QTest::newRow("suffix") << QStringList{"enc/block.1/ff", "enc/block.2/ff"} << "enc/block.*/ff";
        QTest::newRow("one") << QStringList{"model/layers.3"} << "model/layers.3";
    }
    void scopePatterns()
    {
        QFETCH(QStringList, scopes);
        QFETCH(QString, pattern);
        std::vector<std::string> s;
        for (const auto &x : scopes)
            s.push_back(x.toStdString());
        QCOMPARE(QString::fromStdString(layout::scopePattern(s)), pattern);
    }
};

QTEST_APPLESS_MAIN(TestViewGraph)
#include "tst_viewgraph.moc"
