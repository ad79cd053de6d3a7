#pragma once

#include <string>
#include <vector>

namespace tapestry::layout {

struct Point {
    double x = 0;
    double y = 0;
};

// What to lay out: boxes of given size (in points, 72 per inch) and directed
// edges between them, optionally labelled (tensor shapes).
struct LayoutRequest {
    struct Node {
        double width = 120;
        double height = 36;
    };
    struct Edge {
        int from = 0;
        int to = 0;
        std::string label;
    };
    std::vector<Node> nodes;
    std::vector<Edge> edges;
    bool leftToRight = false;  // top to bottom by default, like Netron
};

// Result in a y-down coordinate system with the origin at the top left of
// the bounding box, ready for a QGraphicsScene.
struct LayoutResult {
    std::vector<Point> centers;                 // per node
    std::vector<std::vector<Point>> edgePaths;  // per edge: cubic B-spline control points
    std::vector<Point> edgeLabels;              // per edge: label position (0,0 when none)
    double width = 0;
    double height = 0;
};

// Lays the graph out with Graphviz's `dot`. Graphviz's context is not safe
// to use from several threads at once, so every call takes one process-wide
// mutex; call from a worker thread, never the GUI thread.
LayoutResult layoutWithDot(const LayoutRequest &request);

} // namespace tapestry::layout
