// The studio's report server against fake clients (wrong token, no hello,
// garbage and oversized lines, a client gone mid-run, a second client with
// a used token, a crowd of silent connections) and against a real
// tapestry-exec on 2 ranks, which takes the token from its environment; the
// executor's one-line refusal of a report address nobody listens on.
#include "reportserver.h"

#include <QElapsedTimer>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSignalSpy>
#include <QTcpServer>
#include <QTcpSocket>
#include <QTemporaryDir>
#include <QtTest>

using tapestry::views::ReportServer;

namespace {

// What MPI ranks need here; the report token only when given.
QProcessEnvironment mpiEnvironment(const QString &token = {})
{
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("OMPI_ALLOW_RUN_AS_ROOT"), QStringLiteral("1"));
    env.insert(QStringLiteral("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"), QStringLiteral("1"));
    env.insert(QStringLiteral("OPENBLAS_NUM_THREADS"), QStringLiteral("1"));
    env.remove(QStringLiteral("TAPESTRY_REPORT_TOKEN"));
    if (!token.isEmpty())
        env.insert(QStringLiteral("TAPESTRY_REPORT_TOKEN"), token);
    return env;
}

QByteArray hello(const QString &token, int schema = 1)
{
    return QJsonDocument(QJsonObject{{QStringLiteral("event"), QStringLiteral("hello")},
                                     {QStringLiteral("schema"), schema},
                                     {QStringLiteral("program"), QStringLiteral("fake")},
                                     {QStringLiteral("ranks"), 2},
                                     {QStringLiteral("token"), token}})
               .toJson(QJsonDocument::Compact) +
           '\n';
}

QByteArray step(int n)
{
    return QJsonDocument(QJsonObject{{QStringLiteral("event"), QStringLiteral("step")},
                                     {QStringLiteral("step"), n},
                                     {QStringLiteral("tokens_per_s"), 1000.0 * n}})
               .toJson(QJsonDocument::Compact) +
           '\n';
}

// A client connected to `server`, or a failed test.
std::unique_ptr<QTcpSocket> connectTo(const ReportServer &server)
{
    auto socket = std::make_unique<QTcpSocket>();
    socket->connectToHost(QHostAddress::LocalHost, server.port());
    if (!socket->waitForConnected(10000))
        return nullptr;
    return socket;
}

bool waitFor(QSignalSpy &spy, int count = 1)
{
    for (int i = 0; i < 300 && spy.count() < count; ++i)
        spy.wait(100);
    return spy.count() >= count;
}

} // namespace

class TestReportServer : public QObject {
    Q_OBJECT
private slots:
    void listensOnLoopback()
    {
        ReportServer server;
        QVERIFY(server.listen());
        QVERIFY(server.port() > 0);
        const QString address = server.startRun();
        // The token goes to the job by its environment, never its command line.
        QCOMPARE(address, QStringLiteral("tcp://127.0.0.1:%1").arg(server.port()));
        QCOMPARE(server.token().size(), 32);
        const QString first = server.token();
        server.startRun();
        QVERIFY(server.token() != first);
    }

    void acceptsTheRunsToken()
    {
        ReportServer server;
        QVERIFY(server.listen());
        server.startRun();
        QSignalSpy accepted(&server, &ReportServer::clientAccepted);
        QSignalSpy messages(&server, &ReportServer::messageReceived);
        auto client = connectTo(server);
        QVERIFY(client);
        client->write(hello(server.token()) + step(1) + step(2));
        QVERIFY(waitFor(messages, 2));
        QCOMPARE(accepted.count(), 1);
        QCOMPARE(accepted.first().first().toJsonObject().value(QStringLiteral("ranks")).toInt(), 2);
        QCOMPARE(messages.at(1).first().toJsonObject().value(QStringLiteral("step")).toInt(), 2);
        QVERIFY(server.hasClient());
    }

    void refuses_data()
    {
        QTest::addColumn<QByteArray>("first");
        QTest::addColumn<QString>("reason");
        QTest::newRow("wrong token") << hello(QStringLiteral("0123456789abcdef0123456789abcdef")) << "wrong token";
        QTest::newRow("no token") << QByteArray("{\"event\":\"hello\",\"schema\":1}\n") << "wrong token";
        QTest::newRow("step before hello") << step(1) << "not a hello";
        QTest::newRow("garbage") << QByteArray("GET / HTTP/1.1\r\n") << "not a hello";
        QTest::newRow("binary") << QByteArray("\x00\xff\xfe\n", 4) << "not a hello";
    }
    void refuses()
    {
        QFETCH(QByteArray, first);
        QFETCH(QString, reason);
        ReportServer server;
        QVERIFY(server.listen());
        server.startRun();
        QSignalSpy rejected(&server, &ReportServer::connectionRejected);
        QSignalSpy accepted(&server, &ReportServer::clientAccepted);
        QSignalSpy messages(&server, &ReportServer::messageReceived);
        auto client = connectTo(server);
        QVERIFY(client);
        client->write(first + step(1));
        QVERIFY(waitFor(rejected));
        QVERIFY2(rejected.first().first().toString().contains(reason), qPrintable(rejected.first().first().toString()));
        QVERIFY(client->state() == QAbstractSocket::UnconnectedState || client->waitForDisconnected(10000));
        QCOMPARE(accepted.count(), 0);
        QCOMPARE(messages.count(), 0);
        // The server still takes the right client afterwards.
        auto good = connectTo(server);
        QVERIFY(good);
        good->write(hello(server.token()) + step(1));
        QVERIFY(waitFor(messages));
    }

    void refusesAnOtherSchema()
    {
        ReportServer server;
        QVERIFY(server.listen());
        server.startRun();
        QSignalSpy rejected(&server, &ReportServer::connectionRejected);
        auto client = connectTo(server);
        QVERIFY(client);
        client->write(hello(server.token(), 2));
        QVERIFY(waitFor(rejected));
        QVERIFY(rejected.first().first().toString().contains(QStringLiteral("schema 2")));
    }

    void tokenIsUsedOnce()
    {
        ReportServer server;
        QVERIFY(server.listen());
        server.startRun();
        QSignalSpy accepted(&server, &ReportServer::clientAccepted);
        QSignalSpy rejected(&server, &ReportServer::connectionRejected);
        auto first = connectTo(server);
        QVERIFY(first);
        first->write(hello(server.token()));
        QVERIFY(waitFor(accepted));
        auto second = connectTo(server);
        QVERIFY(second);
        second->write(hello(server.token()));
        QVERIFY(waitFor(rejected));
        QVERIFY(rejected.first().first().toString().contains(QStringLiteral("already used")));
        QCOMPARE(accepted.count(), 1);
    }

    void oldTokenAfterNewRun()
    {
        ReportServer server;
        QVERIFY(server.listen());
        server.startRun();
        const QString old = server.token();
        server.startRun();
        QSignalSpy rejected(&server, &ReportServer::connectionRejected);
        auto client = connectTo(server);
        QVERIFY(client);
        client->write(hello(old));
        QVERIFY(waitFor(rejected));
        server.endRun();
        auto late = connectTo(server);
        QVERIFY(late);
        late->write(hello(old));
        QVERIFY(waitFor(rejected, 2));
        QVERIFY(rejected.at(1).first().toString().contains(QStringLiteral("no run")));
    }

    void survivesGarbageLines()
    {
        ReportServer server;
        QVERIFY(server.listen());
        server.startRun();
        QSignalSpy messages(&server, &ReportServer::messageReceived);
        QSignalSpy logged(&server, &ReportServer::logged);
        auto client = connectTo(server);
        QVERIFY(client);
        client->write(hello(server.token()));
        client->write("this is not json\n");
        client->write("[1, 2, 3]\n");
        client->write("{\"event\": \"step\", \"step\": \n");
        client->write(QByteArray("\x00\x01\x02\n", 4));
        client->write("\n\n");
        client->write(step(7));
        QVERIFY(waitFor(messages));
        QCOMPARE(messages.count(), 1);
        QCOMPARE(messages.first().first().toJsonObject().value(QStringLiteral("step")).toInt(), 7);
        QCOMPARE(logged.count(), 4);
        QVERIFY(server.hasClient());
    }

    void dropsOversizedLines()
    {
        ReportServer server;
        QVERIFY(server.listen());
        server.startRun();
        QSignalSpy messages(&server, &ReportServer::messageReceived);
        QSignalSpy logged(&server, &ReportServer::logged);
        auto client = connectTo(server);
        QVERIFY(client);
        client->write(hello(server.token()) + step(1));
        // A well-formed JSON object far over the limit, sent in pieces.
        QByteArray big = "{\"event\":\"step\",\"pad\":\"" + QByteArray(3 * ReportServer::kMaxLineBytes, 'x') + "\"}\n";
        for (qsizetype at = 0; at < big.size(); at += 256 * 1024) {
            client->write(big.mid(at, 256 * 1024));
            client->flush();
            QTest::qWait(5);
        }
        client->write(step(2));
        QVERIFY(waitFor(messages, 2));
        QCOMPARE(messages.count(), 2);
        QCOMPARE(messages.at(1).first().toJsonObject().value(QStringLiteral("step")).toInt(), 2);
        QVERIFY(logged.count() >= 1);
        QVERIFY(logged.first().first().toString().contains(QStringLiteral("dropped")));
    }

    void oversizedHelloIsRefused()
    {
        ReportServer server;
        QVERIFY(server.listen());
        server.startRun();
        QSignalSpy rejected(&server, &ReportServer::connectionRejected);
        auto client = connectTo(server);
        QVERIFY(client);
        client->write(QByteArray(2 * ReportServer::kMaxLineBytes, 'x'));
        QVERIFY(waitFor(rejected));
    }

    void silentClientTimesOut()
    {
        ReportServer server;
        server.setHelloTimeout(200);
        QVERIFY(server.listen());
        server.startRun();
        QSignalSpy rejected(&server, &ReportServer::connectionRejected);
        auto client = connectTo(server);
        QVERIFY(client);
        QVERIFY(waitFor(rejected));
        QVERIFY(rejected.first().first().toString().contains(QStringLiteral("no hello")));
    }

    // issue 27: a connection that never says hello is dropped within
    // seconds, not held for half a minute.
    void silentClientTimesOutInSeconds()
    {
        ReportServer server;
        QVERIFY(server.listen());
        server.startRun();
        QSignalSpy rejected(&server, &ReportServer::connectionRejected);
        QElapsedTimer clock;
        clock.start();
        auto client = connectTo(server);
        QVERIFY(client);
        for (int i = 0; i < 150 && rejected.isEmpty(); ++i)
            rejected.wait(100);
        QVERIFY(!rejected.isEmpty());
        QVERIFY2(clock.elapsed() < 10000, qPrintable(QString::number(clock.elapsed())));
        QVERIFY(rejected.first().first().toString().contains(QStringLiteral("no hello")));
    }

    // issue 27: connections that never say hello, more than the server
    // holds, cannot lock the run's executor out: the oldest silent ones
    // make room for the newest, and the executor says hello at once.
    void silentConnectionsCannotLockTheRunOut()
    {
        ReportServer server;
        QVERIFY(server.listen());
        server.startRun();
        QSignalSpy accepted(&server, &ReportServer::clientAccepted);
        QSignalSpy messages(&server, &ReportServer::messageReceived);
        std::vector<std::unique_ptr<QTcpSocket>> silent;
        for (int i = 0; i < 3 * ReportServer::kMaxPendingClients; ++i) {
            silent.push_back(connectTo(server));
            QVERIFY(silent.back());
        }
        QTest::qWait(300);  // the server has taken them all
        auto executor = connectTo(server);
        QVERIFY(executor);
        executor->write(hello(server.token()) + step(1));
        QVERIFY(waitFor(messages));
        QCOMPARE(accepted.count(), 1);
        QVERIFY(server.hasClient());
    }

    void clientGoneMidRun()
    {
        ReportServer server;
        QVERIFY(server.listen());
        server.startRun();
        QSignalSpy messages(&server, &ReportServer::messageReceived);
        QSignalSpy gone(&server, &ReportServer::clientDisconnected);
        auto client = connectTo(server);
        QVERIFY(client);
        // Half a line, then the connection drops.
        client->write(hello(server.token()) + step(1) + "{\"event\":\"st");
        client->flush();
        QVERIFY(waitFor(messages));
        client->abort();
        QVERIFY(waitFor(gone));
        QCOMPARE(messages.count(), 1);
        QVERIFY(!server.hasClient());
        QVERIFY(server.isListening());
        // A new run on the same server works.
        server.startRun();
        auto next = connectTo(server);
        QVERIFY(next);
        next->write(hello(server.token()) + step(1));
        QVERIFY(waitFor(messages, 2));
    }

    void executorRefusesAnAddressNobodyListensOn()
    {
        // A port that was free a moment ago: bound, then closed.
        QTcpServer probe;
        QVERIFY(probe.listen(QHostAddress::LocalHost));
        const quint16 port = probe.serverPort();
        probe.close();
        QProcess p;
        p.setProcessEnvironment(mpiEnvironment(QStringLiteral("abc")));
        p.start(QStringLiteral(TAPESTRY_EXEC),
                {QStringLiteral("--model"), QStringLiteral("zoo:mlp"), QStringLiteral("--plan"),
                 QStringLiteral(TAPESTRY_SOURCE_DIR "/samples/plans/mlp-2d-4x2.json"), QStringLiteral("--report"),
                 QStringLiteral("tcp://127.0.0.1:%1").arg(port)});
        QVERIFY(p.waitForFinished(60000));
        QCOMPARE(p.exitCode(), 2);
        QStringList lines;
        for (const QByteArray &line : p.readAllStandardError().split('\n'))
            if (line.startsWith("tapestry-exec"))
                lines << QString::fromUtf8(line);
        QCOMPARE(lines.size(), 1);
        QVERIFY2(lines.first().contains(QStringLiteral("cannot connect to the report server at 127.0.0.1:%1").arg(port)),
                 qPrintable(lines.first()));
    }

    void executorRefusesMalformedAddresses_data()
    {
        QTest::addColumn<QString>("address");
        QTest::addColumn<QString>("token");  // TAPESTRY_REPORT_TOKEN, unset when empty
        QTest::addColumn<QString>("problem");
        QTest::newRow("scheme") << "http://127.0.0.1:5" << "a" << "expected '-'";
        QTest::newRow("no token") << "tcp://127.0.0.1:5" << ""
                                  << "no token: the report server's token for this run goes in the environment "
                                     "variable TAPESTRY_REPORT_TOKEN";
        QTest::newRow("no port") << "tcp://127.0.0.1" << "a" << "HOST:PORT";
        QTest::newRow("bad port") << "tcp://127.0.0.1:99999" << "a" << "1 to 65535";
        QTest::newRow("token not a word") << "tcp://127.0.0.1:5" << "a b"
                                          << "TAPESTRY_REPORT_TOKEN must hold a non-empty word";
        QTest::newRow("empty token in the address") << "tcp://127.0.0.1:5?token=" << "" << "non-empty";
        QTest::newRow("two tokens") << "tcp://127.0.0.1:5?token=a" << "b" << "differs from TAPESTRY_REPORT_TOKEN";
        QTest::newRow("query") << "tcp://127.0.0.1:5?key=a" << "a" << "the token in TAPESTRY_REPORT_TOKEN";
    }
    void executorRefusesMalformedAddresses()
    {
        QFETCH(QString, address);
        QFETCH(QString, token);
        QFETCH(QString, problem);
        QProcess p;
        p.setProcessEnvironment(mpiEnvironment(token));
        p.start(QStringLiteral(TAPESTRY_EXEC), {QStringLiteral("--model"), QStringLiteral("zoo:mlp"),
                                                QStringLiteral("--plan"), QStringLiteral("p.json"),
                                                QStringLiteral("--report"), address});
        QVERIFY(p.waitForFinished(60000));
        QCOMPARE(p.exitCode(), 2);
        const QString err = QString::fromUtf8(p.readAllStandardError());
        QVERIFY2(err.contains(QStringLiteral("tapestry-exec: --report: '%1': ").arg(address)) && err.contains(problem),
                 qPrintable(err));
    }

    // A real job on 2 ranks: hello with the token (from its environment),
    // start, every step, and the summary with a passing verification, all
    // through the server. The older address with ?token= still works, with
    // a warning.
    void realExecutorReports_data()
    {
        QTest::addColumn<bool>("tokenInAddress");
        QTest::newRow("token in the environment") << false;
        QTest::newRow("token in the address") << true;
    }
    void realExecutorReports()
    {
        QFETCH(bool, tokenInAddress);
        QTemporaryDir dir;
        QProcess plan;
        plan.start(QStringLiteral(TAPESTRY_CLI),
                   {QStringLiteral("plan"), QStringLiteral("zoo:mlp"), QStringLiteral("--mesh"), QStringLiteral("2"),
                    QStringLiteral("--search"), QStringLiteral("megatron"), QStringLiteral("-o"),
                    dir.filePath(QStringLiteral("plan.json"))});
        QVERIFY(plan.waitForFinished(60000));
        QCOMPARE(plan.exitCode(), 0);

        ReportServer server;
        QVERIFY(server.listen());
        QString address = server.startRun();
        if (tokenInAddress)
            address += QStringLiteral("?token=") + server.token();
        QSignalSpy accepted(&server, &ReportServer::clientAccepted);
        QSignalSpy messages(&server, &ReportServer::messageReceived);
        QSignalSpy gone(&server, &ReportServer::clientDisconnected);
        QProcess job;
        job.setProcessEnvironment(mpiEnvironment(tokenInAddress ? QString() : server.token()));
        job.start(QStringLiteral("mpirun"),
                  {QStringLiteral("--oversubscribe"), QStringLiteral("-np"), QStringLiteral("2"),
                   QStringLiteral(TAPESTRY_EXEC), QStringLiteral("--model"), QStringLiteral("zoo:mlp"),
                   QStringLiteral("--plan"), dir.filePath(QStringLiteral("plan.json")), QStringLiteral("--steps"),
                   QStringLiteral("3"), QStringLiteral("--verify"), QStringLiteral("--quiet"),
                   QStringLiteral("--report"), address});
        QVERIFY(waitFor(gone));
        QVERIFY(job.waitForFinished(60000));
        QCOMPARE(job.exitCode(), 0);
        QCOMPARE(accepted.count(), 1);
        QStringList events;
        for (const auto &m : messages)
            events << m.first().toJsonObject().value(QStringLiteral("event")).toString();
        QCOMPARE(events, (QStringList{QStringLiteral("start"), QStringLiteral("step"), QStringLiteral("step"),
                                      QStringLiteral("step"), QStringLiteral("summary")}));
        const QJsonObject summary = messages.last().first().toJsonObject();
        QVERIFY(summary.value(QStringLiteral("verification")).toObject().value(QStringLiteral("passed")).toBool());
        QVERIFY(summary.value(QStringLiteral("tokens_per_s")).toDouble() > 0);
        QVERIFY(job.readAllStandardOutput().isEmpty());  // nothing on stdout: it all went to the server
        const QByteArray err = job.readAllStandardError();
        QCOMPARE(err.count("tapestry-exec: warning: --report: the token in the address is readable by every user"),
                 tokenInAddress ? 1 : 0);
        if (tokenInAddress)
            QVERIFY2(err.contains("pass it in TAPESTRY_REPORT_TOKEN instead"), err.constData());
    }
};

QTEST_GUILESS_MAIN(TestReportServer)
#include "tst_reportserver.moc"
