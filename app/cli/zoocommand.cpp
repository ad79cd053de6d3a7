#include "cli/command.h"

#include "io/zoo/zoo.h"

#include <nlohmann/json.hpp>

#include <iostream>

namespace tapestry::cli {

namespace {

int runZoo(const Args &args)
{
    if (!args.positional.empty()) {
        std::cerr << "tapestry-cli zoo: takes no arguments (try 'tapestry-cli zoo --help')\n";
        return BadInput;
    }
    if (args.has("--json")) {
        nlohmann::ordered_json out = nlohmann::ordered_json::array();
        for (const auto &p : io::zoo::presets())
            out.push_back({{"name", p.name}, {"family", p.family}, {"description", p.description}, {"knobs", p.defaults}});
        std::cout << out.dump(2) << '\n';
        return Ok;
    }
    for (const auto &p : io::zoo::presets()) {
        std::cout << "zoo:" << p.name << "\n    " << p.description << "\n    knobs:";
        for (const auto &[knob, value] : p.defaults)
            std::cout << ' ' << knob << '=' << value;
        std::cout << '\n';
    }
    return Ok;
}

Registration zoo([] {
    Command c;
    c.name = "zoo";
    c.usage = "zoo [--json]";
    c.summary = "list the model zoo's presets and their size knobs with defaults";
    c.details = "Any knob can be overridden: zoo:gpt2?layers=48&hidden=1024&heads=16.\n";
    c.options = {{"--json", "", "print the presets as a JSON array"}};
    c.run = runZoo;
    return c;
}());

} // namespace
} // namespace tapestry::cli
