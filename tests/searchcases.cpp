#include "searchcases.h"

#include "io/modelloader.h"
#include "io/zoo/graphbuilder.h"
#include "ir/error.h"
#include "ir/validate.h"

#include "search/axisconstraint.h"
#include "sharding/legalspecs.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <regex>
#include <vector>

namespace tapestry::searchdiff {

namespace {

// splitmix64: a stream fixed by its seed on every platform, unlike the
// standard library's distributions.
class Rng {
public:
    explicit Rng(std::uint64_t seed) : m_state(seed) {}
    std::uint64_t next()
    {
        std::uint64_t z = (m_state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }
    double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
    double uniform(double a, double b) { return a + (b - a) * unit(); }
    bool chance(double p) { return unit() < p; }
    template <typename T>
    T pick(const std::vector<T> &items)
    {
        return items[below(items.size())];
    }

private:
    std::uint64_t m_state;
};

using Knobs = std::map<std::string, std::int64_t>;

std::string query(const Knobs &knobs)
{
    std::string q;
    for (const auto &[k, v] : knobs)
        q += (q.empty() ? "?" : "&") + k + "=" + std::to_string(v);
    return q;
}

// A head count out of `choices` that divides `hidden` (and leaves an even
// head size where rotary embeddings need one).
std::int64_t headsFor(Rng &rng, std::int64_t hidden, bool evenHeadSize)
{
    std::vector<std::int64_t> fit;
    for (std::int64_t h : {1, 2, 3, 4, 6, 8, 12, 16})
        if (hidden % h == 0 && (!evenHeadSize || (hidden / h) % 2 == 0))
            fit.push_back(h);
    return rng.pick(fit);
}

std::vector<std::int64_t> divisorsBelow(std::int64_t n)
{
    std::vector<std::int64_t> d;
    for (std::int64_t k = 1; k < n; ++k)
        if (n % k == 0)
            d.push_back(k);
    return d;
}

// Knobs of a zoo transformer, from a few to a few hundred features wide:
// latency, bandwidth and compute each dominate somewhere. `small` keeps it
// to one layer, for meshes of more than one axis, where exact's strategy
// tables grow with the square of each weight's choices.
Knobs transformerKnobs(Rng &rng, const std::string &family, bool small)
{
    Knobs k;
    k["batch"] = rng.pick<std::int64_t>({1, 2, 3, 4, 6, 8, 12, 16, 32});
    k["hidden"] = rng.pick<std::int64_t>({16, 24, 32, 48, 64, 96, 128, 256, 512});
    k["ffn"] = k["hidden"] * rng.pick<std::int64_t>({1, 2, 3, 4}) + rng.pick<std::int64_t>({0, 0, 0, 8, 24});
    k["vocab"] = rng.pick<std::int64_t>({32, 48, 64, 100, 128, 256, 1000, 1024, 4096});
    k["seq"] = rng.pick<std::int64_t>({4, 8, 12, 16, 24, 32, 64, 128, 256});
    k["layers"] = small ? 1 : 1 + static_cast<std::int64_t>(rng.below(3));
    const bool rotary = family == "llama" || family == "llama-gqa" || family == "mixtral";
    if (family == "t5") {
        k["heads"] = rng.pick<std::int64_t>({1, 2, 3, 4, 6, 8});
        k["head_dim"] = rng.pick<std::int64_t>({4, 6, 8, 16, 32, 64});
        k["layers"] = 1 + static_cast<std::int64_t>(rng.below(2));
        k["decoder_layers"] = 1 + static_cast<std::int64_t>(rng.below(2));
        k["target_seq"] = rng.pick<std::int64_t>({4, 6, 8, 12, 32, 64});
        return k;
    }
    k["heads"] = headsFor(rng, k["hidden"], rotary);
    if (family == "gpt2" || family == "gpt3" || family == "bert")
        k["positions"] = k["seq"] * (rng.chance(0.5) ? 1 : 2);
    if (family == "llama")
        k["kv_heads"] = k["heads"];
    if (family == "llama-gqa" || family == "mixtral") {
        // Grouped-query attention: fewer key/value heads than query heads
        // (one head has no fewer to take: then it is plain attention).
        const auto fewer = divisorsBelow(k["heads"]);
        k["kv_heads"] = fewer.empty() ? k["heads"] : rng.pick(fewer);
    }
    if (family == "mixtral") {
        k["experts"] = rng.pick<std::int64_t>({2, 3, 4});
        k["top_k"] = std::min<std::int64_t>(k["experts"], 1 + static_cast<std::int64_t>(rng.below(2)));
        k["layers"] = small ? 1 : 1 + static_cast<std::int64_t>(rng.below(2));
    }
    return k;
}

// A stack of MLP blocks, each x + fc2(act(fc1(x))) with or without biases
// and the residual, on tokens [batch, hidden] or [batch, seq, hidden], with
// a classifier head and its loss or the last block's output as the output.
ir::Graph buildMlpStack(const std::string &name, const Knobs &k)
{
    const std::int64_t b = k.at("batch"), s = k.at("seq"), h = k.at("hidden"), f = k.at("ffn");
    const bool bias = k.at("bias") != 0, residual = k.at("residual") != 0;
    io::zoo::GraphBuilder g(name);
    const ir::Shape tokens = s > 0 ? ir::Shape{b, s} : ir::Shape{b};
    ir::Shape xs = tokens;
    xs.push_back(h);
    auto x = g.input("x", xs, ir::DType::F32);
    g.push("layers");
    for (std::int64_t i = 0; i < k.at("layers"); ++i) {
        g.push(std::to_string(i));
        auto u = g.linear("fc1", x, f, bias);
        g.push("act");
        u = g.op(k.at("gelu") ? "Gelu" : "Relu", {u}, g.shape(u));
        g.pop();
        auto y = g.linear("fc2", u, h, bias);
        x = residual ? g.op("Add", {x, y}, g.shape(y)) : y;
        g.pop();
    }
    g.pop();
    if (const std::int64_t classes = k.at("classes"); classes > 0) {
        auto labels = g.input("labels", tokens, ir::DType::I64);
        auto logits = g.linear("head", x, classes, bias);
        g.markOutput(g.crossEntropyLoss(logits, labels));
    } else {
        g.markOutput(x);
    }
    return g.take();
}

// A stack of convolutions, each relu(conv(x) + bias) with a residual where
// the channels match, then a global mean over the image, a classifier and
// its loss.
ir::Graph buildConvStack(const std::string &name, const Knobs &k)
{
    const std::int64_t b = k.at("batch"), width = k.at("width"), kernel = k.at("kernel"), c0 = k.at("in_channels"),
                       c = k.at("channels");
    io::zoo::GraphBuilder g(name);
    auto x = g.input("images", {b, c0, width, width}, ir::DType::F32);
    auto labels = g.input("labels", {b}, ir::DType::I64);
    const std::int64_t pad = kernel / 2;
    g.push("layers");
    for (std::int64_t i = 0; i < k.at("layers"); ++i) {
        g.push(std::to_string(i));
        const std::int64_t in = g.shape(x)[1];
        g.push("conv");
        auto w = g.parameter("weight", {c, in, kernel, kernel});
        auto bias = g.parameter("bias", {c});
        auto y = g.op("Conv", {x, w, bias}, {b, c, width, width},
                      {{"kernel_shape", std::vector<std::int64_t>{kernel, kernel}},
                       {"pads", std::vector<std::int64_t>{pad, pad, pad, pad}},
                       {"strides", std::vector<std::int64_t>{1, 1}}});
        g.pop();
        g.push("act");
        y = g.op("Relu", {y}, g.shape(y));
        g.pop();
        x = in == c ? g.op("Add", {x, y}, g.shape(y)) : y;
        g.pop();
    }
    g.pop();
    g.push("pool");
    auto pooled = g.op("ReduceMean", {x}, {b, c},
                       {{"axes", std::vector<std::int64_t>{2, 3}}, {"keepdims", std::int64_t{0}}});
    g.pop();
    auto logits = g.linear("fc", pooled, k.at("classes"), true);
    g.markOutput(g.crossEntropyLoss(logits, labels));
    return g.take();
}

struct Model {
    std::string source;
    ir::Graph graph;
    bool built = false;
};

Model model(Rng &rng, const std::string &family, bool small)
{
    static const std::map<std::string, std::string> kPresets{
        {"gpt2", "gpt2"},       {"gpt3", "gpt3-6.7b"},      {"bert", "bert-base"},
        {"t5", "t5-base"},      {"llama", "llama2-7b"},     {"llama-gqa", "llama3-8b"},
        {"mixtral", "mixtral-8x7b"}, {"mlp", "mlp"},        {"abc", "abc"}};
    if (family == "mlp" || family == "abc") {
        const Knobs k{{"batch", rng.pick<std::int64_t>({1, 2, 3, 4, 6, 8, 12, 16, 64, 256})},
                      {"hidden", rng.pick<std::int64_t>({2, 3, 4, 6, 8, 12, 16, 32, 256, 1024})},
                      {"ffn", rng.pick<std::int64_t>({2, 4, 6, 8, 12, 16, 32, 64, 512, 4096})}};
        const std::string source = "zoo:" + kPresets.at(family) + query(k);
        return {source, io::loadModel(source), false};
    }
    if (family == "mlp-stack") {
        const Knobs k{{"batch", rng.pick<std::int64_t>({1, 2, 3, 4, 6, 8, 12, 16, 32, 64})},
                      {"seq", rng.pick<std::int64_t>({0, 0, 4, 6, 8, 64, 128})},
                      {"hidden", rng.pick<std::int64_t>({4, 6, 8, 12, 16, 32, 64, 256, 1024})},
                      {"ffn", rng.pick<std::int64_t>({4, 8, 12, 16, 24, 32, 64, 128, 1024, 4096})},
                      {"layers", 1 + static_cast<std::int64_t>(rng.below(4))},
                      {"bias", rng.chance(0.5)},
                      {"residual", rng.chance(0.6)},
                      {"gelu", rng.chance(0.5)},
                      {"classes", rng.pick<std::int64_t>({0, 0, 2, 10, 12, 32, 1000})}};
        const std::string source = "gen:mlp-stack" + query(k);
        return {source, buildMlpStack("mlp-stack", k), true};
    }
    if (family == "conv-stack") {
        const Knobs k{{"batch", rng.pick<std::int64_t>({1, 2, 3, 4, 6, 8, 16, 32})},
                      {"in_channels", rng.pick<std::int64_t>({1, 3, 4})},
                      {"channels", rng.pick<std::int64_t>({4, 6, 8, 12, 16, 32, 64, 128})},
                      {"width", rng.pick<std::int64_t>({4, 6, 8, 16, 32})},
                      {"kernel", rng.pick<std::int64_t>({1, 3})},
                      {"layers", 1 + static_cast<std::int64_t>(rng.below(3))},
                      {"classes", rng.pick<std::int64_t>({2, 10, 12, 16})}};
        const std::string source = "gen:conv-stack" + query(k);
        return {source, buildConvStack("conv-stack", k), true};
    }
    const std::string source = "zoo:" + kPresets.at(family) + query(transformerKnobs(rng, family, small));
    return {source, io::loadModel(source), false};
}

// Small graphs (a few matmuls or convolutions) go on meshes of one, two and
// three axes; transformers mostly on one axis, where exact proves its
// optimum in a fraction of a second, and now and then on two, kept small.
std::vector<int> meshSizes(Rng &rng, bool smallGraph)
{
    using Sizes = std::vector<std::vector<int>>;
    static const Sizes kOne{{2}, {2}, {3}, {4}, {4}, {6}, {8}, {8}};
    static const Sizes kTwo{{2, 2}, {2, 2}, {2, 3}, {3, 2}, {2, 4}, {4, 2}};
    static const Sizes kThree{{2, 2, 2}};
    static const Sizes kSixteen{{16}, {2, 8}, {4, 4}, {8, 2}, {2, 2, 4}};
    if (rng.chance(0.08)) {
        if (smallGraph)
            return rng.pick(kSixteen);
        return {16};
    }
    const double r = rng.unit();
    if (smallGraph)
        return r < 0.35 ? rng.pick(kOne) : r < 0.8 ? rng.pick(kTwo) : rng.pick(kThree);
    return r < 0.88 ? rng.pick(kOne) : rng.pick(Sizes{{2, 2}, {2, 2}, {2, 3}, {4, 2}});
}

std::vector<std::string> axisNames(Rng &rng, std::size_t rank)
{
    using Names = std::vector<std::vector<std::string>>;
    static const std::map<std::size_t, Names> kNames{
        {1, {{"model"}, {"model"}, {"data"}, {"tp"}}},
        {2, {{"data", "model"}, {"data", "model"}, {"model", "data"}, {"dp", "tp"}}},
        {3, {{"a", "b", "c"}, {"data", "seq", "model"}, {"pp", "dp", "tp"}}}};
    return rng.pick(kNames.at(rank));
}

// One or two weights, matrices mostly, each alone or with its twins in the
// other layers and experts (the same name but for the indices); moved to
// one of their legal specs, or left to the base plan's.
std::vector<Pin> pinsFor(Rng &rng, const ir::Graph &graph, const sharding::Mesh &mesh, bool moved,
                         bool everyInstance)
{
    const auto roles = rolesOf(mesh);
    std::vector<ir::TensorId> weights, matrices;
    for (auto t : graph.tensorsWithRole(ir::Role::Parameter)) {
        weights.push_back(t);
        if (graph.tensor(t).shape.size() >= 2)
            matrices.push_back(t);
    }
    auto byName = [&](ir::TensorId a, ir::TensorId b) { return graph.tensor(a).name < graph.tensor(b).name; };
    std::sort(weights.begin(), weights.end(), byName);
    std::sort(matrices.begin(), matrices.end(), byName);
    static const std::regex kIndex(R"(\.\d+\.)");
    auto instanceKey = [](const std::string &name) { return std::regex_replace(name, kIndex, ".#."); };
    std::vector<Pin> pins;
    const std::size_t count = 1 + rng.below(2);
    for (std::size_t k = 0; k < count && !weights.empty(); ++k) {
        const ir::TensorId w = rng.pick(!matrices.empty() && rng.chance(0.8) ? matrices : weights);
        const ir::Tensor &tensor = graph.tensor(w);
        std::optional<sharding::ShardingSpec> spec;
        if (moved) {
            // Legal, and kept to the roles the axis names ask for (a pin
            // splitting a weight over an axis named data is refused).
            auto legal = sharding::legalSpecs(tensor.shape, mesh);
            std::erase_if(legal, [&](const sharding::ShardingSpec &s) { return search::brokenAxis(roles, s).has_value(); });
            spec = rng.pick(legal);
        }
        std::vector<std::string> names{tensor.name};
        if (everyInstance) {
            names.clear();
            const std::string key = instanceKey(tensor.name);
            for (auto t : weights)
                if (instanceKey(graph.tensor(t).name) == key)
                    names.push_back(graph.tensor(t).name);
        }
        for (const auto &name : names)
            if (std::none_of(pins.begin(), pins.end(), [&](const Pin &p) { return p.tensor == name; }))
                pins.push_back({name, spec});
    }
    return pins;
}

} // namespace

search::AxisRoles rolesOf(const sharding::Mesh &mesh)
{
    std::vector<std::string> names;
    for (const auto &a : mesh.axes)
        names.push_back(a.name);
    if (names.size() <= 2 && names == sharding::defaultAxisNames(names.size()))
        return {};
    return search::axisRolesFromNames(names, "--mesh");
}

std::string_view toString(MemoryLimit limit)
{
    switch (limit) {
    case MemoryLimit::Loose:
        return "loose";
    case MemoryLimit::Tight:
        return "tight";
    case MemoryLimit::Impossible:
        return "impossible";
    }
    return "?";
}

std::string_view toString(PinKind kind)
{
    switch (kind) {
    case PinKind::None:
        return "none";
    case PinKind::Kept:
        return "kept";
    case PinKind::Moved:
        return "moved";
    }
    return "?";
}

std::string SearchCase::describe() const
{
    std::string s = "#" + std::to_string(index) + " " + family + " " + source + " on " + sharding::meshText(mesh) +
                    " " + profile.name + (overlap ? " overlap" : "") + ", " + std::string(toString(memory));
    if (memory != MemoryLimit::Loose) {
        char f[16];
        std::snprintf(f, sizeof f, " %.2f", memoryFraction);
        s += f;
    }
    if (!(techniques == cost::Techniques{}))
        s += ", " + cost::describe(techniques);
    if (pins != PinKind::None)
        s += ", pins " + std::string(toString(pins)) + " from " + pinBase + " (" + std::to_string(pinned.size()) +
             (pinned.size() == 1 ? " tensor" : " tensors") + (pinEveryInstance ? ", every instance)" : ")");
    return s;
}

SearchCase generateCase(std::uint64_t seed, std::size_t index)
{
    // Each case its own stream, so that case k is the same whatever the count.
    Rng rng(Rng(seed ^ (0x2545f4914f6cdd1dull * (index + 1))).next());
    SearchCase c;
    c.seed = seed;
    c.index = index;

    static const std::vector<std::pair<std::string, int>> kFamilies{
        {"mlp", 5},   {"abc", 4},    {"mlp-stack", 14}, {"conv-stack", 10}, {"gpt2", 12},    {"gpt3", 4},
        {"bert", 10}, {"t5", 10},    {"llama", 8},      {"llama-gqa", 11},  {"mixtral", 10}};
    int total = 0;
    for (const auto &f : kFamilies)
        total += f.second;
    int draw = static_cast<int>(rng.below(static_cast<std::size_t>(total)));
    for (const auto &[name, weight] : kFamilies) {
        if (draw < weight) {
            c.family = name;
            break;
        }
        draw -= weight;
    }
    const bool smallGraph = c.family == "mlp" || c.family == "abc" || c.family == "mlp-stack" || c.family == "conv-stack";
    auto sizes = meshSizes(rng, smallGraph);
    // t5 and mixtral have many classes: on two axes tap alone takes seconds.
    if (sizes.size() > 1 && (c.family == "t5" || c.family == "mixtral" || c.family == "gpt3"))
        sizes = {sizes[0] * sizes[1]};
    const bool small = !smallGraph && sizes.size() > 1;
    Model m = model(rng, c.family, small);
    c.source = std::move(m.source);
    c.graph = std::move(m.graph);
    c.built = m.built;
    if (c.built)
        if (auto problem = ir::validate(c.graph, c.source))
            throw TapestryError(*problem);

    c.profile = sharding::findMeshProfile(rng.pick<std::string>({"dgx-h100", "dgx-h100", "dgx-a100", "pcie-8x",
                                                                  "cpu-loopback"}));
    int devices = 1;
    for (int s : sizes)
        devices *= s;
    // A node smaller than the mesh puts the outer axes on the network.
    if (rng.chance(0.4)) {
        std::vector<int> nodes;
        for (int n : {1, 2, 4})
            if (n < devices)
                nodes.push_back(n);
        c.profile.intraNodeDevices = rng.pick(nodes);
        c.profile.name += "-node" + std::to_string(c.profile.intraNodeDevices);
        c.customProfile = true;
    }
    c.mesh = c.profile.mesh(sizes, axisNames(rng, sizes.size()));
    c.overlap = rng.chance(0.2);

    const double r = rng.unit();
    c.memory = r < 0.4 ? MemoryLimit::Loose : r < 0.8 ? MemoryLimit::Tight : MemoryLimit::Impossible;
    // Tight limits mostly near the least memory, where fitting is hard.
    c.memoryFraction = c.memory == MemoryLimit::Tight ? std::pow(rng.unit(), 2.0) * 0.9 + 0.005
                       : c.memory == MemoryLimit::Impossible ? rng.uniform(0.3, 0.97)
                                                             : 1.0;

    if (rng.chance(0.35)) {
        c.pins = rng.chance(0.5) ? PinKind::Kept : PinKind::Moved;
        c.pinBase = rng.pick<std::string>({"tap", "exact", "megatron", "megatron-sp", "dp", "replicate"});
        c.pinEveryInstance = rng.chance(0.4);
        c.pinned = pinsFor(rng, c.graph, c.mesh, c.pins == PinKind::Moved, c.pinEveryInstance);
        if (c.pinned.empty())
            c.pins = PinKind::None;
    }
    return c;
}

} // namespace tapestry::searchdiff
