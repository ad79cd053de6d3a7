#pragma once

#include <memory>
#include <ostream>
#include <string>

namespace tapestry::exec {

// The environment variable that carries a report server's token to rank 0.
// Never the command line: every user of the machine can read that (ps), and
// whoever presents the token first takes the run's place at the server.
inline constexpr const char *kReportTokenVariable = "TAPESTRY_REPORT_TOKEN";

// Where --report sends its lines: "-" (stdout) or tcp://HOST:PORT.
struct ReportAddress {
    bool toStdout = true;
    std::string host;   // without brackets for IPv6 literals
    std::string port;
    std::string token;
    bool tokenOnCommandLine = false;  // given as tcp://HOST:PORT?token=T
};

// Parses the value of --report: "-", or tcp://HOST:PORT with the token
// from `environmentToken` (the value of TAPESTRY_REPORT_TOKEN, or null).
// tcp://HOST:PORT?token=T is read too, and marked tokenOnCommandLine.
// Throws TapestryError naming --report and what is wrong (scheme, host,
// port, no token, two different tokens) on anything else.
ReportAddress parseReportAddress(const std::string &text, const char *environmentToken);

// The hello line that opens every report: schema version, program, rank
// count and, over TCP, the token the server checks before it reads more.
std::string reportHello(const ReportAddress &address, int ranks);

// A TCP connection to a report server (the studio's) carrying JSON lines.
// Plain POSIX sockets: the executor has no Qt. Lines go out whole at each
// flush. When the server goes away mid-run the link says so once on stderr
// and drops further lines: the run itself goes on, and whoever started it
// still sees its exit status.
class ReportLink {
public:
    // Connects within `timeoutSeconds`. Throws TapestryError naming the
    // address when it is refused, unreachable or unresolvable.
    static std::unique_ptr<ReportLink> connect(const ReportAddress &address, int timeoutSeconds = 10);
    ~ReportLink();
    ReportLink(const ReportLink &) = delete;
    ReportLink &operator=(const ReportLink &) = delete;

    std::ostream &stream();
    bool lost() const;

private:
    class Buffer;
    explicit ReportLink(int fd, std::string where);
    std::unique_ptr<Buffer> m_buffer;
    std::unique_ptr<std::ostream> m_stream;
};

} // namespace tapestry::exec
