#!/usr/bin/env bash
# Benchmark of the memory techniques (not a CTest test): a GPT trained on 4
# MPI ranks (2x2 mesh, data-parallel and Megatron plans) under each
# technique, printing per rank the cost model's predicted memory (the plan
# costed for the float32 tensors and Adam moments tapestry-exec holds) and
# the measured one (the arena's high-water mark and the token ids), their
# ratio (target within ±10%), and the split into parameters, gradients,
# optimizer state and activations (measured: the rest of the arena).
#   tests/bench/bench_techniques.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
CLI=$BUILD/app/tapestry-cli
EXEC=$BUILD/executor/tapestry-exec
MODEL=${MODEL:-'zoo:gpt2?layers=4&batch=8&seq=64&hidden=128&heads=4&vocab=256&positions=64'}
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

configs=(
  "dp none 0 1"
  "dp selective 0 1"
  "dp full 0 1"
  "dp none 1 1"
  "dp none 2 1"
  "dp none 3 1"
  "dp none 0 2"
  "dp full 3 2"
  "megatron none 0 1"
  "megatron selective 0 1"
  "megatron full 0 1"
  "megatron none 3 1"
  "megatron none 0 4"
)
echo "model $MODEL, mesh 2x2, 4 ranks, Adam, float32"
printf '%-9s %-9s %-4s %-3s | %10s %10s %6s | %-42s | %s\n' search recompute zero mb predicted measured ratio \
  "predicted: param/grad/optim/activ (KiB)" "measured: param/grad/optim/activ+rest (KiB)"
i=0
for c in "${configs[@]}"; do
  read -r search recompute zero mb <<<"$c"
  plan="$work/plan$i.json"
  "$CLI" plan "$MODEL" --mesh 2x2 --search "$search" --mesh-profile cpu-loopback --flash-attention off \
    --recompute "$recompute" --zero "$zero" --micro-batches "$mb" --offload-optimizer off -o "$plan" >/dev/null
  mpirun --oversubscribe -np 4 "$EXEC" --model "$MODEL" --plan "$plan" --optimizer adam --steps 1 --warmup 0 \
    --report - --quiet >"$work/run$i.jsonl"
  python3 - "$work/run$i.jsonl" "$search" "$recompute" "$zero" "$mb" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
start = next(l for l in lines if l["event"] == "start")
s = next(l for l in lines if l["event"] == "summary")
p, m = start["predicted_memory_per_rank"], s["memory_per_rank"]
kib = lambda d: "/".join(f"{d[k] / 1024:.0f}" for k in ("parameters", "gradients", "optimizer", "activations"))
print(f"{sys.argv[2]:<9} {sys.argv[3]:<9} {sys.argv[4]:<4} {sys.argv[5]:<3} | {p['total']:>10} {s['peak_memory_bytes_per_rank']:>10} "
      f"{s['memory_predicted_over_measured']:>6.2f} | {kib(p):<42} | {kib(m)}")
PY
  i=$((i + 1))
done
