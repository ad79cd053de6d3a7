#include "findbar.h"

#include "finder.h"
#include "graphpanel.h"

#include <QHBoxLayout>
#include <QLineEdit>

namespace tapestry::views {

FindBar::FindBar(GraphPanel *graph, QWidget *parent) : QWidget(parent), m_graph(graph), m_query(new QLineEdit(this))
{
    auto *row = new QHBoxLayout(this);
    row->setContentsMargins(6, 4, 6, 4);
    m_query->setPlaceholderText(tr("Find op, tensor or shape (Ctrl+F, Enter for next)"));
    m_query->setClearButtonEnabled(true);
    row->addWidget(m_query);
    connect(m_query, &QLineEdit::returnPressed, this, [this] {
        if (!findNext(m_query->text()))
            emit message(tr("No match for \"%1\"").arg(m_query->text()), 4000);
    });
}

bool FindBar::findNext(const QString &query)
{
    const auto &model = m_graph->model();
    const auto found = findNodes(model, query);
    if (found.empty())
        return false;
    if (query != m_lastQuery) {
        m_lastQuery = query;
        m_index = 0;
    } else {
        m_index = (m_index + 1) % found.size();
    }
    const int viewNode = m_graph->viewNodeOf(found[m_index]);
    if (viewNode < 0)
        return false;
    // A match inside a folded class is shown opened, itself selected,
    // where its run can open onto it; else its class is selected.
    if (!m_graph->revealNode(found[m_index]))
        m_graph->selectViewNode(viewNode);
    emit message(tr("Match %1 of %2: %3")
                     .arg(m_index + 1)
                     .arg(found.size())
                     .arg(QString::fromStdString(std::string(model.coarse->node(found[m_index]).name))),
                 6000);
    return true;
}

void FindBar::focusQuery()
{
    m_query->setFocus();
    m_query->selectAll();
}

void FindBar::reset()
{
    m_lastQuery.clear();
}

} // namespace tapestry::views
