"""``ab --repeats auto --noise FILE [--noise FILE ...]``: δ pre-registered from saved ``ab`` A/As of this machine.

Each file is an ``ab --json`` result whose candidate is the control (an A/A:
``ab`` without ``--candidate``) with 3 or more blocks of decode tokens/s, the
metric ``--repeats auto`` decides on. δ is
:func:`~logitlab.perf.prereg.calibrated_margin` (the change the run's budget
resolves at that noise, 1 %-5 %) of:

- one file: its decode block log-ratio sd; a run's own offset (the instance
  effect of two engine objects) is not measured, and taken as 0;
- two or more files (A/As of one variant, workload and isolation): the pooled
  within-run block sd and the between-run sd ``tau`` of the one-way
  random-effects ANOVA of their block log ratios
  (:func:`~logitlab.perf.between_runs.between_run_variance`), so δ carries
  the offset by which a run's two engine objects differ, which no number of
  blocks shrinks.

The record names the files and what they measured (engine, variant, tokens,
isolation, blocks, host). ``bench run`` results and ``bench calibrate``
profiles (times of commands and benchmark files, not an engine's tokens/s)
are refused, as is an ``ab`` of two different variants, or A/As of different
variants, workloads or isolations.
:mod:`logitlab.perf.prereg` has the rule and the default.

Nothing here prints or logs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath
from typing import Any

from logitlab.errors import InputError
from logitlab.experiments.ab_results import AbResult
from logitlab.perf.prereg import (PreregisteredMargin, calibration_paths, host_text, pooled_calibrated_margin,
                                  read_calibration)

__all__ = ["ab_calibration"]

#: What A/As pooled into one calibration must share: ``AbResult.config`` key -> the option that sets it.
_SAME = {"control": "the variant (--control)", "prompt": "the prompt", "n_decode": "--tokens",
         "isolation": "--isolation", "speed_design": "--speed-design"}


def ab_calibration(paths: str | Sequence[str], max_repeats: int, *, n_decode: int | None = None,
                   isolation: str | None = None, speed_design: str | None = None) -> PreregisteredMargin:
    """δ for ``ab --repeats auto`` from the saved ``ab`` A/A(s) ``paths``.

    Parameters
    ----------
    paths : str or sequence of str
        ``ab --json`` results of A/As: one, or several of the same variant,
        tokens, prompt and isolation (e.g. the same command run at different
        times).
    max_repeats : int
        The budget of blocks of the ``--repeats auto`` run to calibrate.
    n_decode, isolation, speed_design : int or str, optional
        The decode tokens, isolation and speed design of that run: the A/As
        must have run the same (a block's noise and a run's offset depend on
        all three: an interleaved block's decode noise is a fraction of a
        whole-run block's); None: not checked. A saved A/A without a speed
        design ran ``runs``.

    Returns
    -------
    PreregisteredMargin
        :func:`~logitlab.perf.prereg.calibrated_margin` of the decode block
        log ratios (one file: its sd, ``tau`` 0; several: the pooled sd and
        ``tau``): source ``'calibration'``, the file(s) and what they measured.

    Raises
    ------
    InputError
        No file; a file that is missing or not JSON; another kind of result
        (``bench run``, ``bench calibrate``); an ``ab`` of two different
        variants; no decode speed in it, or fewer than 3 blocks; files of
        different variants, tokens, prompts, isolations or speed designs; files
        of other tokens, isolation or speed design than the run's.
    """
    paths = calibration_paths(paths)
    runs = [_read_aa(path) for path in paths]
    first = runs[0]
    for path, aa in zip(paths[1:], runs[1:]):
        for key, option in _SAME.items():
            ours, theirs = _spec(_setting(first, key)), _spec(_setting(aa, key))
            if ours != theirs:
                values = "" if key in ("control", "prompt") else f" ({ours} vs {theirs})"
                raise InputError(f"--noise files {paths[0]} and {path} differ in {option}{values}: pool A/As of "
                                 "one variant, workload and isolation")
    for key, option, value in (("n_decode", "--tokens", n_decode), ("isolation", "--isolation", isolation),
                               ("speed_design", "--speed-design", speed_design)):
        if value is not None and _setting(first, key) != value:
            raise InputError(f"--noise files measured {option} {_setting(first, key)}; this run has {option} "
                             f"{value}: calibrate with A/As of the workload, isolation and speed design you run")
    engine = first.manifest.get("engine") if isinstance(first.manifest.get("engine"), dict) else {}
    model = PurePath(str(engine.get("model") or "")).name
    what = (f"ab A/A of {engine.get('engine', '?')}{' ' + model if model else ''}, {first.config.get('n_decode')} "
            f"tokens, {first.config.get('isolation')} isolation")
    return pooled_calibrated_margin([aa.speed["decode"] for aa in runs], max_blocks=max_repeats, files=paths,
                                    what=what, metric="decode", host=host_text(first.manifest.get("host")))


def _setting(aa: AbResult, key: str) -> Any:
    """A saved A/A's setting ``key`` (a speed design not saved: ``runs``, the only one then)."""
    return aa.config.get(key, "runs" if key == "speed_design" else None)


def _read_aa(path: str) -> AbResult:
    """The ``ab`` A/A saved in ``path``, checked: an A/A with decode blocks."""
    kind, data = read_calibration(path)
    if kind != AbResult.KIND:
        raise InputError(f"--noise file {path} holds a result of kind {kind!r}: ab is calibrated by a saved ab A/A "
                         "of this machine (ab without --candidate, --json FILE)")
    aa = AbResult.from_dict(data)
    if _spec(aa.config.get("control")) != _spec(aa.config.get("candidate")):
        raise InputError(f"--noise file {path} is an ab of two different variants, not an A/A: calibrate with ab "
                         "without --candidate")
    if aa.speed.get("decode") is None:
        raise InputError(f"--noise file {path} has no decode tokens/s (no complete block): calibrate with a longer "
                         "A/A")
    return aa


def _spec(variant: object) -> object:
    """A saved variant without its label (``control`` / ``candidate``): what it runs."""
    return {k: v for k, v in variant.items() if k != "label"} if isinstance(variant, dict) else variant
