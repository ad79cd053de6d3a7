#include "layout/viewgraph.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace tapestry::layout {

std::string shapeLabel(const ir::Shape &shape)
{
    if (shape.empty())
        return "scalar";
    std::string s;
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i)
            s += "\u00d7";
        s += std::to_string(shape[i]);
    }
    return s;
}

std::string scopePattern(const std::vector<std::string> &scopes)
{
    if (scopes.empty())
        return {};
    if (scopes.size() == 1)
        return scopes.front();
    // Keep the common prefix and suffix; the differing middle becomes '*'.
    const std::string &a = scopes.front();
    std::size_t prefix = a.size(), suffix = a.size();
    for (const auto &s : scopes) {
        std::size_t p = 0;
        while (p < prefix && p < s.size() && s[p] == a[p])
            ++p;
        prefix = p;
        std::size_t q = 0;
        while (q < suffix && q < s.size() && s[s.size() - 1 - q] == a[a.size() - 1 - q])
            ++q;
        suffix = q;
    }
    // Do not cut inside a number: back the prefix off to before its digits.
    while (prefix > 0 && std::isdigit(static_cast<unsigned char>(a[prefix - 1])))
        --prefix;
    if (prefix + suffix > a.size())
        suffix = a.size() - prefix;
    while (suffix > 0 && std::isdigit(static_cast<unsigned char>(a[a.size() - suffix])))
        --suffix;
    // Instances numbered in steps of more than one (Swin's window and
    // shifted-window blocks alternate: 5.0, 5.2, 5.4 and 5.1, 5.3, 5.5) are
    // named by their numbers, so that two such classes read apart; a run of
    // consecutive numbers, or any other set, is '*'.
    std::vector<long long> numbers;
    for (const auto &s : scopes) {
        if (s.size() < prefix + suffix)
            break;
        const std::string middle = s.substr(prefix, s.size() - prefix - suffix);
        if (middle.empty() || middle.size() > 9 ||
            !std::all_of(middle.begin(), middle.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
            break;
        numbers.push_back(std::stoll(middle));
    }
    std::sort(numbers.begin(), numbers.end());
    const bool stepped = numbers.size() == scopes.size() && numbers.size() >= 2 && numbers[1] - numbers[0] > 1 &&
                         std::adjacent_find(numbers.begin(), numbers.end(), [&](long long x, long long y) {
                             return y - x != numbers[1] - numbers[0];
                         }) == numbers.end();
    std::string middle = "*";
    if (stepped) {
        middle = "{";
        for (std::size_t i = 0; i < numbers.size(); ++i) {
            if (numbers.size() > 4 && i == 2) {
                middle += ",…," + std::to_string(numbers.back());
                break;
            }
            middle += (i ? "," : "") + std::to_string(numbers[i]);
        }
        middle += "}";
    }
    return a.substr(0, prefix) + middle + a.substr(a.size() - suffix);
}

namespace {

std::string shortName(std::string_view name)
{
    // The last two scope components say enough on a box: "attn/q_proj".
    auto slash = name.rfind('/');
    if (slash == std::string_view::npos || slash == 0)
        return std::string(name);
    auto before = name.rfind('/', slash - 1);
    return std::string(before == std::string_view::npos ? name : name.substr(before + 1));
}

} // namespace

std::string countLabel(std::int64_t n)
{
    char buf[32];
    if (n >= 1'000'000'000)
        std::snprintf(buf, sizeof buf, "%.2fB", static_cast<double>(n) / 1e9);
    else if (n >= 1'000'000)
        std::snprintf(buf, sizeof buf, "%.1fM", static_cast<double>(n) / 1e6);
    else if (n >= 1'000)
        std::snprintf(buf, sizeof buf, "%.1fK", static_cast<double>(n) / 1e3);
    else
        std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
    return buf;
}

ViewGraph buildViewGraph(const ir::Graph &graph, const passes::CoarseGraph &coarse,
                         const passes::SubgraphClasses &classes, const ExpandedRuns &expanded,
                         const std::vector<int> &chunkOfOp)
{
    auto chunkOfOps = [&](auto ops) {
        int chunk = -1;
        for (ir::OpId op : ops)
            if (op.index() < chunkOfOp.size())
                chunk = std::max(chunk, chunkOfOp[op.index()]);
        return chunk;
    };
    ViewGraph view;
    const std::size_t nodeCount = coarse.nodeCount();
    // Which (class, instance) each coarse node belongs to.
    std::vector<std::pair<int, std::size_t>> membership(nodeCount, {-1, 0});
    for (const auto &cls : classes.classes) {
        if (static_cast<int>(cls.instances.size()) < classes.minDuplicate)
            continue;
        for (std::size_t i = 0; i < cls.instances.size(); ++i)
            for (auto n : cls.instances[i].nodes)
                if (n.valid() && n.index() < nodeCount)
                    membership[n.index()] = {cls.id.value, i};
    }

    // Runs: chains of instances of one class where each instance reads what
    // the previous one wrote (the layers of a stack).
    std::map<std::pair<int, std::size_t>, int> viewOfInstance;  // (class, instance) -> view node
    std::vector<int> viewOfNode(nodeCount, -1);
    for (const auto &cls : classes.classes) {
        if (static_cast<int>(cls.instances.size()) < classes.minDuplicate)
            continue;
        // Instance order in the graph: by its first coarse node's topological rank.
        std::vector<std::size_t> order(cls.instances.size());
        for (std::size_t i = 0; i < order.size(); ++i)
            order[i] = i;
        auto firstOp = [&](std::size_t i) {
            const auto &ops = cls.instances[i].ops;
            return ops.empty() ? 0 : (*std::min_element(ops.begin(), ops.end())).value;
        };
        std::sort(order.begin(), order.end(), [&](auto a, auto b) { return firstOp(a) < firstOp(b); });
        auto feeds = [&](std::size_t a, std::size_t b) {
            for (auto t : cls.instances[a].outputs)
                for (auto u : cls.instances[b].inputs)
                    if (t == u)
                        return true;
            return false;
        };
        auto chunkOfInstance = [&](std::size_t i) { return chunkOfOps(cls.instances[i].ops); };
        std::vector<std::vector<std::size_t>> runs;
        for (std::size_t k = 0; k < order.size(); ++k) {
            if (!runs.empty() && feeds(runs.back().back(), order[k]) &&
                chunkOfInstance(runs.back().back()) == chunkOfInstance(order[k]))
                runs.back().push_back(order[k]);
            else
                runs.push_back({order[k]});
        }
        for (const auto &run : runs) {
            const bool open = expanded.count({cls.id.value, run.front()}) > 0;
            std::vector<std::size_t> folded(run.begin() + (open ? 1 : 0), run.end());
            if (open) {
                for (auto n : cls.instances[run.front()].nodes) {
                    ViewNode v;
                    v.kind = ViewNode::Kind::Coarse;
                    v.node = n;
                    v.cls = cls.id;
                    v.instances = {run.front()};
                    const auto &cn = coarse.node(n);
                    v.chunk = chunkOfOps(cn.ops);
                    v.title = shortName(cn.name);
                    v.subtitle = std::string(passes::toString(cn.kind));
                    if (!cn.outputs.empty())
                        v.subtitle += " \u00b7 " + shapeLabel(graph.tensor(cn.outputs.front()).shape);
                    viewOfNode[n.index()] = static_cast<int>(view.nodes.size());
                    view.nodes.push_back(std::move(v));
                }
                viewOfInstance[{cls.id.value, run.front()}] = -1;
            }
            if (folded.empty())
                continue;
            ViewNode block;
            block.kind = ViewNode::Kind::Block;
            block.cls = cls.id;
            block.instances = folded;
            block.repeat = static_cast<int>(folded.size());
            block.chunk = chunkOfInstance(folded.front());
            std::vector<std::string> scopes;
            for (auto i : folded)
                scopes.push_back(cls.instances[i].scope);
            block.title = scopePattern(scopes);
            block.subtitle = "class " + std::to_string(cls.id.value) + " \u00b7 " +
                             std::to_string(cls.instances[folded.front()].nodes.size()) + " nodes \u00b7 " +
                             countLabel(cls.parametersPerInstance) + " params";
            const int index = static_cast<int>(view.nodes.size());
            for (auto i : folded) {
                viewOfInstance[{cls.id.value, i}] = index;
                for (auto n : cls.instances[i].nodes)
                    viewOfNode[n.index()] = index;
            }
            view.nodes.push_back(std::move(block));
        }
    }
    // Everything outside repeated classes is drawn node for node.
    for (const auto &cn : coarse.nodes()) {
        if (viewOfNode[cn.id.index()] >= 0)
            continue;
        ViewNode v;
        v.node = cn.id;
        v.chunk = chunkOfOps(cn.ops);
        v.title = shortName(cn.name);
        v.subtitle = std::string(passes::toString(cn.kind));
        if (!cn.outputs.empty())
            v.subtitle += " \u00b7 " + shapeLabel(graph.tensor(cn.outputs.front()).shape);
        viewOfNode[cn.id.index()] = static_cast<int>(view.nodes.size());
        view.nodes.push_back(std::move(v));
    }
    // Order view nodes by their first coarse node's topological rank so the
    // layout reads top to bottom in graph order.
    std::map<std::pair<int, int>, std::size_t> edgeIndex;
    for (const auto &e : coarse.edges()) {
        const int a = viewOfNode[e.from.index()], b = viewOfNode[e.to.index()];
        if (a < 0 || b < 0 || a == b)
            continue;
        auto [it, inserted] = edgeIndex.try_emplace({a, b}, view.edges.size());
        if (inserted) {
            view.edges.push_back({a, b, e.tensor, 1, shapeLabel(ir::Shape(e.shape.begin(), e.shape.end()))});
        } else {
            auto &edge = view.edges[it->second];
            if (edge.tensor != e.tensor) {
                ++edge.tensors;
                edge.label = shapeLabel(graph.tensor(edge.tensor).shape) + " +" + std::to_string(edge.tensors - 1);
            }
        }
    }
    return view;
}

} // namespace tapestry::layout
