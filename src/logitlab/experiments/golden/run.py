"""Golden logits: record a build's logits once, check later builds against them, update with a reason.

``record``
    Per prompt, greedy decode on the engine; store every position's token id
    and logits (or their top-k) and a manifest of the provenance
    (:mod:`~logitlab.experiments.golden.provenance`) under
    ``<root>/<device-key>/`` (:mod:`logitlab.dumps.golden_format`).
``check``
    Pick the golden for this device (or by the fallback rule), refuse one
    for another model or tokenizer, replay its token ids, compare every
    position with :func:`~logitlab.numerics.compare.compare_logits` (or the
    top-k comparison), classify each prompt, and judge the worst verdict
    and the pooled statistics against the bar the provenance calls for:
    bit-exact when device key, build and options are the same, else the
    user's :class:`~logitlab.numerics.gate.Bar`.
``update``
    Re-record the golden of this device key and append to its history the
    old and new file hashes, the reason, the provenance changes and the
    verdict of the new logits against the old ones (the old token ids
    replayed), so that a toolchain bump reads "ulp-noise vs the previous
    golden", never a silent overwrite.

The configs and the check's result records are :mod:`~logitlab.experiments.golden.results` (re-exported here).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from logitlab.device import Device, device_info
from logitlab.dumps.golden_format import (
    GoldenLogits,
    GoldenManifest,
    GoldenPrompt,
    GoldenWriter,
    HistoryEntry,
    Provenance,
    golden_folders,
    parse_store,
    read_golden,
    store_bytes,
    write_manifest,
)
from logitlab.engines.base import Engine, check_fits
from logitlab.engines.crash import CrashEvidence
from logitlab.engines.topk import TopKRows
from logitlab.engines.variant import Variant
from logitlab.engines.workload import environment, run_workload
from logitlab.errors import EngineCrashed, EngineError, InputError
from logitlab.events import Event, ignore_event
from logitlab.experiments.golden.provenance import (
    GoldenMatch,
    ProvenanceChange,
    collect_provenance,
    engine_device,
    match_golden,
    provenance_changes,
    read_goldens,
)
from logitlab.experiments.golden.results import (
    CheckConfig,
    GoldenCheckResult,
    PromptCheck,
    RecordConfig,
    VariantOverrides,
)
from logitlab.experiments.golden.rows import CheckRows, check_rows, record_rows, stored_selection
from logitlab.experiments.isolation import load_supervised
from logitlab.experiments.prompts import Prompt
from logitlab.manifest import now_utc
from logitlab.numerics import LogitComparison, Thresholds, Verdict, classify, compare_logits
from logitlab.numerics.detection import HEADLINE, SHAPES, DetectionLimits, detection_limits
from logitlab.numerics.gate import Bar, judge, worst_verdict
from logitlab.numerics.topk import TopKComparison, compare_topk

__all__ = ["RecordConfig", "VariantOverrides", "CheckConfig", "PromptCheck", "GoldenCheckResult",
           "record_golden", "check_golden", "update_golden", "open_check_engine"]


# -- shared steps -------------------------------------------------------------------------------
def _tokenize(engine: Engine, prompts: Sequence[Prompt], n_decode: int) -> list[list[int]]:
    ids = []
    for prompt in prompts:
        tokens = engine.tokenize(prompt.text)
        if not tokens:
            raise InputError(f"prompt {prompt.name!r} tokenizes to no tokens")
        check_fits(engine, len(tokens), n_decode, name=prompt.name)
        ids.append(tokens)
    return ids


def _run(engine: Engine, variant: Variant, prompt_ids: Sequence[int], n_decode: int,
         replay: Sequence[int] | None = None) -> tuple[np.ndarray, list[int]]:
    with environment(variant.env):
        out = run_workload(engine, prompt_ids, n_decode, replay)
    if out.topk is not None or out.logits.shape[1] == 0:
        raise InputError(f"engine {engine.name!r} returns only top-k log-probabilities; a golden stores logits: "
                         "use an engine with the 'logits' ability")
    return out.logits, list(out.generated)


def _topk_rows(ids: np.ndarray, values: np.ndarray, lse: np.ndarray, k: int) -> TopKRows:
    logp = values.astype(np.float64) - lse[:, None]
    return TopKRows(tuple(tuple(int(t) for t in row) for row in ids),
                    tuple(tuple(float(x) for x in row) for row in logp), int(k))


def _compare(reader: GoldenLogits, manifest: GoldenManifest, index: int, observed: np.ndarray, top_k: int,
             thresholds: Thresholds, rows: CheckRows = CheckRows(None, None)
             ) -> tuple[TopKComparison | LogitComparison, Verdict, np.ndarray | None, np.ndarray]:
    """The golden's prompt ``index`` (reference) against the run's ``observed`` logits ``(n_positions,
    n_vocab)``, at ``rows`` (:func:`~logitlab.experiments.golden.rows.check_rows`: the comparison then names their
    run positions); also the golden's logits of those rows (None for a top-k golden) and the run's."""
    from logitlab.dumps.golden_format import logits_topk

    input_ids = manifest.prompts[index].input_ids
    if rows.run is not None:
        observed, input_ids = observed[rows.run], [input_ids[i] for i in rows.run]
    if manifest.top_k is None:
        reference = reader.logits(index)
        reference = reference if rows.stored is None else reference[rows.stored]
        if reference.shape != observed.shape or reference.dtype != observed.dtype:
            raise EngineError(f"prompt {manifest.prompts[index].name!r}: the golden holds {reference.dtype} "
                              f"{reference.shape} logits, this run returned {observed.dtype} {observed.shape}")
        c = compare_logits(reference, observed, top_k=top_k, token_ids=input_ids)
    else:
        reference = None
        k = manifest.top_k
        ids, values, lse = reader.topk(index)
        if rows.stored is not None:
            ids, values, lse = ids[rows.stored], values[rows.stored], lse[rows.stored]
        ref = _topk_rows(ids, values, lse, k)
        obs = _topk_rows(*logits_topk(observed, k), k)
        c = compare_topk(ref, obs, top_k=min(top_k, k), token_ids=input_ids)
    if rows.run is not None:
        c = c.at_positions(rows.run)
    return c, classify(c, thresholds), reference, observed


def _write(folder: Path, store: str, engine: Engine, variant: Variant, prompts: Sequence[Prompt],
           prompt_ids: Sequence[Sequence[int]], n_decode: int, on_event: Event,
           outputs: list[tuple[np.ndarray, list[int]]] | None = None,
           rows: Sequence[np.ndarray | None] | None = None) -> tuple[list[GoldenPrompt], str, int, str]:
    """Run (greedy) every prompt into ``folder``'s logits file, each prompt's ``rows`` only (None: every row);
    returns prompts, sha256, bytes, dtype."""
    writer = GoldenWriter(folder, store)
    recorded, dtype = [], "float32"
    rows = rows if rows is not None else [None] * len(prompt_ids)
    try:
        for i, (prompt, ids) in enumerate(zip(prompts, prompt_ids)):
            logits, generated = outputs[i] if outputs is not None else _run(engine, variant, ids, n_decode)
            dtype = str(logits.dtype)
            kept = None if rows[i] is None else [int(r) for r in rows[i]]
            writer.add(list(ids) + generated, logits if kept is None else logits[kept], kept)
            recorded.append(GoldenPrompt(prompt.name, prompt.text, list(map(int, ids)), generated,
                                         engine.detokenize(generated), kept))
            on_event("prompt", {"name": prompt.name, "index": i})
        sha, size = writer.close()
    except BaseException:
        writer.abort()
        raise
    return recorded, sha, size, dtype


def _fresh_folder(root: Path, key: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{key}.", suffix=".part", dir=root))


def _worst_key(verdict: Verdict, comparison: TopKComparison | LogitComparison | None) -> tuple:
    """How bad a prompt's check is: the verdict's severity, then argmax flips, then max |Δ|."""
    if comparison is None:  # the engine crashed on this prompt
        return (verdict.severity, 0, 0.0)
    return (verdict.severity, len(comparison.flips), comparison.max_abs_diff)


def _worst(pairs: Sequence[tuple[Verdict, TopKComparison | LogitComparison]]) -> int:
    """Index of the worst prompt: the most severe verdict, then the most argmax flips, then the largest max |Δ|."""
    return max(range(len(pairs)), key=lambda i: _worst_key(*pairs[i]))


def _every_shape(kept: tuple[np.ndarray, np.ndarray, LogitComparison, DetectionLimits], thresholds: Thresholds
                 ) -> DetectionLimits:
    """The headline shape measured already, every other shape measured now, in :data:`SHAPES` order."""
    reference, observed, comparison, headline = kept
    rest = detection_limits(reference, observed, comparison, thresholds=thresholds,
                            shapes=tuple(s for s in SHAPES if s != HEADLINE))
    shapes = sorted(headline.shapes + rest.shapes, key=lambda s: SHAPES.index(s.shape))
    return DetectionLimits(headline.verdict, shapes, rest.notes)


def _crashed_check(name: str, n_positions: int, crash: EngineCrashed) -> PromptCheck:
    """The check of a prompt whose run crashed the engine: the verdict ``crashed`` with the evidence."""
    evidence = CrashEvidence.of(crash)
    evidence.variant = f"prompt {name!r}"
    return PromptCheck(name, n_positions, Verdict("crashed", evidence=[evidence.summary()] + evidence.lines()),
                       None, crash=evidence.to_dict())


# -- record --------------------------------------------------------------------------------------
def record_golden(config: RecordConfig, root: str | Path, *, on_event: Event | None = None) -> GoldenManifest:
    """Record a golden into ``root/<device-key>/``.

    Events: ``("size", {"bytes", "positions", "n_vocab", "store", "full_bytes"})`` before the first run,
    then ``("prompt", {...})`` per prompt.

    Raises:
        InputError: bad config, prompts that do not fit the context, a golden of this device key already
            in ``root`` (update it with ``golden update``), or an engine without full logits.
        EngineError: the engine failed (nothing is left behind).
    """
    config.validate()
    on_event = on_event or ignore_event
    root = Path(root)
    engine = load_supervised(config.variant)
    try:
        engine.require("logits", "a golden (it stores logits)")
        prompt_ids = _tokenize(engine, config.prompts, config.n_decode)
        provenance = collect_provenance(engine, config.variant, config.prompts, prompt_ids, config.build_commit)
        folder = root / provenance.device.key
        if folder.exists():
            raise InputError(f"{folder} already holds a golden for this device key; replace it with: logitlab golden "
                             f"update {root} --reason TEXT (its history keeps the old hashes)")
        kind, k = parse_store(config.store)
        if kind == "topk" and k >= engine.n_vocab:
            raise InputError(f"--store {config.store}: K reaches the vocabulary of {engine.n_vocab} tokens, so the "
                             f"top-k store would be larger than --store full; give K below {engine.n_vocab}, or full")
        rows = record_rows(config.positions, prompt_ids, config.n_decode)  # refused before any run
        positions = sum(len(ids) + config.n_decode if r is None else len(r) for ids, r in zip(prompt_ids, rows))
        on_event("size", {"bytes": store_bytes(config.store, positions, engine.n_vocab), "positions": positions,
                          "n_vocab": engine.n_vocab, "store": config.store, "prompts": len(prompt_ids),
                          "full_bytes": store_bytes("full", positions, engine.n_vocab)})
        tmp = _fresh_folder(root, provenance.device.key)
        try:
            prompts, sha, size, dtype = _write(tmp, config.store, engine, config.variant, config.prompts, prompt_ids,
                                               config.n_decode, on_event, rows=rows)
            manifest = GoldenManifest(created_at=now_utc(), provenance=provenance, store=config.store, dtype=dtype,
                                      n_decode=config.n_decode, prompts=prompts, logits_sha256=sha,
                                      logits_bytes=size, positions=None if rows[0] is None else config.positions)
            write_manifest(manifest, tmp)
            tmp.rename(folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    finally:
        engine.close()
    manifest.folder = str(folder)
    return manifest


# -- check ---------------------------------------------------------------------------------------
def open_check_engine(root: str | Path, overrides: VariantOverrides, *, strict: bool
                      ) -> tuple[Engine, Variant, GoldenManifest, GoldenMatch, Device]:
    """Load the engine for a check or update and pick its golden (see golden_provenance for the rule).

    The variant comes from a golden's manifest (changed by ``overrides``); the device from the loaded
    engine; the golden from the device key. When the golden picked records another variant than the
    one loaded, the engine is loaded again with that golden's variant.

    Raises:
        InputError: no golden, a damaged one, or none for this device under ``strict``.
    """
    manifests = read_goldens(golden_folders(root))
    cpu = device_info("cpu")
    template = next((m for m in manifests if m.provenance.device.key == cpu.key),
                    max(manifests, key=lambda m: m.created_at))
    variant = overrides.apply(template)
    engine = load_supervised(variant)
    try:
        engine.require("logits", "a golden check (it compares logits)")
        device = device_info(engine_device(engine.describe()))
        match = match_golden(manifests, device, strict=strict)
        chosen = read_golden(match.folder, verify=True)
        other = overrides.apply(chosen)
        if other != variant:
            engine.close()
            variant, engine = other, load_supervised(other)
            engine.require("logits", "a golden check (it compares logits)")
    except BaseException:
        engine.close()
        raise
    return engine, variant, chosen, match, device


def _check_model(manifest: GoldenManifest, current: Provenance) -> None:
    """Refuse a golden for another model (InputError)."""
    golden = manifest.provenance
    if golden.model_sha256 and current.model_sha256 and golden.model_sha256 != current.model_sha256:
        raise InputError(f"golden {manifest.folder} is for another model: recorded with {golden.model_path} (sha256 "
                         f"{golden.model_sha256[:12]}…), this run loads {current.model_path} (sha256 "
                         f"{current.model_sha256[:12]}…); pass --model with the recorded model or record a new golden")


def _check_tokenizer(engine: Engine, manifest: GoldenManifest, current: Provenance) -> None:
    """Refuse a golden for another tokenizer: another vocabulary size, or a prompt that tokenizes differently."""
    if manifest.provenance.n_vocab != current.n_vocab:
        raise InputError(f"golden {manifest.folder} is for another tokenizer: vocabulary of "
                         f"{manifest.provenance.n_vocab}, this engine has {current.n_vocab}")
    for prompt in manifest.prompts:
        ids = engine.tokenize(prompt.text)
        if list(ids) != list(prompt.prompt_ids):
            at = next((i for i, (a, b) in enumerate(zip(ids, prompt.prompt_ids)) if a != b),
                      min(len(ids), len(prompt.prompt_ids)))
            raise InputError(f"golden {manifest.folder} is for another tokenizer: prompt {prompt.name!r} tokenizes to "
                             f"{len(ids)} ids here, {len(prompt.prompt_ids)} in the golden, first different at "
                             f"index {at}; record a golden for this tokenizer")


def choose_bar(changes: Sequence[ProvenanceChange], allowed: Bar) -> tuple[Bar, str]:
    """The bar for a check: bit-exact unless the device key, build or options changed (then ``allowed``)."""
    moved = [c.field for c in changes if c.gate]
    loose = allowed.allow != "bit-exact" or allowed.limits
    if not moved:
        reason = "same device key, build and options: bit-exact is required"
        if loose:
            reason += f" (the allowed bar — {allowed.describe()} — applies only when they change)"
        return Bar(), reason
    names = ", ".join(dict.fromkeys(f.split(".")[0] if not f.startswith("device") else "device key" for f in moved))
    if not loose:
        return Bar(), f"{names} changed, and no looser bar was allowed (--allow, KLD limits, --min-top1): " \
                      "bit-exact is required"
    return allowed, f"{names} changed: the allowed bar applies ({allowed.describe()})"


def check_golden(config: CheckConfig, *, on_event: Event | None = None) -> GoldenCheckResult:
    """Replay a golden and judge this build against it.

    Events: ``("start", {"prompts": n, "golden": folder})``, then ``("prompt", {...})`` per prompt.

    Raises:
        InputError: missing/corrupt golden, one for another model or tokenizer, none for this device
            under ``strict_device``, or bad overrides.
        EngineError: the engine failed or returned logits of another shape.
    """
    on_event = on_event or ignore_event
    check_servable(config.root, config.positions)  # before the engine loads
    engine, variant, manifest, match, device = open_check_engine(config.root, config.overrides,
                                                                 strict=config.strict_device)
    try:
        rows = check_rows(manifest, config.positions)
        prompts = [Prompt(p.name, p.text) for p in manifest.prompts]
        current = collect_provenance(engine, variant, prompts, [p.prompt_ids for p in manifest.prompts],
                                     config.build_commit)
        _check_model(manifest, current)
        _check_tokenizer(engine, manifest, current)
        changes = provenance_changes(manifest.provenance, current)
        bar, reason = choose_bar(changes, config.bar)
        on_event("start", {"prompts": len(manifest.prompts), "golden": manifest.folder})
        checks = []
        kept = None  # the worst prompt so far: its golden and run logits, comparison and headline limit
        with GoldenLogits(manifest) as reader:
            for i, prompt in enumerate(manifest.prompts):
                check_fits(engine, len(prompt.prompt_ids), len(prompt.generated_ids), what="the golden's prompt",
                           name=prompt.name, fixed=True)
                try:
                    logits, _ = _run(engine, variant, prompt.prompt_ids, len(prompt.generated_ids),
                                     prompt.generated_ids)
                except EngineCrashed as crash:  # a result: the check fails on it; the prompts after are not run
                    checks.append(_crashed_check(prompt.name, len(prompt.input_ids), crash))
                    on_event("prompt", {"name": prompt.name, "index": i, "verdict": "crashed"})
                    break
                comparison, verdict, reference, logits = _compare(reader, manifest, i, logits, config.top_k,
                                                                  config.thresholds, rows[i])
                limits = None
                if config.detection and reference is not None:
                    limits = detection_limits(reference, logits, comparison, thresholds=config.thresholds,
                                              shapes=(HEADLINE,))
                    if not checks or _worst_key(verdict, comparison) > max(_worst_key(c.verdict, c.comparison)
                                                                           for c in checks):
                        kept = (len(checks), (reference, logits, comparison, limits))
                checks.append(PromptCheck(prompt.name, comparison.n_positions, verdict, comparison, detection=limits))
                on_event("prompt", {"name": prompt.name, "index": i, "verdict": verdict.word})
            index = _worst([(c.verdict, c.comparison) for c in checks])
            if kept is not None and kept[0] == index and kept[1][3].shapes:  # the verdict's prompt: every shape
                checks[index].detection = _every_shape(kept[1], config.thresholds)
    finally:
        engine.close()
    worst = checks[index]
    gate = judge([c.comparison for c in checks if c.comparison is not None], worst.verdict.word, bar)
    return GoldenCheckResult(
        root=str(config.root), match=match, device=device, variant=variant.to_dict(), store=manifest.store,
        golden_created_at=manifest.created_at, golden_provenance=manifest.provenance, provenance=current,
        changes=changes, bar=bar, bar_reason=reason, prompts=checks, verdict=worst.verdict,
        verdict_prompt=worst.name, gate=gate, positions=stored_selection(manifest, config.positions, rows))


def check_servable(root: str | Path, spec: str | None) -> None:
    """Refuse, before any engine loads, a ``--positions`` spec that no golden under ``root`` can serve (rows
    none of them stored; the golden picked is known only once the engine names its device).

    Raises:
        InputError: the first golden's refusal (:func:`~logitlab.experiments.golden.rows.check_rows`).
    """
    if spec is None:
        return
    errors = []
    for manifest in read_goldens(golden_folders(root)):
        try:
            check_rows(manifest, spec)
            return
        except InputError as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


# -- update --------------------------------------------------------------------------------------
def _summary(parts: Sequence[TopKComparison | LogitComparison]) -> dict[str, Any]:
    kld = [x for p in parts for x in p.row_kld if x is not None]
    n = sum(p.n_positions for p in parts)
    return {"max_abs_diff": max(p.max_abs_diff for p in parts),
            "kld_mean": float(np.mean(kld)) if kld else None, "kld_max": float(np.max(kld)) if kld else None,
            "top1_agreement": sum(p.argmax_agreement * p.n_positions for p in parts) / n if n else None,
            "differing_positions": sum(p.differing_rows for p in parts), "positions": n}


def _headline(p: Provenance) -> dict[str, Any]:
    return {"device_key": p.device.key, "engine_version": p.engine_version, "build": dict(p.build),
            "options": dict(p.options), "env": dict(p.env), "model_sha256": p.model_sha256}


def update_golden(root: str | Path, reason: str, *, overrides: VariantOverrides | None = None,
                  build_commit: str | None = None, thresholds: Thresholds = Thresholds(), top_k: int = 5,
                  on_event: Event | None = None) -> GoldenManifest:
    """Re-record the golden of this device key and append a history entry (see the module docstring).

    The prompts, decode length and store stay the golden's. The verdict compares the new logits with
    the old ones on the old token ids (when the new greedy ids differ, those ids are replayed once more).

    Raises:
        InputError: an empty reason, no golden of this device key in ``root`` (record one), a golden
            for another tokenizer, or a damaged golden.
        EngineError: the engine failed (the old golden is left as it was).
    """
    if not reason or not reason.strip():
        raise InputError("golden update needs --reason TEXT: why the golden changes (it goes into the history)")
    on_event = on_event or ignore_event
    engine, variant, old, _, _ = open_check_engine(root, overrides or VariantOverrides(), strict=True)
    folder = Path(old.folder)
    try:
        prompts = [Prompt(p.name, p.text) for p in old.prompts]
        prompt_ids = [p.prompt_ids for p in old.prompts]
        current = collect_provenance(engine, variant, prompts, prompt_ids, build_commit)
        _check_tokenizer(engine, old, current)  # another model is allowed: the history says so
        on_event("start", {"prompts": len(prompts), "golden": str(folder)})
        kept = check_rows(old, None)  # the rows the old golden stores: compared, and stored again
        outputs, parts, verdicts, greedy_changed = [], [], [], []
        with GoldenLogits(old) as reader:
            for i, prompt in enumerate(old.prompts):
                logits, generated = _run(engine, variant, prompt.prompt_ids, old.n_decode)
                outputs.append((logits, generated))
                if generated != list(prompt.generated_ids):
                    greedy_changed.append(prompt.name)
                    logits, _ = _run(engine, variant, prompt.prompt_ids, old.n_decode, prompt.generated_ids)
                comparison, verdict, _, _ = _compare(reader, old, i, logits, top_k, thresholds, kept[i])
                parts.append(comparison)
                verdicts.append(verdict)
        tmp = _fresh_folder(folder.parent, folder.name)
        try:
            new_prompts, sha, size, dtype = _write(tmp, old.store, engine, variant, prompts, prompt_ids, old.n_decode,
                                                   on_event, outputs, [r.run for r in kept])
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    finally:
        engine.close()
    index = _worst(list(zip(verdicts, parts)))
    worst = verdicts[index]
    entry = HistoryEntry(at=now_utc(), reason=reason.strip(), old_logits_sha256=old.logits_sha256,
                         new_logits_sha256=sha, old_provenance=_headline(old.provenance),
                         new_provenance=_headline(current),
                         changes=[c.line for c in provenance_changes(old.provenance, current)],
                         verdict=worst, worst_prompt=old.prompts[index].name, greedy_changed=greedy_changed,
                         summary=_summary(parts))
    manifest = GoldenManifest(created_at=now_utc(), provenance=current, store=old.store, dtype=dtype,
                              n_decode=old.n_decode, prompts=new_prompts, logits_sha256=sha, logits_bytes=size,
                              history=[*old.history, entry], positions=old.positions)
    try:
        write_manifest(manifest, tmp)
        retired = folder.with_name(f".{folder.name}.old")
        shutil.rmtree(retired, ignore_errors=True)
        folder.rename(retired)
        try:
            tmp.rename(folder)
        except BaseException:
            retired.rename(folder)  # put the old golden back
            raise
        shutil.rmtree(retired, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    manifest.folder = str(folder)
    return manifest


__all__ += ["choose_bar", "worst_verdict"]
