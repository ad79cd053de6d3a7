#include "executorpanel.h"

#include "reportserver.h"

#include "io/modelloader.h"
#include "plan/fingerprint.h"
#include "plan/planjson.h"
#include "sharding/meshprofile.h"

#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QHorizontalBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QCryptographicHash>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFontDatabase>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QJsonArray>
#include <QJsonDocument>
#include <QLabel>
#include <QLineEdit>
#include <QLineSeries>
#include <QMultiMap>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSpinBox>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QThread>
#include <QTimer>
#include <QToolButton>
#include <QTreeWidget>
#include <QValueAxis>
#include <QVBoxLayout>

#include <csignal>
#include <sys/prctl.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <variant>

namespace tapestry::views {

namespace {

constexpr int kKillGraceMs = 5000;     // SIGTERM, then SIGKILL
constexpr int kReportDrainMs = 3000;   // after exit, for the report's last lines
constexpr int kStderrTail = 200;
constexpr int kErrorLines = 8;
// Largest model whose whole training step Calibrate runs on every rank.
constexpr std::int64_t kCalibrationModelParameters = 50'000'000;

const QColor kPredicted(0x90a4ae);
const QColor kMeasured(0x42a5f5);
const QColor kThroughput(0x1e88e5);
const QColor kStepTime(0xfb8c00);

QString ms(double seconds)
{
    return QString::number(seconds * 1e3, 'f', seconds < 0.01 ? 3 : 1);
}

QString rate(double v)
{
    if (v >= 1e6)
        return QString::number(v * 1e-6, 'f', 2) + QLatin1Char('M');
    if (v >= 1e4)
        return QString::number(v * 1e-3, 'f', 1) + QLatin1Char('k');
    return QString::number(v, 'f', 0);
}

// The parts of a step the comparison chart sets side by side, so that a
// user sees which part of the model the prediction is off in: the whole
// step, its compute, the GEMMs and the other kernels (norms, softmax,
// elementwise, layout copies) apart, and the collectives.
QStringList partLabels()
{
    return {QObject::tr("step"), QObject::tr("compute"), QObject::tr("GEMMs"), QObject::tr("other kernels"),
            QObject::tr("comm")};
}

QVector<double> partsOf(const ExecutorPrediction &p)
{
    return {p.stepTime, p.compute, p.gemm, p.compute - p.gemm, p.comm};
}

// Replaces the chart of `view`, deleting the one it held.
void setChart(QChartView *view, QChart *chart)
{
    QChart *old = view->chart();
    chart->setMargins(QMargins(4, 4, 4, 4));
    chart->legend()->setAlignment(Qt::AlignBottom);
    view->setChart(chart);
    delete old;
}

QChart *emptyChart(const QString &title)
{
    auto *chart = new QChart;
    chart->setTitle(title);
    return chart;
}

// Predicted and measured side by side, in ms, one category per label:
// horizontal bars, so that the labels read whole on the left in a narrow
// panel (the first label on top).
QChart *comparisonChart(const QString &title, const QStringList &labels, const QVector<double> &predicted,
                        const QVector<double> &measured)
{
    auto *chart = new QChart;
    chart->setTitle(title);
    auto *p = new QBarSet(QCoreApplication::translate("ExecutorPanel", "predicted"));
    auto *m = new QBarSet(QCoreApplication::translate("ExecutorPanel", "measured"));
    p->setColor(kPredicted);
    m->setColor(kMeasured);
    double most = 0;
    QStringList bottomUp;
    for (qsizetype i = labels.size(); i-- > 0;) {
        *p << predicted.value(i) * 1e3;
        *m << measured.value(i) * 1e3;
        bottomUp << labels[i];
        most = std::max({most, predicted.value(i) * 1e3, measured.value(i) * 1e3});
    }
    auto *series = new QHorizontalBarSeries;
    // Measured first, so that in each category predicted sits above it.
    series->append(m);
    series->append(p);
    chart->addSeries(series);
    auto *y = new QBarCategoryAxis;
    y->append(bottomUp);
    auto *x = new QValueAxis;
    x->setTitleText(QStringLiteral("ms"));
    x->setRange(0, most > 0 ? most * 1.1 : 1);
    x->setLabelFormat(QStringLiteral("%.3g"));
    x->setTickCount(3);
    chart->addAxis(y, Qt::AlignLeft);
    chart->addAxis(x, Qt::AlignBottom);
    series->attachAxis(x);
    series->attachAxis(y);
    return chart;
}

QString stateName(ExecutorRun::State state)
{
    switch (state) {
    case ExecutorRun::State::Starting: return QCoreApplication::translate("ExecutorPanel", "starting");
    case ExecutorRun::State::Running: return QCoreApplication::translate("ExecutorPanel", "running");
    case ExecutorRun::State::Finished: return QCoreApplication::translate("ExecutorPanel", "finished");
    case ExecutorRun::State::Failed: return QCoreApplication::translate("ExecutorPanel", "failed");
    case ExecutorRun::State::Stopped: return QCoreApplication::translate("ExecutorPanel", "stopped");
    }
    return {};
}

// One name per collective kind: the executor reports "all_reduce", the cost
// model's breakdown says "all-reduce".
QString kindName(QString kind)
{
    return kind.replace(QLatin1Char('_'), QLatin1Char('-'));
}

// The lines worth showing of a failed job's stderr: the executor's own, else
// the last ones, without the launcher's rulers.
QStringList errorLines(const QStringList &tail)
{
    QStringList own, other;
    for (const QString &line : tail) {
        if (line.startsWith(QLatin1String("tapestry-exec:")))
            own << line;
        else if (!line.startsWith(QLatin1String("-----")))
            other << line;
    }
    const QStringList &lines = own.isEmpty() ? other : own;
    return lines.mid(std::max<qsizetype>(0, lines.size() - kErrorLines));
}

// The one line that says why: the executor's last, else the launcher's.
QString headline(const QStringList &tail)
{
    const QStringList lines = errorLines(tail);
    return lines.isEmpty() ? QString() : lines.back();
}

// `root` and the processes below it (children, theirs, ...), from /proc:
// mpirun starts every rank in a process group of its own, out of reach of a
// signal to the launcher's group.
QList<qint64> processTree(qint64 root)
{
    if (root <= 1)
        return {};
    QMultiMap<qint64, qint64> children;  // by parent
    for (const QString &entry : QDir(QStringLiteral("/proc")).entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
        bool ok = false;
        const qint64 pid = entry.toLongLong(&ok);
        QFile stat(QStringLiteral("/proc/%1/stat").arg(entry));
        if (!ok || !stat.open(QIODevice::ReadOnly))
            continue;
        // "pid (name) state ppid ...": the name may hold spaces and parentheses.
        const QByteArray text = stat.readAll();
        const qsizetype close = text.lastIndexOf(')');
        const QList<QByteArray> fields = text.mid(close + 2).split(' ');
        if (close > 0 && fields.size() > 1)
            children.insert(fields[1].toLongLong(), pid);
    }
    QList<qint64> tree{root};
    for (qsizetype i = 0; i < tree.size(); ++i)
        tree += children.values(tree[i]);
    return tree;
}

} // namespace

bool ExecutorRun::verificationPassed() const
{
    return hasVerification() && summary->verification->passed;
}

double ExecutorRun::meanStepTime() const
{
    if (summary)
        return summary->mean.stepTime;
    double total = 0;
    for (const auto &s : steps)
        total += s.stepTime;
    return steps.isEmpty() ? 0 : total / steps.size();
}

double ExecutorRun::tokensPerSecond() const
{
    if (summary)
        return summary->mean.tokensPerSecond;
    return steps.isEmpty() ? 0 : steps.back().tokensPerSecond;
}

ExecutorPanel::ExecutorPanel(QWidget *parent)
    : QWidget(parent), m_server(new ReportServer(this)), m_killTimer(new QTimer(this))
{
    qRegisterMetaType<ExecutorRun>();
    buildUi();
    m_killTimer->setSingleShot(true);
    connect(m_killTimer, &QTimer::timeout, this, [this] {
        if (isRunning()) {
            log(tr("The job did not end on SIGTERM within %1 s: killing its processes").arg(kKillGraceMs / 1000));
            killJob();
        }
    });
    connect(m_server, &ReportServer::messageReceived, this, &ExecutorPanel::onMessage);
    connect(m_server, &ReportServer::clientAccepted, this, [this](const QJsonObject &hello) {
        log(tr("Report connected: %1 ranks, schema %2")
                .arg(hello.value(QLatin1String("ranks")).toInt())
                .arg(hello.value(QLatin1String("schema")).toInt()));
    });
    connect(m_server, &ReportServer::connectionRejected, this,
            [this](const QString &reason) { log(tr("Report connection refused: %1").arg(reason)); });
    connect(m_server, &ReportServer::logged, this, &ExecutorPanel::log);
    connect(m_server, &ReportServer::clientDisconnected, this, [this] {
        if (isRunning())
            log(tr("The report connection closed while the job runs"));
    });
}

ExecutorPanel::~ExecutorPanel()
{
    if (!isRunning())
        return;
    m_process->disconnect(this);
    const auto pid = static_cast<pid_t>(m_process->processId());
    m_jobProcesses = processTree(pid);
    ::kill(-pid, SIGTERM);
    if (!m_process->waitForFinished(kKillGraceMs)) {
        killJob();
        m_process->waitForFinished(2000);
    }
}

void ExecutorPanel::buildUi()
{
    m_launcher = new QComboBox(this);
    m_launcher->addItem(tr("Local (mpirun)"), static_cast<int>(LaunchTemplate::Kind::LocalMpirun));
    m_launcher->addItem(tr("Slurm (srun)"), static_cast<int>(LaunchTemplate::Kind::Slurm));
    m_launcher->addItem(tr("Custom command"), static_cast<int>(LaunchTemplate::Kind::Custom));
    m_template = new QLineEdit(LaunchTemplate::localMpirun(), this);
    m_template->setToolTip(tr("Placeholders: {np} ranks, {nodes}, {per_node}, {exec} tapestry-exec, {mpi_flags} "
                              "(--allow-run-as-root, --oversubscribe where needed), {args} the executor's arguments"));
    m_ranks = new QSpinBox(this);
    m_ranks->setRange(1, 65536);
    m_ranks->setToolTip(tr("MPI ranks; the plan's mesh must have as many devices"));
    m_nodes = new QSpinBox(this);
    m_nodes->setRange(1, 4096);
    m_nodes->setToolTip(tr("Nodes for Slurm; {per_node} is ranks / nodes"));
    m_steps = new QSpinBox(this);
    m_steps->setRange(1, 100000);
    m_steps->setValue(5);
    m_batch = new QSpinBox(this);
    m_batch->setRange(0, 1 << 20);
    m_batch->setSpecialValueText(tr("as loaded"));
    m_batch->setToolTip(tr("Bind the batch dim (--batch); 'as loaded' keeps the model's"));
    m_backend = new QComboBox(this);
    m_backend->addItems({QStringLiteral("cpu"), QStringLiteral("cuda")});
    m_backend->setToolTip(tr("cpu: MPI collectives and OpenBLAS; cuda: NCCL and cuBLAS, when tapestry-exec was "
                             "built with CUDA"));
    m_verify = new QCheckBox(tr("Verify against the unsharded reference"), this);
    m_verify->setChecked(true);
    m_stepTimeout = new QDoubleSpinBox(this);
    m_stepTimeout->setRange(0, 7 * 24 * 3600);
    m_stepTimeout->setDecimals(1);
    m_stepTimeout->setSuffix(QStringLiteral(" s"));
    m_stepTimeout->setSpecialValueText(tr("automatic"));
    m_stepTimeout->setToolTip(tr("End the job when a step takes longer: a rank has stalled or died and the others "
                                 "wait in a collective (--step-timeout). Automatic: 10 times the slower of the "
                                 "predicted step time and the slowest step so far, at least 60 s"));
    m_profile = new QComboBox(this);
    m_profile->setEditable(true);
    for (const auto &name : sharding::meshProfileNames())
        m_profile->addItem(QString::fromStdString(name));
    m_profile->setCurrentText(QStringLiteral("cpu-loopback"));
    m_profile->setToolTip(tr("Mesh profile of the predicted step time: a shipped name or a profile .json file"));
    m_executable = new QLineEdit(findExecutable(), this);
    m_executable->setCursorPosition(0);
    m_executable->setPlaceholderText(tr("path to tapestry-exec"));
    auto *browse = new QToolButton(this);
    browse->setText(QStringLiteral("…"));
    connect(browse, &QToolButton::clicked, this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, tr("tapestry-exec"), m_executable->text());
        if (!path.isEmpty())
            m_executable->setText(path);
    });
    m_bind = new QLineEdit(QStringLiteral("127.0.0.1"), this);
    m_bind->setToolTip(tr("Address the report server listens on: 127.0.0.1 for local ranks, 0.0.0.0 when rank 0 "
                          "runs on another machine"));

    auto *form = new QFormLayout;
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    form->addRow(tr("Launcher"), m_launcher);
    form->addRow(tr("Command"), m_template);
    auto *sizes = new QHBoxLayout;
    sizes->addWidget(m_ranks);
    sizes->addWidget(new QLabel(tr("nodes"), this));
    sizes->addWidget(m_nodes);
    form->addRow(tr("Ranks"), sizes);
    auto *work = new QHBoxLayout;
    work->addWidget(m_steps);
    work->addWidget(new QLabel(tr("batch"), this));
    work->addWidget(m_batch);
    form->addRow(tr("Steps"), work);
    auto *backend = new QHBoxLayout;
    backend->addWidget(m_backend);
    backend->addWidget(new QLabel(tr("profile"), this));
    backend->addWidget(m_profile, 1);
    form->addRow(tr("Backend"), backend);
    form->addRow(QString(), m_verify);
    form->addRow(tr("Step timeout"), m_stepTimeout);
    auto *exec = new QHBoxLayout;
    exec->addWidget(m_executable, 1);
    exec->addWidget(browse);
    form->addRow(tr("Executor"), exec);
    form->addRow(tr("Report on"), m_bind);

    m_run = new QPushButton(tr("▶ Run"), this);
    m_stop = new QPushButton(tr("■ Stop"), this);
    m_stop->setEnabled(false);
    connect(m_run, &QPushButton::clicked, this, [this] { run(); });
    connect(m_stop, &QPushButton::clicked, this, &ExecutorPanel::stop);
    m_calibrate = new QPushButton(tr("Calibrate…"), this);
    m_calibrate->setToolTip(tr("Measure this machine on these ranks into a mesh profile for the planner: GEMM "
                               "rate, the kernel efficiency of a training step of this model (of a small GPT-2 "
                               "when the model has over 50M parameters), links per axis of the plan's mesh"));
    connect(m_calibrate, &QPushButton::clicked, this, [this] {
        bool ok = false;
        const QString name = QInputDialog::getText(this, tr("Calibrate"), tr("Name of the measured profile:"),
                                                   QLineEdit::Normal, QStringLiteral("this-machine"), &ok);
        if (ok)
            calibrate(name.trimmed());
    });
    auto *buttons = new QHBoxLayout;
    buttons->addWidget(m_run);
    buttons->addWidget(m_stop);
    buttons->addWidget(m_calibrate);
    buttons->addStretch(1);

    auto *left = new QWidget(this);
    auto *leftLayout = new QVBoxLayout(left);
    leftLayout->setContentsMargins(0, 0, 0, 0);
    m_planLabel = new QLabel(tr("No plan yet"), this);
    QFont bold = m_planLabel->font();
    bold.setBold(true);
    m_planLabel->setFont(bold);
    leftLayout->addWidget(m_planLabel);
    m_source = new QLabel(this);
    leftLayout->addWidget(m_source);
    leftLayout->addLayout(form);
    leftLayout->addLayout(buttons);
    leftLayout->addStretch(1);
    left->setMaximumWidth(420);
    left->setMinimumWidth(320);

    m_status = new QLabel(tr("Idle"), this);
    m_status->setWordWrap(true);
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_verdict = new QLabel(this);
    m_verdict->setTextFormat(Qt::RichText);

    m_throughput = new QChartView(this);
    m_collectives = new QChartView(this);
    m_comparison = new QChartView(this);
    auto *live = new QWidget(this);
    auto *liveLayout = new QHBoxLayout(live);
    liveLayout->setContentsMargins(0, 0, 0, 0);
    for (auto *view : {m_throughput, m_collectives, m_comparison}) {
        view->setRenderHint(QPainter::Antialiasing);
        view->setMinimumSize(240, 200);
        liveLayout->addWidget(view, view == m_throughput ? 3 : 2);
    }
    m_runs = new QTreeWidget(this);
    m_runs->setRootIsDecorated(false);
    m_runs->setHeaderLabels({tr("#"), tr("started"), tr("ranks"), tr("tokens/s"), tr("step ms"), tr("predicted ms"),
                             tr("predicted / measured"), tr("verification"), tr("outcome")});
    m_runs->header()->setSectionResizeMode(QHeaderView::ResizeToContents);
    connect(m_runs, &QTreeWidget::currentItemChanged, this, [this](QTreeWidgetItem *item) {
        if (!item)
            return;
        m_shownRun = m_runs->indexOfTopLevelItem(item);
        refreshCharts();
        refreshStatus();
    });
    m_log = new QPlainTextEdit(this);
    m_log->setReadOnly(true);
    m_log->setMaximumBlockCount(2000);
    m_log->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    m_tabs = new QTabWidget(this);
    m_tabs->addTab(live, tr("Live"));
    m_tabs->addTab(m_runs, tr("Runs of this plan"));
    m_tabs->addTab(m_log, tr("Log"));

    auto *right = new QVBoxLayout;
    auto *head = new QHBoxLayout;
    head->addWidget(m_status, 1);
    head->addWidget(m_verdict);
    right->addLayout(head);
    right->addWidget(m_tabs, 1);
    auto *layout = new QHBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(left);
    layout->addLayout(right, 1);

    connect(m_launcher, &QComboBox::currentIndexChanged, this, &ExecutorPanel::onLauncherChanged);
    onLauncherChanged();
    refreshCharts();
}

void ExecutorPanel::onLauncherChanged()
{
    const auto kind = static_cast<LaunchTemplate::Kind>(m_launcher->currentData().toInt());
    if (kind != LaunchTemplate::Kind::Custom) {
        m_template->setText(LaunchTemplate::forKind(kind));
        m_template->setCursorPosition(0);
    }
    m_template->setReadOnly(kind != LaunchTemplate::Kind::Custom);
    m_nodes->setEnabled(kind != LaunchTemplate::Kind::LocalMpirun);
}

QString ExecutorPanel::findExecutable()
{
    const QString env = qEnvironmentVariable("TAPESTRY_EXEC");
    if (!env.isEmpty())
        return env;
    const QDir dir(QCoreApplication::applicationDirPath());
    for (const QString &candidate : {dir.filePath(QStringLiteral("../executor/tapestry-exec")),
                                     dir.filePath(QStringLiteral("tapestry-exec")),
                                     dir.filePath(QStringLiteral("../libexec/tapestry/tapestry-exec"))}) {
        const QFileInfo info(candidate);
        if (info.isFile() && info.isExecutable())
            return info.canonicalFilePath();
    }
    return {};
}

void ExecutorPanel::setPlan(const LoadedModel &model, const PlannedModel &planned)
{
    m_model = model;
    m_planned = planned;
    if (planned.plan) {
        // A pipeline's stages each on their copy of the mesh: a rank per device of every stage.
        const int stages = planned.plan->pipeline ? planned.plan->pipeline->stages : 1;
        m_ranks->setValue(stages * planned.plan->mesh.deviceCount());
        const QString mesh = QString::fromStdString(planned.plan->mesh.toString());
        m_planLabel->setText(tr("%1 plan on %2").arg(QString::fromStdString(planned.plan->method),
                                                     stages > 1 ? tr("%1 pipeline stages of %2").arg(stages).arg(mesh)
                                                                : mesh));
        m_source->setText(m_source->fontMetrics().elidedText(model.source, Qt::ElideMiddle, 380));
        m_source->setToolTip(model.source);
    } else {
        m_planLabel->setText(tr("No plan yet"));
        m_source->clear();
    }
    if (!isRunning()) {
        const auto it = m_history.find(planKey());
        m_shownRun = it == m_history.end() ? -1 : static_cast<int>(it->second.size()) - 1;
    }
    refreshHistory();
    refreshCharts();
    refreshStatus();
}

QString ExecutorPanel::planKey() const
{
    if (!m_planned.plan)
        return {};
    if (m_keyedPlan != m_planned.plan || m_keyedSource != m_model.source) {
        // What makes the plan, not its cost (which follows from it); hashed
        // without writing the plan file, as the studio's plan changes on
        // every edit.
        const plan::Plan &p = *m_planned.plan;
        QCryptographicHash hash(QCryptographicHash::Sha1);
        auto add = [&hash](const std::string &text) {
            hash.addData(QByteArrayView(text.data(), static_cast<qsizetype>(text.size())));
            hash.addData(QByteArrayView("\n", 1));
        };
        auto number = [](double v) { return QByteArray::number(v, 'g', 17).toStdString(); };
        add(p.model.fingerprint);
        add(p.method + (p.sequenceParallel ? " sequence-parallel" : ""));
        add(p.mesh.toString() + " " + p.mesh.profile + " " + p.mesh.device.name + " " +
            std::to_string(p.mesh.device.memoryBytes) + " " + number(p.mesh.device.achievableFraction));
        for (const auto &[dtype, flops] : p.mesh.device.peakFlops)
            add(dtype + " " + number(flops));
        for (const auto &axis : p.mesh.axes)
            add(axis.link.name + " " + number(axis.link.bandwidth) + " " + number(axis.link.latency));
        const auto &o = p.costOptions;
        add(number(o.parameterBytes) + " " + number(o.gradientBytes) + " " + number(o.optimizerBytes) + " " +
            number(o.optimizerFlopsPerParameter) + (o.overlap ? " overlap" : ""));
        for (const auto &[name, entry] : p.specs)
            add(name + " " + entry.spec.toPlacements() + " " + std::string(plan::toString(entry.source)));
        m_planKey = m_model.source + QLatin1Char('|') + QString::fromLatin1(hash.result().toHex());
        m_keyedPlan = m_planned.plan;
        m_keyedSource = m_model.source;
    }
    return m_planKey;
}

void ExecutorPanel::setLauncher(LaunchTemplate::Kind kind)
{
    m_launcher->setCurrentIndex(m_launcher->findData(static_cast<int>(kind)));
}

void ExecutorPanel::setCommandTemplate(const QString &text)
{
    setLauncher(LaunchTemplate::Kind::Custom);
    m_template->setText(text);
}

QString ExecutorPanel::commandTemplate() const
{
    return m_template->text();
}

void ExecutorPanel::setRanks(int ranks)
{
    m_ranks->setValue(ranks);
}

int ExecutorPanel::ranks() const
{
    return m_ranks->value();
}

void ExecutorPanel::setNodes(int nodes)
{
    m_nodes->setValue(nodes);
}

void ExecutorPanel::setSteps(int steps)
{
    m_steps->setValue(steps);
}

void ExecutorPanel::setBatch(int batch)
{
    m_batch->setValue(batch);
}

void ExecutorPanel::setVerify(bool verify)
{
    m_verify->setChecked(verify);
}

void ExecutorPanel::setStepTimeout(double seconds)
{
    m_stepTimeout->setValue(seconds);
}

void ExecutorPanel::setMeshProfile(const QString &nameOrPath)
{
    if (m_profile->findText(nameOrPath) < 0)
        m_profile->addItem(nameOrPath);
    m_profile->setCurrentText(nameOrPath);
}

void ExecutorPanel::setExecutable(const QString &path)
{
    m_executable->setText(path);
    m_executable->setCursorPosition(0);
}

QString ExecutorPanel::executable() const
{
    return m_executable->text().trimmed();
}

void ExecutorPanel::setBindAddress(const QString &address)
{
    m_bind->setText(address);
}

void ExecutorPanel::setAdvertisedHost(const QString &host)
{
    m_server->setAdvertisedHost(host);
}

LaunchValues ExecutorPanel::launchValues(const QStringList &args) const
{
    LaunchValues v;
    v.ranks = m_ranks->value();
    v.nodes = m_nodes->isEnabled() ? m_nodes->value() : 1;
    v.executable = executable();
    v.runningAsRoot = ::geteuid() == 0;
    v.cores = QThread::idealThreadCount();
    v.args = args;
    return v;
}

QStringList ExecutorPanel::command(QString *error) const
{
    LaunchValues v = launchValues({});
    v.args << QStringLiteral("--model") << m_model.source << QStringLiteral("--plan")
           << (m_workDir ? m_workDir->filePath(QStringLiteral("plan.json")) : QStringLiteral("plan.json"))
           << QStringLiteral("--steps") << QString::number(m_steps->value()) << QStringLiteral("--report")
           << (m_server->token().isEmpty() ? QStringLiteral("tcp://HOST:PORT") : m_server->reportAddress());
    if (m_verify->isChecked())
        v.args << QStringLiteral("--verify");
    if (m_stepTimeout->value() > 0)
        v.args << QStringLiteral("--step-timeout") << QString::number(m_stepTimeout->value());
    if (m_batch->value() > 0)
        v.args << QStringLiteral("--batch") << QString::number(m_batch->value());
    if (!m_profile->currentText().trimmed().isEmpty())
        v.args << QStringLiteral("--mesh-profile") << m_profile->currentText().trimmed();
    if (m_backend->currentText() != QLatin1String("cpu"))
        v.args << QStringLiteral("--backend") << m_backend->currentText();
    return expandLaunchTemplate(m_template->text(), v, error);
}

bool ExecutorPanel::isRunning() const
{
    return m_process && m_process->state() != QProcess::NotRunning;
}

bool ExecutorPanel::refuse(const QString &why)
{
    m_status->setText(why);
    log(why);
    return false;
}

bool ExecutorPanel::prepareLaunch()
{
    if (isRunning() || m_exited)
        return refuse(tr("A job is in progress: stop it first"));
    const QFileInfo exec(executable());
    if (!exec.isFile() || !exec.isExecutable())
        return refuse(executable().isEmpty() ? tr("tapestry-exec not found: give its path under Executor")
                                             : tr("%1: not an executable file").arg(executable()));
    const QHostAddress bind(m_bind->text().trimmed());
    if (bind.isNull())
        return refuse(tr("%1: not an IP address to listen on").arg(m_bind->text()));
    if (!m_server->isListening() || m_lastBind != bind) {
        if (!m_server->listen(bind))
            return refuse(tr("Cannot listen on %1: %2").arg(bind.toString(), m_server->errorString()));
        m_lastBind = bind;
    }
    return true;
}

bool ExecutorPanel::run()
{
    if (!m_planned.plan || !m_model.graph)
        return refuse(tr("No plan to run: open a model and derive a plan first"));
    if (!prepareLaunch())
        return false;
    // With a batch of its own the job loads the model at that batch: the
    // same specs (they are per tensor name) go with it, checked and costed
    // again on the new shapes, under the new model's fingerprint.
    plan::Plan runPlan = *m_planned.plan;
    std::shared_ptr<const ir::Graph> graph = m_model.graph;
    if (m_batch->value() > 0) {
        const std::string input = "batch " + std::to_string(m_batch->value());
        try {
            io::LoadOptions load;
            load.batch = m_batch->value();
            graph = std::make_shared<const ir::Graph>(io::loadModel(m_model.source.toStdString(), load));
            runPlan.model.fingerprint = plan::modelFingerprint(*graph);
            runPlan.model.ops = static_cast<std::int64_t>(graph->opCount());
            runPlan.model.tensors = static_cast<std::int64_t>(graph->tensorCount());
            plan::planSpecs(runPlan, *graph, input);  // refuses specs that do not fit the new shapes
            plan::recostPlan(runPlan, *graph, input);
        } catch (const std::exception &e) {
            return refuse(tr("The plan does not run at this batch: %1").arg(QString::fromUtf8(e.what())));
        }
    }
    m_workDir = std::make_unique<QTemporaryDir>();
    const QString planPath = m_workDir->filePath(QStringLiteral("plan.json"));
    try {
        plan::writePlanFile(planPath.toStdString(), runPlan);
    } catch (const std::exception &e) {
        return refuse(QString::fromUtf8(e.what()));
    }
    m_server->startRun();
    QString error;
    const QStringList cmd = command(&error);
    if (cmd.isEmpty()) {
        m_server->endRun();
        return refuse(tr("Launch command: %1").arg(error));
    }

    ExecutorRun record;
    record.id = m_nextId++;
    record.started = QDateTime::currentDateTime();
    record.command = cmd;
    record.ranks = m_ranks->value();
    record.predicted.profile = m_profile->currentText().trimmed();
    m_reader.emplace("tapestry-exec report");
    m_runKey = planKey();
    auto &runs = m_history[m_runKey];
    runs.push_back(record);
    m_shownRun = static_cast<int>(runs.size()) - 1;
    m_tabs->setCurrentIndex(0);
    refreshHistory();
    refreshCharts();
    refreshStatus();
    startJob(cmd, Job::Plan);
    emit runStarted();
    return true;
}

bool ExecutorPanel::calibrate(const QString &name)
{
    static const QRegularExpression word(QStringLiteral("^[A-Za-z0-9_.-]+$"));
    if (!word.match(name).hasMatch() || name.endsWith(QLatin1String(".json")))
        return refuse(tr("'%1': a profile name is letters, digits, '-', '_' or '.', without .json").arg(name));
    if (!prepareLaunch())
        return false;
    const QDir dir(QString::fromStdString(sharding::userMeshProfileDirectory()));
    if (!QDir().mkpath(dir.path()))
        return refuse(tr("%1: cannot create the folder for calibrated profiles").arg(dir.path()));
    m_calibrationName = name;
    m_calibrationPath = dir.filePath(name + QStringLiteral(".json"));
    QStringList args{QStringLiteral("--calibrate"), m_calibrationPath, QStringLiteral("--name"), name,
                     QStringLiteral("--report"), m_server->startRun()};
    // The kernel efficiency from a step of the studio's model itself, whole
    // on each rank, when that is small enough to run there; else the
    // executor's default workload.
    if (m_model.graph && m_model.graph->parameterCount() <= kCalibrationModelParameters) {
        args << QStringLiteral("--model") << m_model.source;
        if (m_batch->value() > 0)
            args << QStringLiteral("--batch") << QString::number(m_batch->value());
    }
    // The plan's mesh, when it has one device per rank, so that each of its
    // axes gets its own sweep.
    if (m_planned.plan && m_planned.plan->mesh.deviceCount() == m_ranks->value()) {
        QStringList sizes;
        for (const auto &axis : m_planned.plan->mesh.axes)
            sizes << QString::number(axis.size);
        args << QStringLiteral("--mesh") << sizes.join(QLatin1Char('x'));
    }
    QString error;
    const QStringList cmd = expandLaunchTemplate(m_template->text(), launchValues(args), &error);
    if (cmd.isEmpty()) {
        m_server->endRun();
        return refuse(tr("Launch command: %1").arg(error));
    }
    m_status->setText(tr("Calibrating on %1 ranks into %2…").arg(m_ranks->value()).arg(m_calibrationPath));
    m_tabs->setCurrentWidget(m_log);
    startJob(cmd, Job::Calibration);
    return true;
}

void ExecutorPanel::startJob(const QStringList &cmd, Job job)
{
    m_job = job;
    m_stopping = false;
    m_exited = false;
    m_stderrPartial.clear();
    m_stderrTail.clear();

    m_process = new QProcess(this);
    m_process->setProcessChannelMode(QProcess::SeparateChannels);
    auto env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("OPENBLAS_NUM_THREADS"), QStringLiteral("1"));
    // The run's token goes to rank 0 by the environment (the launch
    // templates pass it on with -x): a command line is readable by every
    // user of the machine.
    env.remove(QStringLiteral("TAPESTRY_REPORT_TOKEN"));
    if (!m_server->token().isEmpty())
        env.insert(QStringLiteral("TAPESTRY_REPORT_TOKEN"), m_server->token());
    m_process->setProcessEnvironment(env);
    // Its own process group, so that Stop's signal reaches mpirun (which
    // ends every rank it started) and not the studio; and SIGTERM when the
    // studio ends, however it ends, so that no job outlives it. A studio
    // gone before the modifier ran has made the child an orphan already.
    const pid_t studio = ::getpid();
    m_process->setChildProcessModifier([studio] {
        ::setpgid(0, 0);
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (::getppid() != studio)
            ::_exit(127);
    });
    QProcess *process = m_process;
    connect(process, &QProcess::readyReadStandardError, this, &ExecutorPanel::onStderr);
    connect(process, &QProcess::readyReadStandardOutput, this, [this, process] {
        for (const QByteArray &line : process->readAllStandardOutput().split('\n'))
            if (!line.trimmed().isEmpty())
                log(QString::fromUtf8(line));
    });
    connect(process, &QProcess::finished, this, &ExecutorPanel::onProcessFinished);
    connect(process, &QProcess::errorOccurred, this, [this, process](QProcess::ProcessError e) {
        if (e == QProcess::FailedToStart && process == m_process) {
            m_server->endRun();
            const QString why = tr("Cannot start %1: %2").arg(process->program(), process->errorString());
            if (m_job == Job::Plan)
                finishRun(ExecutorRun::State::Failed, why);
            else
                finishCalibration(why);
            process->deleteLater();
            m_process = nullptr;
            m_run->setEnabled(true);
            m_calibrate->setEnabled(true);
            m_stop->setEnabled(false);
        }
    });
    log(tr("$ %1").arg(cmd.join(QLatin1Char(' '))));
    m_run->setEnabled(false);
    m_calibrate->setEnabled(false);
    m_stop->setEnabled(true);
    process->start(cmd.front(), cmd.mid(1));
}

void ExecutorPanel::finishCalibration(const QString &failure)
{
    QString message = failure;
    if (message.isEmpty()) {
        try {
            const auto profile = sharding::loadMeshProfileFile(m_calibrationPath.toStdString());
            if (m_profile->findText(m_calibrationName) < 0)
                m_profile->addItem(m_calibrationName);
            m_profile->setCurrentText(m_calibrationName);
            message = tr("Calibrated '%1': %2 GFLOP/s per rank, achievable fraction %3, link latency %4 µs per "
                         "step, bus bandwidth %5 GB/s")
                          .arg(m_calibrationName)
                          .arg(profile.device.peakFlops.at("float32") * 1e-9, 0, 'f', 1)
                          .arg(profile.device.achievableFraction, 0, 'f', 2)
                          .arg(profile.intraNode.latency * 1e6, 0, 'f', 1)
                          .arg(profile.intraNode.bandwidth * 1e-9, 0, 'f', 2);
            log(message);
            m_status->setText(message);
            emit profileCalibrated(m_calibrationName, m_calibrationPath);
            return;
        } catch (const std::exception &e) {
            message = QString::fromUtf8(e.what());
        }
    }
    message = tr("Calibration failed: %1").arg(message);
    const QStringList lines = errorLines(m_stderrTail);
    log(message);
    m_status->setText(lines.isEmpty() ? message : message + QLatin1Char('\n') + lines.join(QLatin1Char('\n')));
    emit calibrationFailed(message);
}

void ExecutorPanel::stop()
{
    if (!isRunning())
        return;
    m_stopping = true;
    log(tr("Stopping the job (SIGTERM to its process group)"));
    m_jobProcesses = processTree(m_process->processId());
    ::kill(-static_cast<pid_t>(m_process->processId()), SIGTERM);
    m_killTimer->start(kKillGraceMs);
}

void ExecutorPanel::killJob()
{
    // The processes seen when Stop began, as well as those there now: a
    // rank whose launcher died first has a new parent.
    const auto pid = static_cast<pid_t>(m_process->processId());
    if (pid <= 1)
        return;
    QList<qint64> processes = m_jobProcesses;
    for (qint64 p : processTree(pid))
        if (!processes.contains(p))
            processes << p;
    ::kill(-pid, SIGKILL);
    for (qint64 p : processes)
        ::kill(static_cast<pid_t>(p), SIGKILL);
}

ExecutorRun *ExecutorPanel::current()
{
    auto it = m_history.find(m_runKey);
    if (m_runKey.isEmpty() || it == m_history.end() || it->second.isEmpty())
        return nullptr;
    return &it->second.back();
}

const ExecutorRun *ExecutorPanel::currentRun() const
{
    return const_cast<ExecutorPanel *>(this)->current();
}

QVector<ExecutorRun> ExecutorPanel::history() const
{
    const auto it = m_history.find(planKey());
    return it == m_history.end() ? QVector<ExecutorRun>() : it->second;
}

QString ExecutorPanel::statusText() const
{
    return m_status->text();
}

void ExecutorPanel::onMessage(const QJsonObject &message)
{
    if (m_job == Job::Calibration) {
        if (message.value(QLatin1String("event")).toString() == QLatin1String("error"))
            log(tr("tapestry-exec: %1").arg(message.value(QLatin1String("message")).toString()));
        return;  // the profile is read back from its file when the job ends
    }
    ExecutorRun *r = current();
    if (!r || r->state == ExecutorRun::State::Finished || r->state == ExecutorRun::State::Failed)
        return;
    // The report server parsed the line to check it; the typed reader the
    // CLI uses too reads it from there.
    std::optional<plan::ReportEvent> event;
    try {
        if (!m_reader)
            m_reader.emplace("tapestry-exec report");
        event = m_reader->read(nlohmann::json::parse(QJsonDocument(message).toJson(QJsonDocument::Compact).toStdString()));
    } catch (const std::exception &e) {
        log(tr("Report line dropped: %1").arg(QString::fromUtf8(e.what())));
        return;
    }
    if (!event)
        return;
    if (const auto *start = std::get_if<plan::ReportStart>(&*event)) {
        r->start = *start;
        r->state = ExecutorRun::State::Running;
        // The executor costs the plan it read on the profile it was given;
        // its prediction is the one to hold the measurement against.
        const plan::ReportPrediction &p = start->predicted;
        if (!p.meshProfile.empty())
            r->predicted.profile = QString::fromStdString(p.meshProfile);
        r->predicted.stepTime = p.stepTime;
        r->predicted.compute = p.compute;
        r->predicted.gemm = p.gemm;
        r->predicted.comm = p.comm;
        r->predicted.collectiveSeconds.clear();
        for (const auto &[kind, seconds] : p.collectiveSeconds)
            r->predicted.collectiveSeconds[kindName(QString::fromStdString(kind))] = seconds;
    } else if (const auto *step = std::get_if<plan::ReportStep>(&*event)) {
        const plan::StepFigures &f = step->figures;
        ExecutorStep s;
        s.step = step->step;
        s.totalSteps = step->steps;
        s.loss = step->loss;
        s.stepTime = f.stepTime;
        s.tokensPerSecond = f.tokensPerSecond;
        s.compute = f.gemm + f.otherKernels;
        s.gemm = f.gemm;
        s.comm = f.comm;
        for (const auto &[kind, totals] : f.collectives)
            s.collectiveSeconds[kindName(QString::fromStdString(kind))] = totals.seconds;
        r->steps.push_back(s);
        emit stepReceived(s.step, s.tokensPerSecond);
    } else if (const auto *summary = std::get_if<plan::ReportSummary>(&*event)) {
        r->summary = *summary;
        if (r->hasVerification())
            emit verificationReceived(r->verificationPassed());
    } else if (const auto *error = std::get_if<plan::ReportError>(&*event)) {
        log(tr("tapestry-exec: %1").arg(QString::fromStdString(error->message)));
    } else {
        return;
    }
    refreshCharts();
    refreshStatus();
}

void ExecutorPanel::onStderr()
{
    if (!m_process)
        return;
    m_stderrPartial += m_process->readAllStandardError();
    qsizetype nl;
    while ((nl = m_stderrPartial.indexOf('\n')) >= 0) {
        const QString line = QString::fromUtf8(m_stderrPartial.left(nl)).trimmed();
        m_stderrPartial.remove(0, nl + 1);
        if (line.isEmpty())
            continue;
        m_stderrTail << line;
        if (m_stderrTail.size() > kStderrTail)
            m_stderrTail.removeFirst();
        log(line);
    }
}

void ExecutorPanel::onProcessFinished(int exitCode, QProcess::ExitStatus status)
{
    onStderr();
    if (!m_stderrPartial.trimmed().isEmpty())
        m_stderrTail << QString::fromUtf8(m_stderrPartial).trimmed();
    m_stderrPartial.clear();
    m_killTimer->stop();
    m_exited = true;
    m_exitCode = status == QProcess::NormalExit ? exitCode : -1;
    m_run->setEnabled(true);
    m_calibrate->setEnabled(true);
    m_stop->setEnabled(false);
    // Rank 0's last lines may still be on their way through the socket: wait
    // for the report connection to close, a little at most.
    auto finalize = [this] {
        if (!m_exited)
            return;
        m_exited = false;
        if (m_job == Job::Calibration) {
            m_server->endRun();
            if (m_process) {
                m_process->deleteLater();
                m_process = nullptr;
            }
            finishCalibration(m_stopping ? tr("stopped") : m_exitCode != 0 ? tr("exit code %1").arg(m_exitCode)
                                                                           : QString());
            return;
        }
        ExecutorRun *r = current();
        const int code = m_exitCode;
        QString message;
        ExecutorRun::State state;
        if (m_stopping) {
            state = ExecutorRun::State::Stopped;
            message = tr("Stopped after %1 step(s)").arg(r ? r->steps.size() : 0);
        } else if (code == 0 && r && r->summary) {
            state = ExecutorRun::State::Finished;
            message = tr("Finished: %1 steps, %2 tokens/s, step %3 ms (predicted %4 ms)")
                          .arg(r->steps.size())
                          .arg(rate(r->tokensPerSecond()), ms(r->meanStepTime()), ms(r->predicted.stepTime));
        } else {
            state = ExecutorRun::State::Failed;
            const QString last = headline(m_stderrTail);
            message = code < 0 ? tr("Failed: the launcher crashed") : tr("Failed: exit code %1").arg(code);
            if (code == 0)
                message = tr("Failed: the job ended without a report summary");
            if (!last.isEmpty())
                message += QStringLiteral(" — ") + last;
        }
        finishRun(state, message);
        m_server->endRun();
        if (m_process) {
            m_process->deleteLater();
            m_process = nullptr;
        }
    };
    if (m_server->hasClient()) {
        auto *drain = new QTimer(this);
        drain->setSingleShot(true);
        connect(drain, &QTimer::timeout, this, finalize);
        connect(drain, &QTimer::timeout, drain, &QObject::deleteLater);
        connect(m_server, &ReportServer::clientDisconnected, drain, [finalize, drain] {
            finalize();
            drain->deleteLater();
        });
        drain->start(kReportDrainMs);
    } else {
        finalize();
    }
}

void ExecutorPanel::finishRun(ExecutorRun::State state, const QString &message)
{
    ExecutorRun *r = current();
    if (!r)
        return;
    r->state = state;
    r->exitCode = m_exitCode;
    r->message = message;
    if (state == ExecutorRun::State::Failed)
        r->errorLines = errorLines(m_stderrTail);
    log(message);
    refreshHistory();
    refreshCharts();
    refreshStatus();
    emit runFinished(*r);
}

void ExecutorPanel::log(const QString &line) const
{
    m_log->appendPlainText(QTime::currentTime().toString(QStringLiteral("HH:mm:ss  ")) + line);
}

void ExecutorPanel::refreshStatus()
{
    const auto runs = history();
    const ExecutorRun *r = m_shownRun >= 0 && m_shownRun < runs.size() ? &runs[m_shownRun] : nullptr;
    if (!r) {
        m_status->setText(m_planned.plan ? tr("Ready: %1 ranks").arg(m_ranks->value()) : tr("No plan yet"));
        m_verdict->clear();
        return;
    }
    QString text;
    if (r->state == ExecutorRun::State::Starting)
        text = tr("Run %1: starting %2 ranks…").arg(r->id).arg(r->ranks);
    else if (r->state == ExecutorRun::State::Running) {
        text = r->steps.isEmpty() ? tr("Run %1: %2 ranks running, verifying and warming up…").arg(r->id).arg(r->ranks)
                                  : tr("Run %1: step %2/%3 · %4 tokens/s · %5 ms per step")
                                        .arg(r->id)
                                        .arg(r->steps.back().step)
                                        .arg(r->steps.back().totalSteps)
                                        .arg(rate(r->steps.back().tokensPerSecond), ms(r->steps.back().stepTime));
    } else {
        text = tr("Run %1: %2").arg(r->id).arg(r->message);
        if (!r->errorLines.isEmpty())
            text += QLatin1Char('\n') + r->errorLines.join(QLatin1Char('\n'));
    }
    m_status->setText(text);
    if (r->hasVerification()) {
        const plan::ReportVerification &v = *r->summary->verification;
        m_verdict->setText(r->verificationPassed()
                               ? tr("<span style='color:#2e7d32;font-weight:bold'>✔ verification passed</span> "
                                    "<span style='color:#607d8b'>(largest error %1)</span>")
                                     .arg(v.maxRelativeError, 0, 'g', 2)
                               : tr("<span style='color:#c62828;font-weight:bold'>✘ verification FAILED</span> "
                                    "(%1 at %2)")
                                     .arg(v.maxRelativeError, 0, 'g', 3)
                                     .arg(QString::fromStdString(v.where).toHtmlEscaped()));
    } else {
        m_verdict->clear();
    }
}

void ExecutorPanel::refreshHistory()
{
    const auto runs = history();
    m_runs->blockSignals(true);
    m_runs->clear();
    for (const auto &r : runs) {
        const double measured = r.meanStepTime();
        auto *item = new QTreeWidgetItem(m_runs);
        item->setText(0, QString::number(r.id));
        item->setText(1, r.started.toString(QStringLiteral("HH:mm:ss")));
        item->setText(2, QString::number(r.ranks));
        item->setText(3, r.steps.isEmpty() ? QString() : rate(r.tokensPerSecond()));
        item->setText(4, measured > 0 ? ms(measured) : QString());
        item->setText(5, r.predicted.stepTime > 0 ? ms(r.predicted.stepTime) : QString());
        item->setText(6, measured > 0 && r.predicted.stepTime > 0
                             ? QString::number(100.0 * r.predicted.stepTime / measured, 'f', 0) + QLatin1Char('%')
                             : QString());
        item->setText(7, r.hasVerification() ? (r.verificationPassed() ? tr("passed") : tr("FAILED")) : QString());
        item->setText(8, r.exitCode >= 0 ? tr("%1 (exit %2)").arg(stateName(r.state)).arg(r.exitCode)
                                         : stateName(r.state));
        for (int c = 2; c <= 6; ++c)
            item->setTextAlignment(c, Qt::AlignRight | Qt::AlignVCenter);
    }
    if (m_shownRun >= 0 && m_shownRun < m_runs->topLevelItemCount())
        m_runs->setCurrentItem(m_runs->topLevelItem(m_shownRun));
    m_runs->blockSignals(false);
}

void ExecutorPanel::refreshCharts()
{
    const auto runs = history();
    const ExecutorRun *r = m_shownRun >= 0 && m_shownRun < runs.size() ? &runs[m_shownRun] : nullptr;
    if (!r || r->steps.isEmpty()) {
        const QString title = r ? tr("Waiting for the first step…") : tr("No run yet");
        setChart(m_throughput, emptyChart(tr("Throughput — %1").arg(title)));
        setChart(m_collectives, emptyChart(tr("Collectives per step")));
        setChart(m_comparison, emptyChart(tr("Predicted vs measured")));
        if (r && r->predicted.stepTime > 0) {
            setChart(m_comparison, comparisonChart(tr("Predicted vs measured (%1)").arg(r->predicted.profile),
                                                   partLabels(), partsOf(r->predicted), {0, 0, 0, 0, 0}));
        }
        return;
    }

    // Tokens/s (left axis) and step time (right axis) per step, with the
    // predicted step time as a dashed line.
    auto *chart = new QChart;
    chart->setTitle(tr("Throughput — run %1, %2 ranks").arg(r->id).arg(r->ranks));
    auto *tokens = new QLineSeries;
    tokens->setName(tr("tokens/s"));
    tokens->setPen(QPen(kThroughput, 2));
    auto *stepTime = new QLineSeries;
    stepTime->setName(tr("step ms"));
    stepTime->setPen(QPen(kStepTime, 2));
    double mostTokens = 0, mostMs = r->predicted.stepTime * 1e3;
    for (const auto &s : r->steps) {
        tokens->append(s.step, s.tokensPerSecond);
        stepTime->append(s.step, s.stepTime * 1e3);
        mostTokens = std::max(mostTokens, s.tokensPerSecond);
        mostMs = std::max(mostMs, s.stepTime * 1e3);
    }
    const int lastStep = std::max(r->steps.back().step, 2);
    chart->addSeries(tokens);
    chart->addSeries(stepTime);
    auto *x = new QValueAxis;
    x->setTitleText(tr("step"));
    x->setRange(1, lastStep);
    x->setLabelFormat(QStringLiteral("%d"));
    x->setTickCount(std::min(lastStep, 10));
    auto *yTokens = new QValueAxis;
    yTokens->setTitleText(tr("tokens/s"));
    yTokens->setRange(0, mostTokens * 1.15);
    yTokens->setLabelFormat(QStringLiteral("%.4g"));
    yTokens->setLinePenColor(kThroughput);
    auto *yMs = new QValueAxis;
    yMs->setTitleText(tr("ms"));
    yMs->setRange(0, mostMs * 1.15);
    yMs->setLabelFormat(QStringLiteral("%.3g"));
    yMs->setLinePenColor(kStepTime);
    chart->addAxis(x, Qt::AlignBottom);
    chart->addAxis(yTokens, Qt::AlignLeft);
    chart->addAxis(yMs, Qt::AlignRight);
    tokens->attachAxis(x);
    tokens->attachAxis(yTokens);
    stepTime->attachAxis(x);
    stepTime->attachAxis(yMs);
    if (r->predicted.stepTime > 0) {
        auto *predicted = new QLineSeries;
        predicted->setName(tr("predicted ms"));
        QPen pen(kStepTime, 1.5, Qt::DashLine);
        predicted->setPen(pen);
        predicted->append(1, r->predicted.stepTime * 1e3);
        predicted->append(lastStep, r->predicted.stepTime * 1e3);
        chart->addSeries(predicted);
        predicted->attachAxis(x);
        predicted->attachAxis(yMs);
    }
    setChart(m_throughput, chart);

    // Means over the steps so far, against the cost model.
    double compute = 0, gemm = 0, comm = 0, step = 0;
    QMap<QString, double> kinds;
    for (const auto &s : r->steps) {
        compute += s.compute;
        gemm += s.gemm;
        comm += s.comm;
        step += s.stepTime;
        for (auto it = s.collectiveSeconds.begin(); it != s.collectiveSeconds.end(); ++it)
            kinds[it.key()] += it.value();
    }
    const double n = r->steps.size();
    QStringList labels;
    QVector<double> predicted, measured;
    QMap<QString, double> allKinds = r->predicted.collectiveSeconds;
    for (auto it = kinds.begin(); it != kinds.end(); ++it)
        allKinds[it.key()] += 0;
    for (auto it = allKinds.begin(); it != allKinds.end(); ++it) {
        labels << it.key();
        predicted << r->predicted.collectiveSeconds.value(it.key());
        measured << kinds.value(it.key()) / n;
    }
    setChart(m_collectives, labels.isEmpty() ? emptyChart(tr("No collectives"))
                                             : comparisonChart(tr("Collectives per step"), labels, predicted, measured));
    setChart(m_comparison,
             comparisonChart(tr("Predicted (%1) vs measured").arg(r->predicted.profile), partLabels(),
                             partsOf(r->predicted),
                             {step / n, compute / n, gemm / n, (compute - gemm) / n, comm / n}));
}

} // namespace tapestry::views
