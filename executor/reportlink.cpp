#include "reportlink.h"

#include "ir/error.h"
#include "plan/runreport.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <streambuf>

namespace tapestry::exec {

namespace {

[[noreturn]] void fail(const std::string &text, const std::string &problem)
{
    throw TapestryError(Error{"--report", {}, "'" + text + "': " + problem});
}

// Connects one resolved address without blocking longer than `timeoutMs`.
// Returns the connected socket or -1 with errno set.
int connectWithin(const addrinfo &ai, int timeoutMs)
{
    const int fd = socket(ai.ai_family, ai.ai_socktype | SOCK_CLOEXEC, ai.ai_protocol);
    if (fd < 0)
        return -1;
    const int flags = fcntl(fd, F_GETFL, 0);
    fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    int rc = ::connect(fd, ai.ai_addr, ai.ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        rc = poll(&p, 1, timeoutMs);
        if (rc == 0) {
            errno = ETIMEDOUT;
            rc = -1;
        } else if (rc > 0) {
            int error = 0;
            socklen_t len = sizeof error;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
            errno = error;
            rc = error == 0 ? 0 : -1;
        }
    }
    if (rc != 0) {
        const int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    fcntl(fd, F_SETFL, flags);
    return fd;
}

} // namespace

ReportAddress parseReportAddress(const std::string &text, const char *environmentToken)
{
    ReportAddress a;
    if (text == "-")
        return a;
    const std::string scheme = "tcp://";
    if (text.rfind(scheme, 0) != 0)
        fail(text, "expected '-' (stdout) or tcp://HOST:PORT");
    a.toStdout = false;
    std::string rest = text.substr(scheme.size());
    auto isWord = [](const std::string &token) {
        return !token.empty() && token.find_first_of("&# \t\r\n\"\\") == std::string::npos;
    };
    if (const auto query = rest.find('?'); query != std::string::npos) {
        if (rest.compare(query + 1, 6, "token=") != 0)
            fail(text, "expected tcp://HOST:PORT, the token in " + std::string(kReportTokenVariable));
        a.token = rest.substr(query + 7);
        if (!isWord(a.token))
            fail(text, "the token must be a non-empty word");
        a.tokenOnCommandLine = true;
        rest.resize(query);
    }
    if (environmentToken) {
        const std::string fromEnvironment = environmentToken;
        if (!isWord(fromEnvironment))
            fail(text, std::string(kReportTokenVariable) + " must hold a non-empty word");
        if (a.tokenOnCommandLine && fromEnvironment != a.token)
            fail(text, "the token in the address differs from " + std::string(kReportTokenVariable) + "'s");
        a.token = fromEnvironment;
    }
    std::string port;
    if (!rest.empty() && rest.front() == '[') {
        const auto close = rest.find(']');
        if (close == std::string::npos || close + 1 >= rest.size() || rest[close + 1] != ':')
            fail(text, "expected [IPv6]:PORT");
        a.host = rest.substr(1, close - 1);
        port = rest.substr(close + 2);
    } else {
        const auto colon = rest.rfind(':');
        if (colon == std::string::npos)
            fail(text, "expected HOST:PORT");
        a.host = rest.substr(0, colon);
        port = rest.substr(colon + 1);
    }
    if (a.host.empty())
        fail(text, "no host");
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(port) < 1 || std::stoi(port) > 65535)
        fail(text, "the port must be a number from 1 to 65535");
    a.port = port;
    if (a.token.empty())
        fail(text, "no token: the report server's token for this run goes in the environment variable " +
                       std::string(kReportTokenVariable));
    return a;
}

std::string reportHello(const ReportAddress &address, int ranks)
{
    plan::ReportHello hello;
    hello.ranks = ranks;
    if (!address.toStdout)
        hello.token = address.token;
    return plan::reportLine(hello);
}

// Collects a line, sends it whole at flush (the executor flushes after each
// line). A failed send marks the link lost; later lines are dropped.
class ReportLink::Buffer : public std::streambuf {
public:
    Buffer(int fd, std::string where) : m_fd(fd), m_where(std::move(where)) {}
    ~Buffer() override
    {
        sync();
        close(m_fd);
    }
    bool lost() const { return m_lost; }

protected:
    int_type overflow(int_type c) override
    {
        if (c != traits_type::eof())
            m_pending.push_back(traits_type::to_char_type(c));
        return traits_type::not_eof(c);
    }
    std::streamsize xsputn(const char *s, std::streamsize n) override
    {
        m_pending.append(s, static_cast<std::size_t>(n));
        return n;
    }
    int sync() override
    {
        std::size_t sent = 0;
        while (!m_lost && sent < m_pending.size()) {
            const ssize_t n = send(m_fd, m_pending.data() + sent, m_pending.size() - sent, MSG_NOSIGNAL);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                m_lost = true;
                std::cerr << "tapestry-exec: report connection to " << m_where << " lost ("
                          << std::strerror(errno) << "); the run goes on without reporting\n"
                          << std::flush;
                break;
            }
            sent += static_cast<std::size_t>(n);
        }
        m_pending.clear();
        return 0;
    }

private:
    int m_fd;
    std::string m_where;
    std::string m_pending;
    bool m_lost = false;
};

ReportLink::ReportLink(int fd, std::string where)
    : m_buffer(std::make_unique<Buffer>(fd, std::move(where))), m_stream(std::make_unique<std::ostream>(m_buffer.get()))
{
}

ReportLink::~ReportLink()
{
    m_stream.reset();
    m_buffer.reset();
}

std::ostream &ReportLink::stream()
{
    return *m_stream;
}

bool ReportLink::lost() const
{
    return m_buffer->lost();
}

std::unique_ptr<ReportLink> ReportLink::connect(const ReportAddress &address, int timeoutSeconds)
{
    const std::string where = (address.host.find(':') != std::string::npos ? "[" + address.host + "]" : address.host) +
                              ":" + address.port;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo *found = nullptr;
    if (const int rc = getaddrinfo(address.host.c_str(), address.port.c_str(), &hints, &found); rc != 0)
        throw TapestryError(Error{"--report", {}, "cannot resolve " + where + ": " + gai_strerror(rc)});
    int fd = -1;
    int error = 0;
    for (const addrinfo *ai = found; ai && fd < 0; ai = ai->ai_next) {
        fd = connectWithin(*ai, timeoutSeconds * 1000);
        if (fd < 0)
            error = errno;
    }
    freeaddrinfo(found);
    if (fd < 0)
        throw TapestryError(Error{"--report", {}, "cannot connect to the report server at " + where + ": " +
                                                      std::strerror(error)});
    return std::unique_ptr<ReportLink>(new ReportLink(fd, where));
}

} // namespace tapestry::exec
