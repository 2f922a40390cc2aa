"""The golden-logits folder: what a build's logits were, on which device, built how.

Layout of one golden (one device key)::

    <root>/<device-key>/manifest.json          GoldenManifest (kind "golden"): provenance, prompts, history
    <root>/<device-key>/logits.safetensors     per prompt i: token ids and logits (or their top-k)

Per-device goldens live side by side under one root, each in the folder named
by its device key (:mod:`logitlab.device`). Tensors of prompt ``i`` (``pNNNN``
= ``p0000``, ``p0001``, ...):

``store = "full"``
    ``pNNNN.ids`` int32 ``(n_positions,)`` (prompt ids, then the greedy
    decode ids) and ``pNNNN.logits`` ``(n_positions, n_vocab)`` in the dtype
    the engine returned (float32 through the engine contract), so ULP
    distances stay exact.
``store = "topk:K"``
    ``pNNNN.ids``, ``pNNNN.topk_ids`` int32 ``(n_positions, K)`` (largest
    first, ties to the lower id), ``pNNNN.topk_logits`` (the raw logits of
    those tokens, engine dtype) and ``pNNNN.logsumexp`` float64
    ``(n_positions,)``, so that log-probabilities are ``logit - logsumexp``.

A golden recorded with ``--positions`` stores only the selected rows of each
prompt's run: ``pNNNN.ids`` stays whole (every token fed), the logits tensors
hold one row per stored position, and the manifest lists those run positions
(:attr:`GoldenPrompt.positions`) and the spec (:attr:`GoldenManifest.positions`).

The manifest stores the SHA-256 of ``logits.safetensors``; a golden whose
file no longer matches is refused as corrupt.

JSON format history (``schema_version``): 1 — first version; later in 1 (additive): ``positions`` of the
manifest and of each prompt (absent: every position is stored).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from logitlab.device import Device
from logitlab.dumps.format import is_int
from logitlab.dumps.safetensors_io import SafetensorsFiles, read_safetensors_header
from logitlab.dumps.step_writer import StepWriter
from logitlab.errors import InputError
from logitlab.jsonio import ResultRecord, read_json, without_none, write_json
from logitlab.numerics.verdict import Verdict

__all__ = [
    "MANIFEST_FILE",
    "LOGITS_FILE",
    "Provenance",
    "GoldenPrompt",
    "HistoryEntry",
    "GoldenManifest",
    "parse_store",
    "store_bytes",
    "logits_topk",
    "GoldenWriter",
    "GoldenLogits",
    "golden_folders",
    "read_golden",
    "sha256_file",
]

MANIFEST_FILE = "manifest.json"
LOGITS_FILE = "logits.safetensors"
_STORE = re.compile(r"^(full|topk:(\d+))$")


@dataclass
class Provenance:
    """Where a golden's logits came from: build, options, model, tokenizer, prompts, device, software.

    Attributes:
        logitlab_version: the logitlab that recorded it.
        engine: registered engine name.
        engine_version: the engine's version line (``llama-cpp-python 0.3.36``).
        build: build information: ``system_info`` (llama.cpp's feature line) where the engine gives
            one, ``git_commit`` when the user gave ``--build-commit``.
        options: engine options as the engine converted them.
        env: the variant's environment knobs (``--env``).
        ambient_env: knobs of the process environment that engines read (``GGML_*``, ``OMP_*``, ...).
        model: the model as the variant named it (None: the engine's default, the embedded model).
        model_path: the file or folder that was loaded.
        model_sha256: its SHA-256.
        n_vocab: vocabulary size.
        tokenizer_sha256: SHA-256 of ``n_vocab`` and the token ids of every prompt.
        prompts_sha256: SHA-256 of the prompt names and texts.
        device: the device key and description (:class:`~logitlab.device.Device`).
        os: ``platform.platform()``.
        python: Python version.
        libraries: versions of the installed numeric libraries (numpy, llama-cpp-python, torch, ...).
    """

    logitlab_version: str
    engine: str
    engine_version: str
    build: dict
    options: dict
    env: dict
    ambient_env: dict
    model: str | None
    model_path: str
    model_sha256: str
    n_vocab: int
    tokenizer_sha256: str
    prompts_sha256: str
    device: Device
    os: str
    python: str
    libraries: dict

    #: Fields whose change lifts the bit-exact requirement (with the device key): the build and the options.
    GATE_FIELDS: ClassVar[tuple[str, ...]] = ("engine", "engine_version", "build", "options", "env")
    #: Fields shown when they changed, without changing the bar.
    INFO_FIELDS: ClassVar[tuple[str, ...]] = ("logitlab_version", "ambient_env", "os", "python", "libraries",
                                              "model_path")


@dataclass
class GoldenPrompt:
    """One prompt of a golden.

    Attributes:
        name: label in reports.
        text: the prompt text.
        prompt_ids: its token ids (as the engine tokenized it).
        generated_ids: the greedy decode ids that followed on the recording build.
        greedy_text: ``generated_ids`` detokenized.
        positions: the run positions whose logits are stored, ascending (``--positions``); None: every position.
    """

    name: str
    text: str
    prompt_ids: list[int]
    generated_ids: list[int]
    greedy_text: str = ""
    positions: list[int] | None = None

    @property
    def input_ids(self) -> list[int]:
        """The token fed at each position of the run (prompt, then decode)."""
        return list(self.prompt_ids) + list(self.generated_ids)

    @property
    def n_stored(self) -> int:
        """Rows of logits stored: ``len(positions)``, or every position of the run."""
        return len(self.input_ids) if self.positions is None else len(self.positions)

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON types; ``positions`` only where a selection is stored (older goldens: absent)."""
        return without_none(dataclasses.asdict(self), "positions")


@dataclass
class HistoryEntry:
    """One ``golden update``: what was replaced by what, why, and how far apart they are.

    Attributes:
        at: UTC time of the update.
        reason: the ``--reason`` text.
        old_logits_sha256, new_logits_sha256: SHA-256 of ``logits.safetensors`` before and after.
        old_provenance, new_provenance: the two provenances' ``engine_version``, ``build``,
            ``options``, ``env`` and device key (what an engine team reads first).
        changes: one line per provenance field that differs.
        verdict: new logits against the old ones, replaying the old token ids (the worst prompt's).
        worst_prompt: the prompt that verdict is from.
        greedy_changed: prompts whose greedy decode ids differ on the new build.
        summary: max |Δ|, mean and max KLD (nats), top-1 agreement of that comparison.
    """

    at: str
    reason: str
    old_logits_sha256: str
    new_logits_sha256: str
    old_provenance: dict
    new_provenance: dict
    changes: list
    verdict: Verdict
    worst_prompt: str = ""
    greedy_changed: list = field(default_factory=list)
    summary: dict = field(default_factory=dict)


@dataclass
class GoldenManifest(ResultRecord):
    """A golden: its provenance, prompts, store, file hash and history (``manifest.json``).

    It is also the result of ``golden record`` and ``golden update``
    (``logitlab report manifest.json`` shows it).

    JSON format history (``schema_version``): 1 — first version; later in 1 (additive): ``positions``, the
    ``--positions`` spec of the rows stored (absent or None: every row).
    """

    KIND: ClassVar[str] = "golden"
    SCHEMA_VERSION: ClassVar[int] = 1

    created_at: str
    provenance: Provenance
    store: str
    dtype: str
    n_decode: int
    prompts: list[GoldenPrompt]
    logits_sha256: str
    logits_bytes: int
    history: list[HistoryEntry] = field(default_factory=list)
    folder: str = ""
    positions: str | None = None

    @property
    def n_positions(self) -> int:
        """Positions of the prompts' runs (prompt + decode tokens), stored or not."""
        return sum(len(p.input_ids) for p in self.prompts)

    @property
    def n_stored(self) -> int:
        """Rows of logits stored (:attr:`n_positions` unless recorded with ``--positions``)."""
        return sum(p.n_stored for p in self.prompts)

    def to_dict(self) -> dict[str, Any]:
        """:meth:`ResultRecord.to_dict`; ``positions`` only where a selection is stored (older goldens: absent)."""
        return without_none(super().to_dict(), "positions")

    @property
    def top_k(self) -> int | None:
        """K of a ``topk:K`` store, None for ``full``."""
        return parse_store(self.store)[1]


def parse_store(text: str) -> tuple[str, int | None]:
    """``"full"`` → ``("full", None)``; ``"topk:K"`` → ``("topk", K)``.

    Raises:
        InputError: anything else, or K < 1.
    """
    match = _STORE.match(str(text).strip())
    if match is None:
        raise InputError(f"--store {text!r}: expected full or topk:K (e.g. topk:64)")
    if match.group(2) is None:
        return "full", None
    k = int(match.group(2))
    if k < 1:
        raise InputError(f"--store {text!r}: K must be at least 1")
    return "topk", k


def store_bytes(store: str, n_positions: int, n_vocab: int, itemsize: int = 4) -> int:
    """Bytes of ``logits.safetensors`` (tensor data, not the small header) for ``n_positions`` positions."""
    kind, k = parse_store(store)
    ids = 4 * n_positions
    if kind == "full":
        return ids + itemsize * n_positions * n_vocab
    k = min(k, n_vocab)
    return ids + n_positions * (4 * k + itemsize * k + 8)


#: Rows of a run that :func:`logits_topk` selects from at a time: its float64 work arrays (about 8 × 8 bytes a
#: logit: the key and its negation, the partition's indices, the logsumexp's input and its exponentials; 25 MB
#: for 16 rows of a 49,152 vocabulary, 134 MB of a 262,144 one) are this many rows, not a whole run (measured:
#: ``golden record --store topk:64`` peaked at 18.4 run-sized arrays when they were).
TOPK_BLOCK_ROWS = 16


def logits_topk(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row the ``k`` largest logits: ids ``(n, k)`` int32, values ``(n, k)`` (input dtype), logsumexp float64.

    Order: value descending, ties to the lower token id (as ``np.argmax``); NaN last. Rows are taken
    :data:`TOPK_BLOCK_ROWS` at a time (every result is per row, so the blocks change no bit): beside the results,
    the memory is one block's work arrays, whatever the run's length.
    """
    x = np.asarray(logits)
    k = min(int(k), x.shape[1])
    n = x.shape[0]
    if n <= TOPK_BLOCK_ROWS:
        return _topk_block(x, k)
    ids = np.empty((n, k), dtype=np.int32)
    values = np.empty((n, k), dtype=x.dtype)
    lse = np.empty(n, dtype=np.float64)
    for start in range(0, n, TOPK_BLOCK_ROWS):
        rows = slice(start, min(start + TOPK_BLOCK_ROWS, n))
        ids[rows], values[rows], lse[rows] = _topk_block(x[rows], k)
    return ids, values, lse


def _topk_block(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`logits_topk` of one block of rows (``k`` at most the vocabulary)."""
    from scipy.special import logsumexp

    key = np.where(np.isnan(x), -np.inf, x.astype(np.float64))
    part = np.argpartition(-key, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(key, part, axis=1)
    order = np.lexsort((part, -vals), axis=1)
    ids = np.take_along_axis(part, order, axis=1).astype(np.int32)
    with np.errstate(invalid="ignore", over="ignore"):
        lse = logsumexp(x.astype(np.float64), axis=1)
    return ids, np.take_along_axis(x, ids, axis=1), lse.astype(np.float64)


def sha256_file(path: str | Path) -> str:
    """SHA-256 hex digest of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _key(index: int, name: str) -> str:
    return f"p{index:04d}.{name}"


class GoldenWriter:
    """Write ``logits.safetensors`` one prompt at a time (memory: one prompt's logits).

    Use :meth:`add` per prompt, then :meth:`close` (or :meth:`abort`).
    """

    def __init__(self, folder: str | Path, store: str):
        self.folder = Path(folder)
        self.kind, self.k = parse_store(store)
        self.store = store
        self.folder.mkdir(parents=True, exist_ok=True)
        self._writer = StepWriter(self.folder / LOGITS_FILE)
        self.n = 0

    def add(self, input_ids: list[int], logits: np.ndarray, positions: list[int] | None = None) -> None:
        """Store one prompt: ``input_ids`` (n_positions,) and ``logits`` (n_positions, n_vocab), or with
        ``positions`` (the run positions stored) ``logits`` of those rows only, ``(len(positions), n_vocab)``."""
        rows = len(input_ids) if positions is None else len(positions)
        if logits.ndim != 2 or logits.shape[0] != rows:
            what = "token ids" if positions is None else "stored positions"
            raise InputError(f"prompt {self.n}: {rows} {what} for logits of shape {logits.shape}")
        self._writer.add(_key(self.n, "ids"), np.asarray(input_ids, dtype=np.int32))
        if self.kind == "full":
            self._writer.add(_key(self.n, "logits"), logits)
        else:
            ids, values, lse = logits_topk(logits, self.k)
            self._writer.add(_key(self.n, "topk_ids"), ids)
            self._writer.add(_key(self.n, "topk_logits"), values)
            self._writer.add(_key(self.n, "logsumexp"), lse)
        self.n += 1

    def close(self) -> tuple[str, int]:
        """Finish the file; returns its SHA-256 and size in bytes."""
        path = self._writer.close({"format": "logitlab-golden", "store": self.store, "prompts": str(self.n)})
        return sha256_file(path), path.stat().st_size

    def abort(self) -> None:
        self._writer.abort()


class GoldenLogits:
    """Read a golden's stored tensors, prompt by prompt (use as a context manager)."""

    def __init__(self, manifest: GoldenManifest):
        self.manifest = manifest
        self.path = Path(manifest.folder) / LOGITS_FILE
        self._files = SafetensorsFiles()

    def ids(self, index: int) -> np.ndarray:
        return self._files.get(self.path, _key(index, "ids"))

    def logits(self, index: int) -> np.ndarray:
        """``(n_positions, n_vocab)`` logits of prompt ``index`` (full store): a read-only mapping of the file
        (:meth:`~logitlab.dumps.safetensors_io.SafetensorsFiles.map`), read through the page cache."""
        return self._files.map(self.path, _key(index, "logits"))

    def topk(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Top-k ids, logits and logsumexp of prompt ``index`` (topk store)."""
        return tuple(self._files.get(self.path, _key(index, name))  # type: ignore[return-value]
                     for name in ("topk_ids", "topk_logits", "logsumexp"))

    def close(self) -> None:
        self._files.close()

    def __enter__(self) -> "GoldenLogits":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def golden_folders(root: str | Path) -> list[Path]:
    """The golden folders in ``root``: ``root`` itself if it holds a manifest, else its subfolders that do.

    Raises:
        InputError: ``root`` is missing, not a folder, or holds no golden.
    """
    root = Path(root)
    if not root.exists():
        raise InputError(f"golden folder {root} does not exist; record one with: logitlab golden record -o {root}")
    if not root.is_dir():
        raise InputError(f"golden folder {root} is a file, not a folder")
    if (root / MANIFEST_FILE).exists():
        return [root]
    found = sorted(p for p in root.iterdir() if p.is_dir() and (p / MANIFEST_FILE).exists())
    if not found:
        raise InputError(f"golden folder {root} holds no golden (no {MANIFEST_FILE} in it or in a subfolder); "
                         f"record one with: logitlab golden record -o {root}")
    return found


def read_golden(folder: str | Path, *, verify: bool = True) -> GoldenManifest:
    """Read one golden's manifest and check its logits file.

    Args:
        folder: a device folder (holding ``manifest.json``).
        verify: also check the logits file's SHA-256 (reads the whole file).

    Raises:
        InputError: missing or damaged manifest (a store other than ``full`` / ``topk:K``, token ids
            that are not integers), another kind of file, a missing logits file, or one whose header,
            stored token ids (one row per position of each prompt, the ids its manifest lists) or
            SHA-256 does not match the manifest (corrupt).
    """
    folder = Path(folder)
    data = read_json(folder / MANIFEST_FILE, what="golden manifest")
    try:
        manifest = GoldenManifest.from_dict(data)
    except InputError as exc:
        raise InputError(f"{folder / MANIFEST_FILE}: {exc}") from None
    manifest.folder = str(folder)
    logits = folder / LOGITS_FILE
    if not logits.is_file():
        raise InputError(f"golden {folder} is incomplete: {LOGITS_FILE} is missing")
    header, _ = read_safetensors_header(logits)
    expected = {_key(i, "ids") for i in range(len(manifest.prompts))}
    if not expected <= set(header):
        raise InputError(f"golden {folder} is corrupt: {LOGITS_FILE} lacks tensors of {len(manifest.prompts)} prompts")
    _check_prompts(folder, manifest, header)
    if verify and sha256_file(logits) != manifest.logits_sha256:
        raise InputError(f"golden {folder} is corrupt: {LOGITS_FILE} does not match the SHA-256 in its manifest "
                         f"({manifest.logits_sha256[:12]}…); re-record it, or restore the file")
    return manifest


def _check_prompts(folder: Path, manifest: GoldenManifest, header: dict[str, Any]) -> None:
    """Each prompt's stored tensors have one row per position and hold the token ids its manifest lists.

    Raises:
        InputError: see :func:`read_golden`.
    """
    try:
        kind, _ = parse_store(manifest.store)
    except InputError:
        raise InputError(f"{folder / MANIFEST_FILE}: store {manifest.store!r} is not full or topk:K") from None
    names = ("ids", "logits") if kind == "full" else ("ids", "topk_ids", "topk_logits", "logsumexp")
    files = SafetensorsFiles()
    try:
        for i, prompt in enumerate(manifest.prompts):
            ids = prompt.input_ids if isinstance(prompt, GoldenPrompt) else None
            if ids is None or not all(is_int(t) for t in ids):
                raise InputError(f"{folder / MANIFEST_FILE}: prompt {i} does not list its token ids as integers")
            _check_positions(folder, i, prompt.positions, len(ids))
            for name in names:
                shape = header.get(_key(i, name), {}).get("shape")
                rows = len(ids) if name == "ids" else prompt.n_stored
                if not shape or shape[0] != rows:
                    raise InputError(f"golden {folder} is corrupt: {LOGITS_FILE} has no {_key(i, name)} with one "
                                     f"row per {'' if rows == len(ids) else 'stored '}position of prompt {i} "
                                     f"({rows} in its manifest)")
            try:
                stored = files.get(folder / LOGITS_FILE, _key(i, "ids")).tolist()
            except InputError as exc:  # a cut or damaged file: say so, as the SHA-256 check would
                raise InputError(f"golden {folder} is corrupt: {exc}") from None
            if stored != ids:
                raise InputError(f"golden {folder} is corrupt: the token ids {LOGITS_FILE} holds for prompt {i} are "
                                 f"not those its manifest lists")
    finally:
        files.close()


def _check_positions(folder: Path, index: int, positions: Any, n_positions: int) -> None:
    """A prompt's stored positions are None or distinct ascending integers inside its run (InputError)."""
    if positions is None:
        return
    if not (isinstance(positions, list) and positions and all(is_int(p) for p in positions)
            and all(a < b for a, b in zip(positions, positions[1:])) and 0 <= positions[0]
            and positions[-1] < n_positions):
        raise InputError(f"{folder / MANIFEST_FILE}: prompt {index}'s positions are not ascending integers in "
                         f"0-{n_positions - 1}")


def write_manifest(manifest: GoldenManifest, folder: str | Path) -> Path:
    """Write ``manifest.json`` (atomically) into ``folder``."""
    path = Path(folder) / MANIFEST_FILE
    data = manifest.to_dict()
    data["folder"] = ""  # where it lies is not part of it
    write_json(path, data)
    return path


__all__ += ["write_manifest"]
