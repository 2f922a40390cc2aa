"""``ab --repeats auto --noise FILE``: δ pre-registered from a saved ``ab`` A/A of this machine.

The file is an ``ab --json`` result whose candidate is the control (an A/A:
``ab`` without ``--candidate``) with 3 or more blocks of decode tokens/s, the
metric ``--repeats auto`` decides on. δ is
:func:`~logitlab.perf.prereg.calibrated_margin` of its decode block log-ratio
sd (the change the run's budget resolves at that noise, 1 %-5 %); the record names the file and what it measured
(engine, variant, tokens, isolation, blocks, host). ``bench run`` results and
``bench calibrate`` profiles (times of commands and benchmark files, not an
engine's tokens/s) are refused, as is an ``ab`` of two different variants.
:mod:`logitlab.perf.prereg` has the rule and the default.

Nothing here prints or logs.
"""

from __future__ import annotations

from pathlib import PurePath

from logitlab.errors import InputError
from logitlab.experiments.ab_results import AbResult
from logitlab.perf.prereg import PreregisteredMargin, calibrated_margin, host_text, read_calibration

__all__ = ["ab_calibration"]


def ab_calibration(path: str, max_repeats: int) -> PreregisteredMargin:
    """δ for ``ab --repeats auto`` from the saved ``ab`` A/A ``path``.

    Parameters
    ----------
    path : str
        An ``ab --json`` result of an A/A.
    max_repeats : int
        The budget of blocks of the ``--repeats auto`` run to calibrate.

    Returns
    -------
    PreregisteredMargin
        :func:`~logitlab.perf.prereg.calibrated_margin` of the A/A's decode block
        log-ratio sd: source ``'calibration'``, the file and what it was measured on.

    Raises
    ------
    InputError
        A file that is missing or not JSON; another kind of result (``bench
        run``, ``bench calibrate``); an ``ab`` of two different variants; no
        decode speed in it, or fewer than 3 blocks.
    """
    kind, data = read_calibration(path)
    if kind != AbResult.KIND:
        raise InputError(f"--noise file {path} holds a result of kind {kind!r}: ab is calibrated by a saved ab A/A "
                         "of this machine (ab without --candidate, --json FILE)")
    aa = AbResult.from_dict(data)
    if _spec(aa.config.get("control")) != _spec(aa.config.get("candidate")):
        raise InputError(f"--noise file {path} is an ab of two different variants, not an A/A: calibrate with ab "
                         "without --candidate")
    decode = aa.speed.get("decode")
    if decode is None:
        raise InputError(f"--noise file {path} has no decode tokens/s (no complete block): calibrate with a longer "
                         "A/A")
    engine = aa.manifest.get("engine") if isinstance(aa.manifest.get("engine"), dict) else {}
    model = PurePath(str(engine.get("model") or "")).name
    basis = (f"ab A/A of {engine.get('engine', '?')}{' ' + model if model else ''}, {aa.config.get('n_decode')} "
             f"tokens, {aa.config.get('isolation')} isolation, {decode.n_blocks} blocks, decode block sd "
             f"{100 * (decode.sd_log_ratio or 0.0):.2f} %, {host_text(aa.manifest.get('host'))}")
    return calibrated_margin(decode.sd_log_ratio, decode.n_blocks, max_blocks=max_repeats, file=path, basis=basis)


def _spec(variant: object) -> object:
    """A saved variant without its label (``control`` / ``candidate``): what it runs."""
    return {k: v for k, v in variant.items() if k != "label"} if isinstance(variant, dict) else variant
