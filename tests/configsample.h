#pragma once

// The Hugging Face config.json samples (samples/configs), edited for a test.

#include "io/files.h"

#include <QString>
#include <QTemporaryDir>

#include <nlohmann/json.hpp>

#include <string>

namespace tapestry::testing {

inline std::string configSample(const QString &file)
{
    return std::string(TAPESTRY_SOURCE_DIR) + "/samples/configs/" + file.toStdString();
}

// Writes samples/configs/FILE with `edits` applied as config.json in `dir`
// and returns its path. `edits` is a JSON object: each field is set to its
// value, and the fields listed under "-" are removed.
inline std::string editedConfig(const QTemporaryDir &dir, const QString &file, const QString &edits)
{
    auto config = nlohmann::json::parse(io::readFile(configSample(file)));
    const auto changes = nlohmann::json::parse(edits.toStdString());
    for (const auto &[field, value] : changes.items()) {
        if (field == "-")
            for (const auto &removed : value)
                config.erase(removed.get<std::string>());
        else
            config[field] = value;
    }
    const std::string path = dir.filePath(QStringLiteral("config.json")).toStdString();
    io::writeOutputFile(path, config.dump(2));
    return path;
}

} // namespace tapestry::testing
