#pragma once

#include "plandocument.h"
#include "plannedmodel.h"

#include <QObject>
#include <QStringList>

class QAction;
class QActionGroup;
class QComboBox;
class QMenu;
class QSpinBox;
class QToolBar;
class QToolButton;

namespace tapestry::views {

class FindBar;
class PlanDocument;
class StudioWindow;

// The studio's menus and toolbars: File, Edit, Lessons, View and Plan, the
// plan request fields (method, mesh, profile) and the colouring. Each
// action calls the window or its document; the fields follow the
// document's request.
class StudioActions : public QObject {
    Q_OBJECT
public:
    StudioActions(StudioWindow *window, PlanDocument *document, FindBar *find);

    // The request as the toolbar's fields hold it.
    PlanRequest request() const;
    // Shows `colouring` (StudioWindow::Colouring) in the Colour-by field.
    void showColouring(int colouring);
    // Selects a machine profile, adding it to the list when it is new.
    void selectProfile(const QString &name);

    QStringList recentFiles() const;
    void addRecent(const QString &source);

private:
    void createFileMenu();
    void createEditMenu();
    void createViewMenu();
    void createPlanMenu();
    // The Memory button: flash attention, recomputation, ZeRO stage and
    // micro-batches, each auto (chosen with the plan) or fixed.
    void createMemoryMenu(QToolBar *planBar, QMenu *planMenu);
    search::TechniqueChoices techniqueChoices() const;
    void showTechniques();
    // The Plan field after a plan change: a plan opened from a file shows
    // its file there instead of a method it was not made by.
    void showPlanSource(PlanDocument::PlanChange change);
    // The Global batch field follows the open model (a zoo preset's batch
    // knob; other models keep theirs).
    void showBatch();
    // The Recomputation submenu's entries for each kind of layer of the
    // open model (full for that kind only), where it has two or more.
    void showLayerKinds();
    void showRequest(const PlanRequest &request);
    void rebuildRecentMenu();

    StudioWindow *m_window;
    PlanDocument *m_document;
    FindBar *m_find;
    QMenu *m_recentMenu = nullptr;
    QComboBox *m_method = nullptr;
    QComboBox *m_mesh = nullptr;
    QComboBox *m_profile = nullptr;
    QComboBox *m_colourBy = nullptr;
    QToolButton *m_memory = nullptr;
    QSpinBox *m_batch = nullptr;
    // Per technique, its choices: "auto" first (data empty), then the values.
    QActionGroup *m_flash = nullptr, *m_recompute = nullptr, *m_zero = nullptr, *m_micro = nullptr,
                 *m_offload = nullptr;
    QAction *m_open = nullptr;
    QAction *m_zoo = nullptr;
    QAction *m_exportImage = nullptr;
    QAction *m_fit = nullptr;
    QAction *m_minimap = nullptr;
    QString m_derivedMethod = QStringLiteral("tap");  // the Plan field's method while it shows a file
};

} // namespace tapestry::views
