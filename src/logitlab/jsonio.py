"""JSON in and out: strict JSON (NaN and ±Inf become null), written atomically; typed results.

Every top-level result (``ab``, ``verify``, ``invariance``, ``bench run``,
``bench compare``, ``bench calibrate``, ``dump-diff``, ``history``,
``bisect``) is a dataclass that
derives from :class:`ResultRecord`: ``to_dict()`` writes its fields plus
``kind`` and ``schema_version``; ``ResultRecord.from_dict`` reads them back
into the same typed objects (nested dataclasses included, through the
``dacite`` library), so a saved result can be rendered again
(``logitlab report``).
"""

from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import json
import math
import os
import tempfile
import types
import typing
from pathlib import Path
from typing import Any, ClassVar, Iterator, Mapping, TypeVar

import numpy as np

from logitlab.errors import InputError

R = TypeVar("R", bound="ResultRecord")


#: Item types of a list that :func:`to_jsonable` copies as it is when their sum is finite.
_NUMBERS = frozenset({float, int})


def to_jsonable(value: Any) -> Any:
    """Recursively turn numpy scalars/arrays, tuples and non-finite floats (to None) into JSON types.

    A list or tuple of plain Python ``float``/``int`` items whose sum is finite holds no NaN or infinity, and is
    copied as it is (a result's per-position lists: thousands of items); any other goes item by item, with the
    same answer.
    """
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        # a result's per-position lists (thousands of Python floats each): a finite sum means no NaN or infinity
        # among them (either would make it non-finite; an overflow only sends the list the long way)
        if set(map(type, value)) <= _NUMBERS:
            try:
                if math.isfinite(sum(value)):
                    return list(value)
            except OverflowError:  # an int too large for a float beside floats
                pass
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path``, creating missing parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def write_json(path: str | Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` as indented strict JSON, via a temp file and rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(to_jsonable(data), f, indent=1, allow_nan=False)
            f.write("\n")
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the file a normal file's mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def dumps_line(data: Any) -> str:
    """``data`` as one line of strict JSON (NaN and ±Inf as null), for JSONL logs."""
    return json.dumps(to_jsonable(data), allow_nan=False, separators=(",", ":"))


class _NonFinite(ValueError):
    """``NaN``, ``Infinity`` or ``-Infinity`` in a file read as strict JSON."""


def _no_constant(name: str) -> Any:
    raise _NonFinite(name)


@contextlib.contextmanager
def reading(what: str) -> Iterator[None]:
    """Read a file inside this block: an ``OSError`` becomes one :class:`InputError` naming ``what``.

    ``what`` names the file for the messages, e.g. ``"run log out/ab.jsonl"``.

    Raises:
        InputError: ``"{what} does not exist"``, ``"{what} is a folder, not a file"``, or
            ``"cannot read {what}: {reason}"`` for any other ``OSError`` raised in the block.
    """
    try:
        yield
    except FileNotFoundError:
        raise InputError(f"{what} does not exist") from None
    except IsADirectoryError:
        raise InputError(f"{what} is a folder, not a file") from None
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror or exc}") from None


def read_text(path: str | Path, *, what: str = "file") -> str:
    """The UTF-8 text of ``path``; ``what`` names the file in errors (``"matrix file"``: "matrix file x.toml ...").

    Raises:
        InputError: missing, a folder, unreadable (:func:`reading`), or not UTF-8 (the message gives the byte).
    """
    path = Path(path)
    with reading(f"{what} {path}"):
        try:
            return path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{what} {path} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def json_error_text(exc: json.JSONDecodeError) -> str:
    """Where and why ``json`` refused a text, as one phrase: ``"Expecting value at line 1, column 1"``,
    ``"Unterminated string starting at line 89, column 5"`` (its messages that end in "at" get no second one)."""
    return f"{exc.msg.removesuffix(' at')} at line {exc.lineno}, column {exc.colno}"


def read_json(path: str | Path, *, what: str = "JSON file") -> Any:
    """Parse a JSON file logitlab wrote: strict JSON, as :func:`write_json` writes it.

    Raises:
        InputError: missing, unreadable, not UTF-8, not valid JSON (the message names the line),
            ``NaN`` or ``Infinity`` in it (Python's json reads them, the writer never writes them:
            they would read back as null), or nested too deeply for Python's parser (its RecursionError).
    """
    text = read_text(path, what=what)
    try:
        return json.loads(text, parse_constant=_no_constant)
    except _NonFinite as exc:
        raise InputError(f"{what} {path} is not strict JSON: it holds {exc}, which logitlab never writes (was the "
                         "file edited?)") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} {path} is not valid JSON: {json_error_text(exc)}") from None
    except RecursionError:
        raise InputError(f"{what} {path} nests JSON arrays or objects too deeply to be read") from None


class ResultRecord:
    """Mixin of the top-level result dataclasses: a ``kind``, a schema version, and a JSON round trip.

    Subclasses are dataclasses that set ``KIND`` (``"ab"``, ``"verify"``, ...)
    and ``SCHEMA_VERSION``, and annotate every field precisely (nested
    results as their dataclass types, so they load back typed). ``DERIVED``
    lists extra keys ``to_dict`` adds for readers of the JSON (values computed
    from the fields); ``from_dict`` ignores them. Each class is one line of
    :data:`logitlab.kinds.KINDS`.

    What a kind supplies beyond its JSON is a method of its class, found by
    name (a kind that cannot do a thing does not define it):

    - :attr:`verdict_word`: the verdict ``--require`` checks (None here: no verdict);
    - ``history_metrics(self)``: what ``--record`` / ``history add`` keeps,
      variant -> metric name -> :class:`~logitlab.perf.metrics.Metric`
      (kinds that can be recorded; :mod:`logitlab.experiments.history.metrics`);
    - ``from_run_log(cls, log)``, a classmethod: the result a run log
      (:class:`~logitlab.runlog.RunLogContents`) of this kind holds, partial
      when the log was cut short (kinds that write a run log; ``logitlab report``);
    - ``sweep_cell(cls, results, experiment)``, a classmethod: a matrix cell's
      summary from its finished jobs' results (kinds a sweep runs;
      :mod:`logitlab.experiments.sweep.summary`).
    """

    KIND: ClassVar[str] = ""
    SCHEMA_VERSION: ClassVar[int] = 1

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON types (nested dataclasses as dicts), plus ``kind`` and ``schema_version``."""
        data = {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        data.update(self.derived())
        return {"kind": self.KIND, "schema_version": self.SCHEMA_VERSION, **data}

    def derived(self) -> dict[str, Any]:
        """Extra keys for readers of the JSON, computed from the fields (none by default)."""
        return {}

    @property
    def verdict_word(self) -> str | None:
        """The result's verdict word (one of :data:`~logitlab.numerics.verdict.VERDICTS`) that ``--require``
        checks; None when there is none (this kind gives no verdict, or nothing was judged)."""
        return None

    @classmethod
    def from_dict(cls: type[R], data: Mapping[str, Any]) -> R:
        """Rebuild the typed result from :meth:`to_dict` (or ``json.loads`` of it).

        Raises:
            InputError: not a mapping, another kind of result, another schema
                version, or data that does not fit the fields.
        """
        import dacite

        if not isinstance(data, Mapping):
            raise InputError(f"a {cls.KIND} result must be a JSON object, got {type(data).__name__}")
        kind = data.get("kind")
        if kind != cls.KIND:
            raise InputError(f"this is {'a ' + repr(kind) if kind else 'not a logitlab'} result, not a "
                             f"{cls.KIND!r} result")
        version = data.get("schema_version")
        if version != cls.SCHEMA_VERSION:
            raise InputError(f"this {cls.KIND} result has schema_version {version!r}; this logitlab reads "
                             f"{cls.SCHEMA_VERSION}: render it with the logitlab version that wrote it")
        fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        body = {k: v for k, v in data.items() if k in fields}
        try:
            result = dacite.from_dict(cls, body, config=dacite.Config(cast=[tuple], check_types=False))
        except (dacite.DaciteError, TypeError, ValueError, KeyError) as exc:
            raise InputError(f"damaged {cls.KIND} result: {exc}") from None
        where = _unbuilt(result, cls, "")
        if where is not None:
            raise InputError(f"damaged {cls.KIND} result: {where} does not fit its type (a field missing or "
                             "renamed?)")
        return result


def _unbuilt(value: Any, hint: Any, where: str) -> str | None:
    """Where ``value`` holds a JSON object in place of a dataclass, else None.

    With ``check_types=False`` dacite keeps the dict when no member of a union
    of dataclasses (``TopKComparison | LogitComparison | None``) can be built
    from it (a field missing): the result would then load, and break later.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        try:
            hints = typing.get_type_hints(type(value))
        except Exception:  # noqa: BLE001 - an annotation that cannot be resolved is not checked
            return None
        for f in dataclasses.fields(value):
            found = _unbuilt(getattr(value, f.name), hints.get(f.name, Any), f"{where}.{f.name}" if where else f.name)
            if found is not None:
                return found
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if isinstance(value, Mapping):
        options = args if origin in (typing.Union, types.UnionType) else (hint,)
        if all(o is type(None) or dataclasses.is_dataclass(o) for o in options):
            return where or "the result"
        if origin in (dict, collections.abc.Mapping) and len(args) == 2:
            for key, item in value.items():
                found = _unbuilt(item, args[1], f"{where}[{key!r}]")
                if found is not None:
                    return found
        return None
    if isinstance(value, (list, tuple)) and origin in (list, tuple) and args:
        for i, item in enumerate(value):
            found = _unbuilt(item, args[0], f"{where}[{i}]")
            if found is not None:
                return found
    return None


def _plain(value: Any) -> Any:
    """Dataclasses (with their own ``to_dict`` where they have one) to dicts, recursively."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        to_dict = getattr(value, "to_dict", None)
        if callable(to_dict):
            return to_dict()
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def without_none(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    """``data`` (a ``to_dict`` result) without those of ``keys`` whose value is None, the rest in order.

    For an optional field added to a format later: where it is unused the file leaves it out, as the files
    written before it did (``positions``, the ``--positions`` selection of a comparison or a golden).
    """
    return {k: v for k, v in data.items() if k not in keys or v is not None}


class PlainRecord:
    """Mixin of a nested result dataclass whose fields are plain JSON values (or such dataclasses).

    ``to_dict`` is :func:`dataclasses.asdict`; ``from_dict`` is :func:`from_fields`, so the class's own checks
    (``__post_init__``) run on what is read back. Top-level results use :class:`ResultRecord` instead.
    """

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict of all fields (nested dataclasses as dicts)."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Any:
        """Inverse of :meth:`to_dict`.

        Raises:
            InputError: not a mapping, unknown or missing keys, or a value the class rejects.
        """
        return from_fields(cls, data)


def check_schema_version(version: Any, supported: int) -> None:
    """A saved record's ``schema_version`` is the one this logitlab reads.

    Raises:
        InputError: ``"schema_version {version!r} is not supported: this logitlab reads version {supported}"``.
    """
    if version != supported:
        raise InputError(f"schema_version {version!r} is not supported: this logitlab reads version {supported}")


def from_fields(cls: type, data: Any, *, hint: str = ": pass the dict from to_dict()") -> Any:
    """``cls(**data)`` for a dataclass whose fields are plain JSON values (or typed by ``cls`` itself).

    The one check of a saved dict's keys against a dataclass: unknown keys and missing required ones (no
    default, no default factory) are named, ``hint`` is appended to those messages.

    Raises:
        InputError: ``data`` is not a mapping, has unknown keys, lacks required ones, or ``cls`` rejects a
            value (its TypeError).
    """
    if not isinstance(data, Mapping):
        raise InputError(f"{cls.__name__} data {data!r} is not a mapping{hint}")
    fields = dataclasses.fields(cls)
    names = [f.name for f in fields]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise InputError(f"{cls.__name__} data has unknown keys {unknown}: valid keys are {', '.join(names)}")
    required = [f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [k for k in required if k not in data]
    if missing:
        raise InputError(f"{cls.__name__} data lacks keys {missing}{hint}")
    try:
        return cls(**dict(data))
    except TypeError as exc:  # a field of the wrong type deep inside
        raise InputError(f"{cls.__name__} data is not valid: {exc}") from None
