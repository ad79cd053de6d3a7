#!/usr/bin/env bash
# The exports run on the frameworks' own models, where transformers, JAX and Flax are
# installed (a GPU machine's Python, say): every PLAN.json with its torch export PLAN.py
# in TORCH_DIR runs in run_plan.py on Hugging Face's LlamaForCausalLM / GPT2LMHeadModel
# (CPU gloo ranks), and every PLAN.json with its JAX export PLAN.py in JAX_DIR runs in
# run_jax.py on 8 host devices. Plans and exports are made beforehand with tapestry-cli
# (run_interop.sh leaves the torch ones in its WORKDIR).
#   tests/interop/run_frameworks.sh TORCH_DIR JAX_DIR [LOG_DIR]
# Prints one line per plan and a summary; exits non-zero when one fails.
set -u
here=$(cd "$(dirname "$0")" && pwd)
torch_dir=${1:?usage: run_frameworks.sh TORCH_DIR JAX_DIR [LOG_DIR]} jax_dir=${2:?}
logs=${3:-$(mktemp -d)}
mkdir -p "$logs"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONUNBUFFERED=1
failed=() passed=()

torch_case() {  # PLAN.json
  local plan=$1 name
  name=torch-$(basename "${plan%.json}")
  if TAPESTRY_INTEROP_MODELS=transformers timeout 300 python3 "$here/run_plan.py" "$plan" "${plan%.json}.py" \
      >"$logs/$name.log" 2>&1; then echo "PASS $name"; else echo "FAIL $name"; fi
}
jax_case() {  # PLAN.json
  local plan=$1 name
  name=jax-$(basename "${plan%.json}")
  if XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu timeout 300 \
      python3 "$here/run_jax.py" "$plan" "${plan%.json}.py" >"$logs/$name.log" 2>&1; then
    echo "PASS $name"; else echo "FAIL $name"; fi
}

# Up to four plans at a time: a plan has at most 8 ranks and the machines this runs on
# have 16 cores or more.
results=$(
  for plan in "$torch_dir"/*.json; do [[ -f ${plan%.json}.py ]] && echo "torch_case $plan"; done
  for plan in "$jax_dir"/*.json; do [[ -f ${plan%.json}.py ]] && echo "jax_case $plan"; done
)
export -f torch_case jax_case
export here logs
verdicts=$(xargs -P 4 -I{} bash -c '{}' <<<"$results")
while read -r verdict name; do
  [[ -z $name ]] && continue
  grep -E "^rank 0:|numerics|collectives|passed|FAILED|Error|error" "$logs/$name.log" | tail -8 | sed "s/^/$name: /"
  if [[ $verdict == PASS ]]; then passed+=("$name"); else failed+=("$name"); fi
done <<<"$(sort -k2 <<<"$verdicts")"
echo "frameworks: ${#passed[@]} passed (${passed[*]:-none}), ${#failed[@]} failed (${failed[*]:-none})"
[ ${#failed[@]} -eq 0 ]
