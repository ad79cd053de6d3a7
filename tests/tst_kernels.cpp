// Executor kernels and the single-process interpreter: every kernel's
// backward against central finite differences, training of the teaching
// models, gradient spot checks on a tiny GPT, deterministic initialisation.
#include "device.h"
#include "initializer.h"
#include "interpreter.h"
#include "kernels/activation.h"
#include "kernels/binary.h"
#include "kernels/crossentropy.h"
#include "kernels/gather.h"
#include "kernels/layernorm.h"
#include "kernels/layout.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "kernels/softmax.h"
#include "kernels/strided.h"
#include "kernels/vocabparallel.h"

#include "cost/costmodel.h"
#include "io/modelloader.h"
#include "io/zoo/graphbuilder.h"
#include "sharding/meshprofile.h"
#include "ir/error.h"

#include <QtTest>

#include <cmath>
#include <vector>
#include <limits>
#include <algorithm>
#include <functional>
#include <memory>
#include <random>

using namespace tapestry;
using namespace tapestry::exec;
using Views = std::vector<TensorView>;

namespace {

std::int64_t count(const ir::Shape &s)
{
    std::int64_t n = 1;
    for (auto d : s)
        n *= d;
    return n;
}

// A kernel under test: float inputs and outputs of fixed shapes, a forward
// and a backward (which adds into the input gradients). The objective is
// Σ w·out for fixed random w, so the backward gets dout = w.
struct KernelCase {
    std::vector<ir::Shape> inputs;
    std::vector<ir::Shape> outputs;
    std::function<void(const Views &out, const Views &in)> forward;
    std::function<void(const Views &dout, const Views &in, const Views &out, const Views &din)> backward;
    bool awayFromZero = false;  // inputs kept off kinks and poles (ReLU at 0, 1/x)
};

struct Buffers {
    std::vector<std::vector<float>> data;
    Views views;
    explicit Buffers(const std::vector<ir::Shape> &shapes)
    {
        for (const auto &s : shapes)
            data.emplace_back(static_cast<std::size_t>(count(s)), 0.0f);
        for (std::size_t i = 0; i < shapes.size(); ++i)
            views.push_back({data[i].data(), shapes[i]});
    }
};

// Saved statistics a case's forward writes and its backward reads.
std::shared_ptr<std::vector<float>> scratch(std::size_t n)
{
    return std::make_shared<std::vector<float>>(n, 0.0f);
}

KernelCase binaryCase(kernels::BinaryOp op, ir::Shape a, ir::Shape b, ir::Shape out)
{
    return {{a, b}, {out},
            [op](const Views &o, const Views &i) { kernels::binaryForward(op, o[0], i[0], i[1]); },
            [op](const Views &g, const Views &i, const Views &, const Views &d) {
                kernels::binaryBackward(op, g[0], i[0], i[1], d[0], d[1]);
            },
            op == kernels::BinaryOp::Div};
}

KernelCase matmulCase(ir::Shape a, ir::Shape b, ir::Shape out)
{
    return {{a, b}, {out},
            [](const Views &o, const Views &i) { kernels::matmulForward(o[0], i[0], i[1]); },
            [](const Views &g, const Views &i, const Views &, const Views &d) {
                kernels::matmulBackward(g[0], i[0], i[1], d[0], d[1]);
            }};
}

std::map<QString, std::function<KernelCase()>> kernelCases()
{
    using kernels::BinaryOp;
    using kernels::GeluForm;
    std::map<QString, std::function<KernelCase()>> c;
    c["matmul 2d"] = [] { return matmulCase({3, 4}, {4, 5}, {3, 5}); };
    c["matmul x[b,s,h]·W[h,o]"] = [] { return matmulCase({2, 3, 4}, {4, 5}, {2, 3, 5}); };
    c["matmul q·kT [b,a,s,d]x[b,a,d,s]"] = [] {
        return matmulCase({2, 2, 3, 4}, {2, 2, 4, 3}, {2, 2, 3, 3});
    };
    c["matmul broadcast batch"] = [] { return matmulCase({2, 1, 3, 4}, {1, 2, 4, 3}, {2, 2, 3, 3}); };
    c["matmul shared left operand"] = [] { return matmulCase({3, 4}, {2, 4, 2}, {2, 3, 2}); };
    c["add same shape"] = [] { return binaryCase(BinaryOp::Add, {2, 3}, {2, 3}, {2, 3}); };
    c["add bias"] = [] { return binaryCase(BinaryOp::Add, {2, 3, 4}, {4}, {2, 3, 4}); };
    c["add mask [1,1,s,s]"] = [] {
        return binaryCase(BinaryOp::Add, {2, 2, 3, 3}, {1, 1, 3, 3}, {2, 2, 3, 3});
    };
    c["sub both broadcast"] = [] { return binaryCase(BinaryOp::Sub, {2, 1, 4}, {3, 1}, {2, 3, 4}); };
    c["mul scalar"] = [] { return binaryCase(BinaryOp::Mul, {2, 3}, {}, {2, 3}); };
    c["mul rotary [b,a,s,d]x[1,1,s,d]"] = [] {
        return binaryCase(BinaryOp::Mul, {2, 2, 3, 4}, {1, 1, 3, 4}, {2, 2, 3, 4});
    };
    c["div broadcast"] = [] { return binaryCase(BinaryOp::Div, {2, 3}, {2, 1}, {2, 3}); };
    c["relu"] = [] {
        return KernelCase{{{3, 4}}, {{3, 4}},
                          [](const Views &o, const Views &i) { kernels::reluForward(o[0], i[0]); },
                          [](const Views &g, const Views &i, const Views &, const Views &d) {
                              kernels::reluBackward(g[0], i[0], d[0]);
                          },
                          true};
    };
    for (auto form : {GeluForm::Erf, GeluForm::Tanh})
        c[form == GeluForm::Erf ? "gelu erf" : "gelu tanh"] = [form] {
            return KernelCase{{{3, 4}}, {{3, 4}},
                              [form](const Views &o, const Views &i) { kernels::geluForward(form, o[0], i[0]); },
                              [form](const Views &g, const Views &i, const Views &, const Views &d) {
                                  kernels::geluBackward(form, g[0], i[0], d[0]);
                              }};
        };
    c["silu"] = [] {
        return KernelCase{{{3, 4}}, {{3, 4}},
                          [](const Views &o, const Views &i) { kernels::siluForward(o[0], i[0]); },
                          [](const Views &g, const Views &i, const Views &, const Views &d) {
                              kernels::siluBackward(g[0], i[0], d[0]);
                          }};
    };
    c["neg"] = [] {
        return KernelCase{{{3, 4}}, {{3, 4}},
                          [](const Views &o, const Views &i) { kernels::negForward(o[0], i[0]); },
                          [](const Views &g, const Views &, const Views &, const Views &d) {
                              kernels::negBackward(g[0], d[0]);
                          }};
    };
    c["softmax"] = [] {
        return KernelCase{{{3, 5}}, {{3, 5}},
                          [](const Views &o, const Views &i) { kernels::softmaxForward(o[0], i[0]); },
                          [](const Views &g, const Views &, const Views &o, const Views &d) {
                              kernels::softmaxBackward(g[0], o[0], d[0]);
                          }};
    };
    c["layernorm"] = [] {
        auto s = scratch(6);
        return KernelCase{{{3, 6}, {6}, {6}}, {{3, 6}},
                          [s](const Views &o, const Views &i) {
                              kernels::layernormForward(o[0], {s->data(), {3}}, {s->data() + 3, {3}},
                                                        i[0], i[1], i[2], 1e-5f);
                          },
                          [s](const Views &g, const Views &i, const Views &, const Views &d) {
                              kernels::layernormBackward(g[0], i[0], i[1], {s->data(), {3}},
                                                         {s->data() + 3, {3}}, d[0], d[1], d[2]);
                          }};
    };
    c["rmsnorm"] = [] {
        auto s = scratch(3);
        return KernelCase{{{3, 6}, {6}}, {{3, 6}},
                          [s](const Views &o, const Views &i) {
                              kernels::rmsnormForward(o[0], {s->data(), {3}}, i[0], i[1], 1e-6f);
                          },
                          [s](const Views &g, const Views &i, const Views &, const Views &d) {
                              kernels::rmsnormBackward(g[0], i[0], i[1], {s->data(), {3}}, d[0], d[1]);
                          }};
    };
    c["reshape"] = [] {
        return KernelCase{{{2, 6}}, {{3, 4}},
                          [](const Views &o, const Views &i) { kernels::reshapeForward(o[0], i[0]); },
                          [](const Views &g, const Views &, const Views &, const Views &d) {
                              kernels::reshapeBackward(g[0], d[0]);
                          }};
    };
    c["transpose"] = [] {
        static const std::vector<std::int64_t> perm{2, 0, 1};
        return KernelCase{{{2, 3, 4}}, {{4, 2, 3}},
                          [](const Views &o, const Views &i) { kernels::transposeForward(o[0], i[0], perm); },
                          [](const Views &g, const Views &, const Views &, const Views &d) {
                              kernels::transposeBackward(g[0], perm, d[0]);
                          }};
    };
    c["split last axis"] = [] {
        return KernelCase{{{2, 3, 6}}, {{2, 3, 2}, {2, 3, 4}},
                          [](const Views &o, const Views &i) { kernels::splitForward(o, i[0], 2); },
                          [](const Views &g, const Views &, const Views &, const Views &d) {
                              kernels::splitBackward(g, 2, d[0]);
                          }};
    };
    c["concat"] = [] {
        return KernelCase{{{2, 2, 3}, {2, 1, 3}}, {{2, 3, 3}},
                          [](const Views &o, const Views &i) { kernels::concatForward(o[0], i, 1); },
                          [](const Views &g, const Views &, const Views &, const Views &d) {
                              kernels::concatBackward(g[0], 1, d);
                          }};
    };
    c["slice with steps"] = [] {
        // rows 1, 3 of 4; columns 4, 2, 0 of 6
        static const std::vector<std::int64_t> starts{1, 4}, steps{2, -2};
        return KernelCase{{{4, 6}}, {{2, 3}},
                          [](const Views &o, const Views &i) { kernels::sliceForward(o[0], i[0], starts, steps); },
                          [](const Views &g, const Views &, const Views &, const Views &d) {
                              kernels::sliceBackward(g[0], starts, steps, d[0]);
                          }};
    };
    c["expand"] = [] {
        return KernelCase{{{3, 1}}, {{2, 3, 4}},
                          [](const Views &o, const Views &i) { kernels::expandForward(o[0], i[0]); },
                          [](const Views &g, const Views &, const Views &, const Views &d) {
                              kernels::expandBackward(g[0], d[0]);
                          }};
    };
    c["gather (embedding)"] = [] {
        static const std::vector<std::int64_t> ids{4, 0, 2, 4, 4, 1};  // repeats scatter-add
        const IndexView idx{ids.data(), {2, 3}};
        return KernelCase{{{5, 3}}, {{2, 3, 3}},
                          [idx](const Views &o, const Views &i) { kernels::gatherForward(o[0], i[0], idx); },
                          [idx](const Views &g, const Views &, const Views &, const Views &d) {
                              kernels::gatherBackward(g[0], idx, d[0]);
                          }};
    };
    c["softmax cross-entropy"] = [] {
        static const std::vector<std::int64_t> labels{0, 4, 2, 2, 1, 3};
        const IndexView idx{labels.data(), {2, 3}};
        auto s = scratch(6);
        return KernelCase{{{2, 3, 5}}, {{}},
                          [idx, s](const Views &o, const Views &i) {
                              kernels::crossEntropyForward(o[0], {s->data(), {2, 3}}, i[0], idx);
                          },
                          [idx, s](const Views &g, const Views &i, const Views &, const Views &d) {
                              kernels::crossEntropyBackward(g[0], i[0], idx, {s->data(), {2, 3}}, d[0]);
                          }};
    };
    return c;
}

} // namespace

class TestKernels : public QObject {
    Q_OBJECT

private slots:
    // The vectorised element-wise kernels (kernels/vecmath.h, 8 lanes, the
    // tail padded) against the scalar functions in double precision, on
    // sizes around the lane count and on edge values: zeros, tiny and large
    // magnitudes, the clamps of exp, and -inf as a causal mask writes it;
    // the layer norm's forward and backward on rows around the lane count
    // and its 256-element chunks.
    void vectorKernelsMatchScalarReference()
    {
        std::mt19937 gen(7);
        std::uniform_real_distribution<float> wide(-12.0f, 12.0f);
        const float inf = std::numeric_limits<float>::infinity();
        const std::vector<float> edges = {0.0f,   -0.0f,   1e-30f,  -1e-30f, 1e-4f, -1e-4f, 0.5f,  -0.5f,
                                          5.0f,   -5.0f,   20.0f,   -20.0f,  44.0f, -44.0f, 88.5f, -88.5f,
                                          100.0f, -100.0f, -1e30f, 1e30f};
        auto close = [](double got, double want, double abs, double rel) {
            return std::fabs(got - want) <= abs + rel * std::fabs(want);
        };
        for (std::int64_t n : {1, 7, 8, 9, 15, 16, 17, 31, 1000, 1003}) {
            std::vector<float> x(static_cast<std::size_t>(n)), g(x.size());
            for (std::size_t i = 0; i < x.size(); ++i) {
                x[i] = i < edges.size() && n > 20 ? edges[i] : wide(gen);
                g[i] = wide(gen) / 12.0f;
            }
            std::vector<float> out(x.size()), dx(x.size(), 0.25f);
            TensorView xv{x.data(), {n}}, gv{g.data(), {n}}, ov{out.data(), {n}}, dv{dx.data(), {n}};
            for (auto form : {kernels::GeluForm::Tanh, kernels::GeluForm::Erf}) {
                const bool tanhForm = form == kernels::GeluForm::Tanh;
                std::fill(dx.begin(), dx.end(), 0.25f);
                kernels::geluForward(form, ov, xv);
                kernels::geluBackward(form, gv, xv, dv);
                for (std::size_t i = 0; i < x.size(); ++i) {
                    const double v = x[i];
                    const double u = tanhForm ? 0.7978845608028654 * (v + 0.044715 * v * v * v) : v / std::sqrt(2.0);
                    const double cdf = tanhForm ? 0.5 * (1 + std::tanh(u)) : 0.5 * (1 + std::erf(u));
                    const double pdf = tanhForm ? 0.5 * (1 - std::tanh(u) * std::tanh(u)) * 0.7978845608028654 *
                                                      (1 + 3 * 0.044715 * v * v)
                                                : std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
                    const double want = std::fabs(v) > 1e15 ? (v > 0 ? v : 0.0) : v * cdf;
                    QVERIFY2(close(out[i], want, 1e-6, 4e-6),
                             qPrintable(QStringLiteral("gelu %1 forward at x=%2: %3, want %4")
                                            .arg(tanhForm ? "tanh" : "erf").arg(v).arg(out[i]).arg(want)));
                    if (std::fabs(v) > 1e15)
                        continue;  // the reference's own v·pdf is 0·inf there
                    const double wantGrad = 0.25 + g[i] * (cdf + v * pdf);
                    QVERIFY2(close(dx[i], wantGrad, 1e-6, 4e-6),
                             qPrintable(QStringLiteral("gelu %1 backward at x=%2: %3, want %4")
                                            .arg(tanhForm ? "tanh" : "erf").arg(v).arg(dx[i]).arg(wantGrad)));
                }
            }
            std::fill(dx.begin(), dx.end(), 0.25f);
            kernels::siluForward(ov, xv);
            kernels::siluBackward(gv, xv, dv);
            for (std::size_t i = 0; i < x.size(); ++i) {
                const double v = x[i], s = 1.0 / (1.0 + std::exp(-v));
                QVERIFY2(close(out[i], v * s, 1e-6, 4e-6),
                         qPrintable(QStringLiteral("silu at x=%1: %2, want %3").arg(v).arg(out[i]).arg(v * s)));
                if (std::fabs(v) < 1e15)
                    QVERIFY2(close(dx[i], 0.25 + g[i] * s * (1 + v * (1 - s)), 1e-6, 4e-6),
                             qPrintable(QStringLiteral("silu backward at x=%1").arg(v)));
            }
            // Softmax over rows of n, a causal mask's -inf above the diagonal.
            const std::int64_t rows = 3;
            std::vector<float> scores(static_cast<std::size_t>(rows * n)), probs(scores.size());
            for (std::int64_t r = 0; r < rows; ++r)
                for (std::int64_t c = 0; c < n; ++c)
                    scores[static_cast<std::size_t>(r * n + c)] = c > r * n / rows ? -inf : x[static_cast<std::size_t>(c)] / 4.0f;
            kernels::softmaxForward(TensorView{probs.data(), {rows, n}}, TensorView{scores.data(), {rows, n}});
            for (std::int64_t r = 0; r < rows; ++r) {
                double maxv = -inf, sum = 0.0;
                for (std::int64_t c = 0; c < n; ++c)
                    maxv = std::max(maxv, static_cast<double>(scores[static_cast<std::size_t>(r * n + c)]));
                for (std::int64_t c = 0; c < n; ++c)
                    sum += std::exp(scores[static_cast<std::size_t>(r * n + c)] - maxv);
                for (std::int64_t c = 0; c < n; ++c) {
                    const double want = std::exp(scores[static_cast<std::size_t>(r * n + c)] - maxv) / sum;
                    QVERIFY2(close(probs[static_cast<std::size_t>(r * n + c)], want, 1e-7, 4e-6),
                             qPrintable(QStringLiteral("softmax row %1 of %2, column %3").arg(r).arg(n).arg(c)));
                }
            }
        }
        // Layer norm over rows of n (an offset of 100 makes the mean's
        // precision count), forward and backward, against double precision.
        for (std::int64_t n : {1, 7, 8, 9, 15, 17, 255, 256, 257, 1000, 1003, 4099}) {
            const std::int64_t rows = 3;
            const auto size = static_cast<std::size_t>(rows * n);
            std::vector<float> x(size), g(size), w(static_cast<std::size_t>(n)), b(w.size());
            for (auto &v : x)
                v = 100.0f + wide(gen);
            for (auto &v : g)
                v = wide(gen) / 12.0f;
            for (std::size_t i = 0; i < w.size(); ++i) {
                w[i] = 0.5f + static_cast<float>(i % 7) / 7.0f;
                b[i] = wide(gen) / 24.0f;
            }
            std::vector<float> y(size), mean(static_cast<std::size_t>(rows)), rstd(mean.size()), dx(size, 0.25f),
                dw(w.size(), 0.5f), db(w.size(), -0.5f);
            const ir::Shape shape{rows, n}, row{n};
            kernels::layernormForward({y.data(), shape}, {mean.data(), {rows}}, {rstd.data(), {rows}}, {x.data(), shape},
                                      {w.data(), row}, {b.data(), row}, 1e-5f);
            kernels::layernormBackward({g.data(), shape}, {x.data(), shape}, {w.data(), row}, {mean.data(), {rows}},
                                       {rstd.data(), {rows}}, {dx.data(), shape}, {dw.data(), row}, {db.data(), row});
            std::vector<double> wantDw(w.size(), 0.5), wantDb(w.size(), -0.5);
            for (std::int64_t r = 0; r < rows; ++r) {
                const auto at = [&](std::int64_t i) { return static_cast<std::size_t>(r * n + i); };
                double m = 0, v = 0;
                for (std::int64_t i = 0; i < n; ++i)
                    m += x[at(i)];
                m /= static_cast<double>(n);
                for (std::int64_t i = 0; i < n; ++i)
                    v += (x[at(i)] - m) * (x[at(i)] - m);
                const double s = 1.0 / std::sqrt(v / static_cast<double>(n) + 1e-5);
                double sumG = 0, sumGX = 0;
                for (std::int64_t i = 0; i < n; ++i) {
                    const double xhat = (x[at(i)] - m) * s, gh = double(g[at(i)]) * w[static_cast<std::size_t>(i)];
                    sumG += gh;
                    sumGX += gh * xhat;
                    wantDw[static_cast<std::size_t>(i)] += g[at(i)] * xhat;
                    wantDb[static_cast<std::size_t>(i)] += g[at(i)];
                    const double want = xhat * w[static_cast<std::size_t>(i)] + b[static_cast<std::size_t>(i)];
                    QVERIFY2(close(y[at(i)], want, 2e-5, 2e-5),
                             qPrintable(QStringLiteral("layer norm row %1 of %2, column %3: %4, want %5")
                                            .arg(r).arg(n).arg(i).arg(y[at(i)]).arg(want)));
                }
                for (std::int64_t i = 0; i < n; ++i) {
                    const double xhat = (x[at(i)] - m) * s, gh = double(g[at(i)]) * w[static_cast<std::size_t>(i)];
                    const double want = 0.25 + s * (gh - sumG / n - xhat * sumGX / n);
                    QVERIFY2(close(dx[at(i)], want, 2e-5, 2e-4),
                             qPrintable(QStringLiteral("layer norm backward row %1 of %2, column %3: %4, want %5")
                                            .arg(r).arg(n).arg(i).arg(dx[at(i)]).arg(want)));
                }
            }
            for (std::size_t i = 0; i < w.size(); ++i) {
                QVERIFY2(close(dw[i], wantDw[i], 1e-5, 1e-4), qPrintable(QStringLiteral("layer norm dweight %1").arg(i)));
                QVERIFY2(close(db[i], wantDb[i], 1e-5, 1e-4), qPrintable(QStringLiteral("layer norm dbias %1").arg(i)));
            }
        }
        // Softmax backward and the cross-entropy loss (whole rows, and a
        // vocabulary shard's row sums and backward) over rows of n classes,
        // against double precision.
        for (std::int64_t n : {1, 7, 8, 9, 17, 255, 256, 257, 1003}) {
            const std::int64_t rows = 3;
            const auto size = static_cast<std::size_t>(rows * n);
            std::vector<float> z(size), g(size), y(size), dx(size, 0.25f), dz(size, 0.25f), dshard(size, 0.25f);
            for (std::size_t i = 0; i < size; ++i) {
                z[i] = wide(gen);
                g[i] = wide(gen) / 12.0f;
            }
            std::vector<std::int64_t> labelValues{0, n / 2, n - 1};
            const IndexView labels{labelValues.data(), {rows}};
            const ir::Shape shape{rows, n};
            kernels::softmaxForward({y.data(), shape}, {z.data(), shape});
            kernels::softmaxBackward({g.data(), shape}, {y.data(), shape}, {dx.data(), shape});
            std::vector<float> loss(1), lse(static_cast<std::size_t>(rows)), one(1, 1.0f), rowMax(lse.size()),
                sums(lse.size()), target(lse.size()), shardLse(lse.size()), shardLoss(1);
            kernels::crossEntropyForward({loss.data(), {}}, {lse.data(), {rows}}, {z.data(), shape}, labels);
            kernels::crossEntropyBackward({one.data(), {}}, {z.data(), shape}, labels, {lse.data(), {rows}},
                                          {dz.data(), shape});
            kernels::crossEntropyRowMax({z.data(), shape}, {rowMax.data(), {rows}});
            kernels::crossEntropyRowSums({z.data(), shape}, labels, 0, {rowMax.data(), {rows}}, {sums.data(), {rows}},
                                         {target.data(), {rows}});
            kernels::crossEntropyFinish({shardLoss.data(), {}}, {shardLse.data(), {rows}}, {rowMax.data(), {rows}},
                                        {sums.data(), {rows}}, {target.data(), {rows}}, static_cast<double>(rows));
            kernels::crossEntropyShardBackward({one.data(), {}}, {z.data(), shape}, labels, 0, {shardLse.data(), {rows}},
                                               static_cast<double>(rows), {dshard.data(), shape});
            double wantLoss = 0;
            for (std::int64_t r = 0; r < rows; ++r) {
                const auto at = [&](std::int64_t i) { return static_cast<std::size_t>(r * n + i); };
                double maxv = -inf, sum = 0, dot = 0;
                for (std::int64_t i = 0; i < n; ++i)
                    maxv = std::max(maxv, double(z[at(i)]));
                for (std::int64_t i = 0; i < n; ++i)
                    sum += std::exp(z[at(i)] - maxv);
                for (std::int64_t i = 0; i < n; ++i)
                    dot += g[at(i)] * std::exp(z[at(i)] - maxv) / sum;
                const double l = maxv + std::log(sum);
                wantLoss += l - z[at(labelValues[static_cast<std::size_t>(r)])];
                QVERIFY2(close(lse[static_cast<std::size_t>(r)], l, 1e-6, 1e-6), qPrintable(QStringLiteral("lse row %1 of %2").arg(r).arg(n)));
                QVERIFY2(close(shardLse[static_cast<std::size_t>(r)], l, 1e-6, 1e-6),
                         qPrintable(QStringLiteral("shard lse row %1 of %2").arg(r).arg(n)));
                for (std::int64_t i = 0; i < n; ++i) {
                    const double p = std::exp(z[at(i)] - maxv) / sum;
                    const double wantDx = 0.25 + p * (g[at(i)] - dot);
                    QVERIFY2(close(dx[at(i)], wantDx, 1e-6, 1e-5),
                             qPrintable(QStringLiteral("softmax backward row %1 of %2, column %3").arg(r).arg(n).arg(i)));
                    const double wantDz = 0.25 + (p - (i == labelValues[static_cast<std::size_t>(r)] ? 1 : 0)) / rows;
                    QVERIFY2(close(dz[at(i)], wantDz, 1e-6, 1e-5),
                             qPrintable(QStringLiteral("cross-entropy backward row %1 of %2, column %3").arg(r).arg(n).arg(i)));
                    QVERIFY2(close(dshard[at(i)], wantDz, 1e-6, 1e-5),
                             qPrintable(QStringLiteral("shard backward row %1 of %2, column %3").arg(r).arg(n).arg(i)));
                }
            }
            QVERIFY2(close(loss[0], wantLoss / rows, 1e-6, 1e-6), qPrintable(QStringLiteral("loss of %1").arg(n)));
            QVERIFY2(close(shardLoss[0], wantLoss / rows, 1e-6, 1e-6), qPrintable(QStringLiteral("shard loss of %1").arg(n)));
        }
        // exp's clamps: 0 below ln(FLT_MIN), infinity above ln(FLT_MAX), NaN kept.
        std::vector<float> big = {-200.0f, -88.0f, 88.0f, 88.5f, 89.0f, std::nanf(""), 0.0f, 1.0f};
        std::vector<float> e(big.size());
        kernels::siluForward(TensorView{e.data(), {8}}, TensorView{big.data(), {8}});  // v / (1 + exp(-v))
        QCOMPARE(e[0], -0.0f);
        QVERIFY(std::isnan(e[5]));
        QCOMPARE(e[4], 89.0f);
    }

    // A MatMul whose right operand is a parameter stored transposed [N, K]
    // (a tied head reading the embedding, the transpose left out) gives
    // the product with the transposed copy, and its gradient laid out as
    // the parameter: on sizes that are not multiples of anything.
    void transposedRightOperandEqualsTheCopy()
    {
        const std::int64_t rows = 2, M = 7, K = 5, N = 11;
        auto fill = [](std::size_t n, float scale) {
            std::vector<float> v(n);
            for (std::size_t i = 0; i < n; ++i)
                v[i] = scale * static_cast<float>((i * 37) % 23) - 1.0f;
            return v;
        };
        const auto a = fill(rows * M * K, 0.1f), w = fill(N * K, 0.07f), dout = fill(rows * M * N, 0.05f);
        std::vector<float> wt(w.size());
        const std::vector<std::int64_t> swap{1, 0};
        kernels::transposeForward({wt.data(), {K, N}}, {const_cast<float *>(w.data()), {N, K}}, swap);
        std::vector<float> want(rows * M * N), got(want.size(), 3.0f);
        kernels::matmulForward({want.data(), {rows, M, N}}, {const_cast<float *>(a.data()), {rows, M, K}},
                               {wt.data(), {K, N}});
        kernels::matmulForward({got.data(), {rows, M, N}}, {const_cast<float *>(a.data()), {rows, M, K}},
                               {const_cast<float *>(w.data()), {N, K}}, true);
        for (std::size_t i = 0; i < want.size(); ++i)
            QVERIFY2(std::fabs(want[i] - got[i]) < 1e-5f, qPrintable(QStringLiteral("forward %1").arg(i)));
        std::vector<float> daWant(a.size(), 0.5f), daGot(a.size(), 0.5f), dwtWant(wt.size(), 0.25f),
            dwGot(w.size(), 0.25f);
        kernels::matmulBackward({const_cast<float *>(dout.data()), {rows, M, N}},
                                {const_cast<float *>(a.data()), {rows, M, K}}, {wt.data(), {K, N}},
                                {daWant.data(), {rows, M, K}}, {dwtWant.data(), {K, N}});
        kernels::matmulBackward({const_cast<float *>(dout.data()), {rows, M, N}},
                                {const_cast<float *>(a.data()), {rows, M, K}},
                                {const_cast<float *>(w.data()), {N, K}}, {daGot.data(), {rows, M, K}},
                                {dwGot.data(), {N, K}}, true);
        for (std::size_t i = 0; i < daWant.size(); ++i)
            QVERIFY2(std::fabs(daWant[i] - daGot[i]) < 1e-5f, qPrintable(QStringLiteral("da %1").arg(i)));
        for (std::int64_t n = 0; n < N; ++n)
            for (std::int64_t k = 0; k < K; ++k)
                QVERIFY2(std::fabs(dwtWant[static_cast<std::size_t>(k * N + n)] - dwGot[static_cast<std::size_t>(n * K + k)]) < 1e-5f,
                         qPrintable(QStringLiteral("dw [%1, %2]").arg(n).arg(k)));
        const auto calls = kernels::matmulGemms({rows, M, N}, {rows, M, K}, {N, K}, true, true, true, true);
        QCOMPARE(calls.size(), std::size_t{2});
        QCOMPARE(calls[1].m, N);
        QCOMPARE(calls[1].n, K);
        QCOMPARE(calls[1].k, rows * M);
    }

    // Transposes whose source and destination are contiguous along
    // different dims run tile by tile (kernels/strided.cpp): forward, and
    // backward accumulating into what the gradient holds, each element must
    // land where the permutation puts it, on sizes around the tile and
    // below the size that tiles, with untouched dims outside and between.
    void tiledTransposesPlaceEveryElement()
    {
        struct Case {
            ir::Shape x;
            std::vector<std::int64_t> perm;
        };
        const std::vector<Case> cases = {
            {{37, 45}, {1, 0}},          {{16, 16}, {1, 0}},          {{8, 9}, {1, 0}},
            {{2, 3, 33, 17}, {0, 1, 3, 2}}, {{3, 19, 5, 21}, {0, 3, 2, 1}}, {{17, 2, 40}, {2, 1, 0}},
            {{4, 18, 3, 20}, {0, 2, 1, 3}}, {{31, 1, 33}, {2, 1, 0}},
        };
        for (const Case &c : cases) {
            ir::Shape out;
            for (auto p : c.perm)
                out.push_back(c.x[static_cast<std::size_t>(p)]);
            const std::int64_t n = TensorView{nullptr, c.x}.size();
            std::vector<float> x(static_cast<std::size_t>(n)), y(x.size()), g(x.size()), dx(x.size());
            for (std::size_t i = 0; i < x.size(); ++i) {
                x[i] = static_cast<float>(i) + 0.25f;
                g[i] = static_cast<float>(i % 97) - 40.0f;
                dx[i] = 1000.0f + static_cast<float>(i % 13);
            }
            const std::vector<float> before = dx;
            kernels::transposeForward({y.data(), out}, {x.data(), c.x}, c.perm);
            kernels::transposeBackward({g.data(), out}, c.perm, {dx.data(), c.x});
            // The definition: out[i0..ik] = x[j] with j_{perm[d]} = i_d.
            std::vector<std::int64_t> idx(out.size(), 0);
            const auto xs = kernels::contiguousStrides(c.x);
            for (std::int64_t o = 0; o < n; ++o) {
                std::int64_t at = 0;
                for (std::size_t d = 0; d < out.size(); ++d)
                    at += idx[d] * xs[static_cast<std::size_t>(c.perm[d])];
                const auto oi = static_cast<std::size_t>(o), xi = static_cast<std::size_t>(at);
                QVERIFY2(y[oi] == x[xi], qPrintable(QStringLiteral("forward, element %1 of %2 dims").arg(o).arg(out.size())));
                QVERIFY2(dx[xi] == before[xi] + g[oi],
                         qPrintable(QStringLiteral("backward, element %1 of %2 dims").arg(o).arg(out.size())));
                for (std::size_t d = out.size(); d-- > 0;) {
                    if (++idx[d] < out[d])
                        break;
                    idx[d] = 0;
                }
            }
        }
    }

    // A run with bf16 or fp16 GEMMs is predicted at that precision's peak,
    // a float32 run at float32's: the same plan, costed as each runs. By
    // FLOPs alone the two differ by the peaks' ratio; with the profile's
    // roofline by less, as the ops bound by their bytes take as long.
    void predictionFollowsPrecision()
    {
        const auto g = io::loadModel("zoo:gpt2?layers=1&hidden=256&heads=4&ffn=1024&vocab=1024&seq=128&batch=4");
        sharding::Mesh mesh = sharding::findMeshProfile("dgx-h100").mesh({1}, {"model"});
        const std::vector<sharding::ShardingSpec> specs(g.tensorCount(), sharding::ShardingSpec::replicated(1));
        auto computeOn = [&](exec::Precision p) {
            return cost::evaluatePlan(g, exec::predictionMesh(mesh, p), specs, {}).compute;
        };
        QCOMPARE(exec::predictionMesh(mesh, exec::Precision::F32).device.peak(ir::DType::F32), 67e12);
        QCOMPARE(exec::predictionMesh(mesh, exec::Precision::BF16).device.peak(ir::DType::F32), 989e12);
        const double roofF32 = computeOn(exec::Precision::F32), roofBf16 = computeOn(exec::Precision::BF16);
        QVERIFY2(roofF32 / roofBf16 > 1.1 && roofF32 / roofBf16 < 989.0 / 67.0, qPrintable(QString::number(roofF32 / roofBf16)));
        mesh.device.memoryBandwidth = 0;
        mesh.device.kernelLaunch = 0;
        const double f32 = computeOn(exec::Precision::F32), bf16 = computeOn(exec::Precision::BF16);
        QVERIFY(f32 > 0);
        QVERIFY2(std::abs(f32 / bf16 - 989.0 / 67.0) < 1e-6 * 989.0 / 67.0, qPrintable(QString::number(f32 / bf16)));
    }

    void backwardMatchesFiniteDifferences_data();
    void backwardMatchesFiniteDifferences();
    void forwardValues();
    void trainsTeachingModels_data();
    void trainsTeachingModels();
    void interpreterGradientsMatchFiniteDifferences_data();
    void interpreterGradientsMatchFiniteDifferences();
    void refusesOpsItCannotRun();
    void initialisationIsShardable();
    void initialisationFollowsTheSeed();
};

void TestKernels::backwardMatchesFiniteDifferences_data()
{
    QTest::addColumn<QString>("kernel");
    for (const auto &[name, make] : kernelCases())
        QTest::newRow(qPrintable(name)) << name;
}

void TestKernels::backwardMatchesFiniteDifferences()
{
    QFETCH(QString, kernel);
    const KernelCase kc = kernelCases().at(kernel)();
    Buffers in(kc.inputs), out(kc.outputs), dout(kc.outputs), din(kc.inputs);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto &v : in.data)
        for (float &x : v) {
            x = u(rng);
            if (kc.awayFromZero)
                x = std::copysign(0.3f + std::fabs(x), x);
        }
    for (auto &v : dout.data)
        for (float &x : v)
            x = u(rng);
    auto objective = [&] {
        kc.forward(out.views, in.views);
        double f = 0.0;
        for (std::size_t k = 0; k < out.data.size(); ++k)
            for (std::size_t i = 0; i < out.data[k].size(); ++i)
                f += static_cast<double>(out.data[k][i]) * dout.data[k][i];
        return f;
    };
    objective();
    kc.backward(dout.views, in.views, out.views, din.views);

    constexpr float eps = 3e-3f;
    int checked = 0;
    for (std::size_t k = 0; k < in.data.size(); ++k)
        for (std::size_t i = 0; i < in.data[k].size(); ++i) {
            float &x = in.data[k][i];
            const float saved = x;
            x = saved + eps;
            const double plus = objective();
            x = saved - eps;
            const double minus = objective();
            x = saved;
            const double numeric = (plus - minus) / (2.0 * eps);
            const double analytic = din.data[k][i];
            const double tolerance = 2e-3 + 1e-2 * std::max(std::fabs(numeric), std::fabs(analytic));
            if (std::fabs(numeric - analytic) > tolerance)
                QFAIL(qPrintable(QStringLiteral("input %1 element %2: backward %3, finite difference %4")
                                     .arg(k)
                                     .arg(i)
                                     .arg(analytic)
                                     .arg(numeric)));
            ++checked;
        }
    QVERIFY(checked > 0);
}

// Forward values against hand-computed ones, where a finite-difference check
// alone would pass a kernel that is wrong consistently in both directions.
void TestKernels::forwardValues()
{
    std::vector<float> a{1, 2, 3, 4, 5, 6}, b{1, 0, 0, 1, 1, 1}, c(4);
    kernels::matmulForward({c.data(), {2, 2}}, {a.data(), {2, 3}}, {b.data(), {3, 2}});
    QCOMPARE(c, (std::vector<float>{4, 5, 10, 11}));

    std::vector<float> row{1, 2, 3}, sm(3);
    kernels::softmaxForward({sm.data(), {1, 3}}, {row.data(), {1, 3}});
    QVERIFY(std::fabs(sm[2] - 0.66524096f) < 1e-6f);

    std::vector<float> bias{10, 20, 30}, sum(6);
    kernels::binaryForward(kernels::BinaryOp::Add, {sum.data(), {2, 3}}, {a.data(), {2, 3}},
                           {bias.data(), {3}});
    QCOMPARE(sum, (std::vector<float>{11, 22, 33, 14, 25, 36}));

    std::vector<float> t(6);
    const std::vector<std::int64_t> perm{1, 0};
    kernels::transposeForward({t.data(), {3, 2}}, {a.data(), {2, 3}}, perm);
    QCOMPARE(t, (std::vector<float>{1, 4, 2, 5, 3, 6}));

    std::vector<float> g{0.5f, -0.5f}, ge(2);
    kernels::geluForward(kernels::GeluForm::Erf, {ge.data(), {2}}, {g.data(), {2}});
    QVERIFY(std::fabs(ge[0] - 0.34573123f) < 1e-6f && std::fabs(ge[1] + 0.15426877f) < 1e-6f);

    std::vector<float> logits{0, 0, 0, 0}, loss(1), lse(1);
    const std::vector<std::int64_t> label{2};
    kernels::crossEntropyForward({loss.data(), {}}, {lse.data(), {1}}, {logits.data(), {1, 4}},
                                 {label.data(), {1}});
    QVERIFY(std::fabs(loss[0] - std::log(4.0f)) < 1e-6f);
}

void TestKernels::trainsTeachingModels_data()
{
    QTest::addColumn<QString>("model");
    QTest::addColumn<int>("optimizer");
    QTest::addColumn<int>("objective");
    QTest::newRow("mlp sgd") << "zoo:mlp" << int(Optimizer::Sgd) << int(Objective::SumOfSquares);
    QTest::newRow("abc sgd") << "zoo:abc" << int(Optimizer::Sgd) << int(Objective::SumOfSquares);
    QTest::newRow("mlp adam") << "zoo:mlp" << int(Optimizer::Adam) << int(Objective::SumOfSquares);
    QTest::newRow("tiny gpt2 sgd") << "zoo:gpt2?layers=1&hidden=32&heads=2&vocab=64&seq=8&batch=2&ffn=64"
                                   << int(Optimizer::Sgd) << int(Objective::Loss);
}

// A few steps on one fixed batch: the objective must fall at every step.
void TestKernels::trainsTeachingModels()
{
    QFETCH(QString, model);
    QFETCH(int, optimizer);
    QFETCH(int, objective);
    InterpreterOptions options;
    options.seed = 3;
    options.optimizer = static_cast<Optimizer>(optimizer);
    options.learningRate = 1e-2f;
    Interpreter interpreter(io::loadModel(model.toStdString()), options);
    QCOMPARE(int(interpreter.objective()), objective);
    float previous = interpreter.step();
    const float first = previous;
    for (int s = 0; s < 4; ++s) {
        const float loss = interpreter.step();
        QVERIFY2(loss < previous, qPrintable(QStringLiteral("step %1: %2 after %3").arg(s + 2).arg(loss).arg(previous)));
        previous = loss;
    }
    QVERIFY(std::isfinite(first) && previous < first);
}

void TestKernels::interpreterGradientsMatchFiniteDifferences_data()
{
    QTest::addColumn<QString>("model");
    QTest::newRow("mlp") << "zoo:mlp";
    QTest::newRow("gpt2 2 layers") << "zoo:gpt2?layers=2&hidden=64&heads=4&vocab=128&seq=16&batch=2";
    QTest::newRow("llama 1 layer (rotary, GQA, SwiGLU)")
        << "zoo:llama3-8b?layers=1&hidden=32&heads=4&kv_heads=2&vocab=64&seq=8&batch=2&ffn=64";
}

// Spot checks of whole-graph weight gradients: for a few parameters, the
// elements with the largest gradients against central differences of the
// objective (float32 end to end, so a loose tolerance and large entries).
void TestKernels::interpreterGradientsMatchFiniteDifferences()
{
    QFETCH(QString, model);
    Interpreter interpreter(io::loadModel(model.toStdString()), InterpreterOptions{});
    interpreter.forward();
    interpreter.backward();
    int checked = 0;
    for (const ir::Tensor &t : interpreter.graph().tensors()) {
        if (t.role != ir::Role::Parameter)
            continue;
        const TensorView w = interpreter.value(t.name), g = interpreter.grad(t.name);
        QVERIFY2(g.data, qPrintable(QString::fromStdString(t.name)));
        std::vector<float> grad(g.data, g.data + g.size());
        // The two largest-magnitude entries of this parameter's gradient.
        std::vector<std::int64_t> order(grad.size());
        for (std::size_t i = 0; i < order.size(); ++i)
            order[i] = static_cast<std::int64_t>(i);
        std::partial_sort(order.begin(), order.begin() + std::min<std::size_t>(2, order.size()), order.end(),
                          [&](auto x, auto y) { return std::fabs(grad[x]) > std::fabs(grad[y]); });
        for (std::size_t k = 0; k < std::min<std::size_t>(2, order.size()); ++k) {
            const auto i = order[k];
            if (std::fabs(grad[i]) < 1e-3f)
                continue;
            const float saved = w.data[i];
            const float eps = std::max(1e-3f, 1e-2f * std::fabs(saved));
            w.data[i] = saved + eps;
            const double plus = interpreter.forward();
            w.data[i] = saved - eps;
            const double minus = interpreter.forward();
            w.data[i] = saved;
            const double numeric = (plus - minus) / (2.0 * eps);
            QVERIFY2(std::fabs(numeric - grad[i]) <= 2e-3 + 5e-2 * std::fabs(grad[i]),
                     qPrintable(QStringLiteral("%1[%2]: backward %3, finite difference %4")
                                    .arg(QString::fromStdString(t.name))
                                    .arg(i)
                                    .arg(grad[i])
                                    .arg(numeric)));
            ++checked;
        }
    }
    QVERIFY(checked >= 2);
}

void TestKernels::refusesOpsItCannotRun()
{
    io::zoo::GraphBuilder g("refused");
    auto x = g.input("x", {2, 3}, ir::DType::F32);
    auto y = g.op("Conv", {x}, {2, 3});
    auto z = g.op("Conv", {y}, {2, 3});
    auto s = g.op("Softmax", {z}, {2, 3}, {{"axis", std::int64_t{0}}});
    g.markOutput(s);
    try {
        Interpreter interpreter(g.take(), InterpreterOptions{}, "refused.json");
        QFAIL("a graph with Conv ran");
    } catch (const TapestryError &e) {
        const QString message = QString::fromUtf8(e.what());
        QVERIFY2(message.startsWith(QLatin1String("refused.json: ")), qPrintable(message));
        QVERIFY2(message.contains(QLatin1String("Conv (2 ops, first 'Conv'): no kernel")), qPrintable(message));
        QVERIFY2(message.contains(QLatin1String("Softmax (1 op, first 'Softmax'): axis is not the last")),
                 qPrintable(message));
    }
}

// A shard built on its own equals the slice of the whole tensor.
void TestKernels::initialisationIsShardable()
{
    const ir::Shape full{6, 8};
    const std::uint64_t key = streamKey(42, "h.0.mlp.c_fc.weight");
    const InitRule rule{InitKind::Normal, 0.5f};
    std::vector<float> whole(48), shard(3 * 4);
    const std::vector<std::int64_t> origin{0, 0}, offset{3, 4};
    initializeBlock({whole.data(), full}, origin, full, key, rule);
    initializeBlock({shard.data(), {3, 4}}, offset, full, key, rule);
    for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 4; ++c)
            QCOMPARE(shard[static_cast<std::size_t>(r * 4 + c)],
                     whole[static_cast<std::size_t>((r + 3) * 8 + c + 4)]);
    double mean = 0.0, square = 0.0;
    for (float v : whole) {
        mean += v / 48.0;
        square += v * v / 48.0;
    }
    QVERIFY(std::fabs(mean) < 0.3 && square > 0.1 && square < 0.6);  // N(0, 0.25)

    std::vector<std::int64_t> ids(10), tail(4);
    const IndexRule tokens{50, false, 5};
    initializeIndices(ids.data(), 10, 0, key, tokens);
    initializeIndices(tail.data(), 4, 6, key, tokens);
    QCOMPARE(std::vector<std::int64_t>(ids.begin() + 6, ids.end()), tail);
    const IndexRule positions{1024, true, 5};
    initializeIndices(ids.data(), 10, 0, key, positions);
    QCOMPARE(ids, (std::vector<std::int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4}));
}

void TestKernels::initialisationFollowsTheSeed()
{
    auto lossFor = [](std::uint64_t seed) {
        InterpreterOptions options;
        options.seed = seed;
        return Interpreter(io::loadModel("zoo:mlp"), options).forward();
    };
    QCOMPARE(lossFor(5), lossFor(5));
    QVERIFY(lossFor(5) != lossFor(6));
}

QTEST_APPLESS_MAIN(TestKernels)
#include "tst_kernels.moc"
