#pragma once

#include <QByteArray>
#include <QString>

namespace tapestry::views {

// Writes an image drawn into memory to `path` through io::writeOutputFile:
// whole or not at all, an existing image kept until the new one replaces it.
// On failure `error` (when given) gets the one line saying why.
bool writeImageFile(const QString &path, const QByteArray &bytes, QString *error);

// The image format Qt writes for `path`'s suffix ("PNG" unless .jpg, .bmp, ...).
QByteArray imageFormatFor(const QString &path);

} // namespace tapestry::views
