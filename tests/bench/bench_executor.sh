#!/usr/bin/env bash
# Benchmark of the executor (issue 9's targets; not a CTest test): one
# Megatron-split GPT layer (hidden 1024, seq 512, batch 4, 16 heads) trained
# on 2 MPI ranks. Prints tokens/s, the achieved GFLOP/s per rank against
# OpenBLAS's own single-thread sgemm rate for the layer's local GEMM shapes,
# the cost model's predicted step time (cpu-loopback) against the measured
# one, and the same layer in PyTorch over gloo when python3 has torch.
#   tests/bench/bench_executor.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
CLI=$BUILD/app/tapestry-cli
EXEC=$BUILD/executor/tapestry-exec
MODEL='zoo:gpt2?layers=1&hidden=1024&heads=16&seq=512&batch=4&vocab=1024'
STEPS=${STEPS:-3}
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$CLI" plan "$MODEL" --mesh 2 --search megatron --mesh-profile cpu-loopback -o "$work/plan.json" >/dev/null
mpirun --oversubscribe -np 2 "$EXEC" --model "$MODEL" --plan "$work/plan.json" --steps "$STEPS" --warmup 1 \
  --report - --quiet >"$work/run.jsonl"

# OpenBLAS alone on the rank-local GEMMs of the layer (M = batch·seq tokens):
# q/k/v and fc_in column blocks, out_proj and fc_out row blocks.
cat >"$work/sgemm.c" <<'C'
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(void) {
    const int shapes[][3] = {{2048, 1024, 512}, {2048, 512, 1024}, {2048, 1024, 2048}, {2048, 2048, 1024}};
    double flops = 0, secs = 0;
    for (int s = 0; s < 4; ++s) {
        int m = shapes[s][0], k = shapes[s][1], n = shapes[s][2];
        float *a = calloc((size_t)m * k, 4), *b = calloc((size_t)k * n, 4), *c = calloc((size_t)m * n, 4);
        for (long i = 0; i < (long)m * k; ++i) a[i] = (float)(i % 7) * 0.1f;
        for (long i = 0; i < (long)k * n; ++i) b[i] = (float)(i % 5) * 0.1f;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1, a, k, b, n, 0, c, n);
        double t0 = now();
        for (int r = 0; r < 3; ++r)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1, a, k, b, n, 0, c, n);
        secs += now() - t0;
        flops += 3 * 2.0 * m * n * k;
        free(a); free(b); free(c);
    }
    printf("%.3f\n", flops / secs * 1e-9);
    return 0;
}
C
cc -O2 -o "$work/sgemm" "$work/sgemm.c" $(pkg-config --cflags --libs openblas 2>/dev/null || echo -lopenblas)
sgemm=$("$work/sgemm")

python3 - "$work/run.jsonl" "$sgemm" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
start = next(l for l in lines if l["event"] == "start")
s = next(l for l in lines if l["event"] == "summary")
sgemm = float(sys.argv[2])
print(f"model              {s['model']} (megatron plan, mesh {s['mesh']}, {s['ranks']} ranks)")
print(f"step time          {s['step_time_s']*1e3:.1f} ms measured (forward {s['forward_s']*1e3:.1f}, "
      f"backward {s['backward_s']*1e3:.1f}, update {s['update_s']*1e3:.1f}, collectives {s['comm_s']*1e3:.1f} ms)")
print(f"predicted          {s['predicted_step_time_s']*1e3:.1f} ms (cpu-loopback): "
      f"{100*s['predicted_over_measured']:.0f}% of measured (target within ±30%)")
print(f"throughput         {s['tokens_per_s']:.0f} tokens/s")
print(f"GFLOP/s per rank   {s['gflops_per_rank']:.1f} (whole step, matmul FLOPs) vs OpenBLAS sgemm alone "
      f"{sgemm:.1f}: {100*s['gflops_per_rank']/sgemm:.0f}% (target at least 80%)")
for kind, e in s["collectives"].items():
    print(f"  {kind:16} {e['calls']:.0f} calls/step, {e['bytes']/1e6:.1f} MB, {e['seconds']*1e3:.1f} ms")
PY

if python3 -c 'import torch' 2>/dev/null; then
  python3 - "$STEPS" <<'PY'
# The same layer in PyTorch, Megatron-split by hand over torch.distributed
# (gloo, 2 processes, one thread each): q/k/v and fc_in column-parallel,
# out_proj and fc_out row-parallel with an all-reduce after each, and the
# f operator's all-reduces backward.
import os, sys, time
import torch, torch.distributed as dist, torch.multiprocessing as mp
H, S, B, HEADS, P = 1024, 512, 4, 16, 2
class AllReduceBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x): return x
    @staticmethod
    def backward(ctx, g): dist.all_reduce(g); return g
class AllReduceForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x): dist.all_reduce(x); return x
    @staticmethod
    def backward(ctx, g): return g
def work(rank, steps, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=P)
    h, hh = H // P, HEADS // P
    ln1, ln2 = torch.nn.LayerNorm(H), torch.nn.LayerNorm(H)
    qkv = torch.nn.Linear(H, 3 * h); proj = torch.nn.Linear(h, H, bias=rank == 0)
    fc1 = torch.nn.Linear(H, 4 * h); fc2 = torch.nn.Linear(4 * h, H, bias=rank == 0)
    params = [p for m in (ln1, ln2, qkv, proj, fc1, fc2) for p in m.parameters()]
    opt = torch.optim.SGD(params, lr=0.01)
    x = torch.randn(B, S, H)
    mask = torch.full((S, S), float("-inf")).triu(1)
    def step():
        a = AllReduceBackward.apply(ln1(x))
        q, k, v = qkv(a).view(B, S, 3, hh, H // HEADS).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / (H // HEADS) ** 0.5 + mask, -1) @ v
        y = x + AllReduceForward.apply(proj(att.transpose(1, 2).reshape(B, S, h)))
        m = AllReduceBackward.apply(ln2(y))
        z = y + AllReduceForward.apply(fc2(torch.nn.functional.gelu(fc1(m))))
        loss = z.square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
    step()
    dist.barrier(); t0 = time.perf_counter()
    for _ in range(steps): step()
    dist.barrier()
    if rank == 0: out.put((time.perf_counter() - t0) / steps)
    dist.destroy_process_group()
if __name__ == "__main__":
    steps = int(sys.argv[1]); q = mp.get_context("spawn").SimpleQueue()
    mp.spawn(work, args=(steps, q), nprocs=P)
    t = q.get()
    print(f"PyTorch {torch.__version__} gloo  {t*1e3:.1f} ms/step, {B*S/t:.0f} tokens/s (one layer, no embedding or LM head)")
PY
else
  echo "PyTorch comparison skipped: python3 has no torch module (install Debian's python3-torch to compare)"
fi
