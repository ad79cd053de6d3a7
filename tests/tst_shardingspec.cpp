#include "sharding/meshprofile.h"
#include "sharding/reshard.h"
#include "sharding/shardingspec.h"

#include <QtTest>

using namespace tapestry;
using sharding::Placement;
using sharding::ShardingSpec;

namespace {

sharding::Mesh mesh2d()
{
    return sharding::findMeshProfile("dgx-h100").mesh({2, 4}, {"data", "model"});
}

ShardingSpec spec(std::initializer_list<const char *> placements)
{
    ShardingSpec s;
    for (const char *p : placements)
        s.placements.push_back(*Placement::fromString(p));
    return s;
}

ir::Tensor tensor(ir::Shape shape)
{
    ir::Tensor t;
    t.name = "t";
    t.shape = std::move(shape);
    t.dtype = ir::DType::F32;
    return t;
}

} // namespace

class TestShardingSpec : public QObject {
    Q_OBJECT

private slots:
    void notations_data()
    {
        QTest::addColumn<QString>("a");
        QTest::addColumn<QString>("b");
        QTest::addColumn<int>("rank");
        QTest::addColumn<QString>("placements");
        QTest::addColumn<QString>("partitionSpec");
        QTest::newRow("replicated") << "Replicate()" << "Replicate()" << 2 << "[Replicate(), Replicate()]"
                                    << "P(None, None)";
        QTest::newRow("column") << "Replicate()" << "Shard(1)" << 2 << "[Replicate(), Shard(1)]"
                                << "P(None, 'model')";
        QTest::newRow("2d") << "Shard(0)" << "Shard(1)" << 2 << "[Shard(0), Shard(1)]" << "P('data', 'model')";
        QTest::newRow("both on one dim") << "Shard(0)" << "Shard(0)" << 3 << "[Shard(0), Shard(0)]"
                                         << "P(('data', 'model'), None, None)";
        QTest::newRow("partial") << "Shard(0)" << "Partial()" << 2 << "[Shard(0), Partial()]"
                                 << "P('data', None) + partial('model')";
    }
    void notations()
    {
        QFETCH(QString, a);
        QFETCH(QString, b);
        QFETCH(int, rank);
        QFETCH(QString, placements);
        QFETCH(QString, partitionSpec);
        const auto s = spec({a.toUtf8().constData(), b.toUtf8().constData()});
        QCOMPARE(QString::fromStdString(s.toPlacements()), placements);
        QCOMPARE(QString::fromStdString(s.toPartitionSpec(rank, mesh2d())), partitionSpec);
    }

    void placementStrings_data()
    {
        QTest::addColumn<QString>("text");
        QTest::addColumn<bool>("valid");
        QTest::newRow("replicate") << "Replicate()" << true;
        QTest::newRow("shard") << "Shard(3)" << true;
        QTest::newRow("partial") << "Partial()" << true;
        QTest::newRow("no dim") << "Shard()" << false;
        QTest::newRow("negative") << "Shard(-1)" << false;
        QTest::newRow("lower case") << "shard(1)" << false;
        QTest::newRow("jax") << "None" << false;
    }
    void placementStrings()
    {
        QFETCH(QString, text);
        QFETCH(bool, valid);
        const auto p = Placement::fromString(text.toStdString());
        QCOMPARE(p.has_value(), valid);
        if (valid)
            QCOMPARE(QString::fromStdString(p->toString()), text);
    }

    // A dim the axes splitting it do not divide is not a legal split.
    void legality_data()
    {
        QTest::addColumn<QString>("a");
        QTest::addColumn<QString>("b");
        QTest::addColumn<QString>("shape");
        QTest::addColumn<QString>("problem");  // empty: legal
        QTest::newRow("fits") << "Shard(0)" << "Shard(1)" << "8,12" << "";
        QTest::newRow("indivisible") << "Replicate()" << "Shard(1)" << "8,6" << "dim 1 of size 6";
        QTest::newRow("product indivisible") << "Shard(0)" << "Shard(0)" << "12,4" << "into 8 equal pieces";
        QTest::newRow("product fits") << "Shard(0)" << "Shard(0)" << "16,3" << "";
        QTest::newRow("out of range") << "Shard(2)" << "Replicate()" << "8,8" << "out of range";
        QTest::newRow("scalar") << "Replicate()" << "Partial()" << "" << "";
    }
    void legality()
    {
        QFETCH(QString, a);
        QFETCH(QString, b);
        QFETCH(QString, shape);
        QFETCH(QString, problem);
        ir::Shape s;
        for (const auto &d : shape.split(QLatin1Char(','), Qt::SkipEmptyParts))
            s.push_back(d.toLongLong());
        const auto p = spec({a.toUtf8().constData(), b.toUtf8().constData()}).problem(s, mesh2d());
        if (problem.isEmpty())
            QVERIFY2(!p, p ? p->c_str() : "");
        else
            QVERIFY2(p && p->find(problem.toStdString()) != std::string::npos, p ? p->c_str() : "legal");
    }

    void wrongPlacementCount()
    {
        const auto p = spec({"Shard(0)"}).problem({8, 8}, mesh2d());
        QVERIFY(p && p->find("1 placement(s) for a mesh of 2 axes") != std::string::npos);
    }

    void localShape()
    {
        const auto s = spec({"Shard(0)", "Shard(1)"});
        QCOMPARE(s.localShape({8, 12, 5}, mesh2d()), (ir::Shape{4, 3, 5}));
        QCOMPARE(s.localElements({8, 12, 5}, mesh2d()), std::int64_t{60});
        QCOMPARE(spec({"Shard(0)", "Shard(0)"}).splitFactor(0, mesh2d()), std::int64_t{8});
    }

    // The cheapest collective per axis, bytes as nccl-tests counts them.
    void reshard_data()
    {
        QTest::addColumn<QString>("from");
        QTest::addColumn<QString>("to");
        QTest::addColumn<QString>("collectives");
        // Tensor [8, 16] float32 (512 bytes); "model" axis of 4 devices, data replicated.
        QTest::newRow("same") << "Shard(1)" << "Shard(1)" << "";
        QTest::newRow("partial to replicate") << "Partial()" << "Replicate()" << "all-reduce:1:512";
        QTest::newRow("partial to shard") << "Partial()" << "Shard(0)" << "reduce-scatter:1:512";
        QTest::newRow("shard to replicate") << "Shard(1)" << "Replicate()" << "all-gather:1:512";
        QTest::newRow("shard to other dim") << "Shard(1)" << "Shard(0)" << "all-to-all:1:128";
        QTest::newRow("replicate to shard is a slice") << "Replicate()" << "Shard(0)" << "";
        QTest::newRow("replicate to partial") << "Replicate()" << "Partial()" << "";
    }
    void reshard()
    {
        QFETCH(QString, from);
        QFETCH(QString, to);
        QFETCH(QString, collectives);
        const auto r = sharding::reshard(tensor({8, 16}), spec({"Replicate()", from.toUtf8().constData()}),
                                         spec({"Replicate()", to.toUtf8().constData()}), mesh2d());
        QVERIFY(r.legal());
        QStringList got;
        for (const auto &c : r.collectives)
            got << QStringLiteral("%1:%2:%3")
                       .arg(QString::fromLatin1(sharding::toString(c.kind).data()))
                       .arg(c.axis)
                       .arg(c.bytes);
        QCOMPARE(got.join(QLatin1Char(' ')), collectives);
    }

    // Bytes of a collective on one axis count the other axes' split: the
    // partial sum is reduced while the data axis still splits it (256 of
    // 512 bytes), then gathered.
    void reshardTwoAxes()
    {
        const auto r = sharding::reshard(tensor({8, 16}), spec({"Shard(0)", "Partial()"}),
                                         spec({"Replicate()", "Replicate()"}), mesh2d());
        QCOMPARE(r.collectives.size(), std::size_t{2});
        QVERIFY(r.collectives[0].kind == sharding::CollectiveKind::AllReduce);
        QCOMPARE(r.collectives[0].bytes, std::int64_t{256});
        QVERIFY(r.collectives[1].kind == sharding::CollectiveKind::AllGather);
        QCOMPARE(r.collectives[1].bytes, std::int64_t{512});
    }

    // A reshard slices first where slicing is free and cuts what a gather
    // on another axis then moves: [Shard(1), Replicate()] to
    // [Replicate(), Shard(0)] gathered all 512 bytes over the data axis
    // before slicing over the model axis; sliced first, the gather moves a
    // quarter. Undoing the axes in the mesh's order made the cost of a
    // plan depend on which of two like axes it used.
    void reshardSlicesBeforeItGathers()
    {
        const auto a = sharding::reshard(tensor({8, 16}), spec({"Shard(1)", "Replicate()"}),
                                         spec({"Replicate()", "Shard(0)"}), mesh2d());
        QCOMPARE(a.collectives.size(), std::size_t{1});
        QVERIFY(a.collectives[0].kind == sharding::CollectiveKind::AllGather);
        QCOMPARE(a.collectives[0].axis, 0);
        QCOMPARE(a.collectives[0].bytes, std::int64_t{128});
        const auto b = sharding::reshard(tensor({8, 16}), spec({"Replicate()", "Shard(1)"}),
                                         spec({"Shard(0)", "Replicate()"}), mesh2d());
        QCOMPARE(b.collectives.size(), std::size_t{1});
        QCOMPARE(b.collectives[0].axis, 1);
        QCOMPARE(b.collectives[0].bytes, std::int64_t{256});
        // Slices of a dim another axis gathers keep the mesh's order.
        QCOMPARE(sharding::reshardAxisOrder(spec({"Shard(0)", "Replicate()"}), spec({"Replicate()", "Shard(0)"})),
                 (std::vector<std::size_t>{0, 1}));
        QCOMPARE(sharding::reshardAxisOrder(spec({"Shard(1)", "Replicate()"}), spec({"Replicate()", "Shard(0)"})),
                 (std::vector<std::size_t>{1, 0}));
    }

    // Partial sums are reduce-scattered before they are all-reduced, and
    // all-reduced before anything is gathered: [Partial, Partial] to
    // [Replicate, Shard(0)] all-reduced 512 bytes over the data axis, then
    // reduce-scattered; now the data axis reduces a quarter.
    void reshardReducesWhileTheBufferIsSmall()
    {
        const auto r = sharding::reshard(tensor({8, 16}), spec({"Partial()", "Partial()"}),
                                         spec({"Replicate()", "Shard(0)"}), mesh2d());
        QCOMPARE(r.collectives.size(), std::size_t{2});
        QVERIFY(r.collectives[0].kind == sharding::CollectiveKind::ReduceScatter);
        QCOMPARE(r.collectives[0].axis, 1);
        QCOMPARE(r.collectives[0].bytes, std::int64_t{512});
        QVERIFY(r.collectives[1].kind == sharding::CollectiveKind::AllReduce);
        QCOMPARE(r.collectives[1].bytes, std::int64_t{128});
    }

    void reshardToIllegalSpecSaysSo()
    {
        const auto r = sharding::reshard(tensor({6, 16}), spec({"Replicate()", "Replicate()"}),
                                         spec({"Replicate()", "Shard(0)"}), mesh2d());
        QVERIFY(!r.legal());
        QVERIFY(r.problem->find("cannot reshard 't'") != std::string::npos);
    }

    void gradientSpecReplacesPartial()
    {
        QCOMPARE(sharding::gradientSpec(spec({"Partial()", "Shard(1)"})), spec({"Replicate()", "Shard(1)"}));
    }
};

QTEST_APPLESS_MAIN(TestShardingSpec)
#include "tst_shardingspec.moc"
