#include "imagefile.h"

#include "io/files.h"
#include "ir/error.h"

#include <QFileInfo>
#include <QImageWriter>

#include <string_view>

namespace tapestry::views {

bool writeImageFile(const QString &path, const QByteArray &bytes, QString *error)
{
    try {
        io::writeOutputFile(path.toStdString(),
                            std::string_view(bytes.constData(), static_cast<std::size_t>(bytes.size())));
        return true;
    } catch (const TapestryError &e) {
        if (error)
            *error = QString::fromStdString(e.what());
        return false;
    }
}

QByteArray imageFormatFor(const QString &path)
{
    const QByteArray suffix = QFileInfo(path).suffix().toLower().toLatin1();
    return QImageWriter::supportedImageFormats().contains(suffix) ? suffix : QByteArrayLiteral("PNG");
}

} // namespace tapestry::views
