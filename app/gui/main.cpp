#include "modelsummaryview.h"

#include "io/modelloader.h"
#include "ir/error.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QMainWindow>
#include <QMessageBox>
#include <QTimer>

#include <iostream>

int main(int argc, char **argv)
{
    QApplication app(argc, argv);
    QApplication::setApplicationName(QStringLiteral("Tapestry"));
    QApplication::setApplicationVersion(QStringLiteral("0.1.0"));

    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("Tapestry: tensor-parallel plan studio"));
    parser.addHelpOption();
    parser.addVersionOption();
    parser.addPositionalArgument(QStringLiteral("model"),
                                 QStringLiteral("model to open (zoo:NAME, .json, .onnx, config.json)"),
                                 QStringLiteral("[MODEL]"));
    QCommandLineOption screenshot(QStringLiteral("screenshot"),
                                  QStringLiteral("render the window to FILE.png and exit"),
                                  QStringLiteral("FILE"));
    parser.addOption(screenshot);
    parser.process(app);

    const QString model =
        parser.positionalArguments().value(0, QStringLiteral("zoo:gpt2"));

    QMainWindow window;
    window.setWindowTitle(QStringLiteral("Tapestry — %1").arg(model));
    auto *summary = new tapestry::views::ModelSummaryView(&window);
    window.setCentralWidget(summary);
    window.resize(1000, 700);
    try {
        summary->setGraph(tapestry::io::loadModel(model.toStdString()), model);
    } catch (const tapestry::TapestryError &e) {
        if (parser.isSet(screenshot)) {
            std::cerr << "tapestry: " << e.what() << '\n';
            return 2;
        }
        QMessageBox::critical(&window, QStringLiteral("Tapestry"), QString::fromStdString(e.what()));
    }
    window.show();
    if (parser.isSet(screenshot)) {
        const QString file = parser.value(screenshot);
        QTimer::singleShot(100, &window, [&window, file] {
            const bool ok = window.grab().save(file);
            if (!ok)
                std::cerr << "tapestry: cannot write screenshot " << file.toStdString() << '\n';
            QApplication::exit(ok ? 0 : 2);
        });
    }
    return app.exec();
}
