#include "lessondock.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QTextBrowser>
#include <QVBoxLayout>

namespace tapestry::views {

LessonDock::LessonDock(QWidget *parent)
    : QDockWidget(tr("Lesson"), parent), m_title(new QLabel), m_counter(new QLabel), m_text(new QTextBrowser),
      m_back(new QPushButton(tr("◀ Back"))), m_next(new QPushButton(tr("Next ▶")))
{
    setObjectName(QStringLiteral("lesson"));
    auto *panel = new QWidget(this);
    auto *layout = new QVBoxLayout(panel);
    layout->setContentsMargins(6, 4, 6, 4);
    // The lesson's title on a line of its own; the step's heads its text.
    QFont bold = m_title->font();
    bold.setBold(true);
    m_title->setFont(bold);
    m_title->setTextFormat(Qt::PlainText);
    m_title->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Fixed);  // the dock's width is the text's to choose
    layout->addWidget(m_title);
    m_text->setOpenLinks(false);
    m_text->setFrameShape(QFrame::NoFrame);
    // Never squeezed past reading: a few lines of text and the buttons.
    m_text->setMinimumHeight(8 * fontMetrics().lineSpacing());
    m_counter->setAlignment(Qt::AlignCenter);
    m_counter->setMinimumWidth(fontMetrics().horizontalAdvance(tr("step 88 of 88")) + 8);
    layout->addWidget(m_text, 1);
    auto *row = new QHBoxLayout;
    row->addWidget(m_back);
    row->addStretch(1);
    row->addWidget(m_counter);
    row->addStretch(1);
    row->addWidget(m_next);
    layout->addLayout(row);
    setWidget(panel);
    m_back->setShortcut(QKeySequence(Qt::ALT | Qt::Key_Left));
    m_next->setShortcut(QKeySequence(Qt::ALT | Qt::Key_Right));
    m_back->setToolTip(tr("The step before (Alt+Left)"));
    m_next->setToolTip(tr("The next step (Alt+Right)"));
    connect(m_back, &QPushButton::clicked, this, &LessonDock::previous);
    connect(m_next, &QPushButton::clicked, this, &LessonDock::next);
    setLesson({});
}

void LessonDock::setLesson(const Lesson &lesson)
{
    m_lesson = lesson;
    m_step = -1;
    if (m_lesson.steps.isEmpty()) {
        m_title->setText(tr("Lessons › 1, 2 or 3 opens a lesson here"));
        m_text->clear();
        m_counter->clear();
        m_back->setEnabled(false);
        m_next->setEnabled(false);
        return;
    }
    setStep(0);
}

void LessonDock::setStep(int step)
{
    if (step < 0 || step >= m_lesson.steps.size())
        return;
    m_step = step;
    const LessonStep &s = m_lesson.steps[step];
    m_title->setText(m_lesson.title);
    m_title->setToolTip(m_lesson.title);
    m_text->setHtml(QStringLiteral("<h4>%1</h4>").arg(s.title.toHtmlEscaped()) + s.text);
    m_counter->setText(tr("step %1 of %2").arg(step + 1).arg(m_lesson.steps.size()));
    m_back->setEnabled(step > 0);
    m_next->setEnabled(step + 1 < m_lesson.steps.size());
    emit stepShown(s);
}

QString LessonDock::shownText() const
{
    return m_title->text() + QStringLiteral("\n") + m_text->toPlainText();
}

} // namespace tapestry::views
