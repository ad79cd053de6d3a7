#include "classlistmodel.h"
#include "compareview.h"
#include "costchartsview.h"
#include "costsummarybar.h"
#include "graphpanel.h"
#include "inspectorview.h"
#include "lessondock.h"
#include "meshview.h"
#include "pinmenu.h"
#include "pipelinedock.h"
#include "candidatesview.h"
#include "canvasedge.h"
#include "graphscene.h"
#include "graphview.h"
#include <QComboBox>
#include <QLabel>
#include <QLineEdit>
#include <QElapsedTimer>
#include <QUrl>
#include <QDropEvent>
#include <QDragEnterEvent>
#include <QMimeData>
#include <QToolButton>
#include <QTreeWidget>
#include <QHeaderView>
#include <QRegularExpression>
#include <QMenu>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QStatusBar>
#include <QTableWidget>
#include "plan/planjson.h"
#include "io/modelloader.h"
#include "search/referenceplan.h"
#include "search/techniquesearch.h"
#include "studiowindow.h"

#include <QAbstractItemModelTester>
#include <QApplication>
#include <QDir>
#include <QFileInfo>
#include <QSettings>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QStandardPaths>
#include <QTableView>
#include <QTemporaryDir>
#include <QProcess>
#include <QTest>
#include <QUndoStack>

#include <map>
#include <QTreeWidgetItemIterator>

using namespace tapestry::views;

namespace {

// Opens `source` and waits until it is loaded and laid out.
bool openAndWait(StudioWindow &w, const QString &source)
{
    QSignalSpy laid(&w, &StudioWindow::layoutReady);
    QSignalSpy failed(&w, &StudioWindow::loadFailed);
    w.openModel(source);
    for (int i = 0; i < 600 && laid.isEmpty() && failed.isEmpty(); ++i)
        laid.wait(100);
    return !laid.isEmpty();
}

// Opens `source` and waits until it is laid out and its plan derived.
bool openAndPlan(StudioWindow &w, const QString &source)
{
    QSignalSpy planned(&w, &StudioWindow::planReady);
    if (!openAndWait(w, source))
        return false;
    return !planned.isEmpty() || planned.wait(60000);
}

int blockCount(const GraphPanel &panel)
{
    int n = 0;
    for (const auto &v : panel.viewGraph().nodes)
        n += v.kind == tapestry::layout::ViewNode::Kind::Block;
    return n;
}

QString inspectorText(const InspectorView &inspector)
{
    QStringList lines;
    for (int i = 0; i < inspector.topLevelItemCount(); ++i) {
        const auto *item = inspector.topLevelItem(i);
        lines << item->text(0) + QLatin1Char('=') + item->text(1);
    }
    return lines.join(QLatin1Char('\n'));
}

QString shotDir()
{
    const QString dir = QStringLiteral(TAPESTRY_BINARY_DIR "/screenshots");
    QDir().mkpath(dir);
    return dir;
}

// The two window sizes the studio is checked at: its default and 1920x1080.
void addBothSizes()
{
    QTest::addColumn<QSize>("size");
    QTest::newRow("1400x900") << QSize(1400, 900);
    QTest::newRow("1920x1080") << QSize(1920, 1080);
}

// A window of `size` showing megatron's plan of four LLaMA-3 8B layers on 8.
void showLlamaPlan(StudioWindow &w, QSize size)
{
    w.setQuietErrors(true);
    w.resize(size);
    w.setPlanRequest({QStringLiteral("megatron"), QStringLiteral("8"), QStringLiteral("dgx-h100"), {}, {}, {}});
    w.show();
}

} // namespace

class TestStudio : public QObject {
    Q_OBJECT
private slots:
    void initTestCase()
    {
        QStandardPaths::setTestModeEnabled(true);  // QSettings go to a test location
        QSettings().clear();  // each run starts as a new user's first: no window state kept from the last
    }

    void opensGptWithOneClassBlock()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        w.show();
        QVERIFY(openAndWait(w, QStringLiteral("zoo:gpt2?layers=6")));
        QCOMPARE(w.classModel()->rowCount(), 1);
        const auto idx = w.classModel()->index(0, ClassListModel::Instances);
        QCOMPARE(idx.data().toString(), QStringLiteral("×6"));
        QCOMPARE(blockCount(*w.graphPanel()), 1);
        bool found = false;
        for (auto *node : w.graphPanel()->scene()->canvasNodes())
            found = found || node->style().repeat == 6;
        QVERIFY(found);
        // Edges carry tensor shapes.
        bool labelled = false;
        for (const auto &e : w.graphPanel()->viewGraph().edges)
            labelled = labelled || e.label.find("\u00d7") != std::string::npos;
        QVERIFY(labelled);
    }

    void classListMatchesPruning_data()
    {
        QTest::addColumn<QString>("model");
        const QDir samples(QStringLiteral(TAPESTRY_SOURCE_DIR "/samples"));
        for (const auto &dir : {QStringLiteral("onnx"), QStringLiteral("models"), QStringLiteral("configs")})
            for (const auto &file : QDir(samples.filePath(dir)).entryList({QStringLiteral("*.onnx"), QStringLiteral("*.json")}, QDir::Files)) {
                if (file == QLatin1String("expected.json"))
                    continue;
                const QString path = samples.filePath(dir + QLatin1Char('/') + file);
                QTest::newRow(qPrintable(dir + QLatin1Char('/') + file)) << path;
            }
    }
    void classListMatchesPruning()
    {
        QFETCH(QString, model);
        StudioWindow w;
        w.setQuietErrors(true);
        QVERIFY2(openAndWait(w, model), qPrintable(w.lastError()));
        const auto expected = tapestry::views::loadModelForView(model);
        int repeated = 0;
        for (const auto &c : expected.classes->classes)
            if (static_cast<int>(c.instances.size()) >= expected.classes->minDuplicate) {
                const int row = w.classModel()->rowOfClass(c.id.value);
                QVERIFY(row >= 0);
                QCOMPARE(w.classModel()->index(row, ClassListModel::Instances).data().toString(),
                         QStringLiteral("×%1").arg(c.instances.size()));
                ++repeated;
            }
        QCOMPARE(w.classModel()->rowCount(), repeated);
        QVERIFY(!w.graphPanel()->viewGraph().nodes.empty());
    }

    void classListModelIsSound()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        QAbstractItemModelTester tester(w.classModel(), QAbstractItemModelTester::FailureReportingMode::QtTest);
        QAbstractItemModelTester proxyTester(w.classProxy(), QAbstractItemModelTester::FailureReportingMode::QtTest);
        QVERIFY(openAndWait(w, QStringLiteral("zoo:t5-base?layers=2")));
        QCOMPARE(w.classModel()->rowCount(), 2);  // encoder and decoder blocks
        w.classTable()->sortByColumn(ClassListModel::Parameters, Qt::DescendingOrder);
        QVERIFY(w.classProxy()->index(0, ClassListModel::Parameters).data(ClassListModel::SortRole).toLongLong() >=
                w.classProxy()->index(1, ClassListModel::Parameters).data(ClassListModel::SortRole).toLongLong());
    }

    void selectionSyncs()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        w.show();
        QVERIFY(openAndWait(w, QStringLiteral("zoo:gpt2?layers=4")));
        // Class list → graph and inspector.
        w.classTable()->selectRow(0);
        const int selected = w.graphPanel()->selectedViewNode();
        QVERIFY(selected >= 0);
        const auto &v = w.graphPanel()->viewGraph().nodes[static_cast<std::size_t>(selected)];
        QCOMPARE(v.kind, tapestry::layout::ViewNode::Kind::Block);
        QVERIFY(inspectorText(*w.inspector()).contains(QStringLiteral("Instances in the model=4")));
        // Graph → class list: select a node outside any class clears the class selection.
        int outside = -1;
        const auto &nodes = w.graphPanel()->viewGraph().nodes;
        for (std::size_t i = 0; i < nodes.size(); ++i)
            if (!nodes[i].cls.valid())
                outside = static_cast<int>(i);
        QVERIFY(outside >= 0);
        w.graphPanel()->selectViewNode(outside);
        QVERIFY(!w.classTable()->selectionModel()->hasSelection());
        QVERIFY(inspectorText(*w.inspector()).contains(QStringLiteral("Kind=")));
        // And back to the block: the class row is selected again.
        w.graphPanel()->selectViewNode(selected);
        QVERIFY(w.classTable()->selectionModel()->hasSelection());
    }

    // Shardings on the graph: each edge's second line is the block each
    // device holds where the plan splits the tensor (Megatron's MLP: the
    // column-parallel output split by its last dim), the edges that
    // collectives move are drawn heavier, and no two labels overlap in an
    // expanded class (the layout sizes them in the font they are drawn in).
    void edgesShowSharding()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        w.show();
        w.setPlanRequest({QStringLiteral("megatron"), QStringLiteral("4"), QStringLiteral("dgx-h100"), {}});
        QVERIFY(openAndPlan(w, QStringLiteral("zoo:gpt2?layers=2&hidden=256&heads=4&seq=64&vocab=1024")));
        QSignalSpy laid(&w, &StudioWindow::layoutReady);
        QVERIFY(w.expandClass(0));
        QVERIFY(laid.wait(20000));
        const auto &view = w.graphPanel()->viewGraph();
        const auto &edges = w.graphPanel()->scene()->canvasEdges();
        QCOMPARE(static_cast<std::size_t>(edges.size()), view.edges.size());
        const auto &graph = *w.document().graph;
        bool columnSplit = false, heavier = false;
        for (int i = 0; i < edges.size(); ++i) {
            const auto t = view.edges[static_cast<std::size_t>(i)].tensor;
            if (!t.valid())
                continue;
            const auto &tensor = graph.tensor(t);
            // c_fc and GELU.s output as c_proj reads it: 8×64×1024 split 4 ways by its last dim.
            if (tensor.name.find("h.0/mlp/") != std::string::npos && tensor.shape.back() == 1024) {
                QCOMPARE(edges[i]->note(), QStringLiteral("8×64×256"));
                columnSplit = true;
            }
            heavier = heavier || edges[i]->emphasis() > 0;
            QVERIFY(edges[i]->toolTip().contains(QString::fromStdString(tensor.name)));
        }
        QVERIFY(columnSplit);
        QVERIFY(heavier);
        for (int i = 0; i < edges.size(); ++i)
            for (int j = i + 1; j < edges.size(); ++j)
                if (!edges[i]->label().isEmpty() && !edges[j]->label().isEmpty())
                    QVERIFY2(!edges[i]->labelRect().intersects(edges[j]->labelRect()),
                             qPrintable(edges[i]->label() + QStringLiteral(" / ") + edges[j]->label()));
        QVERIFY(w.grab().save(shotDir() + QStringLiteral("/edges-sharding.png")));
        // Another plan: the notes follow it (dp splits the batch, not c_fc's columns).
        QSignalSpy planned(&w, &StudioWindow::planReady);
        w.setPlanRequest({QStringLiteral("dp"), QStringLiteral("4"), QStringLiteral("dgx-h100"), {}});
        w.derivePlan();
        QVERIFY(planned.wait(30000));
        for (int i = 0; i < edges.size(); ++i) {
            const auto t = view.edges[static_cast<std::size_t>(i)].tensor;
            if (t.valid() && graph.tensor(t).name.find("h.0/mlp/") != std::string::npos &&
                graph.tensor(t).shape.back() == 1024)
                QCOMPARE(edges[i]->note(), QStringLiteral("2×64×1024"));
        }
    }

    // Keyboard habits: the conventional keys on their actions (Open,
    // Save, Find, Undo, Redo, Quit, zoom), and no key bound twice.
    void shortcutsAreConventionalAndUnique()
    {
        StudioWindow w;
        QMap<QString, QString> byKey;
        QMap<QString, QKeySequence> byText;
        for (QAction *a : w.findChildren<QAction *>()) {
            if (a->shortcut().isEmpty())
                continue;
            const QString key = a->shortcut().toString();
            QVERIFY2(!byKey.contains(key), qPrintable(key + QStringLiteral(": ") + byKey.value(key) +
                                                      QStringLiteral(" and ") + a->text()));
            byKey.insert(key, a->text());
            byText.insert(QString(a->text()).remove(QLatin1Char('&')), a->shortcut());
        }
        QCOMPARE(byText.value(QStringLiteral("Save plan JSON…")), QKeySequence(QKeySequence::Save));
        QCOMPARE(byText.value(QStringLiteral("Open…")), QKeySequence(QKeySequence::Open));
        QCOMPARE(byText.value(QStringLiteral("Find…")), QKeySequence(QKeySequence::Find));
        QCOMPARE(byText.value(QStringLiteral("Quit")), QKeySequence(QKeySequence::Quit));
        QCOMPARE(byText.value(QStringLiteral("Zoom in")), QKeySequence(QKeySequence::ZoomIn));
        QVERIFY(!byText.value(QStringLiteral("Open plan JSON…")).isEmpty());
    }

    void expandAndCollapse()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        w.show();
        QVERIFY(openAndWait(w, QStringLiteral("zoo:gpt2?layers=4")));
        const auto folded = w.graphPanel()->viewGraph().nodes.size();
        QSignalSpy laid(&w, &StudioWindow::layoutReady);
        QVERIFY(w.expandClass(0));
        QVERIFY(laid.wait(20000));
        const auto &nodes = w.graphPanel()->viewGraph().nodes;
        QVERIFY(nodes.size() > folded);
        // The other three instances stay folded in a ×3 block.
        int repeat = 0;
        int opened = -1;
        for (std::size_t i = 0; i < nodes.size(); ++i) {
            if (nodes[i].kind == tapestry::layout::ViewNode::Kind::Block)
                repeat = nodes[i].repeat;
            else if (nodes[i].cls.valid())
                opened = static_cast<int>(i);
        }
        QCOMPARE(repeat, 3);
        QVERIFY(opened >= 0);
        // Double-click on a node of the open instance folds it again.
        w.graphPanel()->toggleExpanded(opened);
        QVERIFY(laid.wait(20000));
        QCOMPARE(w.graphPanel()->viewGraph().nodes.size(), folded);
    }

    void findSelectsMatches()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        w.show();
        QVERIFY(openAndWait(w, QStringLiteral("zoo:gpt2?layers=2")));
        QVERIFY(w.findNext(QStringLiteral("lm_head")) || w.findNext(QStringLiteral("wte")));
        QVERIFY(w.graphPanel()->selectedViewNode() >= 0);
        QVERIFY(w.findNext(QStringLiteral("768x3072")));  // a shape, typed with an x
        QVERIFY(!w.findNext(QStringLiteral("no-such-thing-anywhere")));

        // A match inside the folded layers: the first layer opens and the
        // match itself is selected, not the class around it (the inspector
        // and the mesh view then show its weight); a match in a layer that
        // stays folded selects the class.
        StudioWindow fresh;
        fresh.setQuietErrors(true);
        fresh.show();
        QVERIFY(openAndWait(fresh, QStringLiteral("zoo:gpt2?layers=2")));
        GraphPanel *graph = fresh.graphPanel();
        auto selectedTitle = [&] {
            const int v = graph->selectedViewNode();
            if (v < 0)
                return std::string("(none)");
            const auto &node = graph->viewGraph().nodes[static_cast<std::size_t>(v)];
            return node.kind == tapestry::layout::ViewNode::Kind::Coarse
                       ? std::string(graph->model().coarse->node(node.node).name)
                       : "block " + node.title;
        };
        QVERIFY(fresh.findNext(QStringLiteral("attn/c_proj")));
        QTRY_COMPARE_WITH_TIMEOUT(selectedTitle(), std::string("transformer/h.0/attn/c_proj"), 30000);
        // The next matches: h.0's other nodes holding c_proj's ops, drawn
        // now, then h.1's, in the block folding the rest.
        std::string title;
        for (int i = 0; i < 8 && title.rfind("block ", 0) != 0; ++i) {
            QVERIFY(fresh.findNext(QStringLiteral("attn/c_proj")));
            title = selectedTitle();
            QVERIFY2(title.rfind("transformer/h.0", 0) == 0 || title.rfind("block ", 0) == 0, title.c_str());
        }
        QCOMPARE(title, std::string("block transformer/h.1"));
    }

    void exportsImages()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        QVERIFY(openAndWait(w, QStringLiteral("zoo:gpt2?layers=2")));
        QTemporaryDir dir;
        const QString png = dir.filePath(QStringLiteral("g.png"));
        const QString svg = dir.filePath(QStringLiteral("g.svg"));
        QVERIFY(w.exportImage(png));
        QVERIFY(w.exportImage(svg));
        QImage image(png);
        QVERIFY(!image.isNull());
        QVERIFY(image.width() > 100 && image.height() > 100);
        QFile f(svg);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QByteArray text = f.readAll();
        QVERIFY(text.contains("<svg"));
        QVERIFY(text.contains("</svg>"));
        QVERIFY(!QFile::exists(png + QStringLiteral(".part")));

        // An image already there stays until the new one replaces it whole:
        // through a link, the link stays and its target is replaced; where
        // the export cannot go (a directory), what is there is kept and the
        // error says why in one line.
        const QString link = dir.filePath(QStringLiteral("latest.png"));
        QVERIFY(QFile::link(png, link));
        QVERIFY(w.exportImage(link));
        QVERIFY(QFileInfo(link).isSymLink());
        QVERIFY(!QImage(png).isNull());
        const QString folder = dir.filePath(QStringLiteral("shots.png"));
        QVERIFY(QDir().mkpath(folder));
        QString error;
        QVERIFY(!w.exportImage(folder, &error));
        QVERIFY2(error.contains(QStringLiteral("is a directory")), qPrintable(error));
        QVERIFY(QFileInfo(folder).isDir());
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files | QDir::Hidden).size(), 3);  // g.png, g.svg, the link
    }

    // The studio's --screenshot mode is for scripts: a plan that fails (a
    // malformed --mesh) still gets its screenshot, and the exit says 2.
    void screenshotOfAFailedPlanExitsTwo()
    {
        QTemporaryDir dir;
        const QString shot = dir.filePath(QStringLiteral("shot.png"));
        QProcess studio;
        studio.start(QStringLiteral(TAPESTRY_GUI), {QStringLiteral("zoo:mlp"), QStringLiteral("--mesh"),
                                                    QStringLiteral("3x"), QStringLiteral("--screenshot"), shot});
        QVERIFY(studio.waitForFinished(120000));
        QCOMPARE(studio.exitStatus(), QProcess::NormalExit);
        QCOMPARE(studio.exitCode(), 2);
        QVERIFY2(studio.readAllStandardError().contains("3x"), "the error names the mesh");
        QVERIFY(!QImage(shot).isNull());
    }

    void badFileKeepsPreviousModel()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        QVERIFY(openAndWait(w, QStringLiteral("zoo:gpt2?layers=2")));
        QTemporaryDir dir;
        const QString bad = dir.filePath(QStringLiteral("broken.json"));
        QFile f(bad);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("{\"format\": \"tapestry.model\", \"vers");
        f.close();
        QSignalSpy failed(&w, &StudioWindow::loadFailed);
        w.openModel(bad);
        QVERIFY(failed.wait(20000));
        QVERIFY(w.lastError().contains(bad));
        QVERIFY(w.lastError().contains(QStringLiteral("not valid JSON")));
        QVERIFY(!w.lastError().contains(QLatin1Char('\n')));
        QCOMPARE(w.document().source, QStringLiteral("zoo:gpt2?layers=2"));
        QCOMPARE(w.classModel()->rowCount(), 1);
    }

    void planIsDerivedAndShown()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        w.show();
        w.setPlanRequest({QStringLiteral("megatron"), QStringLiteral("8"), QStringLiteral("dgx-h100"), {}, {}, {}});
        QSignalSpy planned(&w, &StudioWindow::planReady);
        QVERIFY(openAndWait(w, QStringLiteral("zoo:gpt2?layers=2&heads=16")));
        if (planned.isEmpty())
            QVERIFY(planned.wait(60000));
        QVERIFY(w.planned().plan);
        QCOMPARE(QString::fromStdString(w.planned().plan->method), QStringLiteral("megatron"));
        QVERIFY(w.costBar()->text().contains(QStringLiteral("step")));
        QVERIFY(w.costBar()->fits());
        // The breakdown chart has a bar for the layer class, for the ops
        // outside classes and for each collective kind and phase the plan
        // uses (Megatron: all-reduces forward and backward).
        const QStringList bars = w.costCharts()->stepCategories();
        QVERIFY2(bars.contains(QStringLiteral("transformer/h.*")), qPrintable(bars.join(QLatin1Char(','))));
        QVERIFY(bars.contains(QStringLiteral("outside classes")));
        QVERIFY(bars.contains(QStringLiteral("all-reduce · forward")));
        QVERIFY(bars.contains(QStringLiteral("all-reduce · backward")));
        // The inspector shows the plan's spec of c_fc's weight: split columns.
        QVERIFY(w.findNext(QStringLiteral("h.0/mlp/c_fc")));
        QVERIFY(w.expandClass(0));
        QSignalSpy laid(&w, &StudioWindow::layoutReady);
        QVERIFY(laid.wait(20000));
        QVERIFY(w.selectByName(QStringLiteral("transformer/h.0/mlp/c_fc")));
        QString sharding;
        QTreeWidgetItemIterator it(w.inspector());
        for (; *it; ++it)
            if ((*it)->text(0) == QStringLiteral("transformer.h.0.mlp.c_fc.weight"))
                sharding = (*it)->text(1);
        QVERIFY2(sharding.contains(QStringLiteral("[Shard(1)]")), qPrintable(sharding));
        bool collectives = false;
        for (QTreeWidgetItemIterator c(w.inspector()); *c; ++c)
            collectives = collectives || (*c)->text(0) == QStringLiteral("Cost per step");
        QVERIFY(collectives);
        // Sizes in binary units, as the CLI writes them: c_fc's weight,
        // 768 x 3072 floats, is 9 MiB, never "9.44 MB" or "9 MB".
        QString bytes;
        for (QTreeWidgetItemIterator c(w.inspector()); *c; ++c) {
            const QString value = (*c)->text(1);
            QVERIFY2(!QRegularExpression(QStringLiteral("\\d ?[kKMGT]B\\b")).match(value).hasMatch(), qPrintable(value));
            if ((*c)->text(0) == QStringLiteral("Bytes") && (*c)->parent() &&
                (*c)->parent()->text(0) == QStringLiteral("transformer.h.0.mlp.c_fc.weight"))
                bytes = value;
        }
        QCOMPARE(bytes, QLocale().formattedDataSize(768 * 3072 * 4, 2, QLocale::DataSizeIecFormat));
        QVERIFY2(bytes.contains(QStringLiteral("MiB")), qPrintable(bytes));
        // Colouring by sharding tells column from row splits apart.
        w.setColouring(StudioWindow::Colouring::BySharding);
        QColor fcIn, fcOut;
        for (auto *node : w.graphPanel()->scene()->canvasNodes()) {
            if (node->style().title == QStringLiteral("mlp/c_fc"))
                fcIn = node->style().fill;
            if (node->style().title == QStringLiteral("mlp/c_proj"))
                fcOut = node->style().fill;
        }
        QVERIFY(fcIn.isValid() && fcOut.isValid());
        QVERIFY(fcIn != fcOut);
        // Saving writes a plan file the CLI's format reads back.
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("plan.json"));
        QVERIFY(w.savePlan(path));
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QVERIFY(f.readAll().contains("tapestry.plan"));
    }

    void refusedPlanKeepsModel()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        w.setPlanRequest({QStringLiteral("megatron"), QStringLiteral("8"), QStringLiteral("dgx-h100"), {}, {}, {}});
        QSignalSpy failed(&w, &StudioWindow::planFailed);
        QVERIFY(openAndWait(w, QStringLiteral("zoo:gpt2?layers=2")));  // 12 heads: 8 does not divide
        if (failed.isEmpty())
            QVERIFY(failed.wait(60000));
        QVERIFY(w.lastError().contains(QStringLiteral("heads")));
        QVERIFY(!w.planned().plan);
        QCOMPARE(w.classModel()->rowCount(), 1);
    }

    // Eight devices in a row keep their labels readable in a narrow dock: the
    // row wraps, in reading order; given the room it stays one row, and a 2D
    // mesh keeps its shape.
    void meshRowWrapsWhenNarrow()
    {
        tapestry::views::MeshView view;
        tapestry::sharding::Mesh row;
        row.axes.push_back({"model", 8, {}});
        view.setMesh(row);
        const QString widest = QStringLiteral("dev 7 (7)");
        QFont small = view.font();
        small.setPointSizeF(std::max(6.0, view.font().pointSizeF() - 1.5));
        const QRect narrow(0, 0, 340, 400), wide(0, 0, 1400, 400);
        for (int d = 0; d < 8; ++d)
            QVERIFY2(view.deviceRect(d, narrow).width() >= QFontMetrics(small).horizontalAdvance(widest),
                     qPrintable(QString::number(view.deviceRect(d, narrow).width())));
        QVERIFY(view.deviceRect(4, narrow).top() > view.deviceRect(0, narrow).bottom());
        QVERIFY(view.deviceRect(1, narrow).left() > view.deviceRect(0, narrow).right());
        for (int d = 1; d < 8; ++d) {
            QCOMPARE(view.deviceRect(d, wide).top(), view.deviceRect(0, wide).top());
            QVERIFY(view.deviceRect(d, wide).left() > view.deviceRect(d - 1, wide).right());
        }
        tapestry::sharding::Mesh grid;
        grid.axes.push_back({"data", 4, {}});
        grid.axes.push_back({"model", 2, {}});
        view.setMesh(grid);
        QCOMPARE(view.deviceRect(1, narrow).top(), view.deviceRect(0, narrow).top());
        QVERIFY(view.deviceRect(2, narrow).top() > view.deviceRect(0, narrow).bottom());
    }

    // The mesh view says what each axis carries in the plan, and flags an
    // axis whose name says otherwise; the legend's lines push the devices down.
    void meshAxesLegend()
    {
        tapestry::views::MeshView view;
        tapestry::sharding::Mesh grid;
        grid.axes.push_back({"data", 2, {}});
        grid.axes.push_back({"model", 4, {}});
        const QRect area(0, 0, 600, 400);
        view.setMesh(grid);
        QVERIFY(view.axesLegend().isEmpty());
        const qreal top = view.deviceRect(0, area).top();
        view.setMesh(grid, {*tapestry::plan::AxisCarries::fromString("tensor"),
                            *tapestry::plan::AxisCarries::fromString("data")});
        QCOMPARE(view.axesLegend(), QStringLiteral("axis data (2, rows) carries tensor — not data as named\n"
                                                   "axis model (4, columns) carries data — not tensor as named"));
        QVERIFY(view.deviceRect(0, area).top() > top);
        view.setMesh(grid, {*tapestry::plan::AxisCarries::fromString("data"),
                            *tapestry::plan::AxisCarries::fromString("tensor+sequence")});
        QCOMPARE(view.axesLegend(), QStringLiteral("axis data (2, rows) carries data\n"
                                                   "axis model (4, columns) carries tensor+sequence"));
    }

    void lessonTwoDimensionalMlp()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        w.show();
        QSignalSpy planned(&w, &StudioWindow::planReady);
        QSignalSpy laid(&w, &StudioWindow::layoutReady);
        w.openLesson(2);
        QVERIFY(laid.wait(30000));
        QVERIFY(!planned.isEmpty());
        QCOMPARE(w.planned().plan->mesh.toString(), std::string("4x2 (y, x)"));
        // The lesson opens on its first layer, A[H1_Y, H2_X] on the mesh.
        QTRY_VERIFY_WITH_TIMEOUT(w.meshView()->caption().startsWith(QStringLiteral("mlp.fc1.weight[I_y, J_x]")), 10000);
        // B[H2_X, H1_Y]: device 5 sits at row 2, column 1 of the 4x2 grid.
        QVERIFY(w.selectByName(QStringLiteral("mlp/fc2")));
        auto *mesh = w.meshView();
        QCOMPARE(mesh->frame(), 0);
        QVERIFY2(mesh->caption().contains(QStringLiteral("mlp.fc2.weight[I_x, J_y]")), qPrintable(mesh->caption()));
        QCOMPARE(mesh->deviceLabel(5), QStringLiteral("1/2 2/4"));
        QCOMPARE(mesh->deviceLabel(0), QStringLiteral("0/2 0/4"));
        // fc2's collectives step by step: gathers before the matmul, the
        // reduce-scatter of the partial output after it.
        QStringList titles;
        for (int f = 1; f < mesh->frameCount(); f += 2) {
            mesh->setFrame(f);
            titles << mesh->caption();
        }
        QVERIFY(mesh->frameCount() >= 3);
        const QString all = titles.join(QLatin1Char('\n'));
        QVERIFY2(all.contains(QStringLiteral("all-gather")), qPrintable(all));
        QVERIFY2(all.contains(QStringLiteral("reduce-scatter")), qPrintable(all));
        QVERIFY(all.indexOf(QStringLiteral("all-gather")) < all.indexOf(QStringLiteral("reduce-scatter")));
        // A reduce-scatter's "before" frame holds partial sums on every device.
        for (int f = 1; f < mesh->frameCount(); f += 2) {
            mesh->setFrame(f);
            if (mesh->caption().contains(QStringLiteral("reduce-scatter"))) {
                QVERIFY(mesh->shownSpec().hasPartial());
                mesh->next();
                QVERIFY(!mesh->shownSpec().hasPartial());
                break;
            }
        }
        mesh->setFrame(0);
        const QString shot = shotDir() + QStringLiteral("/lesson-mlp-4x2.png");
        QVERIFY(mesh->exportImage(shot));
        QVERIFY(!QImage(shot).isNull());
        QVERIFY(w.grab().save(shotDir() + QStringLiteral("/lesson-mlp-4x2-window.png")));
    }

    void lessonColumnThenRow()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        QSignalSpy planned(&w, &StudioWindow::planReady);
        QSignalSpy laid(&w, &StudioWindow::layoutReady);
        w.openLesson(1);
        QVERIFY(laid.wait(30000));
        if (planned.isEmpty())
            QVERIFY(planned.wait(30000));
        // The lesson opens on its first matmul, B shown on the mesh.
        QTRY_VERIFY_WITH_TIMEOUT(w.meshView()->caption().startsWith(QStringLiteral("first.weight")), 10000);
        // X·B·C with B split by columns and C by rows: the first matmul needs
        // no collective, the second one all-reduce forward.
        QVERIFY(w.selectByName(QStringLiteral("first")));
        QCOMPARE(w.meshView()->frameCount(), 1);
        QVERIFY(w.meshView()->caption().contains(QStringLiteral("J_model")));
        QVERIFY(w.selectByName(QStringLiteral("second")));
        QVERIFY(w.meshView()->caption().contains(QStringLiteral("I_model")));
        int forwardAllReduces = 0;
        for (int f = 1; f < w.meshView()->frameCount(); f += 2) {
            w.meshView()->setFrame(f);
            forwardAllReduces += w.meshView()->caption().contains(QStringLiteral("forward all-reduce"));
        }
        QCOMPARE(forwardAllReduces, 1);
    }

    // The lessons teach in words: a step's text and the mesh view move
    // together (its node selected, its collective's frame shown), every
    // collective the mesh view steps through for a lesson's nodes is
    // narrated with its bytes, and each step is shot at both sizes.
    void lessonsNarrateEveryStep_data()
    {
        QTest::addColumn<int>("lesson");
        QTest::addColumn<QString>("firstNode");
        QTest::newRow("1: column then row") << 1 << "first";
        QTest::newRow("2: 2D on 4x2") << 2 << "mlp/fc1";
    }
    void lessonsNarrateEveryStep()
    {
        QFETCH(int, lesson);
        QFETCH(QString, firstNode);
        for (const QSize size : {QSize(1400, 900), QSize(1920, 1080)}) {
            StudioWindow w;
            w.setQuietErrors(true);
            w.resize(size);
            w.show();
            QSignalSpy laid(&w, &StudioWindow::layoutReady);
            QVERIFY(w.openLesson(lesson));
            QVERIFY(laid.wait(30000));
            LessonDock *dock = w.lessonDock();
            QTRY_VERIFY_WITH_TIMEOUT(dock->step() == 0, 10000);
            QVERIFY(dock->isVisible());
            const Lesson &script = dock->lesson();
            QVERIFY(script.steps.size() >= 4);
            // The first step opens on the node that matters, its weight on the mesh.
            QCOMPARE(script.steps.front().node, firstNode);
            QVERIFY(dock->shownText().contains(QStringLiteral("split")));
            QSet<QString> named;  // "forward all-gather of x over y"
            for (int k = 0; k < script.steps.size(); ++k) {
                dock->setStep(k);
                const LessonStep &step = script.steps[k];
                // A collective's "after" step animates to it from "before".
                if (w.meshView()->isAnimating())
                    QVERIFY(w.meshView()->transition() < 1);
                QTRY_COMPARE_WITH_TIMEOUT(w.meshView()->frame(), step.frame, 10000);
                QVERIFY2(!step.text.isEmpty(), qPrintable(step.title));
                if (step.frame % 2 == 1) {
                    // A collective's "before" frame: the caption names it, the text says it and its bytes.
                    const QString caption = w.meshView()->caption();
                    for (const char *kind : {"all-gather", "all-reduce", "reduce-scatter", "all-to-all"})
                        if (caption.contains(QLatin1String(kind)))
                            QVERIFY2(dock->shownText().contains(QLatin1String(kind)),
                                     qPrintable(caption + QStringLiteral(" / ") + dock->shownText()));
                    QVERIFY2(dock->shownText().contains(QStringLiteral("each device sends")), qPrintable(dock->shownText()));
                    named.insert(caption.section(QLatin1Char(' '), 0, 5));
                }
                QVERIFY(w.grab().save(shotDir() + QStringLiteral("/lesson-%1-step-%2-%3x%4.png")
                                                      .arg(lesson)
                                                      .arg(k + 1)
                                                      .arg(size.width())
                                                      .arg(size.height())));
            }
            // Every collective of the lesson's nodes has a step of its own.
            int collectives = 0;
            for (const QString node : {QStringLiteral("first"), QStringLiteral("second"), QStringLiteral("mlp/fc1"),
                                       QStringLiteral("mlp/fc2")})
                if (std::any_of(script.steps.begin(), script.steps.end(),
                                [&](const LessonStep &st) { return st.node == node; })) {
                    QVERIFY(w.selectByName(node));
                    collectives += (w.meshView()->frameCount() - 1) / 2;
                }
            QVERIFY(collectives > 0);
            QCOMPARE(static_cast<int>(std::count_if(script.steps.begin(), script.steps.end(),
                                                    [](const LessonStep &st) { return st.frame % 2 == 1; })),
                     collectives);
            // Back walks the text and the mesh back.
            dock->setStep(1);
            dock->previous();
            QCOMPARE(dock->step(), 0);
            QCOMPARE(w.meshView()->frame(), 0);
        }
    }

    // Play animates each collective: pieces move between the devices along
    // the axis (the frames of one moment differ from another's), and the
    // view rests on the collective's result.
    void collectivesAnimate()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        w.show();
        QSignalSpy laid(&w, &StudioWindow::layoutReady);
        QVERIFY(w.openLesson(2));
        QVERIFY(laid.wait(30000));
        QTRY_VERIFY_WITH_TIMEOUT(w.lessonDock()->step() == 0, 10000);
        MeshView *mesh = w.meshView();
        QVERIFY(mesh->frameCount() >= 3);
        mesh->setFrame(1);  // fc1's first collective, before
        QImage still = mesh->grab().toImage();
        QStringList shots;
        QImage previous = still;
        for (double t : {0.1, 0.35, 0.6, 0.85}) {
            mesh->setTransition(t);
            const QImage moment = mesh->grab().toImage();
            QVERIFY2(moment != previous, qPrintable(QString::number(t)));
            previous = moment;
            const QString shot = shotDir() + QStringLiteral("/mesh-motion-%1.png").arg(qRound(t * 100));
            QVERIFY(moment.save(shot));
        }
        mesh->setTransition(-1);
        QCOMPARE(mesh->grab().toImage(), still);
        // Played at 4x: every collective runs to its result, and Play stops at the end.
        mesh->setSpeed(4);
        mesh->setFrame(0);
        QSignalSpy frames(mesh, &MeshView::frameChanged);
        mesh->play(true);
        QVERIFY(mesh->isPlaying());
        QTRY_VERIFY_WITH_TIMEOUT(mesh->isAnimating(), 5000);
        QTRY_VERIFY_WITH_TIMEOUT(!mesh->isPlaying(), 30000);
        QCOMPARE(mesh->frame(), mesh->frameCount() - 1);
        QVERIFY(frames.count() >= mesh->frameCount() - 1);
    }

    // Lesson 3 narrates the open plan: the selected node's weights and
    // each of its collectives.
    void ownPlanLesson()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        QVERIFY(!w.openLesson(3));  // no plan yet: said, nothing opened
        QVERIFY(!w.lastError().isEmpty());
        w.setPlanRequest({QStringLiteral("megatron"), QStringLiteral("4"), QStringLiteral("dgx-h100"), {}});
        QVERIFY(openAndPlan(w, QStringLiteral("zoo:gpt2?layers=2&hidden=256&heads=4&seq=64&vocab=1024")));
        QVERIFY(w.selectByName(QStringLiteral("transformer/h.*")));
        QCOMPARE(w.graphPanel()->viewGraph().nodes[static_cast<std::size_t>(w.graphPanel()->selectedViewNode())].kind,
                 tapestry::layout::ViewNode::Kind::Block);
        // The class is folded and selected: the lesson opens its first
        // layer, then narrates it node by node.
        QVERIFY(w.openLesson(3));
        QTRY_VERIFY_WITH_TIMEOUT(!w.lessonDock()->lesson().steps.isEmpty(), 30000);
        const Lesson &script = w.lessonDock()->lesson();
        QVERIFY2(script.title.contains(QStringLiteral("transformer/h.0")), qPrintable(script.title));
        // Megatron's layer: column-parallel then row-parallel linears, each
        // row-parallel one's all-reduce narrated with the mesh on its frame.
        bool rows = false, allReduce = false;
        for (int k = 0; k < script.steps.size(); ++k) {
            w.lessonDock()->setStep(k);
            const QString text = w.lessonDock()->shownText();
            rows = rows || text.contains(QStringLiteral("rows split 4 ways"));
            if (text.contains(QStringLiteral("all-reduce adds"))) {
                allReduce = true;
                QVERIFY2(w.meshView()->caption().contains(QStringLiteral("all-reduce")), qPrintable(w.meshView()->caption()));
            }
        }
        QVERIFY(rows);
        QVERIFY(allReduce);
        QVERIFY(w.grab().save(shotDir() + QStringLiteral("/lesson-3-last-step.png")));
        QVERIFY(w.lessonDock()->shownText().contains(QStringLiteral("sends")));
    }

    // View › Minimap folds the minimap away and back, and the choice holds
    // for the next window.
    void minimapFoldsAndIsRemembered()
    {
        auto minimapAction = [](StudioWindow &w) -> QAction * {
            for (QAction *a : w.findChildren<QAction *>())
                if (a->text() == QStringLiteral("&Minimap"))
                    return a;
            return nullptr;
        };
        {
            StudioWindow w;
            w.show();
            QAction *a = minimapAction(w);
            QVERIFY(a && a->isCheckable());
            if (!a->isChecked())
                a->setChecked(true);
            QVERIFY(w.graphPanel()->minimapVisible());
            QCOMPARE(a->shortcut(), QKeySequence(QStringLiteral("Ctrl+M")));
            a->setChecked(false);
            QVERIFY(!w.graphPanel()->minimapVisible());
        }
        {
            StudioWindow again;
            again.show();
            QVERIFY(!again.graphPanel()->minimapVisible());
            QVERIFY(!minimapAction(again)->isChecked());
            minimapAction(again)->setChecked(true);  // as the other tests expect it
            QVERIFY(again.graphPanel()->minimapVisible());
        }
    }

    // A node's pin menu stays as wide as a readable line: each alternative
    // says its spec and what it moves; the collectives it adds and removes
    // are in the entry's tooltip.
    void pinMenuReadable()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        w.setPlanRequest({QStringLiteral("tap"), QStringLiteral("4"), QStringLiteral("dgx-h100"), {}, {}, {}});
        w.show();
        QVERIFY(openAndPlan(w, QStringLiteral("zoo:gpt2?layers=2")));
        const auto &nodes = w.graphPanel()->viewGraph().nodes;
        int block = -1;
        for (std::size_t i = 0; i < nodes.size(); ++i)
            if (nodes[i].kind == tapestry::layout::ViewNode::Kind::Block)
                block = static_cast<int>(i);
        QVERIFY(block >= 0);
        PinMenu menu(w.planDocument(), nodes[static_cast<std::size_t>(block)], &w);
        QVERIFY2(menu.error().isEmpty(), qPrintable(menu.error()));
        int submenus = 0, tooltips = 0;
        for (QAction *a : menu.actions()) {
            if (!a->menu())
                continue;
            ++submenus;
            QVERIFY2(a->menu()->sizeHint().width() <= 900,
                     qPrintable(a->text() + QStringLiteral(": %1 px").arg(a->menu()->sizeHint().width())));
            for (QAction *alt : a->menu()->actions())
                tooltips += alt->toolTip().contains(QStringLiteral("adds ")) || alt->toolTip().contains(QStringLiteral("removes "));
        }
        QVERIFY(submenus >= 4);
        QVERIFY(tooltips > 0);
    }

    void pinMovesCostAndUndoRestores()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        w.setPlanRequest({QStringLiteral("megatron"), QStringLiteral("4"), QStringLiteral("dgx-h100"), {}, {}, {}});
        QSignalSpy planned(&w, &StudioWindow::planReady);
        QVERIFY(openAndWait(w, QStringLiteral("zoo:gpt2?layers=2")));
        if (planned.isEmpty())
            QVERIFY(planned.wait(60000));
        const auto derived = w.planned().plan;
        const std::string derivedJson = tapestry::plan::writePlanJson(*derived);
        auto forwardAllReduces = [](const tapestry::plan::Plan &p) {
            int n = 0;
            for (const auto &c : p.cost.collectives)
                n += c.phase == tapestry::cost::Phase::Forward && c.kind == tapestry::sharding::CollectiveKind::AllReduce;
            return n;
        };
        // c_fc is column-parallel in Megatron's plan; pin it to split rows.
        tapestry::sharding::ShardingSpec rows{{tapestry::sharding::Placement::shard(0)}};
        QVERIFY(w.pinTensor("transformer.h.0.mlp.c_fc.weight", rows));
        const auto pinned = w.planned().plan;
        QVERIFY(pinned != derived);
        QVERIFY(pinned->specs.at("transformer.h.0.mlp.c_fc.weight").spec == rows);
        QVERIFY(pinned->specs.at("transformer.h.0.mlp.c_fc.weight").source == tapestry::plan::SpecSource::Override);
        // The whole class follows: layer 1 is pinned too.
        QVERIFY(pinned->specs.at("transformer.h.1.mlp.c_fc.weight").spec == rows);
        QVERIFY(pinned->cost.stepTime != derived->cost.stepTime);
        QVERIFY(forwardAllReduces(*pinned) > forwardAllReduces(*derived));
        // Costed by what the pin changed, exactly as a fresh re-cost.
        auto fresh = *pinned;
        tapestry::plan::recostPlan(fresh, *w.document().graph, "pinned");
        QVERIFY(fresh.cost == pinned->cost);
        QVERIFY(w.costBar()->text().contains(QStringLiteral("%1").arg(pinned->cost.stepTime * 1e3, 0, 'f', 2)));
        const std::string pinnedJson = tapestry::plan::writePlanJson(*pinned);
        // Undo restores the derived plan bit for bit, redo the pinned one.
        w.undoStack()->undo();
        QCOMPARE(tapestry::plan::writePlanJson(*w.planned().plan), derivedJson);
        w.undoStack()->redo();
        QCOMPARE(tapestry::plan::writePlanJson(*w.planned().plan), pinnedJson);
        // An illegal spec is refused and changes nothing.
        tapestry::sharding::ShardingSpec bad{{tapestry::sharding::Placement::shard(5)}};
        QVERIFY(!w.pinTensor("transformer.h.0.mlp.c_fc.weight", bad));
        QCOMPARE(tapestry::plan::writePlanJson(*w.planned().plan), pinnedJson);
        // Pinned nodes carry the pin badge.
        bool badge = false;
        for (auto *node : w.graphPanel()->scene()->canvasNodes())
            badge = badge || node->style().pinned;
        QVERIFY(badge);
    }

    // The memory techniques are part of the plan: the derived plan chose
    // them; fixing one (Plan ▸ Memory techniques) re-costs the plan as one
    // undoable edit, shows in the cost bar, the Memory button and the
    // inspector, and the next derivation keeps it fixed.
    void memoryTechniquesAreEditedLikePins()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        w.setPlanRequest({QStringLiteral("dp"), QStringLiteral("4"), QStringLiteral("dgx-h100"), {}, {}, {}});
        QSignalSpy planned(&w, &StudioWindow::planReady);
        QVERIFY(openAndWait(w, QStringLiteral("zoo:gpt2?layers=2")));
        if (planned.isEmpty())
            QVERIFY(planned.wait(60000));
        const auto derived = w.planned().plan;
        QVERIFY(derived->costOptions.techniques.flashAttention);  // gpt2 has attention
        const std::string derivedJson = tapestry::plan::writePlanJson(*derived);
        tapestry::search::TechniqueChoices fixed;
        fixed.zeroStage = 3;
        fixed.microBatches = 2;
        QVERIFY(w.planDocument()->setTechniques(fixed));
        const auto edited = w.planned().plan;
        QCOMPARE(edited->costOptions.techniques.zeroStage, 3);
        QCOMPARE(edited->costOptions.techniques.microBatches, 2);
        QVERIFY(edited->specs == derived->specs);
        // ZeRO-3 shards the replicated weights 4 ways and gathers them: less
        // memory, more communication.
        QVERIFY(edited->cost.memory.total() < derived->cost.memory.total());
        QVERIFY(edited->cost.comm > derived->cost.comm);
        auto fresh = *edited;
        tapestry::plan::recostPlan(fresh, *w.document().graph, "edited");
        QVERIFY(fresh.cost == edited->cost);
        QVERIFY(w.costBar()->toolTip().contains(QStringLiteral("ZeRO-3")));
        QVERIFY(w.planRequest().techniques.zeroStage == 3);
        // The inspector says how a weight's states are sharded and what the
        // backward pass recomputes of the node.
        QVERIFY(w.expandClass(0));
        QSignalSpy laid(&w, &StudioWindow::layoutReady);
        QVERIFY(laid.wait(20000));
        QVERIFY(w.selectByName(QStringLiteral("transformer/h.0/mlp/c_fc")));
        QString zero, recompute;
        for (QTreeWidgetItemIterator it(w.inspector()); *it; ++it) {
            if ((*it)->text(0) == QStringLiteral("ZeRO") && zero.isEmpty())
                zero = (*it)->text(1);
            if ((*it)->text(0) == QStringLiteral("Recomputation"))
                recompute = (*it)->text(1);
        }
        QVERIFY2(zero.startsWith(QStringLiteral("stage 3: parameter, gradient and optimizer state sharded 4 ways")),
                 qPrintable(zero));
        QVERIFY2(recompute.startsWith(QStringLiteral("none")), qPrintable(recompute));
        w.undoStack()->undo();
        QCOMPARE(tapestry::plan::writePlanJson(*w.planned().plan), derivedJson);
        w.undoStack()->redo();
        QCOMPARE(w.planned().plan->costOptions.techniques.zeroStage, 3);
    }

    // On a model with two kinds of layer (a T5's encoder and decoder), Plan
    // > Memory techniques > Recomputation offers each kind alone; choosing
    // one re-costs the plan with that kind recomputed in full.
    void recomputationOfOneKindOfLayer()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        w.setPlanRequest({QStringLiteral("dp"), QStringLiteral("4"), QStringLiteral("dgx-h100"), {}, {}, {}});
        QSignalSpy planned(&w, &StudioWindow::planReady);
        QVERIFY(openAndWait(w, QStringLiteral("zoo:t5-base?layers=2&decoder_layers=2&batch=8")));
        if (planned.isEmpty())
            QVERIFY(planned.wait(60000));
        QAction *decoder = nullptr;
        for (auto *a : w.findChildren<QAction *>())
            if (a->data().toString() == QStringLiteral("decoder/block.*/"))
                decoder = a;
        QVERIFY(decoder);
        const auto before = w.planned().plan;
        decoder->trigger();
        const auto &t = w.planned().plan->costOptions.techniques;
        QCOMPARE(t.recomputeLayers.size(), std::size_t{1});
        QVERIFY(t.recomputeLayers.at("decoder/block.*/") == tapestry::cost::Recompute::Full);
        QVERIFY(w.planned().plan->cost.memory.activations < before->cost.memory.activations);
        w.undoStack()->undo();
        QVERIFY(w.planned().plan->costOptions.techniques.recomputeLayers.empty());
    }

    // The toolbar's global batch opens a zoo model again with that batch
    // and derives its plan.
    void globalBatchReopensTheModel()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        w.setPlanRequest({QStringLiteral("dp"), QStringLiteral("4"), QStringLiteral("dgx-h100"), {}, {}, {}});
        QSignalSpy planned(&w, &StudioWindow::planReady);
        QVERIFY(openAndWait(w, QStringLiteral("zoo:gpt2?layers=2&batch=4")));
        if (planned.isEmpty())
            QVERIFY(planned.wait(60000));
        QSpinBox *batch = nullptr;
        for (auto *box : w.findChildren<QSpinBox *>())
            if (box->toolTip().startsWith(QStringLiteral("Global batch")))
                batch = box;
        QVERIFY(batch);
        QVERIFY(batch->isEnabled());
        QCOMPARE(batch->value(), 4);
        planned.clear();
        batch->setValue(16);
        QVERIFY(planned.wait(60000));
        QCOMPARE(tapestry::search::modelBatch(*w.document().graph), 16);
        QVERIFY(w.document().source.contains(QStringLiteral("batch=16")));
        QVERIFY(w.document().source.contains(QStringLiteral("layers=2")));
        QCOMPARE(batch->value(), 16);
    }

    // Re-derive around pins: tap replicates the small GPT-2's MLP on 4
    // devices; pinning c_fc to split columns and re-deriving searches the
    // rest around it (no worse than the pinned plan), the pins kept. The
    // edit is autosaved, saving clears it, and a session that ends without
    // saving offers it back.
    void rederiveKeepsPinsAndAutosaves()
    {
        using tapestry::plan::SpecSource;
        const QString model = QStringLiteral("zoo:gpt2?layers=2&heads=4&hidden=256");
        const tapestry::sharding::ShardingSpec columns{{tapestry::sharding::Placement::shard(1)}};
        std::string pinnedJson;
        {
            StudioWindow w;
            w.setQuietErrors(true);
            w.setPlanRequest({QStringLiteral("tap"), QStringLiteral("4"), QStringLiteral("dgx-h100"), {}, {}, {}});
            QSignalSpy planned(&w, &StudioWindow::planReady);
            QVERIFY(openAndWait(w, model));
            if (planned.isEmpty())
                QVERIFY(planned.wait(60000));
            // c_fc pinned to Megatron's columns where the plan splits it
            // otherwise, else kept whole: a spec the search did not choose.
            const bool toColumns = w.planned().plan->specs.at("transformer.h.0.mlp.c_fc.weight").spec != columns;
            const auto pin = toColumns ? columns : tapestry::sharding::ShardingSpec::replicated(1);
            QVERIFY(!w.hasUnsavedEdits());
            QVERIFY(w.pinTensor("transformer.h.0.mlp.c_fc.weight", pin));
            QVERIFY(w.hasUnsavedEdits());
            // Only the pinned weights are overrides; what follows them is not.
            int overrides = 0;
            for (const auto &[name, tp] : w.planned().plan->specs)
                overrides += tp.source == SpecSource::Override;
            QCOMPARE(overrides, 2);
            QCOMPARE(w.autosavedPins(), 2);
            const double pinnedStep = w.planned().plan->cost.stepTime;
            planned.clear();
            w.rederiveAroundPins();
            QVERIFY(planned.wait(60000));
            const auto &p = *w.planned().plan;
            for (const char *layer : {"0", "1"}) {
                const std::string prefix = std::string("transformer.h.") + layer + ".mlp.";
                QVERIFY(p.specs.at(prefix + "c_fc.weight").spec == pin);
                QVERIFY(p.specs.at(prefix + "c_fc.weight").source == SpecSource::Override);
                QVERIFY(p.specs.at(prefix + "c_proj.weight").source == SpecSource::Search);
            }
            QVERIFY(p.cost.stepTime <= pinnedStep);
            QCOMPARE(w.undoStack()->index(), 2);  // pin, re-derive: both undoable
            pinnedJson = tapestry::plan::writePlanJson(p);
            QCOMPARE(w.autosavedPins(), 2);

            QTemporaryDir dir;
            QVERIFY(w.savePlan(dir.filePath(QStringLiteral("plan.json"))));
            QVERIFY(!w.hasUnsavedEdits());
            QCOMPARE(w.autosavedPins(), 0);
            w.undoStack()->undo();
            QVERIFY(w.hasUnsavedEdits());
            w.undoStack()->redo();
            QVERIFY(!w.hasUnsavedEdits());
            // Back to the pin before re-deriving: unsaved again, autosaved.
            w.undoStack()->undo();
            QCOMPARE(w.autosavedPins(), 2);
            pinnedJson = tapestry::plan::writePlanJson(*w.planned().plan);
            // The window goes without closing, as in a crash.
        }
        StudioWindow again;
        again.setQuietErrors(true);
        again.setPlanRequest({QStringLiteral("tap"), QStringLiteral("4"), QStringLiteral("dgx-h100"), {}, {}, {}});
        QSignalSpy planned(&again, &StudioWindow::planReady);
        QVERIFY(openAndWait(again, model));
        if (planned.isEmpty())
            QVERIFY(planned.wait(60000));
        QCOMPARE(again.autosavedPins(), 2);
        QVERIFY(again.restoreAutosave());
        QCOMPARE(tapestry::plan::writePlanJson(*again.planned().plan), pinnedJson);
        again.close();  // edits discarded on close (quiet: no question asked)
        QCOMPARE(again.autosavedPins(), 0);
    }

    // The plan candidates of the layer class: ranked, the plan's choice
    // marked; applying a row pins its weights and is undoable. Changing
    // the mesh shape re-derives and redraws the mesh view.
    void candidatesAndMeshChange()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        w.setPlanRequest({QStringLiteral("tap"), QStringLiteral("4"), QStringLiteral("dgx-h100"), {}, {}, {}});
        QSignalSpy planned(&w, &StudioWindow::planReady);
        QVERIFY(openAndWait(w, QStringLiteral("zoo:gpt2?layers=2&heads=4&hidden=256")));
        if (planned.isEmpty())
            QVERIFY(planned.wait(60000));
        QVERIFY(w.showPanel(QStringLiteral("candidates")));
        QSignalSpy ready(&w, &StudioWindow::candidatesReady);
        w.showCandidates(0);
        QVERIFY(ready.wait(60000));
        auto *table = w.candidatesView()->table();
        QVERIFY(table->rowCount() > 10);
        QVERIFY(table->item(0, 0)->text().contains(QStringLiteral("✓")));
        const auto before = w.planned().plan;
        const auto chosen = w.candidatesView()->candidates().candidates.at(5);
        QVERIFY(w.applyCandidate(5));
        for (const auto &[name, spec] : chosen.weights) {
            QVERIFY(w.planned().plan->specs.at(name).spec == spec);
            QVERIFY(w.planned().plan->specs.at(name).source == tapestry::plan::SpecSource::Override);
        }
        QVERIFY(w.planned().plan->cost.stepTime > before->cost.stepTime);
        // The table follows the edited plan: the applied row is now the chosen one.
        if (ready.size() < 2)
            QVERIFY(ready.wait(60000));
        bool marked = false;
        for (const auto &c : w.candidatesView()->candidates().candidates)
            marked = marked || (c.chosen && c.weights == chosen.weights);
        QVERIFY(marked);
        w.candidatesView()->grab().save(shotDir() + QStringLiteral("/candidates.png"));
        w.undoStack()->undo();
        QCOMPARE(tapestry::plan::writePlanJson(*w.planned().plan), tapestry::plan::writePlanJson(*before));

        w.undoStack()->clear();
        planned.clear();
        w.setMeshShape(QStringLiteral("4x2"));
        QVERIFY(planned.wait(60000));
        QCOMPARE(w.planned().plan->mesh.shape(), (std::vector<int>{4, 2}));
        QCOMPARE(w.meshView()->mesh().shape(), (std::vector<int>{4, 2}));
    }

    // A mesh of three axes is typed with its axis names, the way the plan
    // shows them; without names the error says how to give them. A
    // re-derivation keeps the names.
    void threeAxisMeshNamedInTheField()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        w.setPlanRequest({QStringLiteral("tap"), QStringLiteral("4"), QStringLiteral("dgx-h100"), {}, {}, {}});
        QSignalSpy planned(&w, &StudioWindow::planReady);
        QSignalSpy failed(&w, &StudioWindow::planFailed);
        QVERIFY(openAndWait(w, QStringLiteral("zoo:mlp")));
        if (planned.isEmpty())
            QVERIFY(planned.wait(60000));
        w.setMeshShape(QStringLiteral("2x2x2"));
        QVERIFY(failed.wait(60000));
        QVERIFY2(w.lastError().contains(QStringLiteral("2x2x2 (dp, tp, pp)")), qPrintable(w.lastError()));
        QCOMPARE(w.planned().plan->mesh.shape(), (std::vector<int>{4}));  // the plan shown stays
        planned.clear();
        w.setMeshShape(QStringLiteral("2x2x2 (dp, tp, sp)"));
        QVERIFY(planned.wait(60000));
        QCOMPARE(w.planned().plan->mesh.toString(), std::string("2x2x2 (dp, tp, sp)"));
        QCOMPARE(w.meshView()->mesh().toString(), std::string("2x2x2 (dp, tp, sp)"));
        planned.clear();
        QVERIFY(w.pinTensor("mlp.fc1.weight",
                            tapestry::sharding::ShardingSpec{{tapestry::sharding::Placement::replicate(),
                                                              tapestry::sharding::Placement::replicate(),
                                                              tapestry::sharding::Placement::shard(1)}}));
        w.rederiveAroundPins();
        QVERIFY(planned.wait(60000));
        QCOMPARE(w.planned().plan->mesh.toString(), std::string("2x2x2 (dp, tp, sp)"));
    }

    // A long search (T5 on a 3D mesh takes many seconds) shows its
    // progress and stops at Cancel within about a second; the plan shown
    // stays, with no error raised.
    void cancelStopsAPlanSearch()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        w.setPlanRequest({QStringLiteral("tap"), QStringLiteral("4"), QStringLiteral("dgx-h100"), {}, {}, {}});
        QSignalSpy planned(&w, &StudioWindow::planReady);
        QSignalSpy failed(&w, &StudioWindow::planFailed);
        QVERIFY(openAndWait(w, QStringLiteral("zoo:t5-base?layers=2")));
        if (planned.isEmpty())
            QVERIFY(planned.wait(60000));
        QPushButton *cancel = nullptr;
        for (auto *button : w.findChildren<QPushButton *>())
            if (button->text() == QLatin1String("Cancel"))
                cancel = button;
        QVERIFY(cancel);
        QVERIFY(cancel->isHidden());
        const auto bars = w.statusBar()->findChildren<QProgressBar *>();
        QCOMPARE(bars.size(), 1);
        // T5 on a 3D mesh: about 6 s on 2 cores (BERT took 1.6 s, which a
        // quick moment finished before the click).
        w.setMeshShape(QStringLiteral("2x2x2 (a, b, c)"));
        QVERIFY(!cancel->isHidden());
        // The bar turns from busy to the search's own progress.
        QTRY_VERIFY_WITH_TIMEOUT(bars[0]->maximum() == 1000, 10000);
        const QPixmap progress = w.grab();
        // Cancelled, not finished: the 3D search outlasts the wait on any
        // machine (a wall-clock bound tighter than that flakes on a busy one).
        cancel->click();
        QVERIFY(progress.save(shotDir() + QStringLiteral("/plan-search-progress.png")));
        QVERIFY(failed.wait(10000));
        QVERIFY(planned.size() == 1);
        QVERIFY(failed.last().at(0).toString().contains(QStringLiteral("cancelled")));
        QVERIFY(w.lastError().isEmpty());
        QVERIFY(cancel->isHidden());
        QCOMPARE(w.planned().plan->mesh.shape(), (std::vector<int>{4}));
    }

    void compareHighlightsExactlyTheDifferingTensors()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        w.show();
        w.setPlanRequest({QStringLiteral("megatron"), QStringLiteral("4"), QStringLiteral("dgx-h100"), {}, {}, {}});
        QSignalSpy planned(&w, &StudioWindow::planReady);
        QVERIFY(openAndWait(w, QStringLiteral("zoo:gpt2?layers=2")));
        if (planned.isEmpty())
            QVERIFY(planned.wait(60000));
        QVERIFY(w.compareWith(QStringLiteral("dp")));
        // Exactly the tensors whose specs differ between the two plans.
        const auto dp = tapestry::search::referencePlan(*w.document().graph, "zoo:gpt2?layers=2", w.planned().plan->mesh,
                                                        tapestry::search::ReferenceMethod::DataParallel);
        std::set<std::string> expected;
        for (const auto &[name, tp] : w.planned().plan->specs)
            if (dp.specs.count(name) && !(dp.specs.at(name).spec == tp.spec))
                expected.insert(name);
        QVERIFY(!expected.empty());
        QCOMPARE(w.differingTensors(), expected);
        QVERIFY(w.differingTensors().count("transformer.h.0.mlp.c_fc.weight"));
        QVERIFY(w.compareView()->topLevelItemCount() >= 4);
        // Against the replicated plan, the layers differ (Megatron splits
        // their weights) and the final norm, whole in both, does not.
        QVERIFY(w.compareWith(QStringLiteral("replicate")));
        QColor fcIn, lnF;
        for (auto *node : w.graphPanel()->scene()->canvasNodes()) {
            if (node->style().title == QStringLiteral("transformer/h.*"))
                fcIn = node->style().fill;
            if (node->style().title == QStringLiteral("transformer/ln_f"))
                lnF = node->style().fill;
        }
        QVERIFY(fcIn.isValid() && lnF.isValid());
        QVERIFY(fcIn != lnF);
        QVERIFY(w.grab().save(shotDir() + QStringLiteral("/compare-megatron-dp.png")));
        // Another model's plan is refused with the plan's name.
        QTemporaryDir dir;
        const QString other = dir.filePath(QStringLiteral("other.json"));
        const auto mlpGraph = tapestry::io::loadModel("zoo:mlp");
        const auto mlpPlan = tapestry::search::referencePlan(mlpGraph, "zoo:mlp", w.planned().plan->mesh,
                                                             tapestry::search::ReferenceMethod::DataParallel);
        tapestry::plan::writePlanFile(other.toStdString(), mlpPlan);
        QVERIFY(!w.compareWith(other));
        QVERIFY(w.lastError().contains(other));
    }

    void exportsMatchTheCli_data()
    {
        QTest::addColumn<QString>("format");
        QTest::newRow("torch") << QStringLiteral("torch");
        QTest::newRow("jax") << QStringLiteral("jax");
        QTest::newRow("megatron") << QStringLiteral("megatron");
    }
    void exportsMatchTheCli()
    {
        QFETCH(QString, format);
        StudioWindow w;
        w.setQuietErrors(true);
        w.setPlanRequest({QStringLiteral("megatron"), QStringLiteral("4"), QStringLiteral("dgx-h100"), {}, {}, {}});
        QVERIFY(openAndPlan(w, QStringLiteral("zoo:llama3-8b?layers=2&hidden=256&heads=8&kv_heads=8&ffn=512&vocab=1024")));
        QTemporaryDir dir;
        const QString planFile = dir.filePath(QStringLiteral("plan.json"));
        const QString fromGui = dir.filePath(QStringLiteral("gui.out"));
        const QString fromCli = dir.filePath(QStringLiteral("cli.out"));
        QVERIFY(w.savePlan(planFile));
        QVERIFY(w.exportPlan(format, fromGui));
        QProcess cli;
        cli.start(QStringLiteral(TAPESTRY_CLI), {QStringLiteral("export"), planFile, QStringLiteral("--to"), format,
                                                 QStringLiteral("-o"), fromCli});
        QVERIFY(cli.waitForFinished(60000));
        QCOMPARE(cli.exitCode(), 0);
        QFile a(fromGui), b(fromCli);
        QVERIFY(a.open(QIODevice::ReadOnly) && b.open(QIODevice::ReadOnly));
        const QByteArray gui = a.readAll();
        QVERIFY(!gui.isEmpty());
        QCOMPARE(gui, b.readAll());
    }

    // Plan > Export for says, when it opens, which frameworks can express
    // the plan: one that cannot is disabled, its tooltip naming the tensor
    // that breaks it (a weight split over both axes of a 2x2 mesh: JAX
    // holds it, torch's and Megatron's one tensor-parallel axis do not).
    void exportMenuSaysWhichTargetsCanExpressThePlan()
    {
        QTemporaryDir dir;
        const QString planFile = dir.filePath(QStringLiteral("mlp2d.json"));
        QProcess cli;
        cli.start(QStringLiteral(TAPESTRY_CLI),
                  {QStringLiteral("plan"), QStringLiteral("zoo:mlp?batch=8"), QStringLiteral("--mesh"), QStringLiteral("2x2"),
                   QStringLiteral("--memory-gib"), QStringLiteral("0.0000004656"), QStringLiteral("--offload-optimizer"),
                   QStringLiteral("off"), QStringLiteral("--zero"), QStringLiteral("0"), QStringLiteral("-o"), planFile});
        QVERIFY(cli.waitForFinished(60000));
        QCOMPARE(cli.exitCode(), 0);
        StudioWindow w;
        w.setQuietErrors(true);
        QVERIFY(openAndWait(w, QStringLiteral("zoo:mlp?batch=8")));
        QVERIFY(w.openPlanFile(planFile));
        QMenu *exportMenu = nullptr;
        for (auto *menu : w.findChildren<QMenu *>())
            if (menu->title() == QStringLiteral("&Export for"))
                exportMenu = menu;
        QVERIFY(exportMenu);
        emit exportMenu->aboutToShow();
        std::map<QString, QAction *> byLabel;
        for (auto *a : exportMenu->actions())
            byLabel[a->data().toString()] = a;
        QAction *torch = byLabel.at(QStringLiteral("PyTorch (parallelize module)…"));
        QAction *jax = byLabel.at(QStringLiteral("JAX (mesh and shardings module)…"));
        QAction *megatron = byLabel.at(QStringLiteral("Megatron-LM (arguments)…"));
        QVERIFY(!torch->isEnabled());
        QVERIFY2(torch->toolTip().contains(QStringLiteral("mlp.fc1.weight")), qPrintable(torch->toolTip()));
        QVERIFY(torch->text().contains(QStringLiteral("cannot express")));
        QVERIFY(!megatron->isEnabled());
        QVERIFY(jax->isEnabled());
    }

    // A plan with pipeline stages (plan --devices -o): the cost bar leads
    // with the pipeline's step and its fullest stage, View › Pipeline
    // schedule draws a row per stage of the schedule, the exports that do
    // not split stages say so; a plan of one stage says how to get stages.
    void pipelinedPlanShowsItsSchedule()
    {
        QTemporaryDir dir;
        const QString planFile = dir.filePath(QStringLiteral("pipelined.json"));
        const QString model = QStringLiteral("zoo:gpt2?layers=16&hidden=256&heads=4&ffn=1024&vocab=1024&seq=128&batch=16");
        QProcess cli;
        cli.start(QStringLiteral(TAPESTRY_CLI), {QStringLiteral("plan"), model, QStringLiteral("--devices"), QStringLiteral("16"),
                                                 QStringLiteral("--topology"), QStringLiteral("2x8"),
                                                 QStringLiteral("--pipeline-stages"), QStringLiteral("4"),
                                                 QStringLiteral("-o"), planFile});
        QVERIFY(cli.waitForFinished(60000));
        QCOMPARE(cli.exitCode(), 0);
        StudioWindow w;
        w.setQuietErrors(true);
        QVERIFY(openAndPlan(w, model));
        auto *dock = w.pipelineDock();
        QVERIFY(dock);
        QVERIFY2(dock->caption().contains(QStringLiteral("one stage")), qPrintable(dock->caption()));
        QVERIFY(dock->view()->timeline().stages.empty());
        QVERIFY(w.openPlanFile(planFile));
        QVERIFY2(dock->caption().startsWith(QStringLiteral("4 stages")), qPrintable(dock->caption()));
        const auto &timeline = dock->view()->timeline();
        QCOMPARE(timeline.stages.size(), std::size_t(4));
        QVERIFY(timeline.makespan > 0);
        // Every micro-batch forward and back on every stage.
        const auto pp = *w.planDocument()->planned().plan->pipeline;
        const int micro = w.planDocument()->planned().plan->costOptions.techniques.microBatches;
        for (const auto &stage : timeline.stages)
            QCOMPARE(stage.size(), std::size_t(2 * micro * pp.virtualStages));
        // The graph shows a band per chunk of layers, the 16 layers folded
        // per chunk: each block lies in one, and they hold every layer.
        GraphPanel *graph = w.graphPanel();
        const int chunksDrawn = pp.stages * pp.virtualStages;
        QTRY_VERIFY_WITH_TIMEOUT(!graph->isLayoutRunning() && graph->stageBands() == chunksDrawn, 30000);
        auto foldedPerChunk = [&] {
            std::map<int, int> layers;
            for (const auto &v : graph->viewGraph().nodes)
                if (v.kind == tapestry::layout::ViewNode::Kind::Block)
                    layers[v.chunk] += v.repeat;
            return layers;
        };
        {
            const auto folded = foldedPerChunk();
            QCOMPARE(int(folded.size()), chunksDrawn);
            int all = 0;
            for (const auto &[chunk, layers] : folded) {
                QVERIFY(chunk >= 0 && chunk < chunksDrawn);
                all += layers;
            }
            QCOMPARE(all, 16);
        }
        QVERIFY2(w.costBar()->text().startsWith(QStringLiteral("step %1 ms · pipeline of 4 stages").arg(pp.stepTime * 1e3, 0, 'f', 2)),
                 qPrintable(w.costBar()->text()));
        QVERIFY(w.planDocument()->exportProblem(QStringLiteral("torch")).contains(QStringLiteral("pipeline stages")));
        // Moving a boundary re-costs the pipeline (undoably); cuts that do
        // not fit are refused in a line and change nothing.
        const auto before = pp;
        const int chunks = 4 * before.virtualStages;
        QStringList skewed;
        for (int c = 1; c < chunks; ++c)
            skewed << QString::number(c);  // every chunk one layer but the last
        dock->cutsEdit()->setText(skewed.join(QStringLiteral(", ")));
        QVERIFY(dock->applyCuts());
        const auto &after = *w.planDocument()->planned().plan->pipeline;
        QCOMPARE(after.cuts.size(), before.cuts.size());
        QCOMPARE(after.cuts.front(), 1);
        QVERIFY2(after.stepTime > before.stepTime, qPrintable(QStringLiteral("%1 against %2").arg(after.stepTime).arg(before.stepTime)));
        // The bands follow the cut: the first chunk now holds one layer.
        QTRY_VERIFY_WITH_TIMEOUT(!graph->isLayoutRunning() && foldedPerChunk()[0] == 1, 30000);
        QCOMPARE(graph->stageBands(), chunksDrawn);
        QVERIFY(dock->caption().contains(QStringLiteral("%1 ms").arg(after.stepTime * 1e3, 0, 'f', 3)));
        w.planDocument()->undoStack()->undo();
        QCOMPARE(w.planDocument()->planned().plan->pipeline->cuts, before.cuts);
        dock->cutsEdit()->setText(QStringLiteral("3, 2"));
        QVERIFY(!dock->applyCuts());
        QCOMPARE(w.planDocument()->planned().plan->pipeline->cuts, before.cuts);
        QVERIFY(dock->findChild<QLabel *>(QStringLiteral("pipelineProblem"))->text().contains(QStringLiteral("cuts")));
        dock->cutsEdit()->setText(QStringLiteral("a, b"));
        QVERIFY(!dock->applyCuts());
        QVERIFY(dock->balance());
        QCOMPARE(w.planDocument()->planned().plan->pipeline->cuts, before.cuts);
        QVERIFY(w.planDocument()->exportProblem(QStringLiteral("megatron")).isEmpty());
        // Drawn at both sizes.
        for (const QSize size : {QSize(1400, 900), QSize(1920, 1080)}) {
            w.resize(size);
            w.showPanel(QStringLiteral("pipeline"));
            w.show();
            QVERIFY(QTest::qWaitForWindowExposed(&w));
            QVERIFY(dock->view()->width() > 300 && dock->view()->height() >= 100);
            QDir().mkpath(QStringLiteral(TAPESTRY_BINARY_DIR "/screenshots"));
            w.grab().save(QStringLiteral(TAPESTRY_BINARY_DIR "/screenshots/pipeline-%1x%2.png")
                              .arg(size.width())
                              .arg(size.height()));
        }
    }

    void recentFilesPersist()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        QVERIFY(openAndWait(w, QStringLiteral("zoo:mlp")));
        QCOMPARE(w.recentFiles().value(0), QStringLiteral("zoo:mlp"));
    }

    // The numbers a user opens the studio for are never cut off, at the
    // default window size and at 1920x1080: the cost bar's step time, every
    // numeric column of the class list, and each parameter's sharding in the
    // inspector (its name may elide, keeping its tail).
    void readableAtBothSizes_data() { addBothSizes(); }
    void readableAtBothSizes()
    {
        QFETCH(QSize, size);
        StudioWindow w;
        showLlamaPlan(w, size);
        QVERIFY(openAndPlan(w, QStringLiteral("zoo:llama3-8b?layers=4")));
        w.classTable()->selectRow(0);
        QCoreApplication::sendPostedEvents();  // the layout requests the plan's texts made, as the event loop would
        w.grab();  // lays out and paints every widget at this size

        // The cost bar shows its first part, the step time, whole.
        const QString step = w.costBar()->text().section(QStringLiteral(" · "), 0, 0);
        QVERIFY2(step.startsWith(QStringLiteral("step ")), qPrintable(step));
        QVERIFY2(w.costBar()->shownText().startsWith(step), qPrintable(w.costBar()->shownText()));

        const int margin = 2 * (w.style()->pixelMetric(QStyle::PM_FocusFrameHMargin, nullptr, &w) + 1);
        // The class list: each numeric column inside the view and as wide as
        // its contents and header.
        QTableView *table = w.classTable();
        const QAbstractItemView *view = table;  // sizeHintForColumn is public here
        const QHeaderView *header = table->horizontalHeader();
        for (int c : {ClassListModel::Instances, ClassListModel::Ops, ClassListModel::Parameters, ClassListModel::Share}) {
            const int right = header->sectionViewportPosition(c) + header->sectionSize(c);
            QVERIFY2(right <= table->viewport()->width(),
                     qPrintable(QStringLiteral("column %1 ends at %2 of %3").arg(c).arg(right).arg(table->viewport()->width())));
            QVERIFY2(header->sectionSize(c) >= view->sizeHintForColumn(c),
                     qPrintable(QStringLiteral("column %1: %2 < %3").arg(c).arg(header->sectionSize(c)).arg(view->sizeHintForColumn(c))));
        }
        QCOMPARE(table->model()->index(0, ClassListModel::Instances).data().toString(), QStringLiteral("×4"));
        // The class name whole: each of the lines it wraps into at its scope
        // separators fits the name column beside the class's colour.
        const QModelIndex name = table->model()->index(0, ClassListModel::Name);
        // The scope every class shares ("model/") is left out of the names
        // shown, and kept in their tooltips.
        QCOMPARE(name.data().toString(), QStringLiteral("layers.*"));
        QVERIFY(name.data(Qt::ToolTipRole).toString().contains(QStringLiteral("model/layers.*")));
        const int decoration = table->style()->pixelMetric(QStyle::PM_SmallIconSize, nullptr, table);
        for (const QString &line : name.data().toString().split(QChar(0x200B))) {
            const int needed = table->fontMetrics().horizontalAdvance(line) + decoration + 4 * margin;
            QVERIFY2(needed <= header->sectionSize(ClassListModel::Name),
                     qPrintable(QStringLiteral("\"%1\" needs %2 px of %3").arg(line).arg(needed).arg(header->sectionSize(ClassListModel::Name))));
        }

        // The inspector: each parameter's value (sharding, shape, type) fits
        // the value column.
        InspectorView *inspector = w.inspector();
        const QTreeWidgetItem *params = nullptr;
        for (int i = 0; i < inspector->topLevelItemCount(); ++i)
            if (inspector->topLevelItem(i)->text(0) == QStringLiteral("Parameters"))
                params = inspector->topLevelItem(i);
        QVERIFY(params && params->childCount() > 0);
        const QHeaderView *columns = inspector->header();
        QVERIFY(columns->sectionViewportPosition(1) + columns->sectionSize(1) <= inspector->viewport()->width() + 1);
        for (int i = 0; i < params->childCount(); ++i) {
            const QString value = params->child(i)->text(1);
            QVERIFY2(value.startsWith(QLatin1Char('[')), qPrintable(value));
            // The whole value: its sharding, its shape and its type.
            QVERIFY2(inspector->fontMetrics().horizontalAdvance(value) + margin <= columns->sectionSize(1),
                     qPrintable(value + QStringLiteral(" in %1 px").arg(columns->sectionSize(1))));
        }
        // The plan bar's memory techniques, whose text changes with the
        // plan, as wide as the text it shows.
        const auto *memory = w.findChild<QToolButton *>(QStringLiteral("memoryTechniques"));
        QVERIFY(memory && memory->isVisible());
        QVERIFY2(memory->width() >= memory->sizeHint().width(),
                 qPrintable(QStringLiteral("\"%1\" in %2 px of %3").arg(memory->text()).arg(memory->width()).arg(memory->sizeHint().width())));
        // The legend under the graph says what colours and edges mean, in
        // full (wrapped, never cut) and beside the graph, not over it.
        const QLabel *legend = w.graphPanel()->legend();
        QVERIFY(legend->isVisible());
        QVERIFY2(legend->text().contains(QStringLiteral("Edges:")), qPrintable(legend->text()));
        QVERIFY2(legend->height() >= legend->heightForWidth(legend->width()),
                 qPrintable(QStringLiteral("legend %1 px high of %2").arg(legend->height()).arg(legend->heightForWidth(legend->width()))));
        const QRect graphArea(w.graphPanel()->view()->mapTo(&w, QPoint(0, 0)), w.graphPanel()->view()->size());
        const QRect legendArea(legend->mapTo(&w, QPoint(0, 0)), legend->size());
        QVERIFY(!graphArea.intersects(legendArea));
        QVERIFY(w.grab().save(shotDir() + QStringLiteral("/readable-%1x%2.png").arg(size.width()).arg(size.height())));
    }

    // The legend follows the colouring chosen: each names what its
    // colours mean.
    void legendFollowsTheColouring()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        w.setPlanRequest({QStringLiteral("megatron"), QStringLiteral("4"), QStringLiteral("dgx-h100"), {}, {}, {}});
        QVERIFY(openAndPlan(w, QStringLiteral("zoo:gpt2?layers=2")));
        const QLabel *legend = w.graphPanel()->legend();
        QVERIFY(legend->text().contains(QStringLiteral("class")));
        w.setColouring(StudioWindow::Colouring::BySharding);
        QVERIFY(legend->text().contains(QStringLiteral("split by columns")));
        QVERIFY(legend->text().contains(QStringLiteral("by rows")));
        w.setColouring(StudioWindow::Colouring::ByCost);
        QVERIFY(legend->text().contains(QStringLiteral("costliest")));
        w.setColouring(StudioWindow::Colouring::ByDifference);
        QVERIFY(legend->text().contains(QStringLiteral("differs")));
        QVERIFY(legend->text().contains(QStringLiteral("each device's block")));
    }

    // The minimap never covers the graph as fitted: at both sizes, a
    // layer opened by a find (a tall graph) is drawn clear of the minimap's
    // corner; hidden, the graph takes the whole view again.
    void minimapClearOfTheGraph_data() { addBothSizes(); }
    void minimapClearOfTheGraph()
    {
        QFETCH(QSize, size);
        StudioWindow w;
        showLlamaPlan(w, size);
        QVERIFY(openAndPlan(w, QStringLiteral("zoo:llama3-8b?layers=4")));
        GraphPanel *graph = w.graphPanel();
        graph->setMinimapVisible(true);
        QSignalSpy laidOut(graph, &GraphPanel::layoutFinished);
        QVERIFY(w.findNext(QStringLiteral("o_proj")));
        QVERIFY(laidOut.wait(30000));
        GraphView *view = graph->view();
        auto content = [&] {
            return view->mapFromScene(graph->scene()->itemsBoundingRect()).boundingRect();
        };
        const QWidget *minimap = graph->minimap();
        const QRect corner(view->viewport()->mapFrom(graph, minimap->geometry().topLeft()), minimap->size());
        QVERIFY2(!content().intersects(corner), qPrintable(QStringLiteral("graph %1,%2 %3x%4; minimap %5,%6 %7x%8")
                                                              .arg(content().x()).arg(content().y())
                                                              .arg(content().width()).arg(content().height())
                                                              .arg(corner.x()).arg(corner.y())
                                                              .arg(corner.width()).arg(corner.height())));
        QVERIFY(content().top() >= 0 && content().left() >= 0);
        const int shown = content().height();
        graph->setMinimapVisible(false);
        view->fitAll();
        QVERIFY(content().height() >= shown);
        QVERIFY(w.grab().save(shotDir() + QStringLiteral("/find-opens-layer-%1x%2.png").arg(size.width()).arg(size.height())));
    }

    // A model or plan file dropped on the window opens: a plan with its
    // model (zoo:mlp for the 4x2 lesson plan) and then its own specs; a
    // file of another kind is not taken.
    void dropsOpenModelsAndPlans()
    {
        StudioWindow w;
        w.setQuietErrors(true);
        w.show();
        auto drag = [&](const QString &path) {
            QMimeData data;
            data.setUrls({QUrl::fromLocalFile(path)});
            QDragEnterEvent enter(QPoint(700, 400), Qt::CopyAction, &data, Qt::LeftButton, Qt::NoModifier);
            QCoreApplication::sendEvent(&w, &enter);
            if (!enter.isAccepted())
                return false;
            QDropEvent drop(QPointF(700, 400), Qt::CopyAction, &data, Qt::LeftButton, Qt::NoModifier);
            QCoreApplication::sendEvent(&w, &drop);
            return drop.isAccepted();
        };
        QTemporaryDir dir;
        const QString text = dir.filePath(QStringLiteral("notes.txt"));
        QFile f(text);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("not a model");
        f.close();
        QVERIFY(!drag(text));
        QVERIFY(!drag(dir.filePath(QStringLiteral("missing.onnx"))));

        QSignalSpy planned(&w, &StudioWindow::planReady);
        QVERIFY(drag(QStringLiteral(TAPESTRY_SOURCE_DIR "/samples/plans/mlp-2d-4x2.json")));
        QVERIFY(planned.wait(60000));
        QCOMPARE(w.document().source, QStringLiteral("zoo:mlp"));
        QCOMPARE(QString::fromStdString(w.planned().plan->mesh.toString()), QStringLiteral("4x2 (y, x)"));
        // The Plan field names the file, not a method the plan was not made
        // by; deriving again takes the method chosen before and drops it.
        QComboBox *method = nullptr;
        for (QComboBox *box : w.findChildren<QComboBox *>())
            if (box->findText(QStringLiteral("megatron")) >= 0)
                method = box;
        QVERIFY(method);
        QCOMPARE(method->currentText(), QStringLiteral("file: mlp-2d-4x2.json"));
        QCOMPARE(w.planRequest().method, QStringLiteral("tap"));
        w.derivePlan();
        QVERIFY(planned.wait(60000));
        QCOMPARE(method->findData(QStringLiteral("file")), -1);
        QCOMPARE(method->currentText(), QStringLiteral("tap"));
        QCOMPARE(QString::fromStdString(w.planned().plan->method), QStringLiteral("tap"));

        QVERIFY(drag(QStringLiteral(TAPESTRY_SOURCE_DIR "/samples/onnx/gpt-tiny.onnx")));
        QTRY_VERIFY_WITH_TIMEOUT(w.document().source.endsWith(QStringLiteral("gpt-tiny.onnx")), 60000);
        QVERIFY(w.document().graph);
    }

    void screenshots_data()
    {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("file");
        QTest::newRow("gpt2") << QStringLiteral("zoo:gpt2") << QStringLiteral("gpt2.png");
        QTest::newRow("onnx gpt") << QStringLiteral(TAPESTRY_SOURCE_DIR "/samples/onnx/gpt-tiny.onnx")
                                  << QStringLiteral("onnx-tiny-gpt.png");
    }
    void screenshots()
    {
        QFETCH(QString, model);
        QFETCH(QString, file);
        StudioWindow w;
        w.setQuietErrors(true);
        w.resize(1400, 900);
        w.show();
        QVERIFY(openAndWait(w, model));
        const QString path = shotDir() + QLatin1Char('/') + file;
        QVERIFY(w.grab().save(path));
        QVERIFY(!QImage(path).isNull());
    }
};

QTEST_MAIN(TestStudio)
#include "tst_studio.moc"
