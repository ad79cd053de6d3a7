// The studio's whole edit on a large model, as a user makes it: pin one
// weight to another split in every instance of its class and wait for every
// view to take the new plan (cost bar, graph, inspector, executor panel,
// undo stack, autosave queued). The target is one frame (16 ms) for
// gpt3-175b. Runs offscreen; prints figures only (nothing asserts on
// timings). Usage: bench_studio_edit [MODEL] [MESH]
#include "studiowindow.h"

#include <QApplication>
#include <QElapsedTimer>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

using namespace tapestry;
using namespace tapestry::views;

int main(int argc, char **argv)
{
    qputenv("QT_QPA_PLATFORM", "offscreen");
    QTemporaryDir settings;  // the autosave and settings of this run stay apart from the user's
    qputenv("XDG_CONFIG_HOME", settings.filePath(QStringLiteral("config")).toUtf8());
    qputenv("XDG_DATA_HOME", settings.filePath(QStringLiteral("data")).toUtf8());
    QApplication app(argc, argv);
    const QString source = argc > 1 ? QString::fromLocal8Bit(argv[1]) : QStringLiteral("zoo:gpt3-175b");
    const QString mesh = argc > 2 ? QString::fromLocal8Bit(argv[2]) : QStringLiteral("8");

    StudioWindow w;
    w.setQuietErrors(true);
    w.setPlanRequest({QStringLiteral("megatron"), mesh, QStringLiteral("dgx-h100"), {}});
    QSignalSpy planned(&w, &StudioWindow::planReady);
    QSignalSpy laid(&w, &StudioWindow::layoutReady);
    QSignalSpy failed(&w, &StudioWindow::loadFailed);
    w.resize(1400, 900);
    w.show();
    w.openModel(source);
    for (int i = 0; i < 1200 && (laid.isEmpty() || planned.isEmpty()) && failed.isEmpty(); ++i)
        QTest::qWait(100);
    if (!w.planned().plan) {
        std::fprintf(stderr, "bench_studio_edit: %s: no plan\n", qPrintable(source));
        return 1;
    }

    // The class' first matrix weight, pinned back and forth between two splits.
    const auto &graph = *w.document().graph;
    const auto &cls = w.document().classes->classes.front();
    std::string weight;
    for (auto t : cls.instances[cls.representative].parameters)
        if (weight.empty() && graph.tensor(t).shape.size() == 2)
            weight = graph.tensor(t).name;
    const sharding::ShardingSpec rows{{sharding::Placement::shard(0)}}, columns{{sharding::Placement::shard(1)}};
    std::vector<double> times;
    for (int i = 0; i < 12; ++i) {
        QElapsedTimer timer;
        timer.start();
        if (!w.pinTensor(weight, i % 2 ? columns : rows)) {
            std::fprintf(stderr, "bench_studio_edit: cannot pin %s\n", weight.c_str());
            return 1;
        }
        QCoreApplication::processEvents();  // what the edit posted: repaints, the autosave's completion
        times.push_back(static_cast<double>(timer.nsecsElapsed()) * 1e-6);
    }
    const double first = times.front();
    std::sort(times.begin() + 1, times.end());
    std::printf("bench_studio_edit: %s on %s, %zu ops, class of %zu instances\n", qPrintable(source), qPrintable(mesh),
                graph.opCount(), cls.instances.size());
    std::printf("  pin %s in every instance, 11 times back and forth\n", weight.c_str());
    std::printf("  first pin (builds the explainer)  %8.2f ms\n", first);
    std::printf("  later pins: best %.2f ms, median %.2f ms  (target: 16 ms, one frame)\n", times[1],
                times[1 + (times.size() - 1) / 2]);
    return 0;
}
