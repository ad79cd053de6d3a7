#pragma once

#include "meshview.h"

#include "ir/graph.h"
#include "sharding/mesh.h"
#include "sharding/shardingspec.h"

#include <QString>
#include <QVector>

#include <functional>

namespace tapestry::views {

// One step of a lesson: the node the graph selects, the mesh view's frame
// (0: the node's main tensor as planned; 2k + 1 and 2k + 2: before and
// after the node's k-th collective), and what the step says.
struct LessonStep {
    QString node;
    int frame = 0;
    QString title;
    QString text;  // rich text, a paragraph or two
};

struct Lesson {
    QString title;
    QVector<LessonStep> steps;
};

// What a lesson is written from: the open model and plan, as the studio
// shows them. `stepsOf(node)` gives the collectives the mesh view steps
// through for the node named `node` (MeshDock::collectiveSteps).
struct LessonSource {
    const ir::Graph *graph = nullptr;
    sharding::Mesh mesh;
    std::function<sharding::ShardingSpec(const std::string &tensor)> specOf;
    std::function<QVector<CollectiveStep>(const QString &node)> stepsOf;
};

// The lessons of LESSONS.md, each step's text written for the plan shown:
// the shapes, the devices and every collective the mesh view steps
// through, with its bytes.
// 1: Y = X·B·C, B split by columns and C by rows (zoo:abc, Megatron on 4).
Lesson columnThenRowLesson(const LessonSource &source);
// 2: the 2-layer MLP fully sharded on a 4x2 mesh (zoo:mlp, the sample plan).
Lesson twoDimensionalLesson(const LessonSource &source);
// 3: your own plan: `nodes` of the open model (one node, or the nodes of a
// class's instance, each with its weights), their weights' layout and each
// of their collectives narrated; `subject` names them in the title.
struct NarratedNode {
    QString name;
    std::vector<ir::TensorId> weights;
};
Lesson ownPlanLesson(const LessonSource &source, const QString &subject, const std::vector<NarratedNode> &nodes);

// A collective as a step says it: what each device holds before, what it
// holds after, what it sends and what that costs.
QString narrateCollective(const CollectiveStep &step, const sharding::Mesh &mesh);
// "dim 1 split 4 ways over model" per axis, or "whole on every device".
QString describeSpec(const ir::Shape &shape, const sharding::ShardingSpec &spec, const sharding::Mesh &mesh);

} // namespace tapestry::views
