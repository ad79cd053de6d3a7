#include "finder.h"

#include "layout/viewgraph.h"

namespace tapestry::views {

std::vector<passes::NodeId> findNodes(const LoadedModel &model, const QString &query)
{
    std::vector<passes::NodeId> found;
    if (!model.graph || query.trimmed().isEmpty())
        return found;
    QString q = query.trimmed().toLower();
    q.replace(QLatin1Char('x'), QChar(0x00d7));  // "768x3072" finds "768×3072"
    const QString plain = query.trimmed().toLower();
    auto matches = [&](std::string_view s) {
        const QString text = QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size())).toLower();
        return text.contains(plain) || text.contains(q);
    };
    const auto &graph = *model.graph;
    for (const auto &node : model.coarse->nodes()) {
        bool hit = matches(node.name);
        for (auto o : node.ops)
            hit = hit || matches(graph.op(o).name) || matches(graph.op(o).type);
        for (const auto *list : {&node.inputs, &node.parameters, &node.outputs})
            for (auto t : *list)
                hit = hit || matches(graph.tensor(t).name) ||
                      matches(layout::shapeLabel(graph.tensor(t).shape));
        if (hit)
            found.push_back(node.id);
    }
    return found;
}

} // namespace tapestry::views
