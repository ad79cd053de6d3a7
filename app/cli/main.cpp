#include "cli/command.h"

#include "ir/error.h"

#include <cstdio>
#include <exception>
#include <iostream>

namespace tapestry::cli {

std::map<std::string, Command> &registry()
{
    static std::map<std::string, Command> commands;
    return commands;
}

Registration::Registration(Command command)
{
    auto name = command.name;
    registry().emplace(std::move(name), std::move(command));
}

std::optional<std::string> Args::value(const std::string &name) const
{
    auto it = options.find(name);
    if (it == options.end())
        return std::nullopt;
    return it->second;
}

std::ostream &Args::report() const
{
    return value("-o") == std::optional<std::string>("-") ? std::cerr : std::cout;
}

std::optional<long long> Args::integer(const std::string &name) const
{
    auto v = value(name);
    if (!v)
        return std::nullopt;
    try {
        std::size_t used = 0;
        long long n = std::stoll(*v, &used);
        if (used == v->size())
            return n;
    } catch (const std::exception &) {
    }
    throw TapestryError(Error{name, {}, "expects an integer, got '" + *v + "'"});
}

std::vector<OptionSpec> modelOptions()
{
    return {
        {"--batch", "B", "bind the batch dimension to B (zoo presets, ONNX symbolic dims)"},
        {"--seq", "S", "bind the sequence dimension to S (zoo presets, ONNX symbolic dims)"},
    };
}

namespace {

const char *kModelHelp =
    "MODEL is a tapestry.model .json file, an .onnx file, a Hugging Face config.json,\n"
    "or a zoo preset with optional size knobs: zoo:gpt2, zoo:llama3-8b,\n"
    "zoo:gpt2?layers=48&hidden=1024&heads=16&batch=8&seq=1024.\n";

void printUsage(std::ostream &out)
{
    out << "usage: tapestry-cli COMMAND [ARGS] [--json] [--help]\n\n"
           "Derive, inspect, cost and export tensor-parallel plans.\n\ncommands:\n";
    for (const auto &[name, command] : registry()) {
        std::string pad(name.size() < 12 ? 12 - name.size() : 1, ' ');
        out << "  " << name << pad << command.summary << '\n';
    }
    out << "\n" << kModelHelp
        << "\nExit codes: 0 success, 1 a failed check, 2 bad input or usage.\n"
           "Run 'tapestry-cli COMMAND --help' for a command's options.\n";
}

void printCommandHelp(const Command &command, std::ostream &out)
{
    out << "usage: tapestry-cli " << command.usage << "\n\n" << command.summary << "\n";
    if (!command.details.empty())
        out << "\n" << command.details;
    out << "\noptions:\n";
    auto options = command.options;
    options.push_back({"--help", "", "show this help and exit"});
    for (const auto &o : options) {
        std::string left = o.name + (o.value.empty() ? "" : " " + o.value);
        std::string pad(left.size() < 22 ? 22 - left.size() : 1, ' ');
        out << "  " << left << pad << o.help << '\n';
    }
    if (command.usage.find("MODEL") != std::string::npos)
        out << "\n" << kModelHelp;
}

} // namespace
} // namespace tapestry::cli

int main(int argc, char **argv)
{
    using namespace tapestry::cli;
    std::vector<std::string> argv_(argv + 1, argv + argc);
    if (argv_.empty() || argv_[0] == "--help" || argv_[0] == "-h" || argv_[0] == "help") {
        printUsage(argv_.empty() ? std::cerr : std::cout);
        return argv_.empty() ? BadInput : Ok;
    }
    auto it = registry().find(argv_[0]);
    if (it == registry().end()) {
        std::cerr << "tapestry-cli: unknown command '" << argv_[0]
                  << "' (try 'tapestry-cli --help')\n";
        return BadInput;
    }
    const Command &command = it->second;
    Args args;
    for (std::size_t i = 1; i < argv_.size(); ++i) {
        const std::string &a = argv_[i];
        if (a == "--help" || a == "-h") {
            printCommandHelp(command, std::cout);
            return Ok;
        }
        if (a.size() > 1 && a[0] == '-' && !(a.size() > 1 && std::isdigit(static_cast<unsigned char>(a[1])))) {
            std::string name = a, value;
            auto eq = a.find('=');
            if (eq != std::string::npos) {
                name = a.substr(0, eq);
                value = a.substr(eq + 1);
            }
            const OptionSpec *spec = nullptr;
            for (const auto &o : command.options)
                if (o.name == name)
                    spec = &o;
            if (!spec) {
                std::cerr << "tapestry-cli " << command.name << ": unknown option '" << name
                          << "' (try 'tapestry-cli " << command.name << " --help')\n";
                return BadInput;
            }
            if (!spec->value.empty() && eq == std::string::npos) {
                if (i + 1 >= argv_.size()) {
                    std::cerr << "tapestry-cli " << command.name << ": option " << name
                              << " needs a value (" << spec->value << ")\n";
                    return BadInput;
                }
                value = argv_[++i];
            }
            args.options[name] = value;
        } else {
            args.positional.push_back(a);
        }
    }
    try {
        return command.run(args);
    } catch (const tapestry::TapestryError &e) {
        std::cerr << "tapestry-cli " << command.name << ": " << e.what() << '\n';
        return BadInput;
    } catch (const std::exception &e) {
        std::cerr << "tapestry-cli " << command.name << ": " << e.what() << '\n';
        return BadInput;
    }
}
