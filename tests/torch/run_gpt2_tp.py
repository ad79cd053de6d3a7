# Runs an exported Tapestry torch plan (tapestry-cli export --to torch) on 4 CPU
# gloo ranks with PyTorch 2.x and checks the sharded forward and backward
# against the unsharded module, and that the tensor-parallel group holds the
# ranks the plan puts on its axis. The module is GPT-2 shaped with the names of
# zoo:gpt2?layers=1&hidden=64&heads=4&vocab=256 (batch and sequence do not
# matter), for example:
#   tapestry-cli plan 'zoo:gpt2?layers=1&hidden=64&heads=4&vocab=256&seq=32&batch=4' \
#       --mesh '2x2 (model, data)' --search megatron -o p.json
#   tapestry-cli export p.json --to torch -o tp_plan.py
#   python3 tests/torch/run_gpt2_tp.py tp_plan.py
import os, sys, importlib.util, torch, torch.nn as nn, torch.nn.functional as F
import torch.distributed as dist
from torch.distributed.tensor.parallel import parallelize_module
from torch.distributed.tensor import DTensor

H, HEADS, V, S, B = 64, 4, 256, 32, 4
class Attn(nn.Module):
    def __init__(s):
        super().__init__()
        s.q_proj, s.k_proj, s.v_proj, s.out_proj = (nn.Linear(H, H) for _ in range(4))
    def forward(s, x):
        b, t, _ = x.shape
        hd = H // HEADS
        q = s.q_proj(x).view(b, t, -1, hd).transpose(1, 2)
        k = s.k_proj(x).view(b, t, -1, hd).transpose(1, 2)
        v = s.v_proj(x).view(b, t, -1, hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return s.out_proj(y.transpose(1, 2).reshape(b, t, -1))
class Mlp(nn.Module):
    def __init__(s):
        super().__init__(); s.fc_in = nn.Linear(H, 4 * H); s.fc_out = nn.Linear(4 * H, H)
    def forward(s, x): return s.fc_out(F.gelu(s.fc_in(x)))
class Block(nn.Module):
    def __init__(s):
        super().__init__(); s.ln_1 = nn.LayerNorm(H); s.attn = Attn(); s.ln_2 = nn.LayerNorm(H); s.mlp = Mlp()
    def forward(s, x):
        x = x + s.attn(s.ln_1(x)); return x + s.mlp(s.ln_2(x))
class Body(nn.Module):
    def __init__(s):
        super().__init__(); s.wte = nn.Embedding(V, H); s.h = nn.ModuleList([Block()]); s.ln_f = nn.LayerNorm(H)
class Gpt(nn.Module):
    def __init__(s):
        super().__init__(); s.transformer = Body(); s.lm_head = nn.Linear(H, V, bias=False)
    def forward(s, ids):
        x = s.transformer.wte(ids)
        for blk in s.transformer.h: x = blk(x)
        return s.lm_head(s.transformer.ln_f(x))

def full(t): return t.full_tensor() if isinstance(t, DTensor) else t

def main(rank, world, planfile):
    sys.argv[1:] = [planfile]
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29533", rank=rank, world_size=world)
    spec = importlib.util.spec_from_file_location("tp_plan", sys.argv[1]); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    mesh = m.device_mesh("cpu")
    # The tensor-parallel group holds the ranks the plan puts on that axis.
    import itertools
    tp = list(m.mesh_dim_names).index(m.tp_mesh_dim)
    coords = list(itertools.product(*[range(n) for n in m.mesh_shape]))
    mine = coords[rank]
    expected = sorted(r for r, c in enumerate(coords) if all(c[d] == mine[d] for d in range(len(c)) if d != tp))
    got = sorted(dist.get_process_group_ranks(mesh[m.tp_mesh_dim].get_group()))
    assert got == expected, (rank, got, expected)
    torch.manual_seed(0); ref = Gpt(); model = Gpt(); model.load_state_dict(ref.state_dict())
    parallelize_module(model, mesh[m.tp_mesh_dim], m.plan)
    torch.manual_seed(1); ids = torch.randint(0, V, (B, S)); labels = torch.randint(0, V, (B, S))
    out = model(ids); loss = F.cross_entropy(full(out).reshape(-1, V), labels.reshape(-1)); loss.backward()
    rout = ref(ids); rloss = F.cross_entropy(rout.reshape(-1, V), labels.reshape(-1)); rloss.backward()
    err = (full(out) - rout).abs().max().item()
    gerr = max((full(p.grad) - q.grad).abs().max().item() for p, q in zip(model.parameters(), ref.parameters()))
    if dist.get_rank() == 0:
        print(f"tp group {got} mesh {m.mesh_shape} {m.mesh_dim_names} tp on {m.tp_mesh_dim}: loss {loss.item():.6f} ref {rloss.item():.6f} max|out| err {err:.2e} max|grad| err {gerr:.2e}", flush=True)
    assert err < 1e-4 and gerr < 1e-4
    dist.destroy_process_group()

if __name__ == "__main__":
    import torch.multiprocessing as mp
    mp.spawn(main, args=(4, sys.argv[1]), nprocs=4)
