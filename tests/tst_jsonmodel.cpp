#include "io/files.h"
#include "io/jsonmodel.h"
#include "io/modelloader.h"
#include "io/zoo/zoo.h"
#include "ir/error.h"

#include <QTemporaryDir>
#include <QTest>

#include <fstream>

using namespace tapestry;

namespace {

// A model using every attribute kind and an opaque custom-domain op.
const char *kModel = R"({
 "format": "tapestry.model",
 "version": 1,
 "name": "tiny",
 "tensors": [
  {"name": "x", "shape": [2, 3], "dtype": "float32", "role": "input"},
  {"name": "w", "shape": [3, 4], "dtype": "bfloat16", "role": "parameter"},
  {"name": "y", "shape": [2, 4], "dtype": "float32", "role": "activation"},
  {"name": "z", "shape": [2, 4], "dtype": "float32", "role": "output"}
 ],
 "ops": [
  {"name": "blk/MatMul", "type": "MatMul", "inputs": ["x", "w"], "outputs": ["y"]},
  {"name": "blk/Custom", "type": "FusedThing", "domain": "com.example", "inputs": ["y"], "outputs": ["z"],
   "attributes": {"alpha": 0.5, "axis": -1, "mode": "fast", "perm": [1, 0], "scales": [1.5, 2.0], "tags": ["a", "b"]}}
 ]
})";

std::string withReplacement(std::string text, const std::string &from, const std::string &to)
{
    auto pos = text.find(from);
    Q_ASSERT(pos != std::string::npos);
    return text.replace(pos, from.size(), to);
}

} // namespace

class TestJsonModel : public QObject {
    Q_OBJECT
private slots:
    void readsEveryField()
    {
        const auto g = io::readModelJson(kModel, "tiny.json");
        QCOMPARE(g.name, std::string("tiny"));
        QCOMPARE(g.opCount(), std::size_t(2));
        QVERIFY(g.tensor(*g.findTensor("w")).dtype == ir::DType::BF16);
        QCOMPARE(g.parameterBytes(), 24);
        const auto &custom = g.op(ir::OpId(1));
        QCOMPARE(custom.domain, std::string("com.example"));
        QCOMPARE(ir::floatAttr(custom.attributes, "alpha").value(), 0.5);
        QCOMPARE(ir::intAttr(custom.attributes, "axis").value(), std::int64_t(-1));
        QCOMPARE(ir::stringAttr(custom.attributes, "mode").value(), std::string("fast"));
        QCOMPARE(ir::intsAttr(custom.attributes, "perm").value(), (std::vector<std::int64_t>{1, 0}));
    }

    void roundTripIsExact_data()
    {
        QTest::addColumn<QString>("model");
        QTest::newRow("tiny") << "";
        for (const auto &p : io::zoo::presets())
            QTest::newRow(p.name.c_str()) << QString::fromStdString("zoo:" + p.name + "?layers=2")
                                                 .replace(QStringLiteral("?layers=2"),
                                                          p.defaults.count("layers") ? QStringLiteral("?layers=2") : QString());
    }
    void roundTripIsExact()
    {
        QFETCH(QString, model);
        const ir::Graph g = model.isEmpty() ? io::readModelJson(kModel, "tiny.json")
                                            : io::loadModel(model.toStdString());
        const std::string once = io::writeModelJson(g);
        const std::string twice = io::writeModelJson(io::readModelJson(once, "again.json"));
        QCOMPARE(twice, once);
        const auto back = io::readModelJson(once, "again.json");
        QCOMPARE(back.opCount(), g.opCount());
        QCOMPARE(back.tensorCount(), g.tensorCount());
        QCOMPARE(back.parameterCount(), g.parameterCount());
    }

    void badInput_data()
    {
        QTest::addColumn<QString>("text");
        QTest::addColumn<QString>("message");
        const std::string m = kModel;
        QTest::newRow("not json") << "hello" << "m.json: not valid JSON (syntax error at byte 1)";
        QTest::newRow("truncated") << QString::fromStdString(m.substr(0, m.size() / 2))
                                   << "m.json: not valid JSON (syntax error at byte " + QString::number(m.size() / 2 + 1) + ")";
        QTest::newRow("array") << "[1, 2]" << "m.json: $: expected a JSON object";
        QTest::newRow("wrong format") << QString::fromStdString(withReplacement(m, "tapestry.model", "other"))
                                      << "m.json: $.format: expected \"tapestry.model\"";
        QTest::newRow("wrong version") << QString::fromStdString(withReplacement(m, "\"version\": 1", "\"version\": 7"))
                                       << "m.json: $.version: unsupported version 7 (this build reads 1)";
        QTest::newRow("missing field") << QString::fromStdString(withReplacement(m, "\"dtype\": \"bfloat16\", ", ""))
                                       << "m.json: $.tensors[1]: missing field \"dtype\"";
        QTest::newRow("unknown tensor") << QString::fromStdString(withReplacement(m, "[\"x\", \"w\"]", "[\"x\", \"v\"]"))
                                        << "m.json: $.ops[0].inputs[1]: unknown tensor \"v\"";
        QTest::newRow("negative dim") << QString::fromStdString(withReplacement(m, "[3, 4]", "[3, -4]"))
                                      << "m.json: $.tensors[1].shape[1]: negative dim -4";
        QTest::newRow("overflowing dim") << QString::fromStdString(withReplacement(m, "[3, 4]", "[3, 99999999999999999999]"))
                                         << "m.json: $.tensors[1].shape[1]: integer overflows 64 bits or is not whole: 1e+20";
        QTest::newRow("overflowing count") << QString::fromStdString(withReplacement(m, "[3, 4]", "[4294967296, 4294967296]"))
                                           << "m.json: $.tensors[1].shape[1]: shape's element count overflows 64 bits";
        QTest::newRow("number past a double") << QString::fromStdString(withReplacement(m, "0.5", "1e999"))
                                              << "m.json: not valid JSON (number overflow parsing '1e999')";
        QTest::newRow("bad dtype") << QString::fromStdString(withReplacement(m, "bfloat16", "float8"))
                                   << "m.json: $.tensors[1].dtype: unknown dtype \"float8\"";
        QTest::newRow("bad role") << QString::fromStdString(withReplacement(m, "\"role\": \"parameter\"", "\"role\": \"weight\""))
                                  << "m.json: $.tensors[1].role: unknown role \"weight\"";
        QTest::newRow("shape not array") << QString::fromStdString(withReplacement(m, "[3, 4]", "12"))
                                         << "m.json: $.tensors[1].shape: expected an array";
        QTest::newRow("shape mismatch") << QString::fromStdString(withReplacement(m, "[3, 4]", "[5, 4]"))
                                        << "m.json: op 'blk/MatMul' (MatMul): MatMul contracting dims differ: [2, 3] x [5, 4]";
        QTest::newRow("duplicate tensor") << QString::fromStdString(withReplacement(m, "\"name\": \"w\"", "\"name\": \"x\""))
                                          << "m.json: $.tensors[1].name: duplicate tensor name \"x\"";
    }
    void badInput()
    {
        QFETCH(QString, text);
        QFETCH(QString, message);
        try {
            io::readModelJson(text.toStdString(), "m.json");
            QFAIL("expected an error");
        } catch (const TapestryError &e) {
            QCOMPARE(QString::fromUtf8(e.what()), message);
            QVERIFY(!QString::fromUtf8(e.what()).contains(QLatin1Char('\n')));
        }
    }

    void atomicWriteLeavesNoPartialFile()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath(QStringLiteral("model.json")).toStdString();
        io::writeOutputFile(path, "first");
        QCOMPARE(io::readFile(path), std::string("first"));
        io::writeOutputFile(path, "second");
        QCOMPARE(io::readFile(path), std::string("second"));
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files).size(), qsizetype(1));
        // A directory that does not exist: the error names the path, nothing is left.
        const std::string missing = dir.filePath(QStringLiteral("no/such/model.json")).toStdString();
        QVERIFY_THROWS_EXCEPTION(TapestryError, io::writeOutputFile(missing, "x"));
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files).size(), qsizetype(1));
    }

    void sampleModelLoads()
    {
        const auto g = io::loadModel(TAPESTRY_SOURCE_DIR "/samples/models/mlp.json");
        const auto zoo = io::loadModel("zoo:mlp");
        QCOMPARE(io::writeModelJson(g), io::writeModelJson(zoo));
    }
};

QTEST_APPLESS_MAIN(TestJsonModel)
#include "tst_jsonmodel.moc"
