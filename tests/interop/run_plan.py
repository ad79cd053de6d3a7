"""Runs a Tapestry plan's torch export on CPU gloo ranks and checks it against the
unsharded model and against the plan.

    python3 run_plan.py PLAN.json EXPORT.py
    TAPESTRY_INTEROP_MODELS=transformers python3 run_plan.py PLAN.json EXPORT.py

PLAN.json is a tapestry.plan for a zoo model given with every knob
("zoo:llama3-8b?layers=2&hidden=64&heads=4&kv_heads=2&ffn=128&vocab=256&seq=16&batch=4",
or zoo:gpt2 with positions); EXPORT.py is `tapestry-cli export PLAN.json --to torch`.
One rank per device of the plan's mesh runs a training step (forward, loss,
backward, SGD step) of the model of tests/interop/hf_models.py (Hugging Face's own
LlamaForCausalLM and GPT2LMHeadModel from transformers with
TAPESTRY_INTEROP_MODELS=transformers) with the export
applied (build_mesh, parallelize, batch_slice, loss_context), and checks:
  - the loss and every parameter's gradient equal the unsharded model's
    (float32, 1e-5 relative to the largest element);
  - the collectives torch issues (CommDebugMode) equal, per phase and kind, the
    collectives the plan costs (its "collectives" list): forward, and backward
    with the optimizer step.
Prints one line per check and exits non-zero when one fails.
"""
import copy
import importlib.util
import json
import os
import socket
import sys
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models  # noqa: E402
from zoo_source import model_of  # noqa: E402

TOLERANCE = 1e-5

# CommDebugMode's op names by the plan's collective kinds.
KINDS = {
    "all_reduce": "all-reduce", "allreduce_": "all-reduce", "allreduce_coalesced_": "all-reduce",
    "all_gather_into_tensor": "all-gather", "_allgather_base_": "all-gather", "allgather_": "all-gather",
    "allgather_into_tensor_coalesced_": "all-gather", "all_gather_into_tensor_coalesced": "all-gather",
    "reduce_scatter_tensor": "reduce-scatter", "_reduce_scatter_base_": "reduce-scatter",
    "reduce_scatter_": "reduce-scatter", "reduce_scatter_tensor_coalesced_": "reduce-scatter",
    "reduce_scatter_tensor_coalesced": "reduce-scatter",
    "all_to_all_single": "all-to-all", "alltoall_": "all-to-all", "alltoall_base_": "all-to-all",
}


def collective_counter():
    """CommDebugMode's count of collectives by the plan's kinds. CommDebugMode
    also tracks modules, which torch 2.6's tracker cannot do through activation
    checkpointing; the counting alone is the same dispatch mode without it."""
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.debug import _comm_mode as comm_mode
    from torch.distributed.tensor import DTensor
    from torch.utils._python_dispatch import TorchDispatchMode

    try:
        collectives = set(comm_mode.c10d_collective_ops) | set(comm_mode.NATIVE_TO_PY_MAPPING) | set(
            CommDebugMode().comm_registry)
    except AttributeError:  # a torch whose CommDebugMode keeps them elsewhere: by namespace
        collectives = None
    namespaces = ("c10d", "_c10d_functional", "c10d_functional", "_c10d_functional_autograd", "_dtensor")
    quiet = ("wait_tensor", "barrier", "monitored_barrier_")

    class Counter(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.counts = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if any(t == DTensor for t in types):
                return NotImplemented  # DTensor dispatches it, and the mode sees its local collectives
            packet = func._overloadpacket
            space, _, op = str(packet).rpartition(".")
            if packet in collectives if collectives is not None else (space in namespaces and op not in quiet):
                name = str(packet).split(".")[-1]
                kind = KINDS.get(name)
                if kind is None:
                    raise RuntimeError(f"unknown collective {packet}")
                self.counts[kind] = self.counts.get(kind, 0) + 1
            return func(*args, **(kwargs or {}))

    return Counter()


def _set_up(rank, world, port, plan_file, export_file):
    """This rank in the gloo group; the plan's model (its knobs), the export as a module,
    the unsharded reference, this rank's copy to apply the export to, and the batch."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    plan = json.load(open(plan_file))
    family, c = model_of(plan["model"]["source"], "run_plan")
    spec = importlib.util.spec_from_file_location("tapestry_export", export_file)
    export = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(export)

    torch.manual_seed(0)
    reference = hf_models.build(family, c, os.environ.get("TAPESTRY_INTEROP_MODELS", "twin"))
    model = copy.deepcopy(reference)
    ids = torch.randint(0, c["vocab"], (c["batch"], c["seq"]))
    labels = torch.randint(0, c["vocab"], (c["batch"], c["seq"]))
    return c, export, reference, model, ids, labels


def rank_main(rank, world, port, plan_file, export_file, results):
    try:
        from torch.distributed.tensor import DTensor

        c, export, reference, model, ids, labels = _set_up(rank, world, port, plan_file, export_file)

        mesh = export.build_mesh("cpu")
        export.parallelize(model, mesh)
        mine = export.batch_slice(mesh, c["batch"])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

        # A step as the export's docstring has a training script run it: this
        # rank's samples in micro-batches, gradients synchronised after the last.
        forward, backward = collective_counter(), collective_counter()
        total = None
        parts = list(export.micro_batches_of(ids[mine], labels[mine]))
        for k, (inputs, targets) in enumerate(parts):
            with export.loss_context(), export.accumulating(model, last=k == len(parts) - 1):
                with forward:
                    logits = hf_models.logits_of(model(inputs))
                    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten()) / len(parts)
                with backward:
                    loss.backward()
            total = loss.detach() if total is None else total + loss.detach()
        with export.loss_context():
            with forward:
                reported = export.global_loss(total, mesh)
        with backward:
            optimizer.step()

        ref_loss = F.cross_entropy(hf_models.logits_of(reference(ids)).flatten(0, 1), labels.flatten())
        ref_loss.backward()
        value = reported.item()
        errors = {"loss": abs(value - ref_loss.item()) / max(abs(ref_loss.item()), 1e-12)}
        expected = dict(reference.named_parameters())
        for name, param in model.named_parameters():
            name = name.replace("_checkpoint_wrapped_module.", "").replace("_fsdp_wrapped_module.", "")
            grad = param.grad.full_tensor() if isinstance(param.grad, DTensor) else param.grad
            if hasattr(export, "to_hf_layout"):  # a fused projection's columns, reordered by parallelize
                grad = export.to_hf_layout(name, grad)
            want = expected[name].grad
            errors[name] = ((grad - want).abs().max() / want.abs().max().clamp_min(1e-12)).item()
        results[rank] = {"errors": errors, "forward": forward.counts, "backward": backward.counts}
        dist.destroy_process_group()
    except Exception:
        results[rank] = {"failure": traceback.format_exc()}


def _wait_for_every_p2p():
    """torch 2.6's schedules fuse a step's sends and receives in one batch_isend_irecv
    and wait on its last work only; NCCL's batch is one work, gloo's one per op, so on
    gloo ranks 1F1B and the interleaved schedule hang. Here every work of a batch is
    waited on (the schedules' own order, on the CPU ranks this test has)."""
    from torch.distributed.pipelining import schedules

    def batch_p2p(ops, desc=None):
        if not ops:
            return None
        works = dist.batch_isend_irecv(ops)

        class Every:
            def wait(self):
                for work in works:
                    work.wait()

        return Every()

    schedules._batch_p2p = batch_p2p


def rank_pipeline(rank, world, port, plan_file, export_file, results):
    """A pipelined plan's step: this rank's chunks (pipeline_chunks) under the plan's
    schedule (pipeline_schedule) on the whole batch, checked against the unsharded
    model: the loss on the last stage, each chunk's parameters' gradients where they are."""
    try:
        c, export, reference, model, ids, labels = _set_up(rank, world, port, plan_file, export_file)

        def loss_fn(output, target):
            return F.cross_entropy(hf_models.logits_of(output).flatten(0, 1), target.flatten())

        _wait_for_every_p2p()
        chunks = export.pipeline_chunks(model, rank)
        schedule = export.pipeline_schedule(chunks, rank, loss_fn, torch.device("cpu"))
        losses = []
        last = export.is_last(rank)
        if rank == 0:
            schedule.step(ids, target=labels, losses=losses) if last else schedule.step(ids)
        elif last:
            schedule.step(target=labels, losses=losses)
        else:
            schedule.step()

        ref_loss = F.cross_entropy(hf_models.logits_of(reference(ids)).flatten(0, 1), labels.flatten())
        ref_loss.backward()
        errors = {}
        if last:
            errors["loss"] = abs(export.pipeline_loss(losses).item() - ref_loss.item()) / max(abs(ref_loss.item()), 1e-12)
        expected = dict(reference.named_parameters())
        own = {id(p) for chunk in chunks for p in chunk.parameters()}
        for name, param in model.named_parameters():
            if id(param) not in own:
                continue
            want = expected[name].grad
            errors[name] = ((param.grad - want).abs().max() / want.abs().max().clamp_min(1e-12)).item()
        results[rank] = {"errors": errors, "forward": {}, "backward": {}}
        dist.destroy_process_group()
    except Exception:
        results[rank] = {"failure": traceback.format_exc()}


def plan_counts(plan):
    phases = {"forward": {}, "backward": {}}
    for c in plan["collectives"]:
        phase = "forward" if c["phase"] == "forward" else "backward"
        phases[phase][c["kind"]] = phases[phase].get(c["kind"], 0) + 1
    return phases


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    plan_file, export_file = sys.argv[1], sys.argv[2]
    plan = json.load(open(plan_file))
    world = 1
    for axis in plan["mesh"]["axes"]:
        world *= axis["size"]
    # A pipeline: one rank a stage, sending activations point to point (no
    # collective to count).
    pipelined = bool(plan.get("pipeline"))
    if pipelined:
        world *= plan["pipeline"]["stages"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results = mp.Manager().dict()
    mp.start_processes(rank_pipeline if pipelined else rank_main, args=(world, port, plan_file, export_file, results),
                       nprocs=world, start_method="spawn")
    want = {"forward": {}, "backward": {}} if pipelined else plan_counts(plan)
    ok = True
    for rank in range(world):
        r = results.get(rank)
        if r is None or "failure" in r:
            print(f"rank {rank}: FAILED\n{r['failure'] if r else 'no result'}")
            ok = False
            continue
        worst = max(r["errors"], key=r["errors"].get)
        good = r["errors"][worst] <= TOLERANCE
        ok &= good
        if rank == 0 or not good:
            checked = f"loss and {len(r['errors']) - 1}" if "loss" in r["errors"] else f"{len(r['errors'])}"
            print(f"rank {rank}: numerics {'ok' if good else 'WRONG'}: {checked} gradients, "
                  f"worst {worst} {r['errors'][worst]:.2e} (tolerance {TOLERANCE:g})")
            wrong = sorted(name for name, error in r["errors"].items() if error > TOLERANCE)
            if wrong:
                print(f"rank {rank}: {len(wrong)} wrong: {', '.join(wrong[:6])}{', ...' if len(wrong) > 6 else ''}")
        for phase in ("forward", "backward"):
            same = r[phase] == want[phase]
            ok &= same
            if rank == 0 or not same:
                print(f"rank {rank}: {phase} collectives {'ok' if same else 'DIFFER'}: torch {dict(sorted(r[phase].items()))}, "
                      f"plan {dict(sorted(want[phase].items()))}")
    models = os.environ.get("TAPESTRY_INTEROP_MODELS", "twin")
    models = f"transformers {__import__('transformers').__version__}" if models == "transformers" else "the twin models"
    print(f"{os.path.basename(plan_file)}: {'passed' if ok else 'FAILED'} on {world} gloo ranks, torch {torch.__version__}, "
          f"{models}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
