#pragma once

#include "ir/graph.h"
#include "plan/axisroles.h"
#include "sharding/collective.h"
#include "sharding/mesh.h"
#include "sharding/shardingspec.h"

#include <algorithm>

#include <QTimer>
#include <QVariantAnimation>
#include <QWidget>

namespace tapestry::views {

// One collective as the mesh view steps through it: the tensor's blocks
// before and after, the axis it runs over, the bytes it moves.
struct CollectiveStep {
    QString title;  // "forward all-reduce over model"
    QString detail; // "3.0 MB per device · partial sum → replicated"
    int axis = 0;
    QString tensor;  // the tensor it moves (or whose gradient it moves)
    ir::Shape shape;
    sharding::ShardingSpec before;
    sharding::ShardingSpec after;
    // The collective as the plan costs it, for its narration (lessons).
    sharding::CollectiveKind kind = sharding::CollectiveKind::AllReduce;
    QString phase;   // "forward", "backward"
    QString reason;  // "gradient: partial sum to Shard(0)"
    qint64 bytes = 0, wireBytes = 0;  // the tensor's, what each device sends
    double seconds = 0;
};

// The device mesh drawn in its real shape (8 in a row, 4x2 as four rows of
// two; a row too narrow for its devices' labels wraps), each device a tile showing which block of the selected tensor it
// holds: one colour per distinct block, replicas share a colour, partial
// sums hatched. With collective steps, Next/Prev (and Play) walk through
// them: the blocks before, then after, with arrows along the axis. Under
// the caption, a legend says what each axis carries in the plan, and where
// that is not what the axis' name says.
class MeshView : public QWidget {
    Q_OBJECT
public:
    explicit MeshView(QWidget *parent = nullptr);

    // `carries`: what the plan does with each axis, shown as a legend under
    // the caption; empty when it is not known.
    void setMesh(const sharding::Mesh &mesh, const std::vector<plan::AxisCarries> &carries = {});
    void setTensor(const QString &name, const ir::Shape &shape, const sharding::ShardingSpec &spec);
    void setSteps(const QVector<CollectiveStep> &steps);
    void clear();

    // Frames: 0 shows the tensor as planned; each step then has a "before"
    // and an "after" frame.
    int frameCount() const { return 1 + 2 * static_cast<int>(m_steps.size()); }
    int frame() const { return m_frame; }
    void setFrame(int frame);
    void next();
    void previous();
    // Play walks every step, each collective animated from its "before"
    // frame to its "after" frame: the pieces each device sends travel
    // along the axis as the collective's algorithm moves them (a ring of
    // n - 1 hops for an all-gather or a reduce-scatter, twice that for an
    // all-reduce, n - 1 rounds of pairwise exchanges for an all-to-all),
    // at 60 frames a second, then the view rests on the result.
    void play(bool on);
    bool isPlaying() const { return m_playing; }
    // On a "before" frame: animates its collective to the "after" frame.
    void animateCollective();
    bool isAnimating() const { return m_transition >= 0; }
    // How far the current collective's animation is (0 to 1), -1 for none;
    // set directly, the view shows that moment (the tests' frames).
    double transition() const { return m_transition; }
    void setTransition(double t);
    // Animation speed: 1 takes half a second per hop.
    void setSpeed(double speed) { m_speed = std::max(0.05, speed); }
    double speed() const { return m_speed; }
    QString caption() const;
    // One line per axis: "axis data (2, rows) carries tensor — not data as
    // named"; empty when what the axes carry is not known.
    QString axesLegend() const;
    // The spec shown in the current frame.
    const sharding::ShardingSpec &shownSpec() const;
    const QString &shownTensor() const;
    const ir::Shape &shownShape() const;
    // Notation of the block `device` holds in the current frame.
    QString deviceLabel(int device) const;
    bool exportImage(const QString &path, QString *error = nullptr);
    // Where device `device`'s tile lies when the view is drawn into `area`.
    QRectF deviceRect(int device, const QRect &area) const;
    const sharding::Mesh &mesh() const { return m_mesh; }

    QSize sizeHint() const override { return {520, 320}; }

signals:
    void frameChanged(int frame);
    void playingChanged(bool playing);

protected:
    void paintEvent(QPaintEvent *event) override;

private:
    void paintMesh(QPainter &p, const QRect &area);
    // The pieces in flight m_transition of the way through the current collective.
    void paintMotion(QPainter &p, const QRect &area);
    int hops() const;
    QFont smallFont() const;
    // The caption's height drawn `width` wide.
    int captionHeight(int width) const;
    int activeAxis() const;
    QString axisLegend(std::size_t axis) const;
    bool axisMatchesName(std::size_t axis) const;

    sharding::Mesh m_mesh;
    std::vector<plan::AxisCarries> m_carries;
    QString m_tensor;
    ir::Shape m_shape;
    sharding::ShardingSpec m_spec;
    QVector<CollectiveStep> m_steps;
    int m_frame = 0;
    QTimer m_player;  // the rest between two collectives while playing
    QVariantAnimation m_motion;
    double m_transition = -1;
    double m_speed = 1;
    bool m_playing = false;
};

} // namespace tapestry::views
