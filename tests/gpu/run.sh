#!/usr/bin/env bash
# The GPU verification suite: the executor's verified plan runs of
# tests/tst_planrun.cpp (Megatron's split of the tutorial MLP and ABC models,
# the 2D MLP on 4x2, a 2-layer GPT on 2 and 4 ranks) on --backend cuda, the
# GPT again with fp16 and bf16 GEMMs, the collectives self-test on device
# memory, a plan missing an all-reduce that verification must catch, and
# tst_cudabackend. With fewer GPUs than ranks, ranks share GPUs.
#
#   tests/gpu/run.sh [BUILD_DIR]    (default: build)
#
# Exit: 0 every case passed, 1 a case failed, 2 nothing to run (no build,
# a build without CUDA), 77 no GPU visible (the conventional "skipped").
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
EXEC=$BUILD/executor/tapestry-exec
CLI=$BUILD/app/tapestry-cli

if [[ ! -x $EXEC || ! -x $CLI ]]; then
  echo "tests/gpu/run.sh: $EXEC or $CLI missing: build first (cmake --build $BUILD)"
  exit 2
fi
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "tests/gpu/run.sh: skipped: no GPU visible (nvidia-smi is not installed)"
  exit 77
fi
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "tests/gpu/run.sh: skipped: no GPU visible (nvidia-smi lists none)"
  exit 77
fi
GPUS=$(nvidia-smi -L | grep -c '^GPU ')

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
MPIRUN=(mpirun --oversubscribe)

# tapestry-exec says itself whether it has a cuda backend and sees a GPU
# (cudaGetDeviceCount): a one-rank self-test on it.
if ! probe=$("${MPIRUN[@]}" -np 1 "$EXEC" --self-test collectives --mesh 1 --backend cuda 2>&1); then
  echo "tests/gpu/run.sh: tapestry-exec cannot run on the GPU:"
  grep '^tapestry-exec:' <<<"$probe"
  if grep -q 'built without CUDA' <<<"$probe"; then exit 2; fi
  exit 77
fi
echo "tests/gpu/run.sh: $GPUS GPU(s): $(nvidia-smi -L | head -1)"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
GPT='zoo:gpt2?layers=2&hidden=64&heads=4&vocab=128&seq=16&batch=2'
failures=0

plan() {  # MODEL MESH -> a megatron plan file
  local file
  file="$WORK/$(echo "$1$2" | tr -c 'a-z0-9' '_').json"
  [[ -f $file ]] || "$CLI" plan "$1" --mesh "$2" --search megatron -o "$file" >/dev/null || return 1
  echo "$file"
}

verify() {  # NAME RANKS MODEL PLAN [tapestry-exec options...]
  local name=$1 ranks=$2 model=$3 planfile=$4
  shift 4
  local out="$WORK/out.json" err="$WORK/err.txt"
  "${MPIRUN[@]}" -np "$ranks" "$EXEC" --backend cuda --model "$model" --plan "$planfile" --verify \
    --steps 3 --report - "$@" >"$out" 2>"$err"
  local rc=$?
  if summary=$(python3 - "$out" <<'PY'
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
s = [j for j in s if j.get("event") == "summary"]
if not s or not s[-1].get("verification", {}).get("passed"):
    sys.exit(1)
j = s[-1]
v = j["verification"]
print(f'error {v["max_relative_error"]:.2e} (tolerance {v["tolerance"]:g}), '
      f'{j["step_time_s"]*1e3:.2f} ms/step, {j["tflops_per_rank"]:.3f} TFLOP/s per rank '
      f'({100*j["fraction_of_peak"]:.2f}% of {j["device_peak_tflops"]:.0f}), {j["device"]}')
PY
  ) && [[ $rc -eq 0 ]]; then
    echo "PASS  $name: $summary"
  else
    echo "FAIL  $name (exit $rc)"
    grep '^tapestry-exec:' "$err" | head -5 | sed 's/^/      /'
    failures=$((failures + 1))
  fi
}

verify "mlp megatron 2" 2 zoo:mlp "$(plan zoo:mlp 2)"
verify "mlp megatron 4" 4 zoo:mlp "$(plan zoo:mlp 4)"
verify "abc megatron 2" 2 zoo:abc "$(plan zoo:abc 2)"
verify "mlp 2D 4x2" 8 zoo:mlp samples/plans/mlp-2d-4x2.json
verify "gpt megatron 2" 2 "$GPT" "$(plan "$GPT" 2)"
verify "gpt megatron 4" 4 "$GPT" "$(plan "$GPT" 4)"
verify "gpt megatron 2 fp16" 2 "$GPT" "$(plan "$GPT" 2)" --precision fp16
verify "gpt megatron 2 bf16" 2 "$GPT" "$(plan "$GPT" 2)" --precision bf16
verify "gpt megatron 2 adam" 2 "$GPT" "$(plan "$GPT" 2)" --optimizer adam

# A plan missing an all-reduce must fail verification on the GPU too.
"${MPIRUN[@]}" -np 2 "$EXEC" --backend cuda --model "$GPT" --plan "$(plan "$GPT" 2)" --verify --steps 1 \
  --test-drop-collective 1 >/dev/null 2>"$WORK/err.txt"
rc=$?
if [[ $rc -eq 1 ]] && grep -q 'verification FAILED' "$WORK/err.txt"; then
  echo "PASS  dropped all-reduce fails verification"
else
  echo "FAIL  dropped all-reduce fails verification (exit $rc)"
  failures=$((failures + 1))
fi

for case in 2:2 2x2:4; do
  mesh=${case%%:*} ranks=${case#*:}
  if "${MPIRUN[@]}" -np "$ranks" "$EXEC" --backend cuda --self-test collectives --mesh "$mesh" \
       >"$WORK/self.json" 2>"$WORK/err.txt" && ! grep -q '"ok":false' "$WORK/self.json"; then
    echo "PASS  collectives self-test on $mesh"
  else
    echo "FAIL  collectives self-test on $mesh"
    grep '"ok":false' "$WORK/self.json" | head -3 | sed 's/^/      /'
    failures=$((failures + 1))
  fi
done

if [[ -x $BUILD/tests/tst_cudabackend ]]; then
  # The executor of this build, wherever it was unpacked (the test's own path is the build's).
  if TAPESTRY_EXEC=$(realpath "$EXEC") "$BUILD/tests/tst_cudabackend" >"$WORK/tst.txt" 2>&1; then
    echo "PASS  tst_cudabackend"
  else
    echo "FAIL  tst_cudabackend"
    grep -E -A3 '^(FAIL|SKIP)' "$WORK/tst.txt" | sed 's/^/      /'
    failures=$((failures + 1))
  fi
fi

if ((failures)); then
  echo "tests/gpu/run.sh: $failures case(s) failed"
  exit 1
fi
echo "tests/gpu/run.sh: every case passed"
