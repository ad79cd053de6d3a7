// The CUDA backend as far as a machine without a GPU can check it: the GEMM
// plan the cuBLAS path issues (executed here by a column-major reference
// GEMM and compared with the OpenBLAS kernels), local-rank device selection,
// the CUDA op kernels' rows against the op registry, the block logic the MPI
// and NCCL communicators share, and tapestry-exec's
// --backend handling. What needs a GPU (NCCL set-up, the self-test on
// device memory) is skipped with the reason when none is visible; the full
// GPU verification suite is tests/gpu/run.sh.
#include "processrun.h"
#include "collectives.h"
#include "kernels/matmul.h"

#ifdef TAPESTRY_HAVE_CUDA
#include "cuda/cudabackend.h"
#include "cuda/gemmplan.h"
#include "cuda/localrank.h"
#include "cuda/launch.h"
#include "cuda/opkernels.h"
#endif

#include "ir/error.h"

#include <QProcess>
#include <QtTest>

#include <cmath>
#include <map>
#include <random>
#include <set>

using namespace tapestry;
using namespace tapestry::exec;

namespace {

using Run = tapestry::testing::ProcessRun;

Run mpirun(int ranks, const QStringList &execArgs)
{
    // TAPESTRY_EXEC in the environment names the executor of a build
    // unpacked elsewhere (tests/gpu/pack.sh on a GPU machine).
    const QString exec = qEnvironmentVariable("TAPESTRY_EXEC", QStringLiteral(TAPESTRY_EXEC));
    return tapestry::testing::runProcess(QStringLiteral("mpirun"),
                                         QStringList{QStringLiteral("--oversubscribe"), QStringLiteral("-np"),
                                                     QString::number(ranks), exec} +
                                             execArgs,
                                         120000);
}

QStringList ourLines(const QByteArray &err)
{
    QStringList lines;
    for (const QByteArray &line : err.split('\n'))
        if (line.startsWith("tapestry-exec:"))
            lines << QString::fromUtf8(line);
    return lines;
}

#ifdef TAPESTRY_HAVE_CUDA
std::vector<float> randomValues(std::int64_t n, unsigned seed)
{
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float &x : v)
        x = dist(gen);
    return v;
}

std::int64_t count(const ir::Shape &s)
{
    std::int64_t n = 1;
    for (auto d : s)
        n *= d;
    return n;
}

// cublasGemmEx / cublasGemmStridedBatchedEx on the host: column-major,
// C = op(A)·op(B) + beta·C, alpha 1.
void columnMajorGemm(const gpu::GemmOp &g, const float *first, const float *second, float *out)
{
    for (std::int64_t b = 0; b < g.batch; ++b) {
        const float *A = first + g.firstOffset + b * g.strideFirst;
        const float *B = second + g.secondOffset + b * g.strideSecond;
        float *C = out + g.outOffset + b * g.strideOut;
        for (std::int64_t i = 0; i < g.m; ++i)
            for (std::int64_t j = 0; j < g.n; ++j) {
                double sum = 0.0;
                for (std::int64_t p = 0; p < g.k; ++p) {
                    const float a = g.transFirst ? A[p + i * g.ldFirst] : A[i + p * g.ldFirst];
                    const float bb = g.transSecond ? B[j + p * g.ldSecond] : B[p + j * g.ldSecond];
                    sum += static_cast<double>(a) * bb;
                }
                C[i + j * g.ldOut] = static_cast<float>(sum + g.beta * C[i + j * g.ldOut]);
            }
    }
}

double maxDifference(const std::vector<float> &x, const std::vector<float> &y)
{
    double worst = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i)
        worst = std::max(worst, std::fabs(static_cast<double>(x[i]) - y[i]));
    return worst;
}

// Skips a test that needs a GPU where none is visible, saying why.
#define TAPESTRY_SKIP_WITHOUT_GPU()                                                                                    \
    do {                                                                                                               \
        if (visibleGpuCount() == 0)                                                                                    \
            QSKIP(qPrintable(QStringLiteral("skipped: no GPU (%1); tests/gpu/run.sh runs the GPU suite where one is") \
                                 .arg(QString::fromStdString(whyNoGpu()))));                                            \
    } while (false)
#endif

} // namespace

class TestCudaBackend : public QObject {
    Q_OBJECT

private slots:
    void gemmPlanMatchesOpenBlas_data();
    void gemmPlanMatchesOpenBlas();
    void localRankFromLauncher();
    void cudaKernelsNameRegistryEntries();
    void collectiveBlockChecks();
    void backendChoiceWithoutGpu();
    void ncclCollectivesOnGpu();
    void reductionKernelsOnGpu_data();
    void reductionKernelsOnGpu();
};

void TestCudaBackend::gemmPlanMatchesOpenBlas_data()
{
    QTest::addColumn<ir::Shape>("a");
    QTest::addColumn<ir::Shape>("b");
    QTest::addColumn<ir::Shape>("out");
    QTest::addColumn<bool>("transB");
    QTest::newRow("x·W") << ir::Shape{2, 3, 4} << ir::Shape{4, 5} << ir::Shape{2, 3, 5} << false;
    QTest::newRow("q·kᵀ batched") << ir::Shape{2, 3, 4, 5} << ir::Shape{2, 3, 5, 4} << ir::Shape{2, 3, 4, 4} << false;
    QTest::newRow("b broadcast") << ir::Shape{3, 4, 5} << ir::Shape{1, 5, 2} << ir::Shape{3, 4, 2} << false;
    QTest::newRow("a broadcast") << ir::Shape{4, 5} << ir::Shape{3, 5, 2} << ir::Shape{3, 4, 2} << false;
    // A tied head: the embedding [vocab, h] read as its transpose.
    QTest::newRow("x·Wᵀ stored [N,K]") << ir::Shape{2, 3, 4} << ir::Shape{5, 4} << ir::Shape{2, 3, 5} << true;
}

// The cuBLAS calls of the cuda backend's matmul, run by a host reference of
// cuBLAS's column-major GEMM, give OpenBLAS's row-major results: forward and
// both gradients (accumulated into non-zero buffers).
void TestCudaBackend::gemmPlanMatchesOpenBlas()
{
#ifndef TAPESTRY_HAVE_CUDA
    QSKIP("skipped: built without CUDA (the GEMM plan is part of the cuda backend)");
#else
    QFETCH(ir::Shape, a);
    QFETCH(ir::Shape, b);
    QFETCH(ir::Shape, out);
    QFETCH(bool, transB);
    auto av = randomValues(count(a), 1), bv = randomValues(count(b), 2), dv = randomValues(count(out), 3);
    std::vector<float> refOut(static_cast<std::size_t>(count(out))), gpuOut(refOut.size(), 7.0f);
    kernels::matmulForward({refOut.data(), out}, {av.data(), a}, {bv.data(), b}, transB);
    for (const gpu::GemmOp &g : gpu::planMatmulForward(out, a, b, transB))
        columnMajorGemm(g, g.first == gpu::GemmOp::Operand::A ? av.data() : bv.data(),
                        g.second == gpu::GemmOp::Operand::A ? av.data() : bv.data(), gpuOut.data());
    QVERIFY(maxDifference(refOut, gpuOut) < 1e-5);

    auto refDa = randomValues(count(a), 4), refDb = randomValues(count(b), 5);
    auto gpuDa = refDa, gpuDb = refDb;
    kernels::matmulBackward({dv.data(), out}, {av.data(), a}, {bv.data(), b}, {refDa.data(), a},
                            {refDb.data(), b}, transB);
    auto ptr = [&](gpu::GemmOp::Operand o) {
        return o == gpu::GemmOp::Operand::A ? av.data() : o == gpu::GemmOp::Operand::B ? bv.data() : dv.data();
    };
    for (const gpu::GemmOp &g : gpu::planMatmulBackward(out, a, b, true, true, transB))
        columnMajorGemm(g, ptr(g.first), ptr(g.second), g.outIsDa ? gpuDa.data() : gpuDb.data());
    QVERIFY(maxDifference(refDa, gpuDa) < 1e-5);
    QVERIFY(maxDifference(refDb, gpuDb) < 1e-5);
    // The GEMM count the metrics report matches what the cuBLAS path issues.
    std::int64_t planned = 0, counted = 0;
    for (const gpu::GemmOp &g : gpu::planMatmulForward(out, a, b, transB))
        planned += g.batch;
    for (const kernels::GemmCall &c : kernels::matmulGemms(out, a, b, false, true, true, transB))
        counted += c.count;
    QCOMPARE(planned, counted);
#endif
}

// CUDA kernels register under an op registry entry's name: a row under a
// name the registry lacks would never run, and a row without both kernels
// would be taken for an op a GPU cannot run.
void TestCudaBackend::cudaKernelsNameRegistryEntries()
{
#ifndef TAPESTRY_HAVE_CUDA
    QSKIP("skipped: built without CUDA (the op kernels are part of the cuda backend)");
#else
    std::set<std::string_view> names;
    for (const OpDef &def : opRegistry())
        names.insert(def.name);
    QVERIFY(!cudaOpKernels().empty());
    for (const auto &[name, kernels] : cudaOpKernels()) {
        QVERIFY2(names.count(name), std::string(name).c_str());
        QVERIFY2(bool(kernels), std::string(name).c_str());
    }
#endif
}

void TestCudaBackend::localRankFromLauncher()
{
#ifndef TAPESTRY_HAVE_CUDA
    QSKIP("skipped: built without CUDA (device selection is part of the cuda backend)");
#else
    auto from = [](std::map<std::string, std::string> env) {
        return [env = std::move(env)](const char *name) -> const char * {
            auto it = env.find(name);
            return it == env.end() ? nullptr : it->second.c_str();
        };
    };
    QCOMPARE(gpu::localRankFromEnvironment(from({{"OMPI_COMM_WORLD_LOCAL_RANK", "3"}, {"SLURM_LOCALID", "1"}})),
             std::optional<int>(3));
    QCOMPARE(gpu::localRankFromEnvironment(from({{"SLURM_LOCALID", "2"}})), std::optional<int>(2));
    std::string skipped;
    QCOMPARE(gpu::localRankFromEnvironment(from({{"OMPI_COMM_WORLD_LOCAL_RANK", "x"}, {"SLURM_LOCALID", "1"}}),
                                           &skipped),
             std::optional<int>(1));
    QCOMPARE(skipped, std::string("OMPI_COMM_WORLD_LOCAL_RANK='x'"));
    QCOMPARE(gpu::localRankFromEnvironment(from({})), std::optional<int>());
    // One GPU per rank while there are enough, then shared.
    QCOMPARE(gpu::deviceForLocalRank(1, 8), 1);
    QCOMPARE(gpu::deviceForLocalRank(5, 4), 1);
    QCOMPARE(gpu::deviceForLocalRank(3, 1), 0);
#endif
}

// The shape checks both communicators run before any communication.
void TestCudaBackend::collectiveBlockChecks()
{
    QVERIFY(collective::blocksContiguous({1, 1, 6}, 2));
    QVERIFY(!collective::blocksContiguous({2, 6}, 1));
    std::int64_t first = 0;
    const kernels::StridedBlock b = collective::blockAlong({4, 6}, 1, 3, first, 2);
    QCOMPARE(first, std::int64_t(4));
    QCOMPARE(b.shape[0], std::int64_t(4));
    QCOMPARE(b.shape[1], std::int64_t(2));
    QCOMPARE(b.srcStride[0], std::int64_t(6));
    QCOMPARE(b.dstStride[0], std::int64_t(2));
    try {
        collective::checkBlocks("all-gather", {2, 3}, {2, 7}, 1, 2);
        QFAIL("a mismatched gather was accepted");
    } catch (const TapestryError &e) {
        QVERIFY2(std::string(e.what()).find("do not match along dim 1 over 2 ranks") != std::string::npos, e.what());
    }
    try {
        collective::checkAllToAll({3, 4}, {1, 12}, 0, 1, 2);
        QFAIL("an uneven all-to-all was accepted");
    } catch (const TapestryError &e) {
        QVERIFY2(std::string(e.what()).find("cannot cut [3, 4] into 2 blocks") != std::string::npos, e.what());
    }
}

// Without a GPU (or without CUDA built in), --backend cuda is one clear
// line and exit 2 on rank 0, and the default falls back to the CPU.
void TestCudaBackend::backendChoiceWithoutGpu()
{
#ifdef TAPESTRY_HAVE_CUDA
    if (visibleGpuCount() > 0)
        QSKIP("skipped: a GPU is visible, so the cuda backend runs (ncclCollectivesOnGpu checks it)");
#endif
    const Run r = mpirun(2, {QStringLiteral("--self-test"), QStringLiteral("collectives"), QStringLiteral("--mesh"),
                             QStringLiteral("2"), QStringLiteral("--backend"), QStringLiteral("cuda")});
    QCOMPARE(r.exitCode, 2);
    QVERIFY(r.out.isEmpty());
    const QStringList lines = ourLines(r.err);
    QCOMPARE(lines.size(), 1);
    QVERIFY2(lines[0].startsWith(QStringLiteral("tapestry-exec: --backend cuda: ")), qPrintable(lines[0]));

    const Run bad = mpirun(1, {QStringLiteral("--self-test"), QStringLiteral("collectives"), QStringLiteral("--mesh"),
                               QStringLiteral("1"), QStringLiteral("--backend"), QStringLiteral("gpu")});
    QCOMPARE(bad.exitCode, 2);
    QCOMPARE(ourLines(bad.err), QStringList{QStringLiteral("tapestry-exec: --backend expects cpu or cuda, got 'gpu'")});

    const Run fallback = mpirun(2, {QStringLiteral("--self-test"), QStringLiteral("collectives"),
                                    QStringLiteral("--mesh"), QStringLiteral("2")});
    QVERIFY2(fallback.exitCode == 0, fallback.err.constData());
    QVERIFY(fallback.out.contains("\"ok\":true"));
}

// NCCL communicators per mesh axis (and the host-staged fallback when ranks
// share a GPU) through the collectives self-test on device memory.
void TestCudaBackend::ncclCollectivesOnGpu()
{
#ifndef TAPESTRY_HAVE_CUDA
    QSKIP("skipped: built without CUDA");
#else
    TAPESTRY_SKIP_WITHOUT_GPU();
    const Run r = mpirun(2, {QStringLiteral("--self-test"), QStringLiteral("collectives"), QStringLiteral("--mesh"),
                             QStringLiteral("2"), QStringLiteral("--backend"), QStringLiteral("cuda")});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    QVERIFY(r.out.contains("\"event\":\"self_test_summary\""));
    QVERIFY(!r.out.contains("\"ok\":false"));
#endif
}

// The gradients that sum over broadcast dims (a bias's over every token, a
// norm's weight and bias over every row) against a double-precision host sum:
// few outputs over many rows split the sum into chunks added atomically, many
// outputs keep one thread each.
void TestCudaBackend::reductionKernelsOnGpu_data()
{
    QTest::addColumn<qint64>("rows");
    QTest::addColumn<qint64>("cols");
    QTest::newRow("bias 4096 x 1024 (split)") << qint64(4096) << qint64(1024);
    QTest::newRow("odd 1001 x 37 (split)") << qint64(1001) << qint64(37);
    QTest::newRow("short 7 x 300000 (whole)") << qint64(7) << qint64(300000);
}

void TestCudaBackend::reductionKernelsOnGpu()
{
#ifndef TAPESTRY_HAVE_CUDA
    QSKIP("skipped: built without CUDA");
#else
    TAPESTRY_SKIP_WITHOUT_GPU();
    QFETCH(qint64, rows);
    QFETCH(qint64, cols);
    const auto dout = randomValues(rows * cols, 1), x = randomValues(rows * cols, 2), w = randomValues(cols, 3);
    std::vector<float> mean(static_cast<std::size_t>(rows)), rstd(static_cast<std::size_t>(rows));
    for (std::int64_t r = 0; r < rows; ++r) {
        mean[static_cast<std::size_t>(r)] = 0.01f * static_cast<float>(r % 7);
        rstd[static_cast<std::size_t>(r)] = 1.0f + 0.001f * static_cast<float>(r % 13);
    }
    auto upload = [](const std::vector<float> &v) {
        float *d = nullptr;
        cudaMalloc(reinterpret_cast<void **>(&d), v.size() * sizeof(float));
        cudaMemcpy(d, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice);
        return d;
    };
    auto download = [](const float *d, std::int64_t n) {
        std::vector<float> v(static_cast<std::size_t>(n));
        cudaMemcpy(v.data(), d, v.size() * sizeof(float), cudaMemcpyDeviceToHost);
        return v;
    };
    float *dDout = upload(dout), *dX = upload(x), *dW = upload(w), *dMean = upload(mean), *dRstd = upload(rstd);
    const std::vector<float> ones(static_cast<std::size_t>(cols), 1.0f);
    float *gBias = upload(ones), *gMul = upload(ones), *gWeight = upload(ones), *gNormBias = upload(ones);

    // out = x + bias and out = x * w, w broadcast over the rows: operand 1's gradient.
    gpu::Broadcast l;
    l.rank = 2;
    l.shape[0] = rows, l.shape[1] = cols;
    l.out[0] = cols, l.out[1] = 1;
    l.a[0] = cols, l.a[1] = 1;
    l.b[0] = 0, l.b[1] = 1;
    gpu::binaryBackward(nullptr, gpu::Binary::Add, 1, l, dDout, dX, dW, gBias, cols);
    gpu::binaryBackward(nullptr, gpu::Binary::Mul, 1, l, dDout, dX, dW, gMul, cols);
    gpu::normBackward(nullptr, dDout, dX, dW, dMean, dRstd, nullptr, gWeight, gNormBias, rows, cols);
    // A column broadcast along the last dim (strides [1, 0]): read through the strides.
    const std::vector<float> rowOnes(static_cast<std::size_t>(rows), 1.0f);
    float *gColumn = upload(rowOnes);
    gpu::Broadcast column = l;
    column.b[0] = 1, column.b[1] = 0;
    gpu::binaryBackward(nullptr, gpu::Binary::Mul, 1, column, dDout, dX, dW, gColumn, rows);
    QCOMPARE(cudaDeviceSynchronize(), cudaSuccess);
    const auto columnGrad = download(gColumn, rows);
    cudaFree(gColumn);
    for (std::int64_t r = 0; r < rows; ++r) {
        double sum = 1.0, scale = 1.0;
        for (std::int64_t c = 0; c < cols; ++c) {
            const auto i = static_cast<std::size_t>(r * cols + c);
            sum += static_cast<double>(dout[i]) * x[i];
            scale += std::fabs(static_cast<double>(dout[i]) * x[i]);
        }
        QVERIFY2(std::fabs(columnGrad[static_cast<std::size_t>(r)] - sum) / scale < 1e-5,
                 qPrintable(QStringLiteral("column gradient, row %1").arg(r)));
    }
    const auto bias = download(gBias, cols), mul = download(gMul, cols), weight = download(gWeight, cols),
               normBias = download(gNormBias, cols);
    double worst = 0.0;
    for (std::int64_t c = 0; c < cols; ++c) {
        double sb = 1.0, sm = 1.0, sw = 1.0, scale = 1.0;
        for (std::int64_t r = 0; r < rows; ++r) {
            const auto i = static_cast<std::size_t>(r * cols + c), ri = static_cast<std::size_t>(r);
            sb += dout[i];
            sm += static_cast<double>(dout[i]) * x[i];
            sw += static_cast<double>(dout[i]) * (x[i] - mean[ri]) * rstd[ri];
            scale += std::fabs(static_cast<double>(dout[i]));
        }
        const auto ci = static_cast<std::size_t>(c);
        for (const auto &[got, want] : {std::pair{bias[ci], sb}, std::pair{mul[ci], sm}, std::pair{weight[ci], sw},
                                        std::pair{normBias[ci], sb}})
            worst = std::max(worst, std::fabs(got - want) / scale);
    }
    for (float *d : {dDout, dX, dW, dMean, dRstd, gBias, gMul, gWeight, gNormBias})
        cudaFree(d);
    QVERIFY2(worst < 1e-5, qPrintable(QStringLiteral("worst error %1 relative to the sum of |terms|").arg(worst)));
#endif
}

QTEST_GUILESS_MAIN(TestCudaBackend)
#include "tst_cudabackend.moc"
