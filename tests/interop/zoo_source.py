"""The family and knobs of a plan's zoo source, for the framework twins of
run_plan.py (torch) and run_jax.py (Flax)."""
import urllib.parse


def model_of(source, runner):
    """("llama" or "gpt2", {knob: int}) of "zoo:llama3-8b?layers=2&hidden=64&...";
    kv_heads defaults to heads. Exits naming `runner` for any other model."""
    name, _, query = source.partition("?")
    knobs = {k: int(v[0]) for k, v in urllib.parse.parse_qs(query).items()}
    family = "gpt2" if name.startswith("zoo:gpt2") else "llama" if name.startswith("zoo:llama") else None
    if family is None:
        raise SystemExit(f"{runner}: {source}: only zoo:llama* and zoo:gpt2* models have a twin here")
    knobs.setdefault("kv_heads", knobs.get("heads"))
    return family, knobs
