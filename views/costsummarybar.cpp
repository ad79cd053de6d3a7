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

void CostSummaryBar::setCost(const cost::PlanCost &cost, const QString &planLabel)
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
    m_text = tr("%1 step %2 ms · compute %3 ms · comm %4 ms (%5 %)")
                 .arg(planLabel)
                 .arg(cost.stepTime * 1e3, 0, 'f', 2)
                 .arg(cost.compute * 1e3, 0, 'f', 2)
                 .arg(cost.comm * 1e3, 0, 'f', 2)
                 .arg(m_commShare * 100, 0, 'f', 0);
    m_memoryText = tr("memory %1 of %2%3")
                       .arg(locale.formattedDataSize(cost.memory.total(), 1, QLocale::DataSizeTraditionalFormat),
                            locale.formattedDataSize(cost.memoryCapacity, 0, QLocale::DataSizeTraditionalFormat),
                            m_fits ? QString() : tr(" — DOES NOT FIT"));
    setToolTip(m_text + QLatin1Char('\n') + m_memoryText);
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
        // The last run of the plan, before the bar; the summary gives way.
        const int measuredWidth = std::min(fontMetrics().horizontalAdvance(m_measuredText), textRight / 2);
        const QRect measuredBox(textRight - measuredWidth, 0, measuredWidth, height());
        p.setPen(QColor(0x1565c0));
        p.drawText(measuredBox, Qt::AlignVCenter,
                   fontMetrics().elidedText(m_measuredText, Qt::ElideRight, measuredWidth));
        textRight = measuredBox.left() - 12;
    }
    p.setPen(palette().color(QPalette::WindowText));
    p.drawText(QRect(8, 0, textRight - 8, height()), Qt::AlignVCenter,
               fontMetrics().elidedText(m_text, Qt::ElideRight, textRight - 8));
    // Compute (blue) vs communication (orange).
    p.setPen(Qt::NoPen);
    p.setBrush(QColor(0x64b5f6));
    p.drawRect(commBar);
    p.setBrush(QColor(0xffa726));
    p.drawRect(QRect(commBar.left(), commBar.top(), static_cast<int>(commBar.width() * m_commShare), commBar.height()));
    // Memory against capacity: green, red when over.
    p.setBrush(QColor(0xe0e0e0));
    p.drawRect(memoryBar);
    p.setBrush(m_fits ? QColor(0x66bb6a) : QColor(0xe53935));
    p.drawRect(QRect(memoryBar.left(), memoryBar.top(),
                     static_cast<int>(memoryBar.width() * std::min(1.0, m_memoryShare)), memoryBar.height()));
    p.setPen(m_fits ? palette().color(QPalette::WindowText) : QColor(0xc62828));
    p.drawText(memoryTextBox, Qt::AlignVCenter, m_memoryText);
}

} // namespace tapestry::views
