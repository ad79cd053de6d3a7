#include "zoodialog.h"

#include "io/zoo/zoo.h"

#include <QDialogButtonBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QSpinBox>
#include <QVBoxLayout>

namespace tapestry::views {

ZooDialog::ZooDialog(QWidget *parent) : QDialog(parent), m_list(new QListWidget(this)), m_knobs(nullptr)
{
    setWindowTitle(tr("Model zoo"));
    for (const auto &p : io::zoo::presets()) {
        auto *item = new QListWidgetItem(QString::fromStdString(p.name), m_list);
        item->setToolTip(QString::fromStdString(p.description));
    }
    auto *knobBox = new QWidget(this);
    m_knobs = new QFormLayout(knobBox);
    auto *buttons = new QDialogButtonBox(QDialogButtonBox::Open | QDialogButtonBox::Cancel, this);
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(m_list, &QListWidget::currentRowChanged, this, &ZooDialog::showPreset);
    connect(m_list, &QListWidget::itemDoubleClicked, this, &QDialog::accept);
    auto *row = new QHBoxLayout;
    row->addWidget(m_list, 1);
    row->addWidget(knobBox, 1);
    auto *layout = new QVBoxLayout(this);
    layout->addLayout(row);
    layout->addWidget(buttons);
    m_list->setCurrentRow(0);
    resize(560, 420);
}

void ZooDialog::showPreset(int row)
{
    while (m_knobs->rowCount() > 0)
        m_knobs->removeRow(0);
    m_spins.clear();
    if (row < 0 || row >= static_cast<int>(io::zoo::presets().size()))
        return;
    const auto &p = io::zoo::presets()[static_cast<std::size_t>(row)];
    auto *description = new QLabel(QString::fromStdString(p.description));
    description->setWordWrap(true);
    m_knobs->addRow(description);
    for (const auto &[knob, value] : p.defaults) {
        auto *spin = new QSpinBox;
        spin->setRange(1, 1 << 30);
        spin->setValue(static_cast<int>(value));
        spin->setProperty("default", static_cast<int>(value));
        m_knobs->addRow(QString::fromStdString(knob), spin);
        m_spins.append({QString::fromStdString(knob), spin});
    }
}

QString ZooDialog::spec() const
{
    const auto *item = m_list->currentItem();
    if (!item)
        return {};
    QString s = QStringLiteral("zoo:") + item->text();
    QStringList changed;
    for (const auto &[knob, spin] : m_spins)
        if (spin->value() != spin->property("default").toInt())
            changed << knob + QLatin1Char('=') + QString::number(spin->value());
    if (!changed.isEmpty())
        s += QLatin1Char('?') + changed.join(QLatin1Char('&'));
    return s;
}

} // namespace tapestry::views
