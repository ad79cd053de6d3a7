#pragma once

#include "plan/runreport.h"

#include <QHostAddress>
#include <QJsonObject>
#include <QObject>
#include <QString>

#include <vector>

class QTcpServer;
class QTcpSocket;
class QTimer;

namespace tapestry::views {

// Where a running tapestry-exec sends its JSON lines (executor/REPORT.md):
// a TCP server, on loopback unless told otherwise, that accepts for each run
// one connection whose first line is a hello carrying that run's random
// token. The token reaches the job by the environment (TAPESTRY_REPORT_TOKEN),
// never by its command line, which every user of the machine can read.
// Everything else is refused or dropped and logged: other tokens,
// connections silent for kHelloTimeoutMs, lines that are not JSON objects,
// lines over kMaxLineBytes. At most kMaxPendingClients connections wait for
// their hello; one more drops the oldest of them, so that silent
// connections cannot lock the run's executor out (it says hello as soon as
// it connects). Nothing a client sends can take the studio down.
class ReportServer : public QObject {
    Q_OBJECT
public:
    static constexpr qsizetype kMaxLineBytes = 1 << 20;
    static constexpr int kHelloTimeoutMs = 5000;
    static constexpr int kMaxPendingClients = 16;
    static constexpr int kSchema = plan::kRunReportSchema;

    explicit ReportServer(QObject *parent = nullptr);
    ~ReportServer() override;

    // Listens on `address` (port 0: any free one). False with errorString().
    bool listen(const QHostAddress &address = QHostAddress(QHostAddress::LocalHost), quint16 port = 0);
    void close();
    bool isListening() const;
    quint16 port() const;
    QString errorString() const;
    // The host the ranks are told to connect to: the bound address, or this
    // machine's name when bound to every interface; setAdvertisedHost()
    // overrides it (a cluster's head node, a tunnel).
    QString advertisedHost() const;
    void setAdvertisedHost(const QString &host);
    // How long a connection may stay silent before its hello (default kHelloTimeoutMs).
    void setHelloTimeout(int milliseconds);

    // Starts a run: a fresh random token; connections of the previous run
    // are closed. Returns the value for tapestry-exec --report
    // (tcp://HOST:PORT); the job gets token() in TAPESTRY_REPORT_TOKEN.
    QString startRun();
    // Ends the run: its token is no longer accepted.
    void endRun();
    QString token() const { return m_token; }
    QString reportAddress() const;
    bool hasClient() const;

signals:
    // The run's client presented its token; `hello` is its first line.
    void clientAccepted(const QJsonObject &hello);
    // Every well-formed line after the hello.
    void messageReceived(const QJsonObject &message);
    // A connection turned away, and why (wrong token, no hello, ...).
    void connectionRejected(const QString &reason);
    // Dropped lines and other notes worth a line in the log.
    void logged(const QString &line);
    // The accepted client closed its connection.
    void clientDisconnected();

private:
    struct Client {
        QTcpSocket *socket = nullptr;
        QTimer *helloTimer = nullptr;
        QByteArray buffer;
        bool accepted = false;
        bool discarding = false;  // inside a line over the limit
    };
    void onNewConnection();
    void onReadyRead(QTcpSocket *socket);
    void onDisconnected(QTcpSocket *socket);
    void handleLine(Client &client, const QByteArray &line);
    void reject(Client &client, const QString &reason);
    Client *find(QTcpSocket *socket);
    void drop(QTcpSocket *socket);
    QString peer(const QTcpSocket *socket) const;

    QTcpServer *m_server;
    std::vector<Client> m_clients;
    QString m_token;
    QString m_advertisedHost;
    bool m_tokenUsed = false;
    int m_helloTimeoutMs = kHelloTimeoutMs;
};

} // namespace tapestry::views
