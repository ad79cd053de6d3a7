#!/usr/bin/env bash
# Benchmark of the executor on one GPU against PyTorch on the same work (not a
# CTest test; needs a GPU and python3 with a CUDA torch): a 4-layer GPT-2
# (hidden 1024, 16 heads, ffn 4096, vocab 8192, seq 512, batch 8) trained on
# one rank, fp32 GEMMs (TF32 off on both sides) and bf16 GEMMs (torch:
# autocast), SGD. The peer is tests/interop/hf_models.py's GPT-2, which has the
# zoo model's layers and parameters. Prints per precision the step times
# (min and median of interleaved rounds), tokens/s, the ratio, the executor's
# GEMM and other-kernel time, and the cost model's prediction of each (the
# device's shipped profile: dgx-h200 on an H200, dgx-h100 on an H100).
#   tests/bench/bench_gpu_executor.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
CLI=$BUILD/app/tapestry-cli
EXEC=$BUILD/executor/tapestry-exec
MODEL='zoo:gpt2?layers=4&hidden=1024&heads=16&ffn=4096&vocab=8192&seq=512&batch=8&positions=512'
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-10}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$CLI" plan "$MODEL" --mesh 1 --search megatron -o "$work/plan.json" >/dev/null

cat >"$work/peer.py" <<'PY'
import sys, time, torch, torch.nn.functional as F
sys.path.insert(0, "tests/interop")
import hf_models
precision, steps = sys.argv[1], int(sys.argv[2])
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
c = dict(layers=4, hidden=1024, heads=16, ffn=4096, vocab=8192, positions=512, seq=512, batch=8)
torch.manual_seed(1)
model = hf_models.build("gpt2", c).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
ids = torch.randint(0, c["vocab"], (c["batch"], c["seq"]), device="cuda")
labels = torch.randint(0, c["vocab"], (c["batch"], c["seq"]), device="cuda")
def step():
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
        logits = model(ids)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
for _ in range(3):
    step()
torch.cuda.synchronize()
times = []
for _ in range(steps):
    t = time.perf_counter()
    step()
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t)
times.sort()
print(times[len(times) // 2])
PY

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
minimum() { sort -g | head -1; }
printf '%-5s %12s %12s %12s %12s %8s %10s %10s %10s %10s %10s\n' precision "tapestry min" "median" "torch min" "median" \
  "ratio" "gemm" "other" "predicted" "pred gemm" "pred other"
for precision in fp32 bf16; do
  : >"$work/t.txt"; : >"$work/p.txt"
  for ((r = 0; r < ROUNDS; ++r)); do  # interleaved: the two sides share the machine alike
    mpirun -np 1 "$EXEC" --backend cuda --model "$MODEL" --plan "$work/plan.json" --steps "$STEPS" \
      --precision "$precision" --report - --quiet >"$work/run.jsonl"
    python3 - "$work/run.jsonl" >>"$work/t.txt" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
s = next(l for l in lines if l["event"] == "summary")
p = next(l for l in lines if l["event"] == "start")
print(s["step_time_s"], s["gemm_s"], s["other_kernels_s"], p["predicted_step_time_s"],
      p.get("predicted_gemm_s", 0), p.get("predicted_other_kernels_s", 0), p.get("mesh_profile", "?"))
PY
    python3 "$work/peer.py" "$precision" "$STEPS" >>"$work/p.txt"
  done
  tmin=$(cut -d' ' -f1 "$work/t.txt" | minimum); tmed=$(cut -d' ' -f1 "$work/t.txt" | median)
  pmin=$(minimum <"$work/p.txt"); pmed=$(median <"$work/p.txt")
  gemm=$(cut -d' ' -f2 "$work/t.txt" | median); other=$(cut -d' ' -f3 "$work/t.txt" | median)
  predicted=$(cut -d' ' -f4 "$work/t.txt" | head -1)
  pgemm=$(cut -d' ' -f5 "$work/t.txt" | head -1); pother=$(cut -d' ' -f6 "$work/t.txt" | head -1)
  profile=$(cut -d' ' -f7 "$work/t.txt" | head -1)
  awk -v pr="$precision" -v a="$tmin" -v b="$tmed" -v c="$pmin" -v d="$pmed" -v g="$gemm" -v o="$other" -v p="$predicted" \
    -v pg="$pgemm" -v po="$pother" \
    'BEGIN {printf "%-9s %10.2f ms %9.2f ms %9.2f ms %9.2f ms %7.2fx %7.2f ms %7.2f ms %7.2f ms %7.2f ms %7.2f ms\n",
            pr, a*1e3, b*1e3, c*1e3, d*1e3, d/b, g*1e3, o*1e3, p*1e3, pg*1e3, po*1e3}'
done
echo "predicted: the cost model on the $profile profile (step, GEMMs, other kernels)"
echo "ratio: PyTorch's median step time over Tapestry's (above 1: Tapestry faster); $(nvidia-smi -L | head -1)"
