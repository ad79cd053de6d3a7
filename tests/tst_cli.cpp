#include <QProcess>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QTest>

namespace {

struct Run {
    int code = -1;
    QByteArray out;
    QByteArray err;
};

Run cli(const QStringList &args)
{
    QProcess p;
    p.start(QStringLiteral(TAPESTRY_CLI), args);
    p.waitForFinished(120000);
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, p.readAllStandardOutput(),
            p.readAllStandardError()};
}

void writeFile(const QString &path, const QByteArray &bytes)
{
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(bytes);
}

} // namespace

class TestCli : public QObject {
    Q_OBJECT
private slots:
    void inspectJson()
    {
        const Run r = cli({QStringLiteral("inspect"), QStringLiteral("zoo:mlp"), QStringLiteral("--json")});
        QCOMPARE(r.code, 0);
        const auto o = QJsonDocument::fromJson(r.out).object();
        QCOMPARE(o.value(QStringLiteral("ops")).toInt(), 3);
        QCOMPARE(o.value(QStringLiteral("parameters")).toInteger(), 64);
        QCOMPARE(o.value(QStringLiteral("parameter_bytes")).toInteger(), 256);
        QCOMPARE(o.value(QStringLiteral("op_types")).toObject().value(QStringLiteral("MatMul")).toInt(), 2);
        QCOMPARE(o.value(QStringLiteral("scope_depth")).toInt(), 2);
        QVERIFY(o.contains(QStringLiteral("tensors")));
    }

    void zooListsEveryPresetWithKnobs()
    {
        const Run r = cli({QStringLiteral("zoo"), QStringLiteral("--json")});
        QCOMPARE(r.code, 0);
        const auto presets = QJsonDocument::fromJson(r.out).array();
        QStringList names;
        for (const auto &p : presets)
            names << p.toObject().value(QStringLiteral("name")).toString();
        for (const char *name : {"mlp", "abc", "gpt2", "gpt3-175b", "bert-large", "t5-base", "llama3-8b", "mixtral-8x7b"})
            QVERIFY2(names.contains(QLatin1String(name)), name);
        for (const auto &p : presets)
            if (p.toObject().value(QStringLiteral("name")).toString() == QLatin1String("gpt2"))
                QCOMPARE(p.toObject().value(QStringLiteral("knobs")).toObject().value(QStringLiteral("layers")).toInt(), 12);
        // Every listed preset loads.
        for (const auto &name : names)
            QCOMPARE(cli({QStringLiteral("inspect"), QStringLiteral("zoo:") + name + QStringLiteral("?layers=1"),
                          QStringLiteral("--json")}).code == 0 ||
                         cli({QStringLiteral("inspect"), QStringLiteral("zoo:") + name, QStringLiteral("--json")}).code == 0,
                     true);
    }

    void inspectText()
    {
        const Run r = cli({QStringLiteral("inspect"), QStringLiteral(TAPESTRY_SOURCE_DIR "/samples/models/mlp.json")});
        QCOMPARE(r.code, 0);
        QVERIFY(r.out.contains("parameters  64"));
        QVERIFY(r.out.contains("MatMul"));
    }

    void badInputs_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QByteArray>("fileContents");  // written to FILE when not empty
        QTest::addColumn<QByteArray>("errorPart");
        QTest::newRow("truncated json") << QStringList{QStringLiteral("inspect"), QStringLiteral("FILE")}
                                        << QByteArray("{\"format\": \"tapestry.model\", \"version\": 1, \"tens")
                                        << QByteArray("not valid JSON");
        QTest::newRow("missing file") << QStringList{QStringLiteral("inspect"), QStringLiteral("/nonexistent/m.json")}
                                      << QByteArray() << QByteArray("/nonexistent/m.json: cannot open file");
        QTest::newRow("unknown preset") << QStringList{QStringLiteral("inspect"), QStringLiteral("zoo:gpt9")}
                                        << QByteArray() << QByteArray("unknown zoo preset 'gpt9'");
        QTest::newRow("unknown knob") << QStringList{QStringLiteral("inspect"), QStringLiteral("zoo:mlp?wings=2")}
                                      << QByteArray() << QByteArray("unknown knob");
        QTest::newRow("unknown command") << QStringList{QStringLiteral("frobnicate")} << QByteArray()
                                         << QByteArray("unknown command 'frobnicate'");
        QTest::newRow("unknown option") << QStringList{QStringLiteral("inspect"), QStringLiteral("zoo:mlp"), QStringLiteral("--fast")}
                                        << QByteArray() << QByteArray("unknown option '--fast'");
        QTest::newRow("bad batch") << QStringList{QStringLiteral("inspect"), QStringLiteral("zoo:mlp"), QStringLiteral("--batch"), QStringLiteral("eight")}
                                   << QByteArray() << QByteArray("--batch: expects an integer");
        QTest::newRow("no model") << QStringList{QStringLiteral("inspect")} << QByteArray() << QByteArray("expected one MODEL");
        QTest::newRow("no command") << QStringList{} << QByteArray() << QByteArray("usage:");
        const QStringList plan{QStringLiteral("plan"), QStringLiteral("zoo:mlp"), QStringLiteral("--search"),
                               QStringLiteral("tap"), QStringLiteral("--mesh")};
        QTest::newRow("3D mesh without names") << plan + QStringList{QStringLiteral("2x2x2")} << QByteArray()
                                               << QByteArray("as in 2x2x2 (dp, tp, pp)");
        QTest::newRow("names short of the axes") << plan + QStringList{QStringLiteral("2x2x2 (a, b)")} << QByteArray()
                                                 << QByteArray("2 axis name(s) for a mesh of 3 axes in '2x2x2 (a, b)'");
        QTest::newRow("expert axis") << plan + QStringList{QStringLiteral("2x2"), QStringLiteral("--axes"),
                                                           QStringLiteral("data,expert")}
                                     << QByteArray() << QByteArray("--axes: axis 'expert': expert parallelism");
        QTest::newRow("names twice") << plan + QStringList{QStringLiteral("2x2 (a, b)"), QStringLiteral("--axes"),
                                                           QStringLiteral("c,d")}
                                     << QByteArray() << QByteArray("names its axes already");
    }

    // A mesh names its axes after its sizes, as a plan's report prints it.
    void meshWithAxisNames()
    {
        const Run r = cli({QStringLiteral("plan"), QStringLiteral("zoo:mlp"), QStringLiteral("--search"),
                           QStringLiteral("megatron"), QStringLiteral("--mesh"), QStringLiteral("2x2x2 (dp, tp, sp)"),
                           QStringLiteral("--json")});
        QCOMPARE(r.code, 0);
        QStringList names;
        for (const auto &axis : QJsonDocument::fromJson(r.out).object()[QStringLiteral("mesh")][QStringLiteral("axes")].toArray())
            names << axis.toObject()[QStringLiteral("name")].toString() + QString::number(axis.toObject()[QStringLiteral("size")].toInt());
        QCOMPARE(names.join(QLatin1Char(',')), QStringLiteral("dp2,tp2,sp2"));
    }
    // A plan that fits says nothing about memory: the memory techniques'
    // probes search without a limit, and their plans are costed on the real
    // mesh, not warned about a limit of none.
    void fittingPlanHasNoMemoryWarning()
    {
        const Run r = cli({QStringLiteral("plan"), QStringLiteral("zoo:gpt2?layers=2"), QStringLiteral("--mesh"),
                           QStringLiteral("8"), QStringLiteral("--json")});
        QCOMPARE(r.code, 0);
        const auto report = QJsonDocument::fromJson(r.out).object();
        QVERIFY(report[QStringLiteral("fits_memory")].toBool());
        QVERIFY2(!r.out.contains("costed on the whole graph"), r.out.constData());
    }

    // Given axis names constrain the search and the report says so;
    // default names do not, and the report says what each axis carries.
    void axesAsConstraints_data()
    {
        QTest::addColumn<QStringList>("axes");
        QTest::addColumn<bool>("constrained");
        QTest::newRow("default names") << QStringList{} << false;
        QTest::newRow("--axes data,model") << QStringList{QStringLiteral("--axes"), QStringLiteral("data,model")} << true;
    }
    void axesAsConstraints()
    {
        QFETCH(QStringList, axes);
        QFETCH(bool, constrained);
        const QStringList plan{QStringLiteral("plan"),
                               QStringLiteral("zoo:llama3-8b?layers=2&hidden=2048&heads=32&kv_heads=4&ffn=5632&"
                                              "vocab=32000&batch=8&seq=2048"),
                               QStringLiteral("--search"), QStringLiteral("tap"), QStringLiteral("--mesh"),
                               QStringLiteral("2x4")};
        Run r = cli(plan + axes + QStringList{QStringLiteral("--json")});
        QCOMPARE(r.code, 0);
        const auto mesh = QJsonDocument::fromJson(r.out).object()[QStringLiteral("mesh")].toObject();
        QCOMPARE(mesh[QStringLiteral("axes_constrained")].toBool(), constrained);
        const auto data = mesh[QStringLiteral("axes")].toArray()[0].toObject();
        QCOMPARE(data[QStringLiteral("name")].toString(), QStringLiteral("data"));
        // Free, tap splits weights over the axis named data; named, it may not.
        QCOMPARE(data[QStringLiteral("carries")].toString().contains(QStringLiteral("tensor")), !constrained);
        QCOMPARE(data[QStringLiteral("matches_name")].toBool(), constrained);
        r = cli(plan + axes);
        QCOMPARE(r.code, 0);
        QVERIFY2(r.out.contains(constrained ? "axis names given: the search kept each axis to the role its name asks for"
                                            : "axis names are not constraints here: data carries tensor"),
                 r.out.constData());
        QVERIFY(r.out.contains("  axis data (2)   carries "));
    }
    void badInputs()
    {
        QFETCH(QStringList, args);
        QFETCH(QByteArray, fileContents);
        QFETCH(QByteArray, errorPart);
        QTemporaryDir dir;
        const QString file = dir.filePath(QStringLiteral("model.json"));
        if (!fileContents.isEmpty())
            writeFile(file, fileContents);
        args.replaceInStrings(QStringLiteral("FILE"), file);
        const Run r = cli(args);
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains(errorPart), r.err.constData());
        if (!args.isEmpty())
            QCOMPARE(r.err.count('\n'), 1);  // one line
        QVERIFY(r.out.isEmpty());
    }

    void helpDescribesEveryOption()
    {
        const Run top = cli({QStringLiteral("--help")});
        QCOMPARE(top.code, 0);
        QVERIFY(top.out.contains("inspect"));
        const Run r = cli({QStringLiteral("inspect"), QStringLiteral("--help")});
        QCOMPARE(r.code, 0);
        for (const char *option : {"--batch", "--seq", "--json", "--help"})
            QVERIFY2(r.out.contains(option), option);
    }

    void convertWritesWholeFileOrNothing()
    {
        QTemporaryDir dir;
        const QString out = dir.filePath(QStringLiteral("abc.json"));
        QCOMPARE(cli({QStringLiteral("convert"), QStringLiteral("zoo:abc"), QStringLiteral("-o"), out}).code, 0);
        const Run back = cli({QStringLiteral("inspect"), out, QStringLiteral("--json")});
        QCOMPARE(back.code, 0);
        QCOMPARE(QJsonDocument::fromJson(back.out).object().value(QStringLiteral("ops")).toInt(), 2);
        const QString bad = dir.filePath(QStringLiteral("bad.json"));
        QCOMPARE(cli({QStringLiteral("convert"), QStringLiteral("zoo:nope"), QStringLiteral("-o"), bad}).code, 2);
        QVERIFY(!QFile::exists(bad));
    }
};

QTEST_GUILESS_MAIN(TestCli)
#include "tst_cli.moc"
