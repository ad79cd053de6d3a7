#pragma once

#include "lessonscript.h"

#include <QDockWidget>

class QLabel;
class QPushButton;
class QTextBrowser;

namespace tapestry::views {

// The "Lesson" dock: a lesson's steps, one at a time, with Back and Next.
// Each step shown asks the window (stepShown) to select its node and set
// the mesh view's frame, so that the text and the mesh move together.
class LessonDock : public QDockWidget {
    Q_OBJECT
public:
    explicit LessonDock(QWidget *parent = nullptr);

    void setLesson(const Lesson &lesson);
    const Lesson &lesson() const { return m_lesson; }
    int step() const { return m_step; }
    void setStep(int step);
    void next() { setStep(m_step + 1); }
    void previous() { setStep(m_step - 1); }
    // The step's text as plain text (for tests and the accessible name).
    QString shownText() const;

signals:
    void stepShown(const tapestry::views::LessonStep &step);

private:
    Lesson m_lesson;
    int m_step = -1;
    QLabel *m_title;
    QLabel *m_counter;
    QTextBrowser *m_text;
    QPushButton *m_back;
    QPushButton *m_next;
};

} // namespace tapestry::views
