#pragma once

#include <functional>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tapestry::cli {

// Exit codes shared by every command.
enum ExitCode { Ok = 0, CheckFailed = 1, BadInput = 2 };

struct OptionSpec {
    std::string name;      // "--mesh"
    std::string value;     // placeholder of its value ("SHAPE"); empty for a flag
    std::string help;
};

// Parsed command line of one command: positional arguments and options.
struct Args {
    std::vector<std::string> positional;
    std::map<std::string, std::string> options;  // flags map to ""

    bool has(const std::string &name) const { return options.count(name) > 0; }
    std::optional<std::string> value(const std::string &name) const;
    // Integer option; throws TapestryError naming the option when it is not one.
    std::optional<long long> integer(const std::string &name) const;
    // Where the command's report goes: standard output, or standard error
    // when `-o -` writes the command's file to standard output, so that a
    // pipe reads the file alone.
    std::ostream &report() const;
};

struct Command {
    std::string name;
    std::string usage;    // "inspect MODEL [options]"
    std::string summary;  // one line
    std::string details;  // shown by --help after the usage
    std::vector<OptionSpec> options;
    std::function<int(const Args &)> run;
};

// Commands register themselves from their own files at start-up.
std::map<std::string, Command> &registry();
struct Registration {
    explicit Registration(Command command);
};

// Options every model-loading command takes.
std::vector<OptionSpec> modelOptions();

} // namespace tapestry::cli
