#pragma once

#include <QWidget>

class QLineEdit;

namespace tapestry::views {

class GraphPanel;

// The find field above the graph: Enter selects the next coarse node whose
// op, type, tensor or shape matches; again, the one after.
class FindBar : public QWidget {
    Q_OBJECT
public:
    explicit FindBar(GraphPanel *graph, QWidget *parent = nullptr);

    // Selects the next node matching `query`; false when none.
    bool findNext(const QString &query);
    // Ctrl+F: the field focused, its text selected.
    void focusQuery();
    // A new model: the next find starts at its first match.
    void reset();

signals:
    // What the last find did, for the status bar.
    void message(const QString &text, int timeoutMs);

private:
    GraphPanel *m_graph;
    QLineEdit *m_query;
    QString m_lastQuery;
    std::size_t m_index = 0;
};

} // namespace tapestry::views
