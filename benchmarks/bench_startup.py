"""Start-up time of ``logitlab --help`` and ``logitlab <cmd> --help``, as a ratio to ``python -c pass``.

Target (issue #18): under 0.2 s on an idle machine; the ratio to a bare
interpreter start is the figure that survives a loaded machine.  Each command
runs ``--repeats`` times, interleaved with the bare interpreter (so drift hits
both alike); the table gives the median and the fastest run, and the ratio of
medians.

``--before REV`` also measures another commit of this repository (e.g. the base
of a branch) from a temporary ``git worktree``, interleaved with the current
tree, and prints both::

    python benchmarks/bench_startup.py                      # this tree
    python benchmarks/bench_startup.py --before house       # house vs this tree

Both trees run on this interpreter (``PYTHONPATH=<tree>/src``), so only the
code differs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMANDS = [[], ["ab"], ["verify"], ["bench"], ["bench", "run"], ["history", "show"], ["dump-diff"], ["report"]]
#: modules that a --help must not import (each costs 0.05-2 s to import)
HEAVY = ("numpy", "scipy", "numba", "ml_dtypes", "rich", "matplotlib", "torch", "llama_cpp", "transformers")


def _time(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return elapsed


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree / "src")
    return env


def _heavy_imports(tree: Path, args: list[str]) -> list[str]:
    code = ("import sys\nfrom logitlab.cli import main\n"
            f"try:\n    main({[*args, '--help']!r}, prog_name='logitlab')\nexcept SystemExit:\n    pass\n"
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code], env=_env(tree), capture_output=True, text=True)
    return [m for m in done.stderr.strip().splitlines()[-1].split(",") if m] if done.stderr.strip() else []


def measure(trees: dict[str, Path], repeats: int) -> dict[str, dict[str, list[float]]]:
    """{tree label: {command: [seconds, ...]}}, with 'python -c pass' under the key 'pass'."""
    times: dict[str, dict[str, list[float]]] = {label: {} for label in trees}
    for _ in range(repeats):
        for label, tree in trees.items():
            env = _env(tree)
            times[label].setdefault("pass", []).append(_time([sys.executable, "-c", "pass"], env))
            for args in COMMANDS:
                key = " ".join(["logitlab", *args, "--help"])
                times[label].setdefault(key, []).append(_time([sys.executable, "-m", "logitlab", *args, "--help"], env))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", metavar="REV", help="also measure this commit (a temporary git worktree)")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    trees = {"this tree": REPO}
    tmp = None
    if args.before:
        tmp = Path(tempfile.mkdtemp(prefix="logitlab-before-")) / "tree"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(tmp), args.before], check=True)
        rev = subprocess.run(["git", "-C", str(tmp), "rev-parse", "--short=10", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        trees = {f"before ({args.before} {rev})": tmp, "this tree": REPO}
    try:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {load:.1f}; "
              f"{args.repeats} runs each, interleaved")
        times = measure(trees, args.repeats)
        for label, tree in trees.items():
            base = statistics.median(times[label]["pass"])
            print(f"\n{label}: python -c pass  median {base * 1000:.0f} ms")
            print(f"  {'command':34} {'median':>8} {'fastest':>8} {'ratio':>7}  heavy modules imported")
            for key, values in times[label].items():
                if key == "pass":
                    continue
                heavy = _heavy_imports(tree, key.split()[1:-1])
                print(f"  {key:34} {statistics.median(values) * 1000:6.0f}ms {min(values) * 1000:6.0f}ms "
                      f"{statistics.median(values) / base:6.1f}×  {', '.join(heavy) or '-'}")
        if len(trees) == 2:
            (before, b), (after, a) = times.items()
            print("\nspeed-up (median before / median after):")
            for key in a:
                if key != "pass":
                    print(f"  {key:34} {statistics.median(b[key]) / statistics.median(a[key]):6.1f}×")
    finally:
        if tmp is not None:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tmp)], check=False)


if __name__ == "__main__":
    main()
