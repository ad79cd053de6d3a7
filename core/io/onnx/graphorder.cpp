#include "io/onnx/graphorder.h"

#include "ir/error.h"

#include <functional>
#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace tapestry::io::onnximport {

namespace {

std::string nodeWhere(const ::onnx::NodeProto &node)
{
    return "node '" + node.name() + "' (" + node.op_type() + ")";
}

void nameNodes(::onnx::GraphProto &graph)
{
    std::unordered_set<std::string> used;
    for (const auto &node : graph.node())
        if (!node.name().empty())
            used.insert(node.name());
    // A synthesised name must not take an explicit one that comes later.
    std::unordered_set<std::string> taken;
    for (int i = 0; i < graph.node_size(); ++i) {
        auto &node = *graph.mutable_node(i);
        const bool named = !node.name().empty();
        const std::string base = named ? node.name() : node.op_type() + "_" + std::to_string(i);
        std::string name = base;
        for (int k = 1; taken.count(name) || (!named && used.count(name)); ++k)
            name = base + "_" + std::to_string(i) + (k > 1 ? "_" + std::to_string(k) : "");
        taken.insert(name);
        node.set_name(name);
    }
}

} // namespace

void orderGraph(::onnx::GraphProto &graph, const std::string &input)
{
    nameNodes(graph);
    auto fail = [&](std::string where, std::string problem) {
        throw TapestryError(Error{input, std::move(where), std::move(problem)});
    };

    std::unordered_map<std::string, std::string> sources;  // value -> what provides it
    for (const auto &t : graph.initializer())
        sources.emplace(t.name(), "initializer");
    for (const auto &in : graph.input())
        sources.emplace(in.name(), "graph input");
    std::unordered_map<std::string, int> producer;
    for (int i = 0; i < graph.node_size(); ++i) {
        const auto &node = graph.node(i);
        for (const auto &out : node.output()) {
            if (out.empty())
                continue;
            if (auto it = producer.find(out); it != producer.end())
                fail(nodeWhere(node), "writes '" + out + "', which node '" +
                                          graph.node(it->second).name() + "' also writes");
            if (auto it = sources.find(out); it != sources.end())
                fail(nodeWhere(node), "writes '" + out + "', which is also a " + it->second);
            producer.emplace(out, i);
        }
    }
    for (const auto &node : graph.node())
        for (const auto &in : node.input())
            if (!in.empty() && !producer.count(in) && !sources.count(in))
                fail(nodeWhere(node), "reads '" + in + "', which no node, graph input or initializer produces");
    for (const auto &out : graph.output())
        if (!producer.count(out.name()))
            fail("graph output '" + out.name() + "'", "no node computes it");

    // Kahn's algorithm, smallest original position first, so a graph that is
    // already sorted keeps its order.
    const int n = graph.node_size();
    std::vector<int> pending(static_cast<std::size_t>(n), 0);
    std::vector<std::vector<int>> consumers(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i)
        for (const auto &in : graph.node(i).input())
            if (auto it = producer.find(in); !in.empty() && it != producer.end()) {
                ++pending[static_cast<std::size_t>(i)];
                consumers[static_cast<std::size_t>(it->second)].push_back(i);
            }
    std::priority_queue<int, std::vector<int>, std::greater<>> ready;
    for (int i = 0; i < n; ++i)
        if (pending[static_cast<std::size_t>(i)] == 0)
            ready.push(i);
    std::vector<int> order;
    order.reserve(static_cast<std::size_t>(n));
    while (!ready.empty()) {
        const int i = ready.top();
        ready.pop();
        order.push_back(i);
        for (int c : consumers[static_cast<std::size_t>(i)])
            if (--pending[static_cast<std::size_t>(c)] == 0)
                ready.push(c);
    }
    if (static_cast<int>(order.size()) != n) {
        // Walk producers back from an unsorted node until one repeats: that
        // node lies on the cycle (the first unsorted one may only lie behind it).
        int at = 0;
        while (pending[static_cast<std::size_t>(at)] == 0)
            ++at;
        std::vector<bool> seen(static_cast<std::size_t>(n), false);
        while (!seen[static_cast<std::size_t>(at)]) {
            seen[static_cast<std::size_t>(at)] = true;
            for (const auto &in : graph.node(at).input()) {
                auto it = producer.find(in);
                if (!in.empty() && it != producer.end() && pending[static_cast<std::size_t>(it->second)] > 0) {
                    at = it->second;
                    break;
                }
            }
        }
        fail(nodeWhere(graph.node(at)), "is part of a cycle");
    }
    bool sorted = true;
    for (int i = 0; i < n; ++i)
        sorted = sorted && order[static_cast<std::size_t>(i)] == i;
    if (sorted)
        return;
    std::vector<::onnx::NodeProto> nodes(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i)
        nodes[static_cast<std::size_t>(i)] = std::move(*graph.mutable_node(order[static_cast<std::size_t>(i)]));
    graph.clear_node();
    for (auto &node : nodes)
        *graph.add_node() = std::move(node);
}

} // namespace tapestry::io::onnximport
