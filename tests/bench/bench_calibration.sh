#!/usr/bin/env bash
# Benchmark of calibration (issue 11's target; not a CTest test): for N
# ranks, calibrate this machine with tapestry-exec --calibrate on N ranks,
# then plan the tests' transformers (tap) with the shipped cpu-loopback
# profile and with the calibrated one, run each plan on N ranks and print
# the cost model's predicted step time against the measured one.
#   tests/bench/bench_calibration.sh [BUILD_DIR] [RANKS...]   (default: build 2 4)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
shift || true
RANKS=${*:-2 4}
CLI=$BUILD/app/tapestry-cli
EXEC=$BUILD/executor/tapestry-exec
STEPS=${STEPS:-5}
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MODELS=(
  'zoo:gpt2?layers=2&hidden=64&heads=4&vocab=128&seq=16&batch=2'
  'zoo:gpt2?layers=2&hidden=256&heads=4&seq=64&batch=2&vocab=512'
  'zoo:gpt2?layers=2&hidden=256&heads=4&seq=128&batch=4&vocab=1024'
  'zoo:gpt2?layers=2&hidden=512&heads=8&seq=128&batch=2&vocab=2048'
)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

printf '%-5s %-62s %-13s %10s %10s %8s\n' ranks model profile predicted measured pred/meas
for np in $RANKS; do
  mpirun --oversubscribe -np "$np" "$EXEC" --calibrate "$work/calibrated-$np.json" --name "calibrated-$np" 2>/dev/null
  for model in "${MODELS[@]}"; do
    for profile in cpu-loopback "$work/calibrated-$np.json"; do
      "$CLI" plan "$model" --mesh "$np" --search tap --mesh-profile "$profile" -o "$work/plan.json" >/dev/null
      mpirun --oversubscribe -np "$np" "$EXEC" --model "$model" --plan "$work/plan.json" --steps "$STEPS" \
        --mesh-profile "$profile" --report - --quiet >"$work/run.jsonl"
      python3 - "$work/run.jsonl" "$np" "$model" "$(basename "$profile" .json)" <<'PY'
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' in l][-1]
p, m = s["predicted_step_time_s"], s["step_time_s"]
print(f"{sys.argv[2]:<5} {sys.argv[3]:<62} {sys.argv[4]:<13} {p*1e3:8.2f}ms {m*1e3:8.2f}ms {p/m:8.2f}")
PY
    done
  done
done
