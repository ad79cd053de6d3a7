// Build time of every zoo preset and of a 1000-layer GPT, with validation
// timed apart. Prints figures only: timings on a shared machine vary.
#include "io/zoo/zoo.h"
#include "ir/validate.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

using namespace tapestry;

namespace {

double millisecondsSince(std::chrono::steady_clock::time_point start)
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

void bench(const std::string &spec, int repeats)
{
    std::vector<double> build, validate;
    ir::Graph graph;
    for (int i = 0; i < repeats; ++i) {
        auto start = std::chrono::steady_clock::now();
        graph = io::zoo::build(spec);
        build.push_back(millisecondsSince(start));
        start = std::chrono::steady_clock::now();
        const bool valid = !ir::validate(graph, spec);
        validate.push_back(millisecondsSince(start));
        if (!valid) {
            std::printf("%-28s INVALID\n", spec.c_str());
            return;
        }
    }
    std::sort(build.begin(), build.end());
    std::sort(validate.begin(), validate.end());
    std::printf("%-28s %8zu ops %8zu tensors %16lld params  build %8.2f ms  validate %8.2f ms\n",
                spec.c_str(), graph.opCount(), graph.tensorCount(),
                static_cast<long long>(graph.parameterCount()), build[build.size() / 2],
                validate[validate.size() / 2]);
}

} // namespace

int main()
{
    std::printf("median of 5 runs\n");
    for (const auto &preset : io::zoo::presets())
        bench(preset.name, 5);
    bench("gpt2?layers=1000", 5);
    bench("gpt3-175b?layers=1000", 5);
    return 0;
}
