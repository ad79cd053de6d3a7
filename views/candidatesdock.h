#pragma once

#include <QDockWidget>

namespace tapestry::views {

class CandidatesView;
class ClassesDock;
class PlanDocument;

// The "Plan candidates" dock: the candidates of one class, costed by the
// document on a worker; a row applied becomes an undoable edit.
class CandidatesDock : public QDockWidget {
    Q_OBJECT
public:
    CandidatesDock(PlanDocument *document, ClassesDock *classes, QWidget *parent = nullptr);

    CandidatesView *view() const { return m_view; }
    // Costs the candidates of class `classId`; `ready` follows.
    void showClass(int classId);
    // The class shown or being costed; -1 when none.
    int shownClass() const { return m_class; }
    // After a new plan: costs the class shown again, or, with the dock
    // hidden, when it opens.
    void refresh();
    bool applyCandidate(int row);

signals:
    void ready();

private:
    PlanDocument *m_document;
    ClassesDock *m_classes;
    CandidatesView *m_view;
    int m_class = -1;
};

} // namespace tapestry::views
