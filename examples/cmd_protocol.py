"""The ``cmd`` protocol's file side, shared by the reference engines (``llamacpp_cmd_engine.py``, ``hf_cmd_engine.py``).

An engine binary reads its token ids from ``--tokens``, runs, and writes one
float32 row of logits per position to ``--logits`` (see the README, "Bring
your own engine"). This module holds the parts every engine does the same
way: the arguments, reading and checking the workload, planting the faults
its environment names (``cmd_faults.py``), writing the files and the timing
line. ``numpy_cmd_engine.py`` stays self-contained: tests commit it alone
into a repository.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
from pathlib import Path

import numpy as np
from cmd_faults import FaultError, parse_faults, plant_faults  # this folder (a script's own folder is on sys.path)


class ProtocolError(Exception):
    """Bad input to an engine; the message is its one ``error:`` line (exit status 2)."""


def parser(description: str, prefill_help: str) -> argparse.ArgumentParser:
    """The protocol's arguments: ``--tokens``, ``--logits``, ``--n-prompt``, ``--n-decode``, ``--generated``."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--tokens", required=True, help="input token ids, whitespace-separated")
    p.add_argument("--logits", required=True, help="output: .npy, .safetensors or raw float32")
    p.add_argument("--n-prompt", type=int, default=None, help=prefill_help)
    p.add_argument("--n-decode", type=int, default=None,
                   help="M=1 decode steps after the prompt (default: the rest of the file)")
    p.add_argument("--generated", default=None, help="output: the decode token ids fed, one per line")
    return p


def read_workload(args: argparse.Namespace, fault_prefix: str | None = None) -> tuple[list[int], int, int]:
    """The token ids, the prompt length and the decode steps; with ``fault_prefix``, the fault variables checked.

    Raises:
        ProtocolError: the file cannot be read, its ids do not fit ``--n-prompt`` / ``--n-decode``, or a fault
            variable of ``fault_prefix`` is malformed (before the engine loads its model).
    """
    try:
        tokens = [int(t) for t in Path(args.tokens).read_text().split()]
    except (OSError, ValueError) as exc:
        raise ProtocolError(f"cannot read token ids from {args.tokens}: {exc}") from None
    n_prompt = len(tokens) if args.n_prompt is None else args.n_prompt
    n_decode = len(tokens) - n_prompt if args.n_decode is None else args.n_decode
    if not 1 <= n_prompt <= len(tokens) or n_decode < 0 or len(tokens) > n_prompt + n_decode:
        raise ProtocolError(f"{len(tokens)} tokens in {args.tokens} do not fit --n-prompt {n_prompt} "
                            f"--n-decode {n_decode}")
    if fault_prefix is not None:
        try:
            parse_faults(dict(os.environ), fault_prefix, n_prompt + n_decode)
        except FaultError as exc:
            raise ProtocolError(str(exc)) from None
    return tokens, n_prompt, n_decode


def env_int(name: str, default: int | None) -> int | None:
    """An integer knob of the environment (``default`` when unset or empty).

    Raises:
        ProtocolError: the value is not an integer.
    """
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ProtocolError(f"{name}={value!r} is not an integer") from None


def env_float(name: str, default: float) -> float:
    """A non-negative finite number knob of the environment (``default`` when unset or empty).

    Raises:
        ProtocolError: the value is not a finite number >= 0.
    """
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not (number >= 0 and number != float("inf")):
        raise ProtocolError(f"{name}={value!r} is not a finite number >= 0")
    return number


def env_choice(name: str, default: str, valid: tuple[str, ...]) -> str:
    """A knob of the environment that must be one of ``valid``.

    Raises:
        ProtocolError: it is not.
    """
    value = os.environ.get(name) or default
    if value not in valid:
        raise ProtocolError(f"{name}={value!r} is not one of {', '.join(valid)}")
    return value


def write_logits(path: Path, logits: np.ndarray) -> None:
    """Write ``(rows, vocab)`` float32 logits in the format the file suffix names."""
    logits = np.ascontiguousarray(logits, dtype="<f4")
    if path.suffix == ".npy":
        np.save(path, logits)
    elif path.suffix == ".safetensors":
        header = json.dumps({"logits": {"dtype": "F32", "shape": list(logits.shape),
                                        "data_offsets": [0, logits.nbytes]}}).encode()
        header += b" " * (-len(header) % 8)
        with path.open("wb") as f:
            f.write(struct.pack("<Q", len(header)) + header + logits.tobytes())
    else:
        logits.tofile(path)


def finish(args: argparse.Namespace, logits: np.ndarray, fed: list[int], prefill_seconds: float,
           decode_seconds: float, fault_prefix: str) -> None:
    """Plant the environment's faults, write ``--logits`` and ``--generated``, print the timing line on stderr.

    Raises:
        ProtocolError: a fault variable is malformed (nothing is written).
    """
    try:
        plant_faults(logits, dict(os.environ), fault_prefix)
    except FaultError as exc:
        raise ProtocolError(str(exc)) from None
    write_logits(Path(args.logits), logits)
    if args.generated:
        Path(args.generated).write_text("".join(f"{t}\n" for t in fed))
    print(f"prefill_seconds={prefill_seconds:.6f} decode_seconds={decode_seconds:.6f}", file=sys.stderr)


def serve(main) -> int:
    """Run ``main()``; a :class:`ProtocolError` is one ``error:`` line on stderr and exit status 2."""
    try:
        return main()
    except ProtocolError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
