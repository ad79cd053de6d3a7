#pragma once

#include <QDialog>

class QListWidget;
class QFormLayout;
class QSpinBox;

namespace tapestry::views {

// Picks a zoo preset and its size knobs; spec() gives "zoo:NAME?knob=v&...".
class ZooDialog : public QDialog {
    Q_OBJECT
public:
    explicit ZooDialog(QWidget *parent = nullptr);
    QString spec() const;

private:
    void showPreset(int row);

    QListWidget *m_list;
    QFormLayout *m_knobs;
    QList<QPair<QString, QSpinBox *>> m_spins;
};

} // namespace tapestry::views
