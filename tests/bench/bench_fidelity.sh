#!/usr/bin/env bash
# Fidelity of the cost model (not a CTest test): calibrate this machine with
# tapestry-exec --calibrate on N ranks, then run a fixed set of plans (1D
# and 2D meshes; tap, megatron with and without sequence parallelism, dp,
# replicate; recomputation, ZeRO and micro-batches; a pipeline of one rank
# a stage) on N ranks, each
# predicted with the calibrated profile, and print per plan the predicted
# and measured step times and their ratio, the measured and predicted peak
# memory per rank, and over all plans the mean absolute percentage error,
# the largest error and Spearman's rank correlation of predicted against
# measured step times.
#   tests/bench/bench_fidelity.sh [BUILD_DIR] [RANKS...]   (default: build 2)
# STEPS (default 5) steps are measured per run after the executor's warm-up,
# ROUNDS (default 2) runs per plan, the measurement the least of the runs'
# median steps;
# PROFILE=NAME|FILE predicts with that mesh profile instead of calibrating
# (PROFILE=cpu-loopback: the shipped one).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
shift || true
RANKS=${*:-2}
CLI=$BUILD/app/tapestry-cli
EXEC=$BUILD/executor/tapestry-exec
STEPS=${STEPS:-5}
ROUNDS=${ROUNDS:-2}
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
GPT_S='zoo:gpt2?layers=2&hidden=256&heads=4&seq=64&batch=4&vocab=1024'
GPT_M='zoo:gpt2?layers=2&hidden=512&heads=8&seq=128&batch=4&vocab=2048'
LLAMA='zoo:llama3-8b?layers=2&hidden=256&heads=4&kv_heads=2&ffn=768&seq=64&batch=4&vocab=1024'
# model | plan options (mesh added per rank count; 2D plans on 4 ranks and more)
PLANS=(
  "$GPT_S|--search tap"
  "$GPT_S|--search megatron"
  "$GPT_S|--search dp"
  "$GPT_S|--search replicate"
  "$GPT_M|--search tap"
  "$GPT_M|--search megatron"
  "$GPT_M|--search megatron --sequence-parallel"
  "$GPT_M|--search dp"
  "$GPT_M|--search dp --zero 3"
  "$GPT_M|--search megatron --recompute full"
  "$GPT_M|--search dp --micro-batches 2"
  "$LLAMA|--search tap"
  "$LLAMA|--search megatron"
  "$GPT_M|PIPELINE"
)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for np in $RANKS; do
  profile=${PROFILE:-$work/calibrated-$np.json}
  if [ -z "${PROFILE:-}" ]; then
    mpirun --oversubscribe -np "$np" "$EXEC" --calibrate "$profile" --name "calibrated-$np" >/dev/null 2>&1
  fi
  meshes=("$np")
  if [ "$np" -ge 4 ] && [ $((np % 2)) -eq 0 ]; then meshes+=("2x$((np / 2))"); fi
  : >"$work/results-$np.txt"
  for mesh in "${meshes[@]}"; do
    for entry in "${PLANS[@]}"; do
      model=${entry%%|*}
      options=${entry#*|}
      shape=(--mesh "$mesh")
      if [ "$options" = PIPELINE ]; then
        # A pipeline of one rank a stage, its shape searched (schedule,
        # micro-batches, cuts): on the 1D round only.
        [ "$mesh" = "$np" ] || continue
        options="--pipeline-stages $np --tensor-parallel 1"
        shape=(--devices "$np")
      fi
      label="$(echo "$model" | sed -E 's/^zoo:([^?]*)\?.*hidden=([0-9]+).*/\1 h\2/') $options on $mesh"
      # shellcheck disable=SC2086
      if ! "$CLI" plan "$model" "${shape[@]}" $options --mesh-profile "$profile" \
           -o "$work/plan.json" >/dev/null 2>"$work/plan.err"; then
        echo "skipped: $label: $(tail -1 "$work/plan.err")" >&2
        continue
      fi
      failed=""
      : >"$work/run.jsonl"
      for round in $(seq "$ROUNDS"); do
        if ! mpirun --oversubscribe -np "$np" "$EXEC" --model "$model" --plan "$work/plan.json" --steps "$STEPS" \
             --mesh-profile "$profile" --report - --quiet >>"$work/run.jsonl" 2>"$work/run.err"; then
          failed=1
          break
        fi
      done
      if [ -n "$failed" ]; then
        echo "failed: $label: $(tail -1 "$work/run.err")" >&2
        continue
      fi
      python3 - "$work/run.jsonl" "$label" >>"$work/results-$np.txt" <<'PY'
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
s = [l for l in lines if l.get("event") == "summary"][-1]
# Per run the median of its steps, over the runs the least: a busy moment
# of this 2-core machine stretches a step, or a whole run, never shortens one.
runs, steps = [], []
for l in lines:
    if l.get("event") == "step":
        steps.append(l["step_time_s"])
    elif l.get("event") == "summary":
        runs.append(statistics.median(steps) if steps else l["step_time_s"])
        steps = []
measured = min(runs)
print(json.dumps({"label": sys.argv[2], "predicted": s["predicted_step_time_s"], "measured": measured,
                  "memory": s.get("peak_memory_bytes_per_rank", 0),
                  "predicted_memory": s.get("predicted_memory_bytes_per_rank", 0)}))
PY
    done
  done
  python3 - "$work/results-$np.txt" "$np" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"\n{sys.argv[2]} ranks ({'oversubscribed' if int(sys.argv[2]) > 2 else 'one rank per core'} on this machine)")
print(f"{'plan':<58} {'predicted':>10} {'measured':>10} {'ratio':>6} {'mem pred/meas':>14}")
for r in rows:
    m = r["predicted_memory"] / r["memory"] if r["memory"] else 0
    print(f"{r['label']:<58} {r['predicted']*1e3:8.2f}ms {r['measured']*1e3:8.2f}ms {r['predicted']/r['measured']:6.2f} {m:14.2f}")
def ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2
        i = j + 1
    return r
if len(rows) >= 2:
    errors = [abs(r["predicted"] / r["measured"] - 1) for r in rows]
    p, m = ranks([r["predicted"] for r in rows]), ranks([r["measured"] for r in rows])
    n = len(rows)
    mp, mm = sum(p) / n, sum(m) / n
    cov = sum((a - mp) * (b - mm) for a, b in zip(p, m))
    sd = (sum((a - mp) ** 2 for a in p) * sum((b - mm) ** 2 for b in m)) ** 0.5
    mem = [abs(r["predicted_memory"] / r["memory"] - 1) for r in rows if r["memory"]]
    print(f"plans {n}: step time mean absolute error {100 * sum(errors) / n:.1f}%, largest {100 * max(errors):.1f}%, "
          f"Spearman {cov / sd if sd else 0:.3f}; memory mean absolute error "
          f"{100 * sum(mem) / max(1, len(mem)):.1f}%, largest {100 * max(mem, default=0):.1f}%")
PY
done
