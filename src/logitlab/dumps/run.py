"""Dump variants end to end: load the engine, capture, and (for a pair) diff.

:func:`dump_variant` captures one variant; :func:`dump_pair` captures a
control (greedy, the reference) and a candidate that replays the control's
tokens, so both dumps see identical inputs at every position;
:func:`localize` is what ``ab --localize`` calls: dump a control/candidate
pair on given inputs and return the dump-diff summary.

The engine is loaded supervised (:mod:`logitlab.engines.supervised`): the
capture runs in the engine's worker process, started with the variant's
environment knobs, so a crash of the engine is an
:class:`~logitlab.errors.EngineCrashed` that names what the dump folder still
holds (its manifest is saved while the capture runs), not the end of logitlab.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from logitlab.dumps.capture import CaptureResult
from logitlab.dumps.filters import TensorFilter
from logitlab.dumps.format import MANIFEST_NAME
from logitlab.engines import canonical_engine_name, engine_class, engines_with
from logitlab.engines.supervised import call_engine, load_supervised
from logitlab.engines.variant import Variant
from logitlab.errors import EngineCrashed, InputError
from logitlab.events import Event, ignore_event

#: Default capture size: a short prompt and a few decode steps keep dumps small (≈2 MB per token
#: for the embedded model with every tensor).
DEFAULT_DUMP_PROMPT = "The capital of France is Paris. The capital of Italy is"
DEFAULT_DUMP_TOKENS = 4
DEFAULT_MAX_BYTES = 2 * 1000**3
def capture_function(engine: str) -> Callable[..., CaptureResult]:
    """The capture function of ``engine`` (a name or alias): the ``CAPTURE`` its adapter declares.

    Raises:
        InputError: an unknown engine, or one without the ``dump`` ability (the message lists those with it).
    """
    import importlib

    if canonical_engine_name(engine) is None:
        raise InputError(f"unknown engine {engine!r}; engines with dump capture: {', '.join(engines_with('dump'))}")
    cls = engine_class(engine)
    if not cls.supports("dump") or not cls.CAPTURE:
        raise InputError(f"dump capture is implemented for {', '.join(engines_with('dump'))}, not {engine!r}")
    module, _, function = cls.CAPTURE.partition(":")
    return getattr(importlib.import_module(module), function)


def check_out_dir(path: str | Path, *, force: bool = False, option: str = "--out") -> Path:
    """Check, before any work, that ``path`` can hold a dump; changes nothing but creating the folder.

    The folder (and its parents) is created if missing and probed with a
    temporary file; an existing one must be empty, or hold an earlier
    logitlab dump and ``force`` be given.

    Raises:
        InputError: not a folder, not empty (and not a dump ``force`` may
            clear), or it cannot be created or written.
    """
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise InputError(f"dump folder {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        # an earlier dump: its manifest and step files, or what a capture killed early leaves (step files only)
        ours = all(f.name == MANIFEST_NAME or f.name.startswith(("step-", f".{MANIFEST_NAME}."))
                   for f in out.iterdir())
        if not force:
            raise InputError(f"dump folder {out} is not empty; choose another {option} or pass --force")
        if not ours:
            raise InputError(f"dump folder {out} holds files that are not a logitlab dump; "
                             f"--force only replaces an earlier dump: choose another {option}")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".logitlab-probe-"):
            pass
    except OSError as exc:
        raise InputError(f"{option} {path} cannot be written: {exc.strerror or exc}") from None
    return out


@contextmanager
def removed_if_unused(*folders: str | Path) -> Iterator[None]:
    """On an error inside the block, remove those of ``folders`` (and their parents) it created, if empty.

    A folder that existed before the block is never removed, nor one that holds anything (a dump
    written before the error stays).
    """
    created: set[Path] = set()
    for folder in map(Path, folders):
        for path in (folder.absolute(), *folder.absolute().parents):
            if path.exists():
                break
            created.add(path)
    try:
        yield
    except BaseException:
        for path in sorted(created, key=lambda p: len(p.parts), reverse=True):  # deepest first
            try:
                path.rmdir()
            except OSError:  # not empty, or already gone
                pass
        raise


def prepare_out_dir(path: str | Path, *, force: bool = False) -> Path:
    """Create ``path`` or check it is empty; with ``force``, clear an earlier logitlab dump there.

    Raises:
        InputError: not a folder, not empty (and not a dump ``force`` may
            clear), or it cannot be created or written.
    """
    out = check_out_dir(path, force=force)
    for f in out.iterdir():  # empty, or (with force) an earlier dump
        f.unlink()
    return out


def dump_variant(
    variant: Variant,
    prompt: str | Sequence[int],
    n_decode: int,
    out_dir: str | Path,
    *,
    replay: Sequence[int] | None = None,
    select: TensorFilter | None = None,
    max_bytes: int | None = DEFAULT_MAX_BYTES,
    force: bool = False,
    on_event: Event | None = None,
) -> CaptureResult:
    """Load ``variant``'s engine and dump its tensors for one prefill + ``n_decode`` decode steps.

    Parameters
    ----------
    variant : Variant
        Engine, model, options and environment knobs.
    prompt : str or sequence of int
        Prompt text (tokenized by the engine, BOS added) or token ids.
    n_decode : int
        Decode steps (M=1); greedy unless ``replay`` is given.
    out_dir : path
        Folder for the dump (created; must be empty unless ``force``).
    replay, select, max_bytes, on_event :
        As for :func:`logitlab.dumps.capture.capture_with` (what every engine's capture takes);
        ``on_event("loaded", {"variant": ..., "seconds": ...})`` is sent first.

    Returns
    -------
    CaptureResult

    Raises
    ------
    InputError
        An engine without dump capture (llamacpp and hf have one), bad
        options, a non-empty ``out_dir``.
    EngineError
        The engine failed to load or run.
    """
    capture = capture_function(variant.engine)
    engine_name = canonical_engine_name(variant.engine) or variant.engine
    with removed_if_unused(out_dir):
        out = prepare_out_dir(out_dir, force=force)
        return _load_and_capture(engine_class(engine_name), variant, capture, prompt, n_decode, out,
                                 replay=replay, select=select, max_bytes=max_bytes, on_event=on_event)


def _load_and_capture(cls: type, variant: Variant, capture: Callable[..., CaptureResult],
                      prompt: str | Sequence[int], n_decode: int, out: Path, *, on_event: Event | None,
                      **options: Any) -> CaptureResult:
    """Load the engine supervised (:mod:`logitlab.engines.supervised`) and run ``capture`` into ``out`` in its
    worker (``options``: the capture's); the capture's progress events come back to ``on_event``.

    Raises:
        EngineCrashed: the engine died while loading or capturing; the message says what ``out`` still holds.
    """
    engine = load_supervised(variant)
    try:
        prompt_ids = engine.tokenize(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
        if on_event:
            on_event("loaded", {"variant": variant.label, "seconds": engine.load_seconds})
        return call_engine(engine, run_capture, f"{capture.__module__}:{capture.__name__}", prompt_ids, n_decode,
                           str(out), variant.to_dict(), options, phase=f"dump capture ({variant.label})",
                           on_event=on_event or ignore_event)
    except EngineCrashed as crash:
        steps = sorted(out.glob("step-*.safetensors"))
        kept = (f"the dump in {out} is kept: {len(steps)} whole step file(s) written before the crash"
                if steps else f"no step of the dump in {out} was written")
        raise EngineCrashed(f"{crash}; {kept}", evidence=crash.evidence) from None
    finally:
        engine.close()


def run_capture(engine: Any, capture: str, prompt_ids: list[int], n_decode: int, out: str, variant: dict[str, Any],
                options: dict[str, Any], *, on_event: Event) -> CaptureResult:
    """``capture`` (``"module:function"``) on ``engine`` into ``out``: what the supervised worker runs."""
    import importlib

    module, _, function = capture.partition(":")
    fn = getattr(importlib.import_module(module), function)
    return fn(engine, prompt_ids, n_decode, Path(out), variant=variant, on_event=on_event, **options)


def dump_pair(control: Variant, candidate: Variant, prompt: str | Sequence[int], n_decode: int, out_dir: str | Path,
              *, replay: Sequence[int] | None = None, force: bool = False, on_event: Event | None = None,
              **options: Any) -> tuple[CaptureResult, CaptureResult]:
    """Dump the control into ``out_dir/control`` and the candidate into ``out_dir/candidate``.

    The control decodes greedily (unless ``replay`` is given) and the
    candidate replays the control's decode tokens on the control's prompt ids.
    The parameters are :func:`dump_variant`'s, ``replay`` the control's; ``options``
    (``select``, ``max_bytes``) apply to each side. Raises as :func:`dump_variant`.
    """
    out = Path(out_dir)
    for variant in (control, candidate):  # both engines have a capture, both folders are usable: before any work
        capture_function(variant.engine)
    with removed_if_unused(out / "control", out / "candidate"):
        for side in ("control", "candidate"):
            check_out_dir(out / side, force=force)
        if on_event:
            on_event("variant", {"label": control.label})
        first = dump_variant(control, prompt, n_decode, out / "control", replay=replay, force=force,
                             on_event=on_event, **options)
        generated = first.manifest.generated
        n_second = len(generated)  # fewer than n_decode if the control stopped at --max-bytes
        if on_event:
            on_event("variant", {"label": candidate.label})
        second = dump_variant(candidate, first.manifest.prompt_ids, n_second, out / "candidate", replay=generated,
                              force=force, on_event=on_event, **options)
    return first, second


def localize(
    control: Variant,
    candidate: Variant,
    prompt_ids: Sequence[int],
    replay: Sequence[int],
    *,
    select: TensorFilter | None = None,
    max_bytes: int | None = DEFAULT_MAX_BYTES,
    out_dir: str | Path | None = None,
    on_event: Event | None = None,
) -> dict[str, Any]:
    """Dump both variants on the same inputs and return the dump-diff summary (for ``ab --localize``).

    Parameters
    ----------
    control, candidate : Variant
        The two sides (the control is dump A).
    prompt_ids : sequence of int
        The prompt token ids the A/B ran.
    replay : sequence of int
        The reference run's decode tokens; both sides replay all of them
        (pass a prefix to localize only the first decode steps).
    select : TensorFilter, optional
        Names/layers/positions to dump (default: everything).
    max_bytes : int, optional
        Byte limit per side.
    out_dir : path, optional
        Keep the dumps there (``control/``, ``candidate/``); default: a
        temporary folder removed afterwards.

    Returns
    -------
    dict
        :meth:`DumpDiffResult.summary` (JSON-able: ``verdict``,
        ``first_divergence``, ``layers``, ``only_left``/``only_right``,
        ``problems``...) plus ``"dumps"``: the folder, or None if removed.

    Raises
    ------
    InputError, EngineError
        As :func:`dump_variant`.
    """
    from logitlab.dumps.diff import diff_dumps
    from logitlab.dumps.readers import open_dump

    temp = out_dir is None
    root = Path(tempfile.mkdtemp(prefix="logitlab-localize-")) if temp else Path(out_dir)
    try:
        dump_pair(control, candidate, list(prompt_ids), len(replay), root, replay=list(replay), select=select,
                  max_bytes=max_bytes, force=not temp, on_event=on_event)
        result = diff_dumps(open_dump(root / "control"), open_dump(root / "candidate"))
        summary = result.summary()
        summary["dumps"] = None if temp else str(root)
        return summary
    finally:
        if temp:
            shutil.rmtree(root, ignore_errors=True)


__all__ = ["DEFAULT_DUMP_PROMPT", "DEFAULT_DUMP_TOKENS", "DEFAULT_MAX_BYTES", "capture_function",
           "check_out_dir", "dump_pair", "dump_variant", "localize", "prepare_out_dir", "removed_if_unused"]
