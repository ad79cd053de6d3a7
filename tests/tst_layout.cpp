#include "layout/graphvizlayout.h"

#include <QTest>
#include <QtConcurrent/QtConcurrentRun>

using namespace tapestry::layout;

namespace {

LayoutRequest diamond()
{
    LayoutRequest r;
    r.nodes.resize(4);
    r.edges = {{0, 1, "8×768"}, {0, 2, ""}, {1, 3, ""}, {2, 3, "8×768"}};
    return r;
}

} // namespace

class TestLayout : public QObject {
    Q_OBJECT
private slots:
    void chainRunsTopToBottom()
    {
        LayoutRequest r;
        r.nodes.resize(3);
        r.edges = {{0, 1, ""}, {1, 2, ""}};
        const auto result = layoutWithDot(r);
        QCOMPARE(result.centers.size(), std::size_t(3));
        QVERIFY(result.centers[0].y < result.centers[1].y);
        QVERIFY(result.centers[1].y < result.centers[2].y);
        QCOMPARE(result.centers[0].x, result.centers[2].x);
        for (const auto &c : result.centers) {
            QVERIFY(c.x >= 0 && c.x <= result.width);
            QVERIFY(c.y >= 0 && c.y <= result.height);
        }
    }

    void edgesHavePathsAndLabels()
    {
        const auto result = layoutWithDot(diamond());
        QCOMPARE(result.edgePaths.size(), std::size_t(4));
        for (const auto &path : result.edgePaths)
            QVERIFY(path.size() >= 4);  // a cubic spline: at least one segment
        // Labelled edges get a label position inside the drawing.
        QVERIFY(result.edgeLabels[0].x > 0);
        QVERIFY(result.edgeLabels[3].y > 0);
        // The two middle nodes sit side by side on one rank.
        QCOMPARE(result.centers[1].y, result.centers[2].y);
        QVERIFY(result.centers[1].x != result.centers[2].x);
    }

    void leftToRight()
    {
        LayoutRequest r;
        r.nodes.resize(2);
        r.edges = {{0, 1, ""}};
        r.leftToRight = true;
        const auto result = layoutWithDot(r);
        QVERIFY(result.centers[0].x < result.centers[1].x);
    }

    void badEdgeIsAnError()
    {
        LayoutRequest r;
        r.nodes.resize(1);
        r.edges = {{0, 5, ""}};
        QVERIFY_THROWS_EXCEPTION(std::exception, layoutWithDot(r));
    }

    void concurrentCallsAreSerialised()
    {
        // Four layouts at once from worker threads give the same answer as one.
        const auto expected = layoutWithDot(diamond());
        QList<QFuture<LayoutResult>> futures;
        for (int i = 0; i < 4; ++i)
            futures << QtConcurrent::run([] { return layoutWithDot(diamond()); });
        for (auto &f : futures) {
            const auto got = f.result();
            QCOMPARE(got.width, expected.width);
            QCOMPARE(got.centers[3].y, expected.centers[3].y);
        }
    }
};

QTEST_GUILESS_MAIN(TestLayout)
#include "tst_layout.moc"
