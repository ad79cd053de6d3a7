#!/usr/bin/env bash
# Tapestry's torch exports run in PyTorch 2.x: for each plan below, `tapestry-cli plan`,
# `tapestry-cli export --to torch`, then run_plan.py on one CPU gloo rank per device in
# the torch root (torch_root.sh), checking the loss and every gradient against the
# unsharded model and the collectives torch issues against the plan's.
#   tests/interop/run_interop.sh CLI [WORKDIR]   (WORKDIR under the repository; default build/interop)
# Prints one line per plan and a summary; exits non-zero when a plan fails or the torch
# root cannot be made.
set -u
cd "$(dirname "$0")/../.."
cli=${1:?usage: run_interop.sh CLI [WORKDIR]}
work=${2:-build/interop}
mkdir -p "$work"
# The root sees the repository at /work: the plans and exports are named from there.
work=$(realpath --relative-to=. "$work")
case "$work" in ../*|/*) echo "interop: $work: WORKDIR must be inside the repository"; exit 1 ;; esac
if ! root=$(tests/interop/torch_root.sh 2>"$work/torch_root.log"); then
  cat "$work/torch_root.log" >&2
  echo "interop: FAILED: no PyTorch 2.x root, so no export was run (see above)"
  exit 1
fi

llama="zoo:llama3-8b?layers=2&hidden=64&heads=4&kv_heads=2&ffn=128&vocab=256&seq=16&batch=4"
llama4="zoo:llama3-8b?layers=2&hidden=64&heads=4&kv_heads=4&ffn=128&vocab=256&seq=16&batch=4"
wide="zoo:llama3-8b?layers=2&hidden=512&heads=8&kv_heads=4&ffn=1024&vocab=512&seq=128&batch=32"
gpt2="zoo:gpt2?layers=2&hidden=64&heads=4&ffn=128&vocab=256&seq=16&batch=4&positions=16"
fixed=(--flash-attention on --zero 0 --recompute none --micro-batches 1 --offload-optimizer off)

failed=() passed=() notrun=() ran_sid=
in_root=()
run() {  # NAME PLAN-ARGS...
  local name=$1; shift
  local plan="$work/$name.json" export="$work/$name.py" log="$work/$name.log"
  if ! "$cli" plan "$@" -o "$plan" >"$log" 2>&1 || ! "$cli" export "$plan" --to torch -o "$export" >>"$log" 2>&1; then
    echo "interop: $name: FAILED to plan or export:"; tail -3 "$log"; failed+=("$name"); return
  fi
  in_torch "$name" "$plan" "$export" "$log"
}
in_torch() {  # NAME PLAN EXPORT LOG: run_plan.py in the torch root ($in_root: the root's environment)
  if env "${in_root[@]}" tests/interop/torch_root.sh run python3 tests/interop/run_plan.py "$2" "$3" >>"$4" 2>&1; then
    passed+=("$1")
  else
    failed+=("$1")
  fi
  grep -E "^rank 0:|passed|FAILED|Error" "$4" | sed "s/^/interop: $1: /"
}

run megatron "$llama" --mesh 2 --search megatron "${fixed[@]}"
run megatron-sp "$llama4" --mesh 4 --search megatron --sequence-parallel "${fixed[@]}"
run tap-1d "$llama" --mesh 2 --memory-gib 0.0012 "${fixed[@]}"
# A pin: layer 0's down_proj held row-parallel, tap searching around it.
if "$cli" plan "$llama" --mesh 2 --memory-gib 0.0015 "${fixed[@]}" -o "$work/unpinned.json" >/dev/null 2>&1; then
  python3 - "$work/unpinned.json" "$work/pins.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
plan["specs"]["model.layers.0.mlp.down_proj.weight"] = {"placements": ["Shard(0)"], "source": "override"}
json.dump(plan, open(sys.argv[2], "w"))
PY
fi
run tap-pinned "$llama" --mesh 2 --memory-gib 0.0015 --keep-pins "$work/pins.json" "${fixed[@]}"
run recompute "$llama" --mesh 2 --search megatron --sequence-parallel --flash-attention on --zero 0 \
  --recompute full --micro-batches 1 --offload-optimizer off
run tap-2d "$wide" --mesh 2x2 --axes data,model "${fixed[@]}"
# GPT-2 as Hugging Face builds it: Conv1D projections, q, k and v fused in c_attn.
run gpt2-megatron "$gpt2" --mesh 2 --search megatron "${fixed[@]}"
run gpt2-tap "$gpt2" --mesh 4 --memory-gib 0.001 "${fixed[@]}"

# Pipelines, one rank a stage (torch.distributed.pipelining): the shape search's
# plan of 2 stages, its schedule and cuts set, costed again and exported.
pipelined() {  # NAME MODEL SCHEDULE CHUNKS-PER-STAGE CUTS
  local name=$1 model=$2 schedule=$3 chunks=$4 cuts=$5
  local plan="$work/$name.json" export="$work/$name.py" log="$work/$name.log"
  if ! "$cli" plan "$model" --devices 2 --pipeline-stages 2 --tensor-parallel 1 --flash-attention on --recompute none \
         -o "$work/$name-shaped.json" >"$log" 2>&1 ||
     ! python3 - "$work/$name-shaped.json" "$work/$name-edited.json" "$schedule" "$chunks" "$cuts" <<'PY' ||
import json, sys
plan = json.load(open(sys.argv[1]))
plan["pipeline"].update(schedule=sys.argv[3], virtual_stages=int(sys.argv[4]), cuts=json.loads(sys.argv[5]))
plan["techniques"]["micro_batches"] = 4
json.dump(plan, open(sys.argv[2], "w"))
PY
     ! "$cli" cost "$model" "$work/$name-edited.json" -o "$plan" >>"$log" 2>&1 ||
     ! "$cli" export "$plan" --to torch -o "$export" >>"$log" 2>&1; then
    echo "interop: $name: FAILED to plan or export:"; tail -3 "$log"; failed+=("$name"); return
  fi
  in_torch "$name" "$plan" "$export" "$log"
}
llama4layers="zoo:llama3-8b?layers=4&hidden=64&heads=4&kv_heads=2&ffn=128&vocab=256&seq=16&batch=4"
pipelined pipeline-1f1b "$llama" 1f1b 1 '[1]'
pipelined pipeline-interleaved "$llama4layers" interleaved 2 '[1, 2, 3]'

# FSDP: ZeRO as fully_shard over the data axis, each weight gradient reduce-scattered;
# ZeRO-1 gathers each updated parameter for the forward pass, ZeRO-3 for the forward
# and again for the backward pass. FSDP2
# runs on CPU from torch 2.11 only (2.6's streams record no events on CPU), so this
# case runs in a Debian sid root, made and cached as the other (TAPESTRY_TORCH_SID_ROOT,
# default /var/tmp/tapestry-torch-sid). Where sid's torch cannot be installed that
# day, the summary says the cases were not run.
sid=${TAPESTRY_TORCH_SID_ROOT:-/var/tmp/tapestry-torch-sid}
if TAPESTRY_TORCH_ROOT=$sid TAPESTRY_TORCH_SUITE=sid tests/interop/torch_root.sh >"$work/torch_root_sid.log" 2>&1; then
  in_root=(TAPESTRY_TORCH_ROOT="$sid" TAPESTRY_TORCH_SUITE=sid) ran_sid=1
  for stage in 1 3; do
    run fsdp-zero$stage "$wide" --mesh 2x2 --axes data,model --flash-attention on --zero $stage --recompute none \
      --micro-batches 1 --offload-optimizer off
  done
  in_root=()
else
  sed 's/^/interop: fsdp: /' "$work/torch_root_sid.log"
  notrun+=("fsdp-zero1 fsdp-zero3 (no Debian sid root with torch 2.11 or later)")
fi

echo "interop: ${#passed[@]} passed (${passed[*]:-none}), ${#failed[@]} failed (${failed[*]:-none})${notrun:+, not run: ${notrun[*]}}; PyTorch from $root${ran_sid:+ and $sid}"
[ ${#failed[@]} -eq 0 ]
