#include "reportserver.h"

#include <QHostInfo>
#include <QJsonDocument>
#include <QRandomGenerator>
#include <QTcpServer>
#include <QTcpSocket>
#include <QTimer>

#include <algorithm>

namespace tapestry::views {

namespace {

// Compares without stopping at the first differing byte.
bool sameToken(const QString &a, const QString &b)
{
    const QByteArray x = a.toUtf8(), y = b.toUtf8();
    unsigned diff = x.size() == y.size() ? 0u : 1u;
    for (qsizetype i = 0; i < std::min(x.size(), y.size()); ++i)
        diff |= static_cast<unsigned>(x[i] ^ y[i]);
    return diff == 0;
}

} // namespace

ReportServer::ReportServer(QObject *parent) : QObject(parent), m_server(new QTcpServer(this))
{
    connect(m_server, &QTcpServer::newConnection, this, &ReportServer::onNewConnection);
}

ReportServer::~ReportServer()
{
    close();
}

bool ReportServer::listen(const QHostAddress &address, quint16 port)
{
    close();
    return m_server->listen(address, port);
}

void ReportServer::close()
{
    m_server->close();
    while (!m_clients.empty())
        drop(m_clients.back().socket);
}

bool ReportServer::isListening() const
{
    return m_server->isListening();
}

quint16 ReportServer::port() const
{
    return m_server->serverPort();
}

QString ReportServer::errorString() const
{
    return m_server->errorString();
}

QString ReportServer::advertisedHost() const
{
    if (!m_advertisedHost.isEmpty())
        return m_advertisedHost;
    const QHostAddress bound = m_server->serverAddress();
    if (bound == QHostAddress::Any || bound == QHostAddress::AnyIPv4 || bound == QHostAddress::AnyIPv6)
        return QHostInfo::localHostName();
    if (bound.protocol() == QAbstractSocket::IPv6Protocol)
        return QLatin1Char('[') + bound.toString() + QLatin1Char(']');
    return bound.toString();
}

void ReportServer::setAdvertisedHost(const QString &host)
{
    m_advertisedHost = host;
}

void ReportServer::setHelloTimeout(int milliseconds)
{
    m_helloTimeoutMs = milliseconds;
}

QString ReportServer::startRun()
{
    while (!m_clients.empty())
        drop(m_clients.back().socket);
    QByteArray bytes(16, Qt::Uninitialized);
    QRandomGenerator::system()->fillRange(reinterpret_cast<quint32 *>(bytes.data()), 4);
    m_token = QString::fromLatin1(bytes.toHex());
    m_tokenUsed = false;
    return reportAddress();
}

void ReportServer::endRun()
{
    m_token.clear();
}

QString ReportServer::reportAddress() const
{
    return QStringLiteral("tcp://%1:%2").arg(advertisedHost()).arg(port());
}

bool ReportServer::hasClient() const
{
    return std::any_of(m_clients.begin(), m_clients.end(), [](const Client &c) { return c.accepted; });
}

QString ReportServer::peer(const QTcpSocket *socket) const
{
    return socket->peerAddress().toString() + QLatin1Char(':') + QString::number(socket->peerPort());
}

void ReportServer::onNewConnection()
{
    while (QTcpSocket *socket = m_server->nextPendingConnection()) {
        // The newest connection may be the run's executor, which says hello
        // at once: the oldest silent one makes room for it.
        auto silent = [](const Client &c) { return !c.accepted; };
        if (std::count_if(m_clients.begin(), m_clients.end(), silent) >= kMaxPendingClients)
            reject(*std::find_if(m_clients.begin(), m_clients.end(), silent),
                   tr("no hello yet, and more connections are waiting for theirs"));
        Client client;
        client.socket = socket;
        client.helloTimer = new QTimer(socket);
        client.helloTimer->setSingleShot(true);
        connect(client.helloTimer, &QTimer::timeout, this, [this, socket] {
            if (Client *c = find(socket); c && !c->accepted)
                reject(*c, tr("no hello within %1 s").arg(m_helloTimeoutMs / 1000.0));
        });
        client.helloTimer->start(m_helloTimeoutMs);
        connect(socket, &QTcpSocket::readyRead, this, [this, socket] { onReadyRead(socket); });
        connect(socket, &QTcpSocket::disconnected, this, [this, socket] { onDisconnected(socket); });
        m_clients.push_back(client);
        // Bytes may have arrived with the connection.
        if (socket->bytesAvailable() > 0)
            QTimer::singleShot(0, this, [this, socket] {
                if (find(socket))
                    onReadyRead(socket);
            });
    }
}

ReportServer::Client *ReportServer::find(QTcpSocket *socket)
{
    for (auto &c : m_clients)
        if (c.socket == socket)
            return &c;
    return nullptr;
}

void ReportServer::drop(QTcpSocket *socket)
{
    auto it = std::find_if(m_clients.begin(), m_clients.end(), [socket](const Client &c) { return c.socket == socket; });
    if (it == m_clients.end())
        return;
    m_clients.erase(it);
    socket->disconnect(this);
    socket->abort();
    socket->deleteLater();
}

void ReportServer::reject(Client &client, const QString &reason)
{
    emit connectionRejected(tr("%1: %2").arg(peer(client.socket), reason));
    drop(client.socket);
}

void ReportServer::onReadyRead(QTcpSocket *socket)
{
    // Lines are handled one at a time; handling may drop this client, so
    // look it up again after each.
    for (Client *c = find(socket); c; c = find(socket)) {
        const QByteArray chunk = socket->read(kMaxLineBytes);
        if (chunk.isEmpty())
            return;
        c->buffer += chunk;
        qsizetype begin = 0;
        for (qsizetype nl; c && (nl = c->buffer.indexOf('\n', begin)) >= 0; c = find(socket)) {
            const QByteArray line = c->buffer.mid(begin, nl - begin);
            begin = nl + 1;
            if (c->discarding) {
                c->discarding = false;  // the rest of an oversized line
                continue;
            }
            if (line.size() > kMaxLineBytes) {
                emit logged(tr("report %1: dropped a line of %2 bytes (limit %3)")
                                .arg(peer(socket)).arg(line.size()).arg(kMaxLineBytes));
                if (!c->accepted) {
                    reject(*c, tr("oversized first line"));
                    return;
                }
                continue;
            }
            handleLine(*c, line);
        }
        if (!c)
            return;
        c->buffer.remove(0, begin);
        if (c->buffer.size() > kMaxLineBytes) {
            emit logged(tr("report %1: dropped a line over %2 bytes").arg(peer(socket)).arg(kMaxLineBytes));
            c->buffer.clear();
            if (!c->accepted) {
                reject(*c, tr("oversized first line"));
                return;
            }
            c->discarding = true;
        }
    }
}

void ReportServer::handleLine(Client &client, const QByteArray &line)
{
    if (line.trimmed().isEmpty())
        return;
    QJsonParseError error{};
    const QJsonDocument doc = QJsonDocument::fromJson(line, &error);
    if (client.accepted) {
        if (error.error != QJsonParseError::NoError || !doc.isObject()) {
            emit logged(tr("report %1: dropped a line that is not a JSON object: %2")
                            .arg(peer(client.socket), QString::fromUtf8(line.left(80))));
            return;
        }
        emit messageReceived(doc.object());
        return;
    }
    const QJsonObject hello = doc.object();
    if (error.error != QJsonParseError::NoError || !doc.isObject() ||
        hello.value(QLatin1String("event")).toString() != QLatin1String("hello")) {
        reject(client, tr("the first line is not a hello"));
        return;
    }
    const QString token = hello.value(QLatin1String("token")).toString();
    if (m_token.isEmpty()) {
        reject(client, tr("no run is waiting for a report"));
        return;
    }
    if (!sameToken(token, m_token)) {
        reject(client, tr("wrong token"));
        return;
    }
    if (m_tokenUsed) {
        reject(client, tr("this run's token was already used"));
        return;
    }
    const int schema = hello.value(QLatin1String("schema")).toInt(-1);
    if (schema != kSchema) {
        reject(client, tr("report schema %1; this studio reads schema %2").arg(schema).arg(kSchema));
        return;
    }
    m_tokenUsed = true;
    client.accepted = true;
    client.helloTimer->stop();
    emit clientAccepted(hello);
}

void ReportServer::onDisconnected(QTcpSocket *socket)
{
    // Lines still buffered arrive before the close is handled.
    if (socket->bytesAvailable() > 0)
        onReadyRead(socket);
    Client *c = find(socket);
    if (!c)
        return;
    const bool accepted = c->accepted;
    drop(socket);
    if (accepted)
        emit clientDisconnected();
}

} // namespace tapestry::views
