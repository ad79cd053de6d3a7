#include "graphpanel.h"
#include "studiowindow.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QTimer>

#include <iostream>

using tapestry::views::StudioWindow;

int main(int argc, char **argv)
{
    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("Tapestry"));
    QApplication::setApplicationName(QStringLiteral("Tapestry"));
    QApplication::setApplicationVersion(QStringLiteral("0.1.0"));

    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("Tapestry: tensor-parallel plan studio"));
    parser.addHelpOption();
    parser.addVersionOption();
    parser.addPositionalArgument(QStringLiteral("model"),
                                 QStringLiteral("model to open: zoo:NAME[?knobs], .onnx, .json, config.json "
                                                "(default zoo:gpt2)"),
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
    parser.addOptions({screenshot, select, expand});
    parser.process(app);

    const QString model = parser.positionalArguments().value(0, QStringLiteral("zoo:gpt2"));
    const bool shooting = parser.isSet(screenshot);

    StudioWindow window;
    window.setQuietErrors(shooting);
    window.show();

    // After the model loads: expand (which lays out again), then select, then
    // take the screenshot once the last layout is on screen.
    bool expandPending = parser.isSet(expand);
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
        if (shooting) {
            QTimer::singleShot(50, &window, [&] {
                const QString file = parser.value(screenshot);
                const bool ok = window.grab().save(file);
                if (!ok)
                    std::cerr << "tapestry: " << file.toStdString() << ": cannot write the screenshot\n";
                QApplication::exit(ok ? 0 : 2);
            });
        }
    });
    if (shooting)
        QObject::connect(&window, &StudioWindow::loadFailed, &window, [] { QApplication::exit(2); });
    window.openModel(model);
    return app.exec();
}
