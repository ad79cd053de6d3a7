#include "candidatesview.h"

#include <QHeaderView>
#include <QLabel>
#include <QLocale>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>

namespace tapestry::views {

namespace {

enum Column { Rank, Weights, Step, Compute, Comm, Memory, Fits, Columns };

QString ms(double seconds)
{
    return QStringLiteral("%1 ms").arg(seconds * 1e3, 0, 'f', 3);
}

// "q_proj [S1] · out_proj [S0, R]": the last two name parts, short placements.
QString weightsText(const analysis::ClassCandidate &c)
{
    QStringList parts;
    for (const auto &[name, spec] : c.weights) {
        QString n = QString::fromStdString(name);
        if (n.endsWith(QLatin1String(".weight")))
            n.chop(7);
        n = n.section(QLatin1Char('.'), -1);
        QStringList placements;
        for (const auto &p : spec.placements)
            placements << (p.isReplicate() ? QStringLiteral("R")
                                           : p.isPartial() ? QStringLiteral("P") : QStringLiteral("S%1").arg(p.dim));
        parts << QStringLiteral("%1 %2").arg(n, placements.join(QLatin1Char(',')));
    }
    return parts.join(QStringLiteral(" · "));
}

} // namespace

CandidatesView::CandidatesView(QWidget *parent)
    : QWidget(parent), m_title(new QLabel(this)), m_table(new QTableWidget(this))
{
    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(2, 2, 2, 2);
    auto *apply = new QPushButton(tr("Apply as pins"), this);
    auto *top = new QHBoxLayout;
    top->addWidget(m_title, 1);
    top->addWidget(apply);
    layout->addLayout(top);
    layout->addWidget(m_table, 1);
    m_title->setWordWrap(true);
    m_table->setColumnCount(Columns);
    m_table->setHorizontalHeaderLabels(
        {tr("#"), tr("Weights (S = split dim, R = replicated, per axis)"), tr("Step (class)"), tr("Compute"),
         tr("Comm"), tr("Memory / device"), tr("Fits")});
    m_table->verticalHeader()->hide();
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setSelectionMode(QAbstractItemView::SingleSelection);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->horizontalHeader()->setSectionResizeMode(Weights, QHeaderView::Stretch);
    connect(m_table, &QTableWidget::cellDoubleClicked, this, [this](int row, int) {
        emit applyRequested(m_classId, row);
    });
    connect(apply, &QPushButton::clicked, this, [this] {
        if (m_table->currentRow() >= 0)
            emit applyRequested(m_classId, m_table->currentRow());
    });
    clear();
}

void CandidatesView::clear()
{
    m_classId = -1;
    m_candidates = {};
    m_table->setRowCount(0);
    m_title->setText(tr("Select a subgraph class to see the plans its weights could take"));
}

void CandidatesView::showMessage(const QString &message)
{
    m_table->setRowCount(0);
    m_title->setText(message);
}

void CandidatesView::showBusy(const QString &className)
{
    m_table->setRowCount(0);
    m_title->setText(tr("Costing every choice of %1's weights…").arg(className));
}

void CandidatesView::setCandidates(const QString &className, int classId, analysis::ClassCandidates candidates)
{
    m_classId = classId;
    m_candidates = std::move(candidates);
    const auto &list = m_candidates.candidates;
    m_title->setText(tr("%1: %2 choices costed%3, %4 listed, fastest first; double-click a row to pin it")
                         .arg(className)
                         .arg(m_candidates.enumerated)
                         .arg(m_candidates.perBlock ? tr(" (block by block: too many combinations)") : QString())
                         .arg(list.size()));
    m_table->setRowCount(static_cast<int>(list.size()));
    const QLocale locale;
    for (int row = 0; row < static_cast<int>(list.size()); ++row) {
        const auto &c = list[static_cast<std::size_t>(row)];
        const QStringList cells{c.chosen ? QStringLiteral("%1 ✓").arg(row + 1) : QString::number(row + 1),
                                weightsText(c),
                                ms(c.time),
                                ms(c.compute),
                                ms(c.comm),
                                locale.formattedDataSize(c.planMemory),
                                c.fits ? tr("yes") : tr("no")};
        for (int col = 0; col < Columns; ++col) {
            auto *item = new QTableWidgetItem(cells[col]);
            if (c.chosen) {
                QFont f = item->font();
                f.setBold(true);
                item->setFont(f);
                item->setToolTip(tr("The plan's present choice"));
            }
            if (!c.fits)
                item->setForeground(QColor(0xc62828));
            if (col >= Step && col <= Memory)
                item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
            m_table->setItem(row, col, item);
        }
    }
    m_table->resizeColumnToContents(Rank);
}

} // namespace tapestry::views
