#include "graphpanel.h"
#include "imagefile.h"
#include "studiowindow.h"

#include <QApplication>
#include <QBuffer>
#include <QCommandLineParser>
#include <QTimer>

#include <iostream>
#include <string>

using tapestry::views::StudioWindow;
using tapestry::views::imageFormatFor;
using tapestry::views::writeImageFile;

namespace {

// Without a display, --screenshot, --help and --version still work (on
// Qt's offscreen platform); anything else says why it cannot open a window
// instead of Qt aborting with its platform plugin message.
bool prepareDisplay(int argc, char **argv)
{
    if (qEnvironmentVariableIsSet("QT_QPA_PLATFORM") || qEnvironmentVariableIsSet("DISPLAY") ||
        qEnvironmentVariableIsSet("WAYLAND_DISPLAY"))
        return true;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--screenshot" || arg.rfind("--screenshot=", 0) == 0 || arg == "--help" || arg == "-h" ||
            arg == "--help-all" || arg == "--version" || arg == "-v") {
            qputenv("QT_QPA_PLATFORM", "offscreen");
            return true;
        }
    }
    std::cerr << "tapestry: no display to open a window on (DISPLAY is not set); use tapestry-cli, or "
                 "tapestry MODEL --screenshot FILE.png to render the studio offscreen\n";
    return false;
}

} // namespace

int main(int argc, char **argv)
{
    if (!prepareDisplay(argc, argv))
        return 2;
    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("Tapestry"));
    QApplication::setApplicationName(QStringLiteral("Tapestry"));
    QApplication::setApplicationVersion(QStringLiteral("0.1.0"));

    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("Tapestry: tensor-parallel plan studio"));
    parser.addHelpOption();
    parser.addVersionOption();
    parser.addPositionalArgument(QStringLiteral("model"),
                                 QStringLiteral("model to open: zoo:NAME[?knobs], .onnx, .json, config.json, "
                                                "or a tapestry.plan file with its model (default zoo:gpt2)"),
                                 QStringLiteral("[MODEL]"));
    const QCommandLineOption screenshot(QStringLiteral("screenshot"),
                                        QStringLiteral("render the window to FILE.png once the model is shown, then exit"),
                                        QStringLiteral("FILE"));
    const QCommandLineOption select(QStringLiteral("select"),
                                    QStringLiteral("select the node or class block whose name contains NAME"),
                                    QStringLiteral("NAME"));
    const QCommandLineOption expand(QStringLiteral("expand"),
                                    QStringLiteral("expand the first block of class CLASS (an id from the class list)"),
                                    QStringLiteral("CLASS"));
    const QCommandLineOption mesh(QStringLiteral("mesh"), QStringLiteral("device mesh shape for the plan (8, 2x8, 4x2; name the axes of longer ones: \"2x2x2 (dp, tp, sp)\")"),
                                  QStringLiteral("SHAPE"));
    const QCommandLineOption method(QStringLiteral("plan"),
                                    QStringLiteral("how to make the plan: tap (default), megatron, dp, replicate"),
                                    QStringLiteral("METHOD"));
    const QCommandLineOption colour(QStringLiteral("colour"), QStringLiteral("colour nodes by class, sharding or cost"),
                                    QStringLiteral("MODE"));
    const QCommandLineOption lesson(QStringLiteral("lesson"),
                                    QStringLiteral("open lesson N of the Lessons menu (1: X·B·C column/row split, 2: MLP on 4x2, 3: the selected node of the open model's plan)"),
                                    QStringLiteral("N"));
    const QCommandLineOption show(QStringLiteral("show"),
                                  QStringLiteral("show a panel that starts hidden: charts, mesh, compare (repeatable)"),
                                  QStringLiteral("PANEL"));
    parser.addOptions({screenshot, select, expand, mesh, method, colour, lesson, show});
    parser.process(app);

    const QString model = parser.positionalArguments().value(0, QStringLiteral("zoo:gpt2"));
    const bool shooting = parser.isSet(screenshot);

    StudioWindow window;
    window.setQuietErrors(shooting);
    auto request = window.planRequest();
    if (parser.isSet(mesh))
        request.meshShape = parser.value(mesh);
    if (parser.isSet(method))
        request.method = parser.value(method);
    window.setPlanRequest(request);
    const QString colourMode = parser.value(colour);
    if (colourMode == QLatin1String("sharding"))
        window.setColouring(StudioWindow::Colouring::BySharding);
    else if (colourMode == QLatin1String("cost"))
        window.setColouring(StudioWindow::Colouring::ByCost);
    for (const QString &panel : parser.values(show)) {
        if (!window.showPanel(panel)) {
            std::cerr << "tapestry: --show " << panel.toStdString() << ": no such panel\n";
            return 2;
        }
    }
    window.show();

    // The screenshot waits until the layout is on screen and the plan settled.
    bool laidOut = false;
    bool shot = false;
    // A plan that failed (a malformed --mesh, a model that does not load) is
    // still shown, but the run exits 2: a script taking screenshots must see it.
    bool planFailed = false;
    auto shoot = [&] {
        if (!shooting || shot || !laidOut || window.isBusy())
            return;
        shot = true;
        QTimer::singleShot(50, &window, [&] {
            const QString file = parser.value(screenshot);
            QByteArray bytes;
            QBuffer buffer(&bytes);
            buffer.open(QIODevice::WriteOnly);
            QString error;
            const bool ok = window.grab().save(&buffer, imageFormatFor(file).constData()) &&
                            writeImageFile(file, bytes, &error);
            if (!ok)
                std::cerr << "tapestry: "
                          << (error.isEmpty() ? file + QStringLiteral(": cannot draw the screenshot") : error).toStdString()
                          << '\n';
            QApplication::exit(ok && !planFailed ? 0 : 2);
        });
    };
    QObject::connect(&window, &StudioWindow::planReady, &window, shoot);
    QObject::connect(&window, &StudioWindow::planFailed, &window, [&] {
        planFailed = true;
        shoot();
    });

    // After the model loads: expand (which lays out again), then select, then
    // take the screenshot once the last layout is on screen.
    bool expandPending = parser.isSet(expand);
    const bool ownLesson = parser.isSet(lesson) && parser.value(lesson).toInt() == 3;
    QObject::connect(&window, &StudioWindow::layoutReady, &window, [&] {
        if (expandPending) {
            expandPending = false;
            bool ok = false;
            const int cls = parser.value(expand).toInt(&ok);
            if (ok && window.expandClass(cls))
                return;  // another layoutReady follows
            std::cerr << "tapestry: --expand " << parser.value(expand).toStdString() << ": no such class block\n";
        }
        if (parser.isSet(select) && !window.selectByName(parser.value(select)))
            std::cerr << "tapestry: --select " << parser.value(select).toStdString() << ": nothing matches\n";
        // Lesson 3 narrates the open model's plan, once it is shown.
        if (ownLesson && !laidOut)
            window.openLesson(3);
        laidOut = true;
        shoot();
    });
    if (shooting)
        QObject::connect(&window, &StudioWindow::loadFailed, &window, [] { QApplication::exit(2); });
    if (parser.isSet(lesson) && !ownLesson)
        window.openLesson(parser.value(lesson).toInt());
    else
        if (!window.openDroppedFile(model))  // a plan file opens with its model
            window.openModel(model);
    return app.exec();
}
