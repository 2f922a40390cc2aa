"""Provenance of a golden: collect it from a loaded engine, compare two, and pick the golden for a device.

The rules a ``golden check`` follows, in one place:

- **Which golden.** Per-device goldens lie side by side, one folder per
  device key. The golden of this device key is used. Otherwise (unless
  ``--strict-device``) the fallback rule picks one of the others: first
  those of the same device kind and architecture (a CPU golden for a CPU
  run on x86_64), then those of the same processor model name, then the most
  recently recorded; ties go to the folder name. The report says which
  golden matched and why.
- **Which bar.** Same device key, same engine build (engine, version, build
  information such as llama.cpp's system-info line and the ``--build-commit``)
  and same options and environment knobs: bit-exact is required, whatever
  ``--allow`` says. Anything of those changed: the bar the user allows
  (``--allow``, KLD limits, a same-top-1 rate), bit-exact when none is given.
  Other changes (logitlab, OS, Python, library versions, ambient knobs) are
  reported and do not move the bar.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from logitlab import __version__
from logitlab.device import Device, device_info
from logitlab.dumps.golden_format import GoldenManifest, Provenance, read_golden
from logitlab.engines import registered_engines
from logitlab.engines.base import Engine
from logitlab.engines.variant import Variant
from logitlab.errors import InputError
from logitlab.experiments.prompts import Prompt
from logitlab.jsonio import to_jsonable

__all__ = ["AMBIENT_PREFIXES", "LIBRARIES", "collect_provenance", "engine_device", "ProvenanceChange",
           "provenance_changes", "GoldenMatch", "match_golden", "model_of"]

#: Environment variables that any engine's math libraries read (OpenMP, MKL and OpenBLAS thread pools), recorded
#: from the process environment with those of every registered engine's ``ENV_PREFIXES`` (not only the engine
#: run's: a ``cmd`` or server engine runs a process that may use any of the libraries).
AMBIENT_PREFIXES = ("OMP_", "MKL_", "OPENBLAS_")
#: Distributions whose versions a golden records (when installed), with every registered engine's ``LIBRARIES``.
LIBRARIES = ("numpy", "safetensors", "ml-dtypes", "numba")


def _sha(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _ambient_prefixes() -> tuple[str, ...]:
    """:data:`AMBIENT_PREFIXES` and every registered engine's ``ENV_PREFIXES``, each once."""
    engines = [prefix for _, adapter in registered_engines() for prefix in adapter.ENV_PREFIXES]
    return tuple(dict.fromkeys([*AMBIENT_PREFIXES, *engines]))


def _libraries() -> dict[str, str]:
    """The installed versions of :data:`LIBRARIES` and of every registered engine's ``LIBRARIES``."""
    engines = [dist for _, adapter in registered_engines() for dist, _ in adapter.LIBRARIES]
    out = {}
    for name in dict.fromkeys([*LIBRARIES, *engines]):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def engine_device(description: dict[str, Any]) -> str:
    """The device an engine computes on, from its ``describe()``: ``effective.device``, else ``"cpu"``."""
    effective = description.get("effective") or {}
    return str(effective.get("device") or description.get("device") or "cpu")


def model_of(variant: Variant) -> str | None:
    """The variant's model as a golden records it (None: the engine's default, found anew on every machine)."""
    return variant.model


def collect_provenance(engine: Engine, variant: Variant, prompts: Sequence[Prompt],
                       prompt_ids: Sequence[Sequence[int]], build_commit: str | None = None) -> Provenance:
    """The provenance of runs of ``engine`` (loaded from ``variant``) on ``prompts``.

    Args:
        engine: the loaded engine.
        variant: what it was loaded from (engine name, model, options, knobs).
        prompts: the prompts.
        prompt_ids: their token ids, as ``engine`` tokenized them.
        build_commit: the engine build's source commit, when the caller knows it.
    """
    described = engine.describe()
    build = {k: described[k] for k in ("system_info",) if described.get(k)}
    build.update(described.get("build_identity") or {})  # a cmd engine: the files its template names
    if build_commit:
        build["git_commit"] = build_commit
    prefixes = _ambient_prefixes()
    ambient = {k: v for k, v in sorted(os.environ.items()) if k.startswith(prefixes) and k not in variant.env}
    return Provenance(
        logitlab_version=__version__,
        engine=engine.name,
        engine_version=str(described.get("engine_version", engine.name)),
        build=build,
        options=to_jsonable(dict(described.get("options", {}))),
        env=dict(variant.env),
        ambient_env=ambient,
        model=model_of(variant),
        model_path=str(described.get("model", "")),
        model_sha256=str(described.get("model_sha256", "")),
        n_vocab=int(engine.n_vocab),
        tokenizer_sha256=_sha([int(engine.n_vocab), [list(map(int, ids)) for ids in prompt_ids]]),
        prompts_sha256=_sha([[p.name, p.text] for p in prompts]),
        device=device_info(engine_device(described)),
        os=platform.platform(),
        python=sys.version.split()[0],
        libraries=_libraries(),
    )


@dataclass
class ProvenanceChange:
    """One provenance field that differs between a golden and this run.

    Attributes:
        field: dotted name (``device.key``, ``options.flash_attn``, ``engine_version``).
        golden: its value in the golden (None: unset).
        current: its value now (None: unset).
        gate: whether the change lifts the bit-exact requirement (device key, build, options, knobs).
    """

    field: str
    golden: Any
    current: Any
    gate: bool

    @property
    def line(self) -> str:
        def show(value: Any) -> str:
            return "(unset)" if value is None else str(value)

        return f"{self.field}: {show(self.golden)} → {show(self.current)}"


def _dict_changes(name: str, old: dict, new: dict, gate: bool) -> list[ProvenanceChange]:
    return [ProvenanceChange(f"{name}.{key}", old.get(key), new.get(key), gate)
            for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)]


def provenance_changes(golden: Provenance, current: Provenance) -> list[ProvenanceChange]:
    """Every field that differs, the bar-moving ones first (device key, then :attr:`Provenance.GATE_FIELDS`)."""
    old, new = to_jsonable(_plain(golden)), to_jsonable(_plain(current))
    changes = []
    if old["device"]["key"] != new["device"]["key"]:
        changes.append(ProvenanceChange("device.key", old["device"]["key"], new["device"]["key"], True))
    for name, gate in [(f, True) for f in Provenance.GATE_FIELDS] + \
                      [(f, False) for f in (*Provenance.INFO_FIELDS, "model_sha256")]:
        a, b = old.get(name), new.get(name)
        if isinstance(a, dict) or isinstance(b, dict):
            changes += _dict_changes(name, a or {}, b or {}, gate)
        elif a != b:
            changes.append(ProvenanceChange(name, a, b, gate))
    return changes


def _plain(provenance: Provenance) -> dict[str, Any]:
    from dataclasses import asdict

    data = asdict(provenance)
    data["device"] = provenance.device.to_dict() if isinstance(provenance.device, Device) else provenance.device
    return data


@dataclass
class GoldenMatch:
    """The golden a check uses, and why.

    Attributes:
        folder: its folder.
        device_key: its device key.
        exact: recorded under this run's device key.
        reason: one sentence: which rule picked it.
        available: the device keys of every golden in the root.
    """

    folder: str
    device_key: str
    exact: bool
    reason: str
    available: list = field(default_factory=list)


def match_golden(manifests: Sequence[GoldenManifest], device: Device, *, strict: bool) -> GoldenMatch:
    """Pick the golden for ``device`` (see the module docstring for the rule).

    Raises:
        InputError: no golden of this device key and ``strict`` (the message lists the keys there are).
    """
    keys = [m.provenance.device.key for m in manifests]
    same = [m for m in manifests if m.provenance.device.key == device.key]
    if same:
        chosen = max(same, key=lambda m: (m.created_at, m.folder))
        return GoldenMatch(chosen.folder, device.key, True, f"recorded under this device key ({device.key})", keys)
    if strict:
        raise InputError(f"no golden for this device key {device.key} among {', '.join(keys)}; --strict-device "
                         f"refuses another device's golden: record one here with logitlab golden record")

    def rank(m: GoldenManifest) -> tuple:
        d = m.provenance.device
        return (d.kind == device.kind and d.arch == device.arch, d.name == device.name, m.created_at,
                Path(m.folder).name)

    chosen = max(manifests, key=rank)
    d = chosen.provenance.device
    why = ["same device kind and architecture" if (d.kind, d.arch) == (device.kind, device.arch)
           else f"no golden of this device kind ({device.kind}, {device.arch})"]
    if d.name == device.name:
        why.append("same processor model")
    why.append(f"recorded {chosen.created_at}")
    return GoldenMatch(chosen.folder, d.key, False,
                       f"fallback: no golden for this device key ({device.key}); picked {d.key} by the fallback rule "
                       f"({', '.join(why)})", keys)


def read_goldens(folders: Sequence[str | Path]) -> list[GoldenManifest]:
    """The manifests of the golden folders (files not hashed yet: only the matched one is)."""
    return [read_golden(folder, verify=False) for folder in folders]


__all__ += ["read_goldens"]
