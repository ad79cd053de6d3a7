#include "candidatesdock.h"

#include "candidatesview.h"
#include "classesdock.h"
#include "plandocument.h"

namespace tapestry::views {

CandidatesDock::CandidatesDock(PlanDocument *document, ClassesDock *classes, QWidget *parent)
    : QDockWidget(tr("Plan candidates"), parent), m_document(document), m_classes(classes),
      m_view(new CandidatesView(this))
{
    setObjectName(QStringLiteral("candidates"));
    setWidget(m_view);
    connect(this, &QDockWidget::visibilityChanged, this, [this](bool visible) {
        if (visible && m_class < 0 && m_classes->currentClass() >= 0)
            showClass(m_classes->currentClass());
    });
    connect(m_view, &CandidatesView::applyRequested, this, [this](int, int row) { applyCandidate(row); });
    connect(m_document, &PlanDocument::candidatesReady, this,
            [this](int classId, const analysis::ClassCandidates &result, const QString &error) {
        const QString name = m_classes->className(classId);
        if (!error.isEmpty())
            m_view->showMessage(tr("%1: %2").arg(name, error));
        else if (result.candidates.empty())
            m_view->showMessage(tr("%1: no candidates (the class has no weights to split, or its plan "
                                   "could not be costed)").arg(name));
        else
            m_view->setCandidates(name, classId, result);
        emit ready();
    });
}

void CandidatesDock::showClass(int classId)
{
    if (!m_document->requestCandidates(classId))
        return;
    m_class = classId;
    const QString name = m_classes->className(classId);
    m_view->showBusy(name.isEmpty() ? tr("class %1").arg(classId) : name);
}

void CandidatesDock::refresh()
{
    if (m_class < 0)
        return;
    if (!isHidden())
        showClass(m_class);
    else
        m_class = -1;  // costed again when the dock opens
}

bool CandidatesDock::applyCandidate(int row)
{
    const auto &list = m_view->candidates().candidates;
    if (row < 0 || row >= static_cast<int>(list.size()))
        return false;
    return m_document->applyCandidate(m_view->classId(), row, list[static_cast<std::size_t>(row)]);
}

} // namespace tapestry::views
