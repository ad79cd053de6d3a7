#pragma once
// What the export suites (tst_exports, tst_exportmegatron, tst_exportjax)
// make their plans with and run the CLI by.
#include "ir/graph.h"
#include "passes/coarsen.h"
#include "passes/prune.h"
#include "plan/plan.h"
#include "search/referenceplan.h"
#include "search/tapsearch.h"
#include "sharding/meshprofile.h"

#include <QProcess>
#include <QString>
#include <QStringList>

#include <cstdint>
#include <string>

namespace tapestry::testing {

// A mesh of `shape` ("8", "2x4") on the dgx-h100 profile, its axes named by default.
inline sharding::Mesh exportMesh(const std::string &shape)
{
    const auto sizes = sharding::parseMeshShape(shape);
    return sharding::findMeshProfile("dgx-h100").mesh(sizes, sharding::defaultAxisNames(sizes.size()));
}

// The plans the exports are checked on: a reference plan ("megatron",
// "megatron-sp", "dp") with `techniques`, or tap's ("tap") under
// `memoryBytes` of device memory (0: the profile's).
inline plan::Plan exportPlan(const ir::Graph &g, const std::string &source, const std::string &shape,
                             const std::string &method, std::int64_t memoryBytes = 0,
                             const cost::Techniques &techniques = {})
{
    sharding::Mesh m = exportMesh(shape);
    if (memoryBytes > 0)
        m.device.memoryBytes = memoryBytes;
    if (method == "tap") {
        const auto coarse = passes::Coarsen().run(g);
        return search::tapSearch(g, passes::Prune().run(g, coarse), source, m).plan;
    }
    search::ReferenceOptions options;
    options.sequenceParallel = method == "megatron-sp";
    options.cost.techniques = techniques;
    return search::referencePlan(g, source, m,
                                 method == "dp" ? search::ReferenceMethod::DataParallel
                                                : search::ReferenceMethod::Megatron,
                                 options);
}

struct Cli {
    int code;
    QString out, err;
};

// tapestry-cli with `args`, to its exit.
inline Cli runCli(const QStringList &args)
{
    QProcess p;
    p.start(QStringLiteral(TAPESTRY_CLI), args);
    p.waitForFinished(60000);
    return {p.exitCode(), QString::fromUtf8(p.readAllStandardOutput()), QString::fromUtf8(p.readAllStandardError())};
}

} // namespace tapestry::testing
