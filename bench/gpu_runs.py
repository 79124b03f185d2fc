"""Summaries of the runs of bench/gpu_runs.sh (imported by the GPU scripts' inline Python)."""
import json


def rows(w, name):
    """The training records (with an lm loss) of $W/NAME.jsonl; [] when the run is missing."""
    try:
        return [r for r in map(json.loads, open(f"{w}/{name}.jsonl")) if r.get("lm_loss") is not None]
    except OSError:
        return []


def print_parity(w, reference, others):
    """Each run in `others` against `reference`, iteration by iteration: max |loss difference|
    and max relative grad-norm difference, or FAIL when the numbers of iterations differ."""
    one = rows(w, reference)
    for other in others:
        o = rows(w, other)
        if not one or len(one) != len(o):
            print(f"{other}: {len(o)} vs {len(one)} logged iterations: FAIL")
            continue
        dl = max(abs(a["lm_loss"] - b["lm_loss"]) for a, b in zip(one, o))
        dg = max(abs(a["grad_norm"] - b["grad_norm"]) / a["grad_norm"] for a, b in zip(one, o))
        print(f"{other} vs 1 GPU over {len(o)} iterations: max |loss diff| {dl:.2e}, max rel grad-norm diff {dg:.2e}")
