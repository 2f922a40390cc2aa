"""The run manifest: what ran, where, and when — stored with every result."""

from __future__ import annotations

import os
import platform
import sys
from datetime import datetime, timezone
from typing import Any

from logitlab import __version__


def cpu_model() -> str:
    """The CPU model name (from /proc/cpuinfo on Linux, else platform.processor())."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_info() -> dict[str, Any]:
    """CPU model, logical cores, OS, Python and the 1-minute load average."""
    try:
        load = round(os.getloadavg()[0], 2)
    except OSError:
        load = None
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "load_average_1m": load,
    }


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def build_manifest(engine: dict[str, Any], *variants: Any) -> dict[str, Any]:
    """Manifest for a result: logitlab version, engine description, variants, host, start time."""
    return {
        "logitlab_version": __version__,
        "engine": engine,
        "variants": {v.label: v.to_dict() for v in variants},
        "host": host_info(),
        "started_at": now_utc(),
    }


def busy_machine_note(factor: float = 1.5) -> str | None:
    """A note when the 1-minute load average exceeds ``factor`` × the logical cores, else None."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return None
    cores = os.cpu_count() or 1
    if load <= factor * cores:
        return None
    return (f"machine busy: 1-minute load average {load:.1f} on {cores} cores at the end of the run; absolute "
            "tokens/s are unreliable (the ABBA/BAAB pairing still protects the ratio, at the cost of a wider CI)")
