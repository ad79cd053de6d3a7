#include <QProcess>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QDir>
#include <QFileInfo>
#include <QTemporaryDir>
#include <QTest>

#include <sys/stat.h>

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
    // A batch of 4 in 2 micro-batches cannot be split over 4 devices as
    // dp splits it: plan says so in one line naming the tensor, writes
    // nothing, and exits 2 (tapestry-exec would refuse the plan).
    void microBatchesThePlanCannotSplitAreRefused()
    {
        QTemporaryDir dir;
        const QString out = dir.filePath(QStringLiteral("plan.json"));
        const Run r = cli({QStringLiteral("plan"), QStringLiteral("zoo:gpt2?layers=1&hidden=64&heads=4&seq=16&batch=4&vocab=128"),
                           QStringLiteral("--mesh"), QStringLiteral("4"), QStringLiteral("--search"), QStringLiteral("dp"),
                           QStringLiteral("--micro-batches"), QStringLiteral("2"), QStringLiteral("-o"), out});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("--micro-batches") && r.err.contains("input_ids") && r.err.contains("4 equal pieces"),
                 r.err.constData());
        QCOMPARE(r.err.count('\n'), 1);
        QVERIFY(!QFile::exists(out));
        // One micro-batch per device's share divides: planned.
        const Run ok = cli({QStringLiteral("plan"), QStringLiteral("zoo:gpt2?layers=1&hidden=64&heads=4&seq=16&batch=8&vocab=128"),
                            QStringLiteral("--mesh"), QStringLiteral("4"), QStringLiteral("--search"), QStringLiteral("dp"),
                            QStringLiteral("--micro-batches"), QStringLiteral("2"), QStringLiteral("-o"), out});
        QVERIFY2(ok.code == 0, ok.err.constData());
        QVERIFY(QFile::exists(out));
    }

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
        QTest::newRow("no threads") << plan + QStringList{QStringLiteral("4"), QStringLiteral("--threads"), QStringLiteral("0")}
                                    << QByteArray() << QByteArray("--threads: expects a whole number from 1 to 1024, got '0'");
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

        // Sizes past the limits (ir/sizes.h, zoo.h) are refused before a
        // model is built, not wrapped into a model of 0 bytes that "fits".
        QTest::newRow("batch past 64 bits")
            << QStringList{QStringLiteral("plan"), QStringLiteral("zoo:gpt2?batch=4611686018427387904"),
                           QStringLiteral("--mesh"), QStringLiteral("4"), QStringLiteral("--search"),
                           QStringLiteral("megatron")}
            << QByteArray() << QByteArray("batch=4611686018427387904 exceeds 16777216");
        QTest::newRow("a billion layers") << QStringList{QStringLiteral("inspect"), QStringLiteral("zoo:gpt2?layers=1000000000")}
                                          << QByteArray() << QByteArray("layers=1000000000 exceeds 10000");
        QTest::newRow("ops past the limit")
            << QStringList{QStringLiteral("inspect"), QStringLiteral("zoo:mixtral-8x7b?layers=10000&experts=1024&hidden=64&heads=8&kv_heads=8&ffn=64&vocab=64&seq=8")}
            << QByteArray() << QByteArray("a layer); Tapestry plans at most 1048576");
        QTest::newRow("config sizes past 64 bits")
            << QStringList{QStringLiteral("plan"), QStringLiteral("FILE"), QStringLiteral("--mesh"), QStringLiteral("4"),
                           QStringLiteral("--search"), QStringLiteral("megatron")}
            << QByteArray(R"({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2,
                             "n_embd": 4611686018427387904, "n_head": 72057594037927936, "vocab_size": 50257,
                             "n_positions": 1024})")
            << QByteArray("n_embd: n_embd=4611686018427387904 exceeds 16777216");
        QTest::newRow("config with a billion layers")
            << QStringList{QStringLiteral("inspect"), QStringLiteral("FILE")}
            << QByteArray(R"({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 1000000000,
                             "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024})")
            << QByteArray("n_layer: n_layer=1000000000 exceeds 10000");
        QTest::newRow("tensor past the model limit")
            << QStringList{QStringLiteral("inspect"), QStringLiteral("zoo:gpt2?batch=16777216&seq=1024&hidden=65536&heads=1")}
            << QByteArray() << QByteArray("the most a model may hold");
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

    // `-o` writes regular files (through a symbolic link to its target), '-'
    // is standard output, and anything else is refused and left as it was.
    void outputsAreRegularFilesOrStandardOutput()
    {
        QTemporaryDir dir;
        const QStringList plan{QStringLiteral("plan"), QStringLiteral("zoo:mlp"), QStringLiteral("--mesh"),
                               QStringLiteral("2"), QStringLiteral("--search"), QStringLiteral("megatron"),
                               QStringLiteral("-o")};
        const Run toStdout = cli(plan + QStringList{QStringLiteral("-")});
        QCOMPARE(toStdout.code, 0);
        QVERIFY2(QJsonDocument::fromJson(toStdout.out).object().value(QStringLiteral("format")) ==
                     QStringLiteral("tapestry.plan"),
                 toStdout.out.left(200).constData());
        QVERIFY(toStdout.err.contains("step time"));  // the report, out of the pipe's way
        QVERIFY(!QFile::exists(QStringLiteral("-")));

        const QByteArray fifo = dir.filePath(QStringLiteral("plan.fifo")).toLocal8Bit();
        QCOMPARE(::mkfifo(fifo.constData(), 0600), 0);
        const Run toFifo = cli(plan + QStringList{QString::fromLocal8Bit(fifo)});
        QCOMPARE(toFifo.code, 2);
        QVERIFY2(toFifo.err.contains("is a FIFO, not a regular file"), toFifo.err.constData());
        QCOMPARE(toFifo.err.count('\n'), 1);
        struct stat st {};
        QCOMPARE(::lstat(fifo.constData(), &st), 0);
        QVERIFY(S_ISFIFO(st.st_mode));

        const Run toDirectory = cli(plan + QStringList{dir.path()});
        QCOMPARE(toDirectory.code, 2);
        QVERIFY2(toDirectory.err.contains("is a directory"), toDirectory.err.constData());

        // A link is followed: the link stays, its target gets the plan and
        // keeps its permissions.
        const QString target = dir.filePath(QStringLiteral("target.json"));
        writeFile(target, "old");
        QVERIFY(QFile::setPermissions(target, QFileDevice::ReadOwner | QFileDevice::WriteOwner));
        const QString link = dir.filePath(QStringLiteral("link.json"));
        QVERIFY(QFile::link(target, link));
        QCOMPARE(cli(plan + QStringList{link}).code, 0);
        QVERIFY(QFileInfo(link).isSymLink());
        QFile file(target);
        QVERIFY(file.open(QIODevice::ReadOnly));
        QVERIFY(file.readAll().contains("tapestry.plan"));
        struct stat written {};
        QCOMPARE(::stat(QFile::encodeName(target).constData(), &written), 0);
        QCOMPARE(written.st_mode & 0777, 0600u);
        QVERIFY(QDir(dir.path()).entryList({QStringLiteral("*.tmp-*")}, QDir::Files | QDir::Hidden).isEmpty());
    }

    // Inputs that are not regular files are refused at once: a FIFO named
    // like a model would otherwise block the read forever.
    void inputsThatAreNotFilesAreRefused()
    {
        QTemporaryDir dir;
        for (const char *name : {"model.onnx", "model.json"}) {
            const QByteArray fifo = dir.filePath(QString::fromLatin1(name)).toLocal8Bit();
            QCOMPARE(::mkfifo(fifo.constData(), 0600), 0);
            const Run r = cli({QStringLiteral("inspect"), QString::fromLocal8Bit(fifo)});
            QCOMPARE(r.code, 2);
            QVERIFY2(r.err.contains(fifo + ": is a FIFO, not a regular file"), r.err.constData());
        }
        const QString folder = dir.filePath(QStringLiteral("folder.onnx"));
        QVERIFY(QDir().mkpath(folder));
        const Run r = cli({QStringLiteral("inspect"), folder});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("is a directory"), r.err.constData());
    }

    // --keep-pins takes pins from a plan of the same model only, as `cost`
    // takes plans.
    void keepPinsRefusesAnotherModelsPlan()
    {
        QTemporaryDir dir;
        const QString mlpPlan = dir.filePath(QStringLiteral("mlp.plan.json"));
        QCOMPARE(cli({QStringLiteral("plan"), QStringLiteral("zoo:mlp"), QStringLiteral("--mesh"), QStringLiteral("2"),
                      QStringLiteral("-o"), mlpPlan})
                     .code,
                 0);
        const Run r = cli({QStringLiteral("plan"), QStringLiteral("zoo:abc"), QStringLiteral("--mesh"), QStringLiteral("2"),
                           QStringLiteral("--keep-pins"), mlpPlan});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains("model.fingerprint"), r.err.constData());
        QCOMPARE(r.err.count('\n'), 1);
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
