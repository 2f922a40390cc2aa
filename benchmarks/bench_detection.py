"""Verdicts and detection limits on real pairs of the embedded model: the false-positive census of the rules.

For each real pair (a control and a candidate that differ only in a knob that is *not* a bug: flash attention,
a quantised KV cache, the micro-batch size, the thread count, transformers' dtype and attention implementation,
ONNX Runtime GenAI's int4, and Gemma 3 on llama.cpp), the candidate replays the control's greedy tokens on one
prompt, the pair is compared over the full vocabulary, and the script prints:

- the verdict (none may be ``divergent``: that would be a false positive of the rules);
- the statistics the divergence rules read, as a multiple of what fires them: the largest top-k Δ spread and
  the largest row Δ sd against their p99 (the fence is ``floor_factor`` = 4), the largest within-row outlier
  z (the fence is ``outlier_z`` = 20);
- the detection limits of :mod:`logitlab.numerics.detection` per fault shape.

With ``--bracket`` it checks the limits through a real engine instead: for four pairs of the ``cmd``
reference engines (``examples/llamacpp_cmd_engine.py``: flash attention; a q4_0 KV cache; prompt forwards of 4
rows vs 512; ``examples/hf_cmd_engine.py``: transformers in float32 vs bfloat16), ``ab`` measures the limits of
the clean pair, then the engine itself plants each single-logit and row shape (``LLAMACPP_CMD_PLANT`` /
``HF_CMD_PLANT``) at the hardest position, at 1.1× and at 0.8× the limit, and ``ab`` judges each: 1.1× must
read ``divergent``, 0.8× must not.

Usage::

    .venv/bin/python benchmarks/bench_detection.py [--tokens 64] [--pairs NAME,...] [--json OUT]
    .venv/bin/python benchmarks/bench_detection.py --bracket [--tokens 16] [--pairs NAME,...]

Pairs whose engine is not installed are reported as skipped. Run it on a quiet machine only if you also read
the printed seconds; the verdicts do not depend on load.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from logitlab.engines.variant import parse_variant
from logitlab.engines.workload import run_workload
from logitlab.experiments.isolation import load_engine
from logitlab.numerics import Thresholds, classify, compare_logits
from logitlab.numerics.detection import detection_limits
from logitlab.numerics.floor import measure_floor

PROMPT = ("The old lighthouse keeper climbed the stairs every evening, counting the steps as his father had "
          "taught him, and at the top he")
#: name -> (control, candidate) variant specs; "gemma:" is the llamacpp engine on the Gemma 3 270M model.
PAIRS = {
    "llamacpp flash attention": ("llamacpp:flash_attn=0", "llamacpp:flash_attn=1"),
    "llamacpp KV q8_0": ("llamacpp:flash_attn=1", "llamacpp:flash_attn=1,type_k=q8_0,type_v=q8_0"),
    "llamacpp KV q4_0": ("llamacpp:flash_attn=1", "llamacpp:flash_attn=1,type_k=q4_0,type_v=q4_0"),
    "llamacpp n_ubatch 4 vs 512": ("llamacpp:n_ubatch=512", "llamacpp:n_ubatch=4,n_batch=4"),
    "llamacpp threads 1 vs 2": ("llamacpp:n_threads=2,n_threads_batch=2", "llamacpp:n_threads=1,n_threads_batch=1"),
    "hf float32 vs bfloat16": ("hf:dtype=float32", "hf:dtype=bfloat16"),
    "hf sdpa vs eager": ("hf:attn=sdpa", "hf:attn=eager"),
    "ortgenai fp32 vs int4": ("ortgenai:precision=fp32", "ortgenai:precision=int4"),
    "gemma flash attention": ("gemma:flash_attn=0", "gemma:flash_attn=1"),
}


def _variant(spec: str, label: str):
    if spec.startswith("gemma:"):
        from logitlab.models import gemma_model_path

        return parse_variant(spec[len("gemma:"):], label, default_engine="llamacpp",
                             default_model=str(gemma_model_path()))
    return parse_variant(spec, label, default_engine="llamacpp")


def _run(spec: str, label: str, n_decode: int, replay):
    engine = load_engine(_variant(spec, label))
    try:
        ids = engine.tokenize(PROMPT)
        out = run_workload(engine, ids, n_decode, replay)
        return np.array(out.logits, dtype=np.float32), list(out.generated)
    finally:
        engine.close()


def _ratio(values, floor) -> str:
    return "n/a" if not floor.measured or not values else f"{max(values) / floor.value:.2f}×"


def census(name: str, control: str, candidate: str, n_decode: int, t: Thresholds) -> dict:
    start = time.perf_counter()
    ref, generated = _run(control, "control", n_decode, None)
    obs, _ = _run(candidate, "candidate", n_decode, generated)
    c = compare_logits(ref, obs)
    verdict = classify(c, t)
    spread, row = measure_floor(c), measure_floor(c, of="sd")
    kept = [i for i in range(c.n_positions) if c.row_differing[i] and c.row_argmax_ref[i] == c.row_argmax_obs[i]]
    zs = [z for z in (c.row_delta_z or []) if z is not None]
    limits = detection_limits(ref, obs, c, thresholds=t)
    return {
        "pair": name, "control": control, "candidate": candidate, "shape": list(ref.shape),
        "verdict": verdict.word, "outside": verdict.outside,
        "spread_max_over_p99": _ratio([c.row_topk_spread[i] for i in kept], spread),
        "sd_max_over_p99": _ratio([c.row_std_diff[i] for i in kept], row),
        "z_max": round(max(zs), 2) if zs else None,
        "limits": limits.to_dict(), "seconds": round(time.perf_counter() - start, 1),
    }


def _cmd(script: str) -> str:
    return (f"{sys.executable} examples/{script} --tokens {{tokens}} --logits {{logits}} "
            "--n-prompt {n_prompt} --n-decode {n_decode}")


#: name -> (engine script, fault-variable prefix, control env, candidate env) of the cmd reference engines.
BRACKET_PAIRS = {
    "flash attention": ("llamacpp_cmd_engine.py", "LLAMACPP_CMD_", {}, {"LLAMACPP_CMD_FLASH_ATTN": "1"}),
    "KV q4_0": ("llamacpp_cmd_engine.py", "LLAMACPP_CMD_", {"LLAMACPP_CMD_FLASH_ATTN": "1"},
                {"LLAMACPP_CMD_FLASH_ATTN": "1", "LLAMACPP_CMD_KV": "q4_0"}),
    "n_ubatch 4 vs 512": ("llamacpp_cmd_engine.py", "LLAMACPP_CMD_", {"LLAMACPP_CMD_UBATCH": "512"},
                          {"LLAMACPP_CMD_UBATCH": "4"}),
    "hf float32 vs bfloat16": ("hf_cmd_engine.py", "HF_CMD_", {"HF_CMD_DTYPE": "float32"},
                               {"HF_CMD_DTYPE": "bfloat16"}),
}
PLANTED = ("argmax-up", "argmax-down", "tail-up", "row-noise")


def bracket(n_decode: int, names: list[str]) -> int:
    """Each shape planted by the engine at 1.1× and 0.8× its limit: 1.1× must read divergent, 0.8× must not."""
    import dataclasses

    from logitlab.experiments.ab import AbConfig, run_ab

    wrong = 0
    print(f"{'pair':24} {'verdict':10} {'shape':12} {'limit':>9} {'pos':>4}  {'1.1× reads':12} {'0.8× reads':12}")
    for name in names:
        script, prefix, control_env, candidate_env = BRACKET_PAIRS[name]
        base = parse_variant("", "control", default_engine=f"cmd:{_cmd(script)}")

        def ab(candidate, detection=False):
            return run_ab(AbConfig(control=dataclasses.replace(base, env=control_env),
                                   candidate=dataclasses.replace(base, label="candidate", env=candidate),
                                   prompt=PROMPT, n_decode=n_decode, repeats=1, warmup=0, detection=detection))

        clean = ab(candidate_env, detection=True)
        for shape in PLANTED:
            s = clean.detection.shape(shape)
            words = []
            for factor in (1.1, 0.8):
                plant = f"{shape}:{s.position}:{factor * s.limit:.6g}" + (f":{s.token}" if s.token is not None else "")
                words.append(ab({**candidate_env, f"{prefix}PLANT": plant}).verdict.word)
            ok = words[0] == "divergent" and words[1] != "divergent"
            wrong += not ok
            print(f"{name:24} {clean.verdict.word:10} {shape:12} {s.limit:9.4g} {s.position:4d}  {words[0]:12} "
                  f"{words[1]:12}{'' if ok else '  <- NOT bracketed'}", flush=True)
    print(f"\n{len(names) * len(PLANTED) - wrong} of {len(names) * len(PLANTED)} limits bracketed by the engine's "
          "own plants")
    return 1 if wrong else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64, help="decode tokens per run (default 64)")
    parser.add_argument("--pairs", default="", help="comma-separated pair names (default: all)")
    parser.add_argument("--json", default=None, help="write the rows as JSON here")
    parser.add_argument("--bracket", action="store_true", help="check the limits through the cmd engine's plants")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.pairs.split(",") if n.strip()]
    known = BRACKET_PAIRS if args.bracket else PAIRS
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"error: unknown pair(s) {', '.join(map(repr, unknown))}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    if args.bracket:
        return bracket(args.tokens if args.tokens != 64 else 16, names or list(BRACKET_PAIRS))
    names = names or list(PAIRS)
    t = Thresholds()
    rows = []
    print(f"{'pair':28} {'verdict':18} {'spread/p99':>10} {'sd/p99':>7} {'z max':>6}  "
          f"{'argmax±':>15} {'tail+':>7} {'row noise':>9} {'swaps caught':>12} {'offset':>8}")
    for name in names:
        control, candidate = PAIRS[name]
        try:
            row = census(name, control, candidate, args.tokens, t)
        except Exception as exc:  # noqa: BLE001 - an engine that is not installed is a skipped row
            print(f"{name:28} skipped: {str(exc).splitlines()[0][:100]}")
            continue
        rows.append(row)
        lim = {s["shape"]: s for s in row["limits"]["shapes"]}

        def g(shape):
            s = lim.get(shape)
            return "n/a" if s is None or s["limit"] is None else f"{s['limit']:.3g}"

        swaps = lim.get("top2-swap")
        swap = "n/a" if swaps is None else f"{swaps['caught']}/{swaps['probed']}"
        updown = f"{g('argmax-up')}/{g('argmax-down')}"
        print(f"{name:28} {row['verdict']:18} {row['spread_max_over_p99']:>10} {row['sd_max_over_p99']:>7} "
              f"{row['z_max'] if row['z_max'] is not None else 'n/a':>6}  {updown:>15} {g('tail-up'):>7} "
              f"{g('row-noise'):>9} {swap:>12} {g('all-rows-shift'):>8}", flush=True)
    false = [r["pair"] for r in rows if r["verdict"] == "divergent"]
    print(f"\n{len(rows)} real pairs, {len(false)} divergent (false positives){': ' + ', '.join(false) if false else ''}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 1 if false else 0


if __name__ == "__main__":
    sys.exit(main())
