"""What every dump capture shares, whatever the engine.

An engine-specific capture (:mod:`~logitlab.dumps.capture_llamacpp`,
:mod:`~logitlab.dumps.capture_hf`) observes tensors while the engine
evaluates and hands each one to :meth:`StepRecorder.store`; this module does
the rest:

- :class:`StepRecorder`: one safetensors step file per engine call, the
  manifest entries, execution order, the position filter (split a tensor into
  one-position rows), the ``--max-bytes`` limit and its stop message, and an
  error raised inside an engine callback, kept until the step ends (an
  exception must not cross into C or unwind a framework's forward pass).
- :func:`capture_with`: the one entry point every engine's capture function
  calls (the checks, the engine's recorder, the driver), with the options they share.
- :func:`check_capture_inputs`: the checks made before the engine runs.
- :func:`run_capture`: the prefill + ``n_decode`` M=1 decode driver (greedy,
  or a replay of given token ids), the size estimate and progress events, and
  the manifest written at the end, even when the capture stopped or failed —
  and saved after the steps as they finish (an incomplete manifest that
  lists the finished steps), so a capture killed mid-way leaves a readable,
  incomplete dump.
- :func:`check_filter_matches`: ``--names``/``--layers`` that keep nothing are
  an error that names what the model has.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from logitlab.dumps.filters import TensorFilter, format_ranges
from logitlab.dumps.format import format_label
from logitlab.dumps.manifest import DumpManifest, StepInfo, TensorEntry
from logitlab.dumps.sizes import format_bytes
from logitlab.dumps.step_writer import DumpWriteError, StepWriter
from logitlab.engines.base import check_fits
from logitlab.errors import EngineError, InputError
from logitlab.events import Event

@dataclass
class CaptureResult:
    """A finished (or stopped) capture.

    Attributes:
        path: the dump folder.
        manifest: what was written (also in ``path/manifest.json``).
        logits: ``(n_positions, n_vocab)`` float32 logits of the run, as the
            engine's session returned them.
    """

    path: Path
    manifest: DumpManifest
    logits: np.ndarray = field(repr=False, default=None)  # type: ignore[assignment]

    @property
    def stopped(self) -> str | None:
        return self.manifest.stopped


def check_filter_matches(select: TensorFilter, seen: Sequence[tuple[str, int | None]], *,
                         have: str | None = None) -> None:
    """Raise if ``--names`` / ``--layers`` keep none of the graph's tensors ``seen`` (``(name, layer)``, in order).

    ``have`` says whose tensors ``seen`` are in messages (default: "the model has" layers, "the graph has" names).

    Raises:
        InputError: naming the filter and what the graph has (its layer range, a few names).
    """
    if not seen:
        return
    layers = sorted({layer for _, layer in seen if layer is not None})
    names = list(dict.fromkeys(name for name, _ in seen))
    shown = ", ".join(names[:12]) + (f", … ({len(names)} names)" if len(names) > 12 else "")
    layer_text = f"layers {layers[0]}-{layers[-1]}" if layers else "no layers"
    if select.layers is not None and not select.layers & set(layers):
        raise InputError(f"--layers {format_ranges(select.layers)} matches no layer: {have or 'the model has'} "
                         f"{layer_text}")
    if not select.names or any(select.keeps_name(name, layer) for name, layer in seen):
        return
    patterns = ",".join(select.names)
    if any(TensorFilter(select.names).keeps_name(name, layer) for name, layer in seen):
        raise InputError(f"--names {patterns} with --layers {format_ranges(select.layers or ())} matches no tensor: "
                         f"those names are in other layers ({layer_text})")
    raise InputError(f"--names {patterns} matches no tensor; {have or 'the graph has'} {shown}")


class StepRecorder:
    """Store captured tensors into step files, under a filter and a byte limit.

    Subclasses observe an engine and call :meth:`store`; they implement
    :meth:`probe_bytes_per_token` (filling :attr:`seen`) and may extend
    :meth:`begin_step` / :meth:`end_step`. An error inside an engine callback
    goes to :meth:`fail` and is raised by :meth:`end_step` (or
    :meth:`raise_pending_error`).

    Attributes:
        entries: manifest entries of the stored tensors, in execution order.
        steps: the steps that stored at least one tensor.
        bytes_written: bytes stored so far.
        stopped: why storing stopped (``--max-bytes``), or None.
        notes: remarks for the manifest (``capture_notes``), e.g. tensors skipped.
        seen: ``(name, layer)`` of every tensor the last size probe saw, in order (kept or not).
        refused_first: ``(label, bytes)`` of the tensor ``--max-bytes`` refused before anything was stored.
    """

    #: "dump capture failed inside <where>" in the message of an unexpected callback error.
    callback_where = "the engine callback"

    def __init__(self, select: TensorFilter, out_dir: Path, *, max_bytes: int | None = None):
        self.select = select
        self.out_dir = Path(out_dir)
        self.max_bytes = max_bytes
        self.entries: list[TensorEntry] = []
        self.steps: list[StepInfo] = []
        self.bytes_written = 0
        self.stopped: str | None = None
        self.notes: list[str] = []
        self.seen: dict[tuple[str, int | None], None] = {}
        self.refused_first: tuple[str, int] | None = None
        self._order = 0
        self._error: BaseException | None = None
        self._writer: StepWriter | None = None
        self._step = StepInfo(-1, "none", (0, 0), "")

    # -- to implement -------------------------------------------------------------
    def probe_bytes_per_token(self) -> int:  # pragma: no cover - abstract
        """Bytes the filter keeps for one token; fills :attr:`seen`; leaves the engine as it was."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop observing the engine (remove hooks); called once the capture is over."""

    # -- steps --------------------------------------------------------------------
    def begin_step(self, index: int, kind: str, start: int, n_tokens: int) -> None:
        """Prepare for one engine call appending ``n_tokens`` at positions ``start``…"""
        name = f"step-{index:04d}-{kind}.safetensors"
        self._step = StepInfo(index, kind, (start, start + n_tokens), name)
        self._writer = None if self.stopped else StepWriter(self.out_dir / name)

    def end_step(self) -> StepInfo:
        """Finish the step file (removed if it stored nothing); returns the step's info.

        Raises:
            EngineError, InputError: an error kept from inside the engine callback.
        """
        try:
            self.raise_pending_error()
        except BaseException:
            self.abort()
            raise
        step = self._step
        if self._writer is not None:
            if step.n_tensors:
                self._writer.close({"format": "logitlab-dump", "step": str(step.index), "kind": step.kind})
                self.steps.append(step)
            else:
                self._writer.abort()
        self._writer = None
        return step

    def abort(self) -> None:
        """Drop the step file being written (the capture failed or is over)."""
        if self._writer is not None:
            self._writer.abort()
            self._writer = None

    # -- callback errors ------------------------------------------------------------
    def fail(self, exc: BaseException) -> None:
        """Keep the first error raised inside an engine callback, to raise after the engine call."""
        if self._error is None:
            self._error = exc

    @property
    def failed(self) -> bool:
        return self._error is not None

    def raise_pending_error(self) -> None:
        """Raise the error kept by :meth:`fail`, if any (EngineError/InputError as they are, others wrapped).

        Raises:
            EngineError, InputError: the kept error.
        """
        if self._error is not None:
            error, self._error = self._error, None
            if isinstance(error, (EngineError, InputError)):
                raise error
            raise EngineError(f"dump capture failed inside {self.callback_where}: {error!r}") from error

    # -- storing --------------------------------------------------------------------
    def store(self, info: dict[str, Any], array: np.ndarray, span: tuple[int, int], axis: int | None) -> None:
        """Store one observed tensor of the current step.

        Args:
            info: ``name``, ``layer`` (None outside the layers), ``instance``,
                ``op`` (engine-specific: the ggml op, or the hf module) and
                ``label`` (the engine's own name for it, for messages).
            array: the tensor in numpy axis order (dtype kept as given).
            span: the half-open token positions it covers.
            axis: the axis that runs over those positions, or None if not known.

        With a position filter and a known axis, each kept position is stored
        as its own one-position slice (the axis stays, with length 1).
        """
        if self.select.positions is None or axis is None:
            self._write(info, array, span, axis)
            return
        for i, pos in enumerate(range(*span)):
            if pos in self.select.positions:
                self._write(info, np.take(array, [i], axis=axis), (pos, pos + 1), axis)

    def _write(self, info: dict[str, Any], array: np.ndarray, span: tuple[int, int], axis: int | None) -> None:
        if self.stopped or self._writer is None:
            return
        if self.max_bytes is not None and self.bytes_written + array.nbytes > self.max_bytes:
            if not self.entries:
                self.refused_first = (format_label(info["name"], info["layer"], info["instance"]), array.nbytes)
            self.stopped = (f"--max-bytes {format_bytes(self.max_bytes)} reached at step {self._step.index} "
                            f"({self._step.kind}, positions {self._step.positions[0]}-"
                            f"{self._step.positions[1] - 1}), tensor {info['label']}: "
                            f"{format_bytes(self.bytes_written)} written")
            return
        key = f"{self._order:06d}/{format_label(info['name'], info['layer'], info['instance'])}@{span[0]}"
        self._writer.add(key, array)
        self.entries.append(TensorEntry(
            key=key, name=info["name"], layer=info["layer"], instance=info["instance"], positions=span,
            token_axis=axis, dtype=array.dtype.name, shape=tuple(array.shape), order=self._order,
            step=self._step.index, file=self._step.file, op=info["op"]))
        self._order += 1
        self.bytes_written += array.nbytes
        self._step.n_tensors += 1
        self._step.nbytes += array.nbytes


class ManifestSaver:
    """Save the manifest of a running capture after its steps, for a kill to leave a readable dump.

    Each save lists the finished steps and says the capture is not complete
    (``stopped`` names the last step saved). Saving rewrites the whole
    manifest, so saves are spaced to cost at most ``share`` of the capture's
    time: after every step of a small dump, less often for a large one (a kill
    then loses the steps after the last save from the manifest; their files
    are named as unlisted by the reader).
    """

    def __init__(self, out: Path, *, share: float = 0.1):
        import time

        self.out = out
        self.share = share
        self._clock = time.perf_counter
        self._start = self._clock()
        self._spent = 0.0
        self.saves = 0
        self.saved_steps = 0

    def save(self, manifest: DumpManifest, capture: StepRecorder, step: StepInfo) -> None:
        now = self._clock()
        if self.saves and self._spent > self.share * (now - self._start):
            return
        manifest.steps, manifest.tensors = list(capture.steps), list(capture.entries)
        manifest.bytes_written = capture.bytes_written
        manifest.stopped = (f"interrupted: this manifest was saved after step {step.index} ({step.kind}, positions "
                            f"{step.positions[0]}-{step.positions[1] - 1}) while the capture ran, and nothing "
                            "replaced it (the process was killed, or a later write failed); the steps listed are "
                            "whole")
        manifest.write(self.out)
        self._spent += self._clock() - now
        self.saves += 1
        self.saved_steps = len(manifest.steps)


def check_capture_inputs(engine: Any, prompt_ids: Sequence[int], n_decode: int, replay: Sequence[int] | None,
                         select: TensorFilter) -> tuple[TensorFilter, list[int]]:
    """Check a capture's inputs before the engine runs.

    Returns:
        ``select`` with its ``--positions`` SPEC resolved against this run of ``len(prompt_ids)`` prompt and
        ``n_decode`` decode positions (:meth:`TensorFilter.for_run`: the positions ``ab`` would keep), and the
        positions it keeps, sorted.

    Raises:
        InputError: ``replay`` shorter than ``n_decode``, an empty prompt, more
            tokens than the engine's context (:func:`~logitlab.engines.base.check_fits`),
            or ``--positions`` past the run's last position or keeping none of the run's positions.
    """
    if replay is not None and len(replay) < n_decode:
        raise InputError(f"replay has {len(replay)} tokens, {n_decode} needed")
    if not prompt_ids:
        raise InputError("the prompt has no tokens")
    n_total = len(prompt_ids) + n_decode
    check_fits(engine, len(prompt_ids), n_decode)
    select = select.for_run(len(prompt_ids), n_decode)
    positions = [p for p in range(n_total) if select.keeps_position(p)]
    if not positions:
        raise InputError(f"--positions {select.positions_text} matches no position: this run has "
                         f"positions 0-{n_total - 1} ({len(prompt_ids)} prompt + {n_decode} decode tokens)")
    return select, positions


def run_capture(
    engine: Any,
    capture: StepRecorder,
    prompt_ids: Sequence[int],
    n_decode: int,
    positions: Sequence[int],
    *,
    replay: Sequence[int] | None = None,
    variant: dict[str, Any] | None = None,
    on_event: Event | None = None,
) -> CaptureResult:
    """Drive a capture: size probe, one prefill, ``n_decode`` M=1 decode steps, manifest.

    Parameters
    ----------
    engine : Engine
        The loaded engine ``capture`` observes.
    capture : StepRecorder
        The engine-specific capture, freshly made (nothing stored yet).
    prompt_ids : sequence of int
        Prompt token ids (one prefill call).
    n_decode : int
        Decode steps, one token each: greedy (argmax of the last logits row)
        unless ``replay`` gives the ids.
    positions : sequence of int
        The positions the filter keeps (from :func:`check_capture_inputs`),
        for the size estimate.
    replay, variant, on_event :
        As for :func:`capture_with`.

    Returns
    -------
    CaptureResult
        ``logits`` holds the rows of the steps that ran (fewer than
        ``len(prompt_ids) + n_decode`` if ``--max-bytes`` stopped the run).

    Raises
    ------
    InputError
        A filter that keeps none of the model's tensors, or ``max_bytes``
        smaller than the first tensor (then nothing is written, not even the
        manifest).
    EngineError
        The engine failed, or a tensor could not be observed.
    """
    per_token = _probe(capture)
    estimate = per_token * len(positions)
    if on_event:
        on_event("estimate", {"bytes": estimate, "bytes_per_token": per_token, "positions": len(positions)})
    manifest = _new_manifest(engine, capture, prompt_ids, variant, estimate)
    rows: list[np.ndarray] = []
    saver = ManifestSaver(capture.out_dir)
    failed: BaseException | None = None
    try:
        _run_steps(engine, capture, manifest, saver, rows, n_decode, replay, on_event)
        manifest.complete = capture.stopped is None
    except BaseException as exc:
        failed = exc
        raise
    finally:
        _finish_manifest(capture, manifest, saver, failed)
    _check_stored(capture, estimate)
    return CaptureResult(capture.out_dir, manifest,
                         np.concatenate(rows) if rows else np.zeros((0, engine.n_vocab), np.float32))


def capture_with(
    recorder: Callable[..., StepRecorder],
    engine: Any,
    prompt_ids: Sequence[int],
    n_decode: int,
    out_dir: str | Path,
    *,
    replay: Sequence[int] | None = None,
    select: TensorFilter | None = None,
    max_bytes: int | None = None,
    variant: dict[str, Any] | None = None,
    on_event: Event | None = None,
) -> CaptureResult:
    """Run prefill + ``n_decode`` M=1 decode steps on a loaded engine and dump its tensors through ``recorder``.

    What :func:`~logitlab.dumps.capture_llamacpp.capture_llamacpp` and
    :func:`~logitlab.dumps.capture_hf.capture_hf` do, each with its own recorder.

    Parameters
    ----------
    recorder : callable
        The engine's :class:`StepRecorder` class, called as
        ``recorder(engine, select, out_dir, max_bytes=max_bytes)`` after the checks.
    engine : Engine
        Loaded, of the kind ``recorder`` observes.
    prompt_ids : sequence of int
        Prompt token ids (one prefill call).
    n_decode : int
        Decode steps, one token each; greedy unless ``replay`` gives the ids.
    out_dir : path
        Existing, empty folder for the step files and ``manifest.json``.
    replay : sequence of int, optional
        Decode token ids to feed (a reference run's), at least ``n_decode``.
    select : TensorFilter, optional
        Names, layers and positions to keep (default: every named tensor).
    max_bytes : int, optional
        Stop storing once this many bytes are written; the manifest then says
        ``"complete": false`` and why, and the run stops after that step.
    variant : dict, optional
        The variant description stored in the manifest.
    on_event : callable, optional
        ``on_event("estimate", {"bytes", "bytes_per_token", "positions"})``
        before capture, ``on_event("step", {"step": StepInfo, "total": n_steps})``
        after each step.

    Returns
    -------
    CaptureResult
        What :func:`run_capture` returns: the dump folder, its manifest and the
        ``(n_positions, n_vocab)`` float32 logits of the steps that ran.

    Raises
    ------
    InputError
        As :func:`check_capture_inputs` and :func:`run_capture` (``replay`` too
        short, the tokens do not fit the engine, a filter that keeps nothing,
        ``max_bytes`` smaller than the first tensor), and as ``recorder``.
    EngineError
        The engine failed, or tensors could not be assigned to positions.
    """
    select, positions = check_capture_inputs(engine, prompt_ids, n_decode, replay, select or TensorFilter())
    capture = recorder(engine, select, Path(out_dir), max_bytes=max_bytes)
    return run_capture(engine, capture, prompt_ids, n_decode, positions, replay=replay, variant=variant,
                       on_event=on_event)


def _probe(capture: StepRecorder) -> int:
    """Bytes the filter keeps for one token (the capture's size probe).

    Raises:
        InputError: a filter that keeps none of the model's tensors (the capture is closed first).
    """
    try:
        per_token = capture.probe_bytes_per_token()
        check_filter_matches(capture.select, list(capture.seen))
    except BaseException:
        capture.close()
        raise
    return per_token


def _new_manifest(engine: Any, capture: StepRecorder, prompt_ids: Sequence[int], variant: dict[str, Any] | None,
                  estimate: int) -> DumpManifest:
    """The manifest of a capture about to run (no steps yet, not complete)."""
    from logitlab import __version__
    from logitlab.manifest import now_utc

    return DumpManifest(engine=engine.describe(), variant=dict(variant or {}), prompt_ids=list(prompt_ids),
                        generated=[], filter=capture.select.to_dict(), estimate_bytes=estimate,
                        created_at=now_utc(), logitlab_version=__version__, complete=False)


def _run_steps(engine: Any, capture: StepRecorder, manifest: DumpManifest, saver: ManifestSaver,
               rows: list[np.ndarray], n_decode: int, replay: Sequence[int] | None, on_event: Event | None) -> None:
    """One prefill of ``manifest.prompt_ids``, then up to ``n_decode`` M=1 decode steps, each a step file.

    Appends each step's logits to ``rows`` and its decode token to ``manifest.generated``; saves the manifest
    after the steps (``saver``); stops early when ``--max-bytes`` stopped storing.

    Raises:
        EngineError, InputError: the engine failed (the callback's error first, if it explains the engine's).
    """
    with engine.open_session() as session:
        calls = [("prefill", list(manifest.prompt_ids))] + [("decode", None)] * n_decode
        for index, (kind, tokens) in enumerate(calls):
            if tokens is None:
                step = index - 1
                token = int(replay[step]) if replay is not None else int(np.argmax(rows[-1][-1]))
                manifest.generated.append(token)
                tokens = [token]
            capture.begin_step(index, kind, session.n_past, len(tokens))
            try:
                logits = session.prefill(tokens) if kind == "prefill" else session.decode(tokens)
            except BaseException:
                capture.abort()
                capture.raise_pending_error()  # the callback's error explains the engine's, if there is one
                raise
            info = capture.end_step()
            rows.append(logits)
            if capture.entries and not capture.stopped and index + 1 < len(calls):
                saver.save(manifest, capture, info)
            if on_event:
                on_event("step", {"step": info, "total": len(calls)})
            if capture.stopped:
                break


def _finish_manifest(capture: StepRecorder, manifest: DumpManifest, saver: ManifestSaver,
                     failed: BaseException | None) -> None:
    """Close the capture and write its final manifest, whether it ran to the end, stopped or failed.

    Nothing is written when nothing was stored because ``--max-bytes`` refused the first tensor.

    Raises:
        DumpWriteError: the manifest could not be written after a capture that ran (full disk), or
            ``failed`` was one: then the message says what the dump folder still holds.
        InputError: the manifest could not be written after a capture that ran.
    """
    out = capture.out_dir
    capture.abort()
    capture.close()
    manifest.stopped = capture.stopped
    manifest.steps = capture.steps
    manifest.tensors = capture.entries
    manifest.bytes_written = capture.bytes_written
    if capture.notes:
        manifest.engine = {**manifest.engine, "capture_notes": capture.notes}
    if manifest.stopped is None and not manifest.complete:
        manifest.stopped = "the capture failed before the end (see the error it raised)"
        if isinstance(failed, DumpWriteError):
            manifest.stopped = f"the capture stopped: {failed}"
    listed = None
    if capture.entries or capture.refused_first is None:  # else nothing stored: leave the folder empty
        try:
            manifest.write(out)
            listed = len(manifest.steps)
        except DumpWriteError:
            if failed is None:
                raise
            listed = saver.saved_steps  # the manifest saved last, if any, stays as it was
        except InputError:
            if failed is None:
                raise
    if isinstance(failed, DumpWriteError):  # a full disk: say what the folder still holds
        kept = (f"its manifest lists the {listed} whole step(s) written before and says the dump is incomplete"
                if listed else "no manifest could be written")
        raise DumpWriteError(f"{failed}; the dump in {out} is kept: {kept}") from None


def _check_stored(capture: StepRecorder, estimate: int) -> None:
    """Raise when ``--max-bytes`` refused the first tensor, so that nothing was stored.

    Raises:
        InputError: naming the limit, the first tensor and its size, and the capture's estimate.
    """
    if capture.refused_first is not None and not capture.entries:
        label, size = capture.refused_first
        raise InputError(f"--max-bytes {format_bytes(capture.max_bytes or 0)} is smaller than the first tensor "
                         f"({label}, {format_bytes(size)}): nothing would be stored; raise it (the whole capture is "
                         f"estimated at {format_bytes(estimate)})")


__all__ = ["CaptureResult", "StepRecorder", "capture_with", "check_capture_inputs", "check_filter_matches",
           "run_capture"]
