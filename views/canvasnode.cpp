#include "canvasnode.h"

#include <QFontMetricsF>
#include <QPainter>
#include <QStyleOptionGraphicsItem>

namespace tapestry::views {

namespace {
QFont titleFont()
{
    QFont f;
    f.setPointSizeF(9);
    f.setBold(true);
    return f;
}
QFont subtitleFont()
{
    QFont f;
    f.setPointSizeF(8);
    return f;
}
} // namespace

CanvasNode::CanvasNode(NodeStyle style, QSizeF size, QGraphicsItem *parent)
    : QGraphicsObject(parent), m_style(std::move(style)), m_size(size)
{
    setFlag(ItemIsSelectable);
    setAcceptHoverEvents(true);
    setToolTip(m_style.title + QLatin1Char('\n') + m_style.subtitle);
}

void CanvasNode::setStyle(NodeStyle style)
{
    m_style = std::move(style);
    update();
}

QSizeF CanvasNode::sizeFor(const NodeStyle &style)
{
    const QFontMetricsF title(titleFont()), sub(subtitleFont());
    const qreal w = std::max(title.horizontalAdvance(style.title), sub.horizontalAdvance(style.subtitle));
    return {std::clamp(w + 28.0, 90.0, 320.0), style.repeat > 1 ? 46.0 : 38.0};
}

QRectF CanvasNode::boundingRect() const
{
    return QRectF(-m_size.width() / 2 - 4, -m_size.height() / 2 - 4, m_size.width() + 14,
                  m_size.height() + 14);
}

void CanvasNode::paint(QPainter *painter, const QStyleOptionGraphicsItem *option, QWidget *)
{
    const QRectF box(-m_size.width() / 2, -m_size.height() / 2, m_size.width(), m_size.height());
    painter->setRenderHint(QPainter::Antialiasing);
    const bool selected = option->state & QStyle::State_Selected;
    if (m_style.repeat > 1) {
        // A stack of cards: this block stands for several identical instances.
        painter->setPen(QPen(m_style.fill.darker(160), 1));
        painter->setBrush(m_style.fill.darker(115));
        painter->drawRoundedRect(box.translated(6, 6), 6, 6);
        painter->drawRoundedRect(box.translated(3, 3), 6, 6);
    }
    QPen pen(selected ? QColor(0x1565c0) : m_style.fill.darker(170), selected ? 3 : 1);
    if (m_style.highlighted && !selected)
        pen = QPen(QColor(0xff6f00), 2.5);
    painter->setPen(pen);
    painter->setBrush(m_style.fill);
    painter->drawRoundedRect(box, 6, 6);

    const qreal lightness = m_style.fill.lightnessF();
    painter->setPen(lightness < 0.45 ? Qt::white : QColor(0x212121));
    painter->setFont(titleFont());
    const QRectF textBox = box.adjusted(8, 3, -8, -3);
    painter->drawText(textBox.adjusted(0, 0, 0, -textBox.height() / 2), Qt::AlignCenter,
                      QFontMetricsF(titleFont()).elidedText(m_style.title, Qt::ElideMiddle, textBox.width()));
    painter->setFont(subtitleFont());
    painter->drawText(textBox.adjusted(0, textBox.height() / 2, 0, 0), Qt::AlignCenter,
                      QFontMetricsF(subtitleFont()).elidedText(m_style.subtitle, Qt::ElideRight, textBox.width()));

    if (m_style.repeat > 1) {
        const QString badge = QStringLiteral("×%1").arg(m_style.repeat);
        QFont f = titleFont();
        f.setPointSizeF(9);
        const qreal w = QFontMetricsF(f).horizontalAdvance(badge) + 10;
        const QRectF pill(box.right() - w + 4, box.top() - 8, w, 16);
        painter->setPen(Qt::NoPen);
        painter->setBrush(QColor(0x37474f));
        painter->drawRoundedRect(pill, 8, 8);
        painter->setPen(Qt::white);
        painter->setFont(f);
        painter->drawText(pill, Qt::AlignCenter, badge);
    }
    if (m_style.pinned) {
        const QRectF pin(box.left() - 5, box.top() - 5, 12, 12);
        painter->setPen(QPen(QColor(0xb71c1c), 1.5));
        painter->setBrush(QColor(0xef5350));
        painter->drawEllipse(pin);
    }
}

} // namespace tapestry::views
