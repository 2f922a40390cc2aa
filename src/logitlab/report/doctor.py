"""The report of ``logitlab doctor``: one screen on what this installation has, and what to do about the rest."""

from __future__ import annotations

from typing import Any

from logitlab.dumps.sizes import format_bytes
from logitlab.experiments.doctor import DoctorResult
from logitlab.report.document import Bullets, Document, Heading, KeyValues, Paragraph, Span, Table, rich

__all__ = ["doctor_document"]


def _mark(ok: bool) -> Span:
    return Span("yes" if ok else "no", "call:good" if ok else "call:bad")


def _library(lib: Any) -> str:
    if lib.imports:
        return f"{lib.distribution} {lib.version or '(version unknown)'}"
    if lib.version is None:
        return f"{lib.distribution}: not installed"
    return f"{lib.distribution} {lib.version}: does not import ({lib.error})"


def doctor_document(result: DoctorResult, **_: Any) -> Document:
    """Header (versions, platform, device key), engines, engine details, models, llama.cpp tools, optional tools."""
    doc = Document("doctor", "logitlab doctor")
    problems = result.problems
    doc.add(Heading(rich("logitlab doctor: ", Span("ready" if not problems else "not ready",
                                                   "call:good" if not problems else "call:bad"))))
    device = result.device
    device_text = (f"{device['key']} ({device.get('name')}, {device.get('arch')}, "
                   f"{len(device.get('flags') or ())} kernel ISA flags)" if "key" in device
                   else f"unreadable: {device.get('error')}")
    doc.add(KeyValues([
        ("logitlab", result.logitlab_version),
        ("python", f"{result.python} ({result.python_executable})"),
        ("platform", result.platform),
        ("device key", device_text),
        ("libraries", ", ".join(_library(lib) for lib in result.core)),
    ], boxed=True))
    if problems:
        doc.add(Bullets(problems, tone="error"))
    if result.engines:
        doc.add(Table(("engine", "ready", "libraries", "abilities", "to install"), [
            (rich(Span(e.name, "code")), rich(_mark(e.ready)),
             "; ".join(_library(lib) for lib in e.libraries) or "(none needed)",
             ", ".join(e.abilities) or "-",
             "" if e.ready else (e.error or (f"pip install 'logitlab[{e.extra}]'" if e.extra else "")))
            for e in result.engines], title="engines (--engine NAME)"))
        details = [(f"{e.name} {key}", value) for e in result.engines for key, value in e.details.items()]
        if details:
            doc.add(KeyValues(details, title="what the engines' libraries report"))
    rows: list[tuple] = []
    for m in result.models:
        # the note says which package holds the model; the path, this machine's install location, is in --json
        where = f"{m.note} ({format_bytes(m.size_bytes)})" if m.size_bytes else (m.note or m.path or "")
        rows.append((m.name, rich(_mark(m.found), f"  {where}" if m.found else f"  {m.note}")))
    built = [t.name for t in result.llama_tools if t.present]
    missing = [t.name for t in result.llama_tools if not t.present]
    tools = rich(_mark(not missing), f"  {', '.join(built)} in {result.llama_tools_folder}" if built else "")
    if missing:
        tools = rich(_mark(False), f"  missing {', '.join(missing)}: "
                                   f"{result.llama_tools_note or 'run scripts/build-llama-tools.sh (or: make tools)'}")
    rows.append(("llama.cpp tools", tools))
    for t in result.optional:
        found = " ".join(x for x in (t.version, t.where) if x)
        rows.append((t.name, rich(_mark(t.present), f"  {found}" if t.present else "", f"  — {t.needed_for}")))
    doc.add(KeyValues(rows, title="models and tools"))
    doc.add(Paragraph("Paste this report (logitlab doctor --markdown FILE) into a bug report.", tone="dim"))
    return doc
