#pragma once

#include "plan/plan.h"

#include <QUndoCommand>

#include <functional>
#include <memory>

namespace tapestry::views {

// One edit of the plan (a pin, a reset): holds the whole plan before and
// after, so undo and redo restore bit-identical plans.
class PlanEditCommand : public QUndoCommand {
public:
    using Show = std::function<void(const std::shared_ptr<const plan::Plan> &)>;
    PlanEditCommand(const QString &text, std::shared_ptr<const plan::Plan> before,
                    std::shared_ptr<const plan::Plan> after, Show show)
        : QUndoCommand(text), m_before(std::move(before)), m_after(std::move(after)), m_show(std::move(show))
    {
    }
    void undo() override { m_show(m_before); }
    void redo() override { m_show(m_after); }

private:
    std::shared_ptr<const plan::Plan> m_before;
    std::shared_ptr<const plan::Plan> m_after;
    Show m_show;
};

} // namespace tapestry::views
