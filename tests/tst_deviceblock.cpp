#include "sharding/deviceblock.h"
#include "sharding/meshprofile.h"

#include <QTest>

#include <set>

using namespace tapestry::sharding;

namespace {

Mesh mesh(std::vector<int> sizes, std::vector<std::string> names)
{
    Mesh m;
    for (std::size_t i = 0; i < sizes.size(); ++i)
        m.axes.push_back({names[i], sizes[i], {}});
    return m;
}

ShardingSpec spec(std::vector<Placement> p)
{
    return ShardingSpec{std::move(p)};
}

} // namespace

class TestDeviceBlock : public QObject {
    Q_OBJECT
private slots:
    // LESSONS.md case 3 on a 4x2 mesh (Y rows, X columns): D[B_Y, H1_X].
    void lessonTwoDimensional()
    {
        const Mesh m = mesh({4, 2}, {"Y", "X"});
        const auto d = spec({Placement::shard(0), Placement::shard(1)});
        // Device 5 sits at row 2, column 1: batch block 2 of 4, feature block 1 of 2.
        const auto b = deviceBlock(d, 2, m, 5);
        QCOMPARE(b.coordinate, (std::vector<int>{2, 1}));
        QCOMPARE(b.index, (std::vector<std::int64_t>{2, 1}));
        QCOMPARE(b.blocks, (std::vector<std::int64_t>{4, 2}));
        QCOMPARE(blockNotation("D", d, 2, m, {"B", "H1"}), std::string("D[B_Y, H1_X]"));
        // Eight devices, eight different blocks.
        std::set<std::int64_t> keys;
        for (int dev = 0; dev < 8; ++dev)
            keys.insert(deviceBlock(d, 2, m, dev).linearIndex());
        QCOMPARE(keys.size(), std::size_t(8));
    }

    void replicasShareBlocks()
    {
        const Mesh m = mesh({4, 2}, {"Y", "X"});
        // A[H1_Y, H2]: the two devices of a row hold the same block.
        const auto a = spec({Placement::shard(0), Placement::replicate()});
        QCOMPARE(deviceBlock(a, 2, m, 2).linearIndex(), deviceBlock(a, 2, m, 3).linearIndex());
        QVERIFY(deviceBlock(a, 2, m, 0).linearIndex() != deviceBlock(a, 2, m, 2).linearIndex());
    }

    void twoAxesOnOneDim()
    {
        const Mesh m = mesh({2, 4}, {"data", "model"});
        const auto s = spec({Placement::shard(1), Placement::shard(1)});
        // The earlier axis picks the outer block: device (1, 3) holds block 7 of 8.
        const auto b = deviceBlock(s, 2, m, 7);
        QCOMPARE(b.index[1], std::int64_t(7));
        QCOMPARE(b.blocks[1], std::int64_t(8));
        QCOMPARE(blockNotation("W", s, 2, m), std::string("W[I, J_data,model]"));
    }

    void partialSums()
    {
        const Mesh m = mesh({8}, {"model"});
        const auto y = spec({Placement::partial()});
        const auto b = deviceBlock(y, 2, m, 3);
        QCOMPARE(b.partialAxes, (std::vector<int>{0}));
        QCOMPARE(blockNotation("Y", y, 2, m, {"B", "N"}), std::string("Y[B, N]{U_model}"));
    }
};

QTEST_APPLESS_MAIN(TestDeviceBlock)
#include "tst_deviceblock.moc"
