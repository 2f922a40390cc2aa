"""Change-point detection over build histories: logitlab against Apache Otava, asv, conbench and a threshold.

Simulated histories of 100 builds of a higher-is-better metric (tokens/s,
base 100), per build in natural logs::

    log y = log 100 + sum of planted steps + drift * t / 99 + e + o
    e ~ N(0, sigma)                               lognormal noise, sigma 1, 2 or 3 %
    o = log(1 - U(10 %, 30 %)) with prob. 3 %     one-off slow runs (outliers)

Scenarios, each on its own seeded series:

- ``steps``: three steps of 2 %, 5 % and 10 % (random order and signs, at
  least 15 builds apart and 10 from either end) on a drift of +/-2 % over
  the 100 builds;
- ``compound``: five steps of 1 % in the same direction, 4 builds apart (a
  5 % regression that no single PR shows), on the same drift;
- ``noise``: no step, no drift (every change point is false);
- ``drift``: only the +/-2 % drift (shown, not judged: whether a slow drift
  deserves a change point is a policy question).

A detection matches a planted step if it lies within +/-5 builds of it (each
detection matches at most one step, the larger steps first). Reported per
method: the detection rate per step size, for the compound regression (any
detection inside it, +/-5 builds), the localisation error of matched
detections (mean |builds|, share exact), and the false change points per
100 builds (unmatched detections in ``steps``, all detections in ``noise``).

A method that raises many false alarms also "detects" by chance: a false
alarm within +/-5 builds of a step counts as a hit. For the 5 % threshold
and the z-score, part of the detection rate (most of it for the compound
regression, 26 builds wide) is that: compare ``--outlier-rate 0``.

Methods, all on the same series:

- logitlab: :func:`logitlab.perf.changepoint.detect_change_points`
  (Hampel filter, PELT via ``ruptures``, Otava-style Welch t merge, p 0.001);
- Apache Otava (PyPI ``apache-otava``), in its own virtual environment
  (it pins numpy 2.2.0): ``otava.analysis.compute_change_points`` with its
  defaults, window 50, max p 0.001, min magnitude 0 (E-divisive means split,
  Student t merge; Fleming et al. 2023);
- asv (PyPI ``asv``), in its own virtual environment: ``asv.step_detect.
  detect_steps`` (the piecewise-constant Potts fit asv draws and takes
  regressions from); every step boundary is a change point;
- conbench-style lookback z-score: each build against the mean of up to 100
  earlier builds since the last distribution change, divided by the sd of the
  residuals from that rolling mean, flagged at |z| > 5 (conbench's defaults,
  ``conbench/entities/history.py``); one-off outliers are found with
  conbench's trimmed shift detector and left out of the distribution; a
  flagged build that is not an outlier starts a new distribution, as a
  curator annotating the alert would do;
- a 5 % threshold: a build more than 5 % from the previous build.

The peers' virtual environments are made on first use under ``--peers-dir``
(default ``$LOGITLAB_CACHE/peers``, else ``~/.cache/logitlab/peers``; PyPI needed
once); a peer that cannot be installed is reported as missing, the rest still run.
``tests/perf/test_changepoint_otava.py`` uses the same Otava environment and
series.

Why PELT and not our own E-divisive: Otava's own E-divisive split with its
t merge is the E-divisive option, measured here. At the same p 0.001 the
Hampel + PELT + Welch-merge detector finds more steps of every size and the
compound regression more often, with a fraction of Otava's false change
points, and localises about as well; it cuts a slow drift into levels more
often (CPs/100 drift). The segmentation is one call into a maintained
library. ``--variants`` shows what the parts are worth: without the outlier
filter it detects about as often as Otava (the filter is most of the gain),
and the settings either side of the defaults (p 0.01, penalty 1, min size 5).

    python benchmarks/bench_history.py [--series 200] [--seed 0] [--variants] [--outlier-rate 0.03]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import time
import venv
from pathlib import Path
from typing import Callable

import numpy as np

from logitlab.engines.build_cache import cache_root
from logitlab.perf.changepoint import FALSE_ALARM_RATE, detect_change_points

N_BUILDS = 100
SIGMAS = (0.01, 0.02, 0.03)
STEP_SIZES = (0.02, 0.05, 0.10)
DRIFT = 0.02
P_OUTLIER = 0.03
TOLERANCE = 5
SCENARIOS = ("steps", "compound", "noise", "drift")

PEERS = {
    "otava": "apache-otava==0.8.0",
    "asv": "asv==0.6.6",
}

# Runs inside a peer's virtual environment: JSON list of series on stdin,
# JSON list of change-point index lists on stdout.
_PEER_SCRIPT = {
    "otava": """
import json, sys
from otava.analysis import compute_change_points
out = []
for s in json.load(sys.stdin):
    cps, _ = compute_change_points(list(s), window_len=50, max_pvalue=0.001, min_magnitude=0.0)
    out.append([int(c.index) for c in cps])
json.dump(out, sys.stdout)
""",
    "asv": """
import json, sys
from asv.step_detect import detect_steps
out = []
for s in json.load(sys.stdin):
    steps = detect_steps(list(s))
    out.append([int(st[0]) for st in steps[1:]])
json.dump(out, sys.stdout)
""",
}


# ---------------------------------------------------------------------------
# Simulation


def simulate(
    rng: np.random.Generator, sigma: float, steps: list[tuple[int, float]], drift: float, p_outlier: float
) -> np.ndarray:
    """One history of N_BUILDS values (see the module docstring)."""
    x = np.full(N_BUILDS, math.log(100.0))
    for k, r in steps:
        x[k:] += math.log1p(r)
    x += drift * np.arange(N_BUILDS) / (N_BUILDS - 1)
    x += rng.normal(0.0, sigma, N_BUILDS)
    slow = rng.random(N_BUILDS) < p_outlier
    x[slow] += np.log1p(-rng.uniform(0.10, 0.30, int(slow.sum())))
    return np.exp(x)


def plant_steps(rng: np.random.Generator) -> list[tuple[int, float]]:
    while True:
        pos = sorted(int(p) for p in rng.integers(10, N_BUILDS - 10, len(STEP_SIZES)))
        if all(b - a >= 15 for a, b in zip(pos, pos[1:])):
            break
    sizes = rng.permutation(STEP_SIZES)
    signs = rng.choice([-1.0, 1.0], len(STEP_SIZES))
    return [(p, float(s * g)) for p, s, g in zip(pos, sizes, signs)]


def make_cases(
    scenario: str, sigma: float, n: int, seed: int, p_outlier: float = P_OUTLIER
) -> list[tuple[np.ndarray, list[tuple[int, float]]]]:
    rng = np.random.default_rng([seed, SCENARIOS.index(scenario), int(round(sigma * 1000))])
    cases = []
    for _ in range(n):
        drift = float(rng.choice([-DRIFT, DRIFT]))
        if scenario == "steps":
            steps = plant_steps(rng)
        elif scenario == "compound":
            start = int(rng.integers(20, 60))
            sign = float(rng.choice([-1.0, 1.0]))
            steps = [(start + 4 * j, sign * 0.01) for j in range(5)]
        else:
            steps = []
        if scenario == "noise":
            drift = 0.0
        cases.append((simulate(rng, sigma, steps, drift, p_outlier), steps))
    return cases


# ---------------------------------------------------------------------------
# Methods


def logitlab_method(**kw) -> Callable[[np.ndarray], list[int]]:
    def run(y: np.ndarray) -> list[int]:
        r = detect_change_points(y, kind="higher-is-better", **kw)
        return [c.index for c in r.change_points]

    return run


def threshold_method(y: np.ndarray, threshold: float = 0.05) -> list[int]:
    rel = y[1:] / y[:-1] - 1.0
    return [i + 1 for i in np.nonzero(np.abs(rel) >= threshold)[0]]


def _conbench_outliers(y: np.ndarray, z_threshold: float = 5.0, window: int = 100) -> np.ndarray:
    """conbench's ``_detect_shifts_with_trimmed_estimators``: one-off shifts that revert."""
    d = np.concatenate([[np.nan], np.diff(y)])
    lo, hi = np.nanquantile(d, 0.05), np.nanquantile(d, 0.95)
    clipped = np.where((d < lo) | (d > hi), np.nan, d)
    z = np.full(y.size, np.nan)
    for i in range(y.size):
        w = clipped[max(0, i - window + 1) : i + 1]
        w = w[~np.isnan(w)]
        if w.size >= 2 and np.std(w, ddof=1) > 0:
            z[i] = (d[i] - w.mean()) / np.std(w, ddof=1)
    shift = np.abs(np.nan_to_num(z)) > z_threshold
    reverts = shift & np.concatenate([shift[1:], [False]])
    return reverts


def conbench_method(y: np.ndarray, z_threshold: float = 5.0, window: int = 100) -> list[int]:
    outlier = _conbench_outliers(y, z_threshold, window)
    flagged: list[int] = []
    seg_start = 0
    residuals: list[float] = []
    for i in range(y.size):
        hist = [j for j in range(max(seg_start, i - window), i) if not outlier[j]]
        if len(hist) >= 1:
            mean = float(np.mean(y[hist]))
        else:
            mean = float(y[i])
        if len(residuals) >= 2 and len(hist) >= 2:
            sd = float(np.std(residuals[-window:], ddof=1))
            if sd > 0 and abs(y[i] - mean) / sd > z_threshold:
                flagged.append(i)
                if not outlier[i]:
                    seg_start = i
        if not outlier[i]:
            residuals.append(float(y[i] - mean))
    return flagged


def peer_python(name: str, peers_dir: Path) -> tuple[Path | None, str]:
    """The Python of peer ``name``'s virtual environment under ``peers_dir``, made (PyPI needed) unless it
    already imports the peer, and the peer's version; ``(None, why)`` when it cannot be made
    (``tests/perf/test_changepoint_otava.py`` uses it too)."""
    env_dir = peers_dir / name
    py = env_dir / "bin" / "python"
    probe = {"otava": "import otava.analysis", "asv": "import asv.step_detect"}[name]
    if py.exists() and subprocess.run([str(py), "-c", probe], capture_output=True).returncode == 0:
        return py, _peer_version(py, name)
    try:
        venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
        r = subprocess.run(
            [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", PEERS[name]],
            capture_output=True,
            text=True,
            timeout=900,
        )
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"could not create {env_dir}: {e}"
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"pip install {PEERS[name]} failed: {tail}"
    return py, _peer_version(py, name)


def _peer_version(py: Path, name: str) -> str:
    dist = PEERS[name].split("==")[0]
    r = subprocess.run(
        [str(py), "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
        capture_output=True,
        text=True,
    )
    return r.stdout.strip() or "?"


def run_peer(py: Path, name: str, series: list[np.ndarray]) -> list[list[int]]:
    r = subprocess.run(
        [str(py), "-c", _PEER_SCRIPT[name]],
        input=json.dumps([s.tolist() for s in series]),
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        raise RuntimeError(f"{name} failed: {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout)


# ---------------------------------------------------------------------------
# Scoring


def match(detections: list[int], steps: list[tuple[int, float]]) -> tuple[dict[int, int | None], int]:
    """Planted step -> offset of its matched detection (None: missed); unmatched count."""
    det = sorted(set(detections))
    used: set[int] = set()
    offsets: dict[int, int | None] = {}
    for k, _ in sorted(steps, key=lambda s: -abs(s[1])):
        near = [d for d in det if d not in used and abs(d - k) <= TOLERANCE]
        if near:
            best = min(near, key=lambda d: (abs(d - k), d))
            used.add(best)
            offsets[k] = best - k
        else:
            offsets[k] = None
    return offsets, len(det) - len(used)


def score(scenario: str, cases, detections: list[list[int]]) -> dict[str, float]:
    out: dict[str, float] = {}
    if scenario == "steps":
        hits = {s: [] for s in STEP_SIZES}
        errs: list[int] = []
        false = 0
        for (_, steps), det in zip(cases, detections):
            offsets, f = match(det, steps)
            false += f
            for k, r in steps:
                size = min(STEP_SIZES, key=lambda s: abs(s - abs(r)))
                hits[size].append(offsets[k] is not None)
                if offsets[k] is not None:
                    errs.append(abs(offsets[k]))
        for s in STEP_SIZES:
            out[f"det {100 * s:.0f}%"] = float(np.mean(hits[s]))
        out["loc err"] = float(np.mean(errs)) if errs else math.nan
        out["exact"] = float(np.mean([e == 0 for e in errs])) if errs else math.nan
        out["false/100 steps"] = 100.0 * false / (len(cases) * N_BUILDS)
    elif scenario == "compound":
        found = []
        for (_, steps), det in zip(cases, detections):
            lo, hi = steps[0][0] - TOLERANCE, steps[-1][0] + TOLERANCE
            found.append(any(lo <= d <= hi for d in det))
        out["compound"] = float(np.mean(found))
    else:
        total = sum(len(set(d)) for d in detections)
        key = "false/100 noise" if scenario == "noise" else "CPs/100 drift"
        out[key] = 100.0 * total / (len(cases) * N_BUILDS)
    return out


COLUMNS = (
    ("det 2%", "rate"),
    ("det 5%", "rate"),
    ("det 10%", "rate"),
    ("compound", "rate"),
    ("loc err", "builds"),
    ("exact", "rate"),
    ("false/100 steps", "count"),
    ("false/100 noise", "count"),
    ("CPs/100 drift", "count"),
)


def _fmt(v: float, kind: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if kind == "rate":
        return f"{100 * v:.1f}%"
    return f"{v:.2f}"


def _vs(v: float, ref: float, kind: str) -> str:
    if any(x is None or math.isnan(x) for x in (v, ref)):
        return "-"
    if kind == "rate":
        return f"{100 * (v - ref):+.1f}pt"
    if kind == "builds":
        return f"{v - ref:+.2f}"
    return f"x{v / ref:.2f}" if ref > 0 else ("x1" if v == 0 else "inf")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=200, help="simulated series per scenario and noise level")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--peers-dir", type=Path, default=cache_root() / "peers",
                        help="where the peers' virtual environments are made (default: %(default)s)")
    parser.add_argument("--no-peers", action="store_true", help="skip Otava and asv")
    parser.add_argument("--outlier-rate", type=float, default=P_OUTLIER,
                        help="share of builds that are one-off slow runs (default: %(default)s)")
    parser.add_argument("--variants", action="store_true",
                        help="also run logitlab without its outlier filter and with other settings")
    args = parser.parse_args()

    started = time.perf_counter()
    methods: dict[str, Callable[[np.ndarray], list[int]]] = {"logitlab": logitlab_method()}
    if args.variants:
        methods["  no outlier filter"] = logitlab_method(outlier_sigmas=1e9)
        methods["  max p 0.01"] = logitlab_method(max_pvalue=0.01)
        methods["  penalty 1"] = logitlab_method(penalty=1.0)
        methods["  min size 5"] = logitlab_method(min_size=5)
    peers: dict[str, Path] = {}
    notes: list[str] = []
    if not args.no_peers:
        for name in PEERS:
            py, info = peer_python(name, args.peers_dir)
            if py is None:
                notes.append(f"{name}: missing ({info})")
            else:
                peers[name] = py
                notes.append(f"{name} {info} from {py.parent.parent}")
    labels = {"otava": "Apache Otava", "asv": "asv step fit"}
    peer_label = {n: f"{labels[n]}" for n in peers}
    methods_local = {
        "conbench z>5": conbench_method,
        "5% vs previous": threshold_method,
    }

    print(f"bench_history: {args.series} series x {N_BUILDS} builds per scenario and noise level, seed {args.seed}; "
          f"outliers {100 * args.outlier_rate:.0f}% of builds (10-30% slow), drift +/-{100 * DRIFT:.0f}%/100 builds, "
          f"match tolerance +/-{TOLERANCE} builds")
    for note in notes:
        print(f"  peer {note}")
    names = list(methods) + [peer_label[n] for n in peers] + list(methods_local)
    timing = {m: 0.0 for m in names}
    results: dict[float, dict[str, dict[str, float]]] = {}
    for sigma in SIGMAS:
        res = {m: {} for m in names}
        for scenario in SCENARIOS:
            cases = make_cases(scenario, sigma, args.series, args.seed, args.outlier_rate)
            ys = [c[0] for c in cases]
            for m, fn in {**methods, **methods_local}.items():
                t0 = time.perf_counter()
                det = [fn(y) for y in ys]
                timing[m] += time.perf_counter() - t0
                res[m].update(score(scenario, cases, det))
            for n, py in peers.items():
                t0 = time.perf_counter()
                det = run_peer(py, n, ys)
                timing[peer_label[n]] += time.perf_counter() - t0
                res[peer_label[n]].update(score(scenario, cases, det))
        results[sigma] = res

        print(f"\nnoise sd {100 * sigma:.0f}%")
        head = f"{'method':22s}" + "".join(f"{c:>16s}" for c, _ in COLUMNS)
        print(head)
        print("-" * len(head))
        for m in names:
            print(f"{m:22s}" + "".join(f"{_fmt(res[m].get(c, math.nan), k):>16s}" for c, k in COLUMNS))
        if "Apache Otava" in res:
            ref = res["Apache Otava"]
            for m in names:
                if m == "Apache Otava" or m.startswith("  "):
                    continue
                print(f"{(m + ' vs Otava'):22s}" + "".join(
                    f"{_vs(res[m].get(c, math.nan), ref.get(c, math.nan), k):>16s}" for c, k in COLUMNS))
    n_series = args.series * len(SCENARIOS) * len(SIGMAS)
    print("\ntime per series (ms, peers include their process start): " + ", ".join(
        f"{m.strip()} {1000 * timing[m] / n_series:.1f}" for m in names))

    worst_noise = max(results[s]["logitlab"]["false/100 noise"] for s in SIGMAS)
    met = worst_noise <= FALSE_ALARM_RATE
    print(f"\ntarget  logitlab false change points per 100 builds of stationary noise <= FALSE_ALARM_RATE "
          f"{FALSE_ALARM_RATE} (worst over noise sds): {worst_noise:.3f} -> {'met' if met else 'MISSED'}")
    print(f"done in {time.perf_counter() - started:.0f} s")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
