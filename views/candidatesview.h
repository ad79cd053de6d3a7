#pragma once

#include "analysis/candidates.h"

#include <QWidget>

class QLabel;
class QTableWidget;

namespace tapestry::views {

// The plan candidates of one subgraph class: every choice of its weights
// ranked by step time (the rest of the plan held), with compute,
// communication, memory and whether it fits; the plan's choice marked.
// Double-clicking a row (or Apply) asks for it to be applied as pins.
class CandidatesView : public QWidget {
    Q_OBJECT
public:
    explicit CandidatesView(QWidget *parent = nullptr);

    void showBusy(const QString &className);
    void setCandidates(const QString &className, int classId, analysis::ClassCandidates candidates);
    void showMessage(const QString &message);
    void clear();

    int classId() const { return m_classId; }
    const analysis::ClassCandidates &candidates() const { return m_candidates; }
    QTableWidget *table() const { return m_table; }

signals:
    void applyRequested(int classId, int row);

private:
    QLabel *m_title;
    QTableWidget *m_table;
    analysis::ClassCandidates m_candidates;
    int m_classId = -1;
};

} // namespace tapestry::views
