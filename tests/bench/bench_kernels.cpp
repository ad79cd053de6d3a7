// The executor's CPU kernels one at a time on the shapes of one rank of
// bench_executor.sh's Megatron-split GPT layer (hidden 1024, 16 heads, seq
// 512, batch 4, 2 ranks): per kernel the minimum and median time of a few
// rounds and the bytes it reads and writes per second, so that a kernel
// well below the memory's rate shows. One thread; asserts nothing.
#include "kernels/activation.h"
#include "kernels/binary.h"
#include "kernels/crossentropy.h"
#include "kernels/layernorm.h"
#include "kernels/layout.h"
#include "kernels/softmax.h"
#include "kernels/vocabparallel.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

using namespace tapestry;
using namespace tapestry::exec;

namespace {

struct Buffer {
    std::vector<float> values;
    TensorView view;
    explicit Buffer(ir::Shape shape, float base = 0.01f)
    {
        std::int64_t n = 1;
        for (auto d : shape)
            n *= d;
        values.resize(static_cast<std::size_t>(n));
        for (std::size_t i = 0; i < values.size(); ++i)
            values[i] = base * static_cast<float>(static_cast<int>(i % 97) - 48);
        view = {values.data(), std::move(shape)};
    }
    double bytes() const { return 4.0 * static_cast<double>(values.size()); }
};

void time(const std::string &name, double bytes, const std::function<void()> &body)
{
    constexpr int kRounds = 7;
    body();  // warm
    std::vector<double> ms;
    for (int r = 0; r < kRounds; ++r) {
        const auto start = std::chrono::steady_clock::now();
        body();
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(ms.begin(), ms.end());
    std::printf("%-40s %9.3f %9.3f ms %8.2f GB/s\n", name.c_str(), ms.front(), ms[kRounds / 2],
                bytes / ms.front() * 1e-6);
}

} // namespace

int main()
{
    const std::int64_t b = 4, heads = 8, s = 512, h = 1024, rows = b * s;
    std::printf("%-40s %9s %9s    %8s\n", "kernel (one rank's shapes)", "min", "median", "rate");
    {
        Buffer x({b, heads, s, s}), y({b, heads, s, s}), g({b, heads, s, s}), dx({b, heads, s, s});
        Buffer scale({}, 1.0f), mask({1, 1, s, s}), none({});
        none.view.data = nullptr;
        time("Mul scores x scalar", 2 * x.bytes(), [&] { kernels::binaryForward(kernels::BinaryOp::Mul, y.view, x.view, scale.view); });
        time("Add scores + mask [1,1,s,s]", 2 * x.bytes(), [&] { kernels::binaryForward(kernels::BinaryOp::Add, y.view, x.view, mask.view); });
        time("Mul backward (scores)", 3 * x.bytes(), [&] { kernels::binaryBackward(kernels::BinaryOp::Mul, g.view, x.view, scale.view, dx.view, none.view); });
        time("Add backward (scores)", 3 * x.bytes(), [&] { kernels::binaryBackward(kernels::BinaryOp::Add, g.view, x.view, mask.view, dx.view, none.view); });
        time("Softmax forward", 2 * x.bytes(), [&] { kernels::softmaxForward(y.view, x.view); });
        time("Softmax backward", 4 * x.bytes(), [&] { kernels::softmaxBackward(g.view, y.view, dx.view); });
    }
    {
        Buffer x({rows, 3 * h / 2}), y({rows, 3 * h / 2}), bias({3 * h / 2}), g({rows, 3 * h / 2}), dx({rows, 3 * h / 2}),
            db({3 * h / 2});
        time("Add bias [rows, 1536]", 2 * x.bytes(), [&] { kernels::binaryForward(kernels::BinaryOp::Add, y.view, x.view, bias.view); });
        time("Add bias backward", 3 * x.bytes(), [&] { kernels::binaryBackward(kernels::BinaryOp::Add, g.view, x.view, bias.view, dx.view, db.view); });
    }
    {
        Buffer x({b, s, h}), r({b, s, h}), y({b, s, h}), g({b, s, h}), dx({b, s, h}), dr({b, s, h});
        time("Add residual [b,s,h]", 3 * x.bytes(), [&] { kernels::binaryForward(kernels::BinaryOp::Add, y.view, x.view, r.view); });
        time("Add residual backward", 5 * x.bytes(), [&] { kernels::binaryBackward(kernels::BinaryOp::Add, g.view, x.view, r.view, dx.view, dr.view); });
        Buffer w({h}, 0.02f), bias({h}), mean({rows}), rstd({rows}), dw({h}), dbias({h});
        time("LayerNorm forward [rows, 1024]", 2 * x.bytes(), [&] { kernels::layernormForward(y.view, mean.view, rstd.view, x.view, w.view, bias.view, 1e-5f); });
        time("LayerNorm backward", 4 * x.bytes(), [&] { kernels::layernormBackward(g.view, x.view, w.view, mean.view, rstd.view, dx.view, dw.view, dbias.view); });
        Buffer t({b, s, heads, h / 16}), tt({b, heads, s, h / 16});
        const std::vector<std::int64_t> perm{0, 2, 1, 3};
        time("Transpose [b,s,8,64] -> [b,8,s,64]", 2 * t.bytes(), [&] { kernels::transposeForward(tt.view, t.view, perm); });
        // The keys' transpose of the scores' product (the innermost two dims
        // swapped) and its backward pass, which accumulates.
        Buffer k({b, heads, s, h / 16}), kt({b, heads, h / 16, s});
        const std::vector<std::int64_t> swapLast{0, 1, 3, 2};
        time("Transpose [b,8,s,64] -> [b,8,64,s]", 2 * k.bytes(), [&] { kernels::transposeForward(kt.view, k.view, swapLast); });
        time("Transpose backward [b,8,64,s]", 3 * k.bytes(), [&] { kernels::transposeBackward(kt.view, swapLast, k.view); });
        // A tied head's weight [vocab, h] read as [h, vocab].
        Buffer wte({2048, 512}), wt({512, 2048});
        const std::vector<std::int64_t> swap2{1, 0};
        time("Transpose [2048,512] -> [512,2048]", 2 * wte.bytes(), [&] { kernels::transposeForward(wt.view, wte.view, swap2); });
        time("Transpose backward [512,2048]", 3 * wte.bytes(), [&] { kernels::transposeBackward(wt.view, swap2, wte.view); });
        Buffer flat({rows, h});
        time("Reshape [b,s,h] -> [rows,h]", 2 * flat.bytes(), [&] { kernels::reshapeForward(flat.view, x.view); });
    }
    {
        Buffer x({rows, 2 * h}), y({rows, 2 * h}), g({rows, 2 * h}), dx({rows, 2 * h});
        time("Gelu tanh forward [rows, 2048]", 2 * x.bytes(), [&] { kernels::geluForward(kernels::GeluForm::Tanh, y.view, x.view); });
        time("Gelu tanh backward", 3 * x.bytes(), [&] { kernels::geluBackward(kernels::GeluForm::Tanh, g.view, x.view, dx.view); });
    }
    {
        const std::int64_t vocab = 512;
        Buffer logits({rows, vocab}), lse({rows}), loss({}), dlogits({rows, vocab}), rowMax({rows}), sums({rows}),
            target({rows}), dloss({}, 1.0f);
        std::vector<std::int64_t> labels(static_cast<std::size_t>(rows));
        for (std::size_t i = 0; i < labels.size(); ++i)
            labels[i] = static_cast<std::int64_t>(i * 7 % vocab);
        const IndexView ids{labels.data(), {rows}};
        time("CrossEntropy forward [rows, 512]", logits.bytes(), [&] { kernels::crossEntropyForward(loss.view, lse.view, logits.view, ids); });
        time("CrossEntropy backward", 2 * logits.bytes(), [&] { kernels::crossEntropyBackward(dloss.view, logits.view, ids, lse.view, dlogits.view); });
        time("CE row max (vocab-parallel)", logits.bytes(), [&] { kernels::crossEntropyRowMax(logits.view, rowMax.view); });
        time("CE row sums (vocab-parallel)", logits.bytes(), [&] { kernels::crossEntropyRowSums(logits.view, ids, 0, rowMax.view, sums.view, target.view); });
    }
    return 0;
}
