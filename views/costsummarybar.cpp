#include "costsummarybar.h"

#include <algorithm>

#include <QLocale>
#include <QPainter>

namespace tapestry::views {

CostSummaryBar::CostSummaryBar(QWidget *parent) : QWidget(parent)
{
    setMinimumHeight(30);
}

QSize CostSummaryBar::sizeHint() const
{
    return {800, 30};
}

void CostSummaryBar::clearCost()
{
    m_hasCost = false;
    m_text.clear();
    m_measuredText.clear();
    update();
}

void CostSummaryBar::setCost(const cost::PlanCost &cost, const QString &planLabel, const cost::Techniques &techniques,
                             const plan::PlanPipeline *pipeline)
{
    m_hasCost = true;
    m_measuredText.clear();  // a measurement belongs to the plan it ran
    m_fits = cost.fitsMemory;
    const double step = cost.stepTime > 0 ? cost.stepTime : 1;
    m_commShare = cost.comm / step;
    m_memoryShare = cost.memoryCapacity > 0
                        ? static_cast<double>(cost.memory.total()) / static_cast<double>(cost.memoryCapacity)
                        : 0;
    const QLocale locale;
    const double scale = cost.memoryCapacity > 0 ? static_cast<double>(cost.memoryCapacity)
                                                 : std::max<double>(1, static_cast<double>(cost.memory.total()));
    const std::int64_t parts[4] = {cost.memory.parameters, cost.memory.gradients, cost.memory.optimizer,
                                   cost.memory.activations};
    for (int i = 0; i < 4; ++i)
        m_parts[i] = static_cast<double>(parts[i]) / scale;
    // The step time first: where the line is cut, the plan's label goes.
    m_text = tr("step %1 ms · compute %2 ms · comm %3 ms (%4 %) · %5")
                 .arg(cost.stepTime * 1e3, 0, 'f', 2)
                 .arg(cost.compute * 1e3, 0, 'f', 2)
                 .arg(cost.comm * 1e3, 0, 'f', 2)
                 .arg(m_commShare * 100, 0, 'f', 0)
                 .arg(planLabel);
    auto size = [&](std::int64_t bytes, int decimals) {
        return locale.formattedDataSize(bytes, decimals, QLocale::DataSizeIecFormat);
    };
    m_memoryText = tr("memory %1 of %2%3")
                       .arg(size(cost.memory.total(), 1), size(cost.memoryCapacity, 0),
                            m_fits ? QString() : tr(" — DOES NOT FIT"));
    const QString breakdown =
        tr("parameters %1, gradients %2, optimizer state %3, activations %4 (%5)\nmemory techniques: %6")
            .arg(size(cost.memory.parameters, 2), size(cost.memory.gradients, 2), size(cost.memory.optimizer, 2),
                 size(cost.memory.activations, 2), QString::fromStdString(cost.memory.activationModel),
                 QString::fromStdString(cost::describe(techniques)));
    QString stage;
    if (pipeline) {
        // The pipeline's step and its fullest stage lead; the plan's own
        // figures are one stage's devices running the whole model.
        stage = tr("\none stage's plan over the whole model: ") + m_text + QLatin1Char('\n') + m_memoryText;
        m_text = tr("step %1 ms · pipeline of %2 stages, bubble %3 % · %4")
                     .arg(pipeline->stepTime * 1e3, 0, 'f', 2)
                     .arg(pipeline->stages)
                     .arg(pipeline->bubbleFraction * 100, 0, 'f', 1)
                     .arg(planLabel);
        m_fits = pipeline->fitsMemory;
        m_memoryShare = cost.memoryCapacity > 0 ? static_cast<double>(pipeline->memoryPerDevice) /
                                                      static_cast<double>(cost.memoryCapacity)
                                                : 0;
        for (double &part : m_parts)
            part = 0;
        m_parts[0] = m_memoryShare;
        m_memoryText = tr("memory %1 of %2 on the fullest stage%3")
                           .arg(size(pipeline->memoryPerDevice, 1), size(cost.memoryCapacity, 0),
                                m_fits ? QString() : tr(" — DOES NOT FIT"));
    }
    setToolTip(m_text + QLatin1Char('\n') + m_memoryText + QLatin1Char('\n') + breakdown + stage);
    update();
}

void CostSummaryBar::setMeasured(const QString &text)
{
    m_measuredText = text;
    setToolTip(m_text + QLatin1Char('\n') + m_measuredText + QLatin1Char('\n') + m_memoryText);
    update();
}

void CostSummaryBar::paintEvent(QPaintEvent *)
{
    QPainter p(this);
    p.setRenderHint(QPainter::Antialiasing);
    p.fillRect(rect(), palette().window());
    if (!m_hasCost) {
        p.setPen(palette().color(QPalette::PlaceholderText));
        p.drawText(rect().adjusted(8, 0, 0, 0), Qt::AlignVCenter, tr("No plan: choose a mesh and Derive plan"));
        return;
    }
    // Right to left: memory bar, memory text, comm/compute bar; the summary
    // text takes what is left, elided.
    const int barWidth = 110;
    const int memoryTextWidth = fontMetrics().horizontalAdvance(m_memoryText);
    const QRect memoryBar(width() - barWidth - 8, 8, barWidth, height() - 16);
    const QRect memoryTextBox(memoryBar.left() - memoryTextWidth - 10, 0, memoryTextWidth + 4, height());
    const QRect commBar(memoryTextBox.left() - barWidth - 16, 8, barWidth, height() - 16);
    int textRight = commBar.left() - 16;
    if (!m_measuredText.isEmpty()) {
        // The last run of the plan, before the bar; the summary gives way,
        // but for its first part (the step time), which stays whole.
        const int stepWidth = fontMetrics().horizontalAdvance(m_text.section(QStringLiteral(" · "), 0, 0) +
                                                              QStringLiteral(" …"));
        const int measuredWidth =
            std::max(0, std::min({fontMetrics().horizontalAdvance(m_measuredText), textRight / 2,
                                  textRight - 8 - stepWidth - 12}));
        const QRect measuredBox(textRight - measuredWidth, 0, measuredWidth, height());
        p.setPen(QColor(0x1565c0));
        p.drawText(measuredBox, Qt::AlignVCenter,
                   fontMetrics().elidedText(m_measuredText, Qt::ElideRight, measuredWidth));
        textRight = measuredBox.left() - 12;
    }
    p.setPen(palette().color(QPalette::WindowText));
    m_shownText = fontMetrics().elidedText(m_text, Qt::ElideRight, textRight - 8);
    p.drawText(QRect(8, 0, textRight - 8, height()), Qt::AlignVCenter, m_shownText);
    // Compute (blue) vs communication (orange).
    p.setPen(Qt::NoPen);
    p.setBrush(QColor(0x64b5f6));
    p.drawRect(commBar);
    p.setBrush(QColor(0xffa726));
    p.drawRect(QRect(commBar.left(), commBar.top(), static_cast<int>(commBar.width() * m_commShare), commBar.height()));
    // Memory against capacity, in parts: parameters, gradients, optimizer
    // state, activations (greens when it fits, reds when over).
    p.setBrush(QColor(0xe0e0e0));
    p.drawRect(memoryBar);
    static const QColor kFits[4] = {QColor(0x1b5e20), QColor(0x388e3c), QColor(0x66bb6a), QColor(0xa5d6a7)};
    static const QColor kOver[4] = {QColor(0xb71c1c), QColor(0xd32f2f), QColor(0xe57373), QColor(0xef9a9a)};
    const double total = m_parts[0] + m_parts[1] + m_parts[2] + m_parts[3];
    const double shrink = total > 1 ? 1 / total : 1;  // over capacity: the parts fill the bar
    double x = memoryBar.left();
    for (int i = 0; i < 4; ++i) {
        const double w = memoryBar.width() * m_parts[i] * shrink;
        p.setBrush(m_fits ? kFits[i] : kOver[i]);
        p.drawRect(QRectF(x, memoryBar.top(), w, memoryBar.height()));
        x += w;
    }
    p.setPen(m_fits ? palette().color(QPalette::WindowText) : QColor(0xc62828));
    p.drawText(memoryTextBox, Qt::AlignVCenter, m_memoryText);
}

} // namespace tapestry::views
