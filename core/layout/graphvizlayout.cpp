#include "layout/graphvizlayout.h"

#include "ir/error.h"

#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>

#include <memory>
#include <mutex>
#include <string>

namespace tapestry::layout {

namespace {

std::mutex &gvcMutex()
{
    static std::mutex m;
    return m;
}

GVC_t *context()
{
    // One context for the process, created on first use under the mutex.
    static GVC_t *gvc = gvContext();
    return gvc;
}

void set(void *object, const char *name, const std::string &value)
{
    agsafeset(object, const_cast<char *>(name), const_cast<char *>(value.c_str()),
              const_cast<char *>(""));
}

} // namespace

LayoutResult layoutWithDot(const LayoutRequest &request)
{
    std::lock_guard lock(gvcMutex());
    GVC_t *gvc = context();
    Agraph_t *g = agopen(const_cast<char *>("tapestry"), Agdirected, nullptr);
    if (!g)
        throw TapestryError(Error{"graph layout", {}, "Graphviz could not create a graph"});
    std::unique_ptr<Agraph_t, int (*)(Agraph_t *)> guard(g, agclose);
    set(g, "rankdir", request.leftToRight ? "LR" : "TB");
    set(g, "nodesep", "0.25");
    set(g, "ranksep", "0.35");
    set(g, "splines", "spline");

    std::vector<Agnode_t *> nodes;
    nodes.reserve(request.nodes.size());
    for (std::size_t i = 0; i < request.nodes.size(); ++i) {
        Agnode_t *n = agnode(g, const_cast<char *>(("n" + std::to_string(i)).c_str()), 1);
        set(n, "shape", "box");
        set(n, "fixedsize", "true");
        set(n, "label", "");
        set(n, "width", std::to_string(request.nodes[i].width / 72.0));
        set(n, "height", std::to_string(request.nodes[i].height / 72.0));
        nodes.push_back(n);
    }
    std::vector<Agedge_t *> edges;
    edges.reserve(request.edges.size());
    for (std::size_t i = 0; i < request.edges.size(); ++i) {
        const auto &e = request.edges[i];
        if (e.from < 0 || e.to < 0 || static_cast<std::size_t>(e.from) >= nodes.size() ||
            static_cast<std::size_t>(e.to) >= nodes.size())
            throw TapestryError(Error{"graph layout", "edge " + std::to_string(i), "refers to a missing node"});
        Agedge_t *edge = agedge(g, nodes[static_cast<std::size_t>(e.from)],
                                nodes[static_cast<std::size_t>(e.to)],
                                const_cast<char *>(("e" + std::to_string(i)).c_str()), 1);
        if (!e.label.empty()) {
            set(edge, "label", e.label);
            // Sized as the studio draws it: a fixed-width font of 9 points,
            // whose width Graphviz estimates right (Courier: 0.6 em a
            // character), so that the labels it places do not overlap.
            set(edge, "fontname", "Courier");
            set(edge, "fontsize", "9");
        }
        edges.push_back(edge);
    }

    if (gvLayout(gvc, g, "dot") != 0)
        throw TapestryError(Error{"graph layout", {}, "Graphviz dot failed"});

    LayoutResult result;
    const boxf bb = GD_bb(g);
    result.width = bb.UR.x - bb.LL.x;
    result.height = bb.UR.y - bb.LL.y;
    // Graphviz is y-up with its own origin; flip into the scene's y-down frame.
    auto toScene = [&](pointf p) { return Point{p.x - bb.LL.x, bb.UR.y - p.y}; };
    for (Agnode_t *n : nodes)
        result.centers.push_back(toScene(ND_coord(n)));
    for (Agedge_t *e : edges) {
        std::vector<Point> path;
        if (splines *spl = ED_spl(e); spl && spl->size > 0) {
            const bezier &bz = spl->list[0];
            if (bz.sflag)
                path.push_back(toScene(bz.sp));
            for (int k = 0; k < bz.size; ++k)
                path.push_back(toScene(bz.list[k]));
            if (bz.eflag)
                path.push_back(toScene(bz.ep));
        }
        result.edgePaths.push_back(std::move(path));
        textlabel_t *label = ED_label(e);
        result.edgeLabels.push_back(label ? toScene(label->pos) : Point{});
    }
    gvFreeLayout(gvc, g);
    return result;
}

} // namespace tapestry::layout
