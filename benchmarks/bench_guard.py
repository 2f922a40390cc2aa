"""Near-tie guard overhead: guarded verify vs unguarded verify vs M=1 decode, side by side.

On the built-in default prompt set, each round runs, for every prompt and in
alternating order (ABCD, then DCBA, ...), four greedy decodes of --tokens
tokens on one loaded engine:

- ``M=1``: plain greedy decode, one token per call;
- ``unguarded``: speculative greedy with K-token verify blocks (drafts: the
  M=1 greedy tokens, so every draft is right unless a verify row flips);
- ``redecode`` and ``resync``: the same loop under the near-tie guard with τ
  from ``calibrate`` on the held-out calibration prompts (done once, untimed).

Timed: the decode phase only (prefill excluded), wall clock, guard work
included. Printed per method: median over rounds of ms per generated token
and tokens/s, the range over rounds, ratios against unguarded verify and
against M=1 (per-round ratios, median [min, max]), forward rows and calls per
token, triggers, and how many prompts came out token-identical to M=1 greedy.

    python benchmarks/bench_guard.py [--tokens 32] [--k 4] [--rounds 3] [--options n_threads_batch=1]
    python benchmarks/bench_guard.py --engine hf --options dtype=bfloat16,threads=1 [--prompts 4]

τ is what ``verify --guard auto`` sets: ``--safety`` (default: the verdicts'
floor factor, 4) × the noise floor of the calibration verify rows (p99 of their
top-k Δ spread over the rows that kept their argmax). "extra rows" is the
forward work beyond one row per generated token (the ideal of a speculative
loop whose drafts are all right), the target's measure (≤ 10 %). Also printed:
the trigger rate at τ = 1 × the floor, the least τ that still covers it (a lower
bound on the extra rows of any such guard: each trigger costs at least one
row), and the τ a 10 % trigger rate would need, as a multiple of the floor.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from logitlab.engines.variant import parse_variant
from logitlab.experiments.verify import guard as G
from logitlab.experiments.verify import guard_calibration as GC
from logitlab.experiments.isolation import load_engine
from logitlab.experiments.prompts import builtin_prompts
from logitlab.experiments.verify.run import greedy_m1, replay_mk
from logitlab.manifest import host_info

METHODS = ("M=1", "unguarded", "redecode", "resync")


def m1_decode(engine, ids, n):
    """Plain greedy decode; returns (tokens, decode seconds, rows fed, calls)."""
    with engine.open_session() as session:
        row = session.prefill(ids)[-1]
        tokens = [int(np.argmax(row))]
        start = time.perf_counter()
        while len(tokens) < n:
            tokens.append(int(np.argmax(session.decode([tokens[-1]])[0])))
        return tokens, time.perf_counter() - start, n - 1, n - 1


def speculative(engine, ids, n, k, reference, tau, fallback):
    with engine.open_session() as session:
        run = G.speculative_greedy(session, ids, n, k=k, draft=G.oracle_draft(reference), tau=tau,
                                   fallback=fallback, keep_rows=False)
    return run.tokens, run.decode_seconds, run.forward_rows, run.forward_calls, len(run.triggers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=None,
                        help="time only the first N of the 9 default prompts (default: all)")
    parser.add_argument("--safety", type=float, default=4.0, help="τ = safety × the calibration's noise floor")
    parser.add_argument("--engine", default="llamacpp", help="engine name (llamacpp, hf, ...)")
    parser.add_argument("--options", default="", help="engine options, e.g. n_threads_batch=1")
    args = parser.parse_args()

    engine = load_engine(parse_variant(args.options, "bench", default_engine=args.engine))
    prompts = builtin_prompts("default")
    if args.prompts is not None:
        if not 1 <= args.prompts <= len(prompts):
            parser.error(f"--prompts must be in 1..{len(prompts)}")
        prompts = prompts[:args.prompts]
    ids = {p.name: engine.tokenize(p.text) for p in prompts}
    n = args.tokens

    pairs = []
    for p in builtin_prompts("calibration"):
        cal_ids = engine.tokenize(p.text)
        ref = greedy_m1(engine, cal_ids, n)
        pairs.append((ref.decode_rows, replay_mk(engine, cal_ids, ref.tokens, args.k)[0]))
    cal = GC.calibrate(pairs, k=args.k, safety=args.safety)
    at_floor = GC.calibrate(pairs, k=args.k, safety=1.0)  # the least τ that still covers the floor
    reference = {name: greedy_m1(engine, i, n).tokens for name, i in ids.items()}

    seconds = {m: [0.0] * args.rounds for m in METHODS}
    rows = {m: 0 for m in METHODS}
    calls = {m: 0 for m in METHODS}
    triggers = {m: 0 for m in METHODS}
    identical = {m: 0 for m in METHODS}
    for r in range(args.rounds):
        for name, prompt_ids in ids.items():
            order = METHODS if r % 2 == 0 else METHODS[::-1]
            for method in order:
                if method == "M=1":
                    tokens, sec, fed, ncalls = m1_decode(engine, prompt_ids, n)
                    trig = 0
                else:
                    tau = None if method == "unguarded" else cal.tau
                    tokens, sec, fed, ncalls, trig = speculative(engine, prompt_ids, n, args.k, reference[name],
                                                                 tau, "redecode" if tau is None else method)
                seconds[method][r] += sec
                if r == 0:
                    rows[method] += fed
                    calls[method] += ncalls
                    triggers[method] += trig
                    identical[method] += tokens == reference[name]

    generated = len(ids) * (n - 1)  # tokens after the first (which the prefill decides)
    host = host_info()
    print(f"bench_guard: {engine.describe().get('engine_version')}, options {args.options or 'defaults'}; "
          f"{len(ids)} default prompts × {n} tokens, K = {args.k}, {args.rounds} rounds (alternating order)")
    print(f"host: {host['cpu']}, {host['cores']} cores, load {host['load_average_1m']}")
    basis = (f"the noise floor {cal.floor:.4g} (p99 of the top-{cal.top_k} Δ spread over {cal.floor_positions} "
             f"of {cal.rows} calibration rows)" if cal.floor is not None else
             f"the largest top-{cal.top_k} spread {cal.max_topk_spread:.4g} ({cal.floor_reason})")
    print(f"τ = {cal.tau:.4g} = {cal.safety:g} × {basis}; predicted trigger rate {cal.trigger_rate:.1%}")
    if cal.floor:
        # Every trigger costs at least one extra forward row (the M=1 decision of that position), so a
        # guard whose τ covers the floor (safety >= 1) needs at least this share of extra rows.
        print(f"lower bound: at τ = 1 × the floor ({at_floor.tau:.4g}) {at_floor.trigger_rate:.1%} of calibration "
              f"rows trigger, so any guard covering the floor needs >= {at_floor.trigger_rate:.1%} extra rows; "
              f"a 10 % trigger rate needs τ <= {cal.tau_for_10pct:.4g} = {cal.tau_for_10pct / cal.floor:.2f} × "
              f"the floor")
    print()
    head = (f"{'method':10s} {'ms/token':>9s} {'tok/s':>7s} {'range ms/token':>16s} {'vs unguarded':>22s} "
            f"{'vs M=1':>22s} {'rows/tok':>8s} {'extra rows':>10s} {'calls/tok':>9s} {'triggers':>9s} "
            f"{'identical':>9s}")
    print(head)
    print("-" * len(head))

    def ratio(method: str, base: str) -> str:
        rs = [a / b for a, b in zip(seconds[method], seconds[base])]
        return f"{statistics.median(rs):.3f} [{min(rs):.3f}, {max(rs):.3f}]"

    for method in METHODS:
        per_token = [1000 * s / generated for s in seconds[method]]
        med = statistics.median(per_token)
        print(f"{method:10s} {med:9.2f} {1000 / med:7.1f} {f'{min(per_token):.2f}–{max(per_token):.2f}':>16s} "
              f"{ratio(method, 'unguarded'):>22s} {ratio(method, 'M=1'):>22s} {rows[method] / generated:8.2f} "
              f"{rows[method] / generated - 1:10.1%} {calls[method] / generated:9.2f} {triggers[method]:9d} "
              f"{identical[method]:>5d}/{len(ids)}")
    engine.close()


if __name__ == "__main__":
    main()
