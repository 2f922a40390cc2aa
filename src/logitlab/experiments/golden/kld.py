"""llama.cpp as a peer: check any engine against a ``--kl-divergence-base`` file, and write one from a golden.

:func:`check_kld_base` reads a file ``llama-perplexity --kl-divergence-base``
wrote, runs the engine on every chunk's tokens as ``llama-perplexity
--kl-divergence`` does (each chunk from an empty cache; the chunk's first
token replaced by BOS when the engine's tokenizer adds one; the positions
``n_ctx/2 … n_ctx-2`` scored) and reports llama.cpp's own statistics
(:mod:`logitlab.numerics.llamacpp_kld`): mean PPL(Q) and PPL(base), their
ratio, mean KLD ± SE, the KLD percentiles, RMS Δp, same top p ± SE.

:func:`export_kld_base` writes such a file from a golden (full store):
each prompt's positions (prompt, then decode) become a chunk, cut to the
shortest prompt's length, so ``llama-perplexity --kl-divergence
--kl-divergence-base FILE -c N`` judges a llama.cpp build against logits
any engine recorded. llama-perplexity prints its summary only from 100
scored positions on (``n_chunk × (n_ctx - 1 - n_ctx/2)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from logitlab.dumps.golden_format import GoldenLogits, GoldenManifest
from logitlab.dumps.llamacpp_kld import kld_base_size, read_kld_base, write_kld_base
from logitlab.engines.base import check_fits
from logitlab.engines.crash import CrashEvidence
from logitlab.engines.supervised import call_engine, load_supervised
from logitlab.engines.variant import Variant
from logitlab.engines.workload import environment, run_workload
from logitlab.errors import EngineCrashed, EngineError, InputError
from logitlab.events import Event, ignore_event
from logitlab.jsonio import ResultRecord
from logitlab.numerics.gate import Bar, GateCheck, GateResult, limit_checks
from logitlab.numerics.llamacpp_kld import LlamaCppKldStats, kld_rows, kld_statistics, quantize_log_probs

__all__ = ["ChunkStats", "KldCheckResult", "check_kld_base", "KldExport", "export_kld_base"]


@dataclass
class ChunkStats:
    """One chunk of a KLD check: its scored positions, mean KLD (nats), same-top count, NLL sum (nats)."""

    chunk: int
    count: int
    kld_mean: float
    same_top: int
    nll_sum: float
    nll_base_sum: float


@dataclass
class KldCheckResult(ResultRecord):
    """An engine checked against a llama.cpp ``--kl-divergence-base`` file.

    JSON format history (``schema_version``): 1 — first version; 2 — ``settings``: the engine's lines on the
    settings in which it and llama-perplexity may differ (:meth:`~logitlab.engines.base.Engine.peer_settings`);
    3 — ``crash``: the :class:`~logitlab.engines.crash.CrashEvidence` of an engine that crashed (the check
    fails; ``chunks`` and ``stats`` hold the chunks run before it, ``stats`` is None when none was).
    """

    KIND: ClassVar[str] = "golden-kld"
    SCHEMA_VERSION: ClassVar[int] = 3

    file: str
    n_ctx: int
    n_vocab: int
    n_chunk: int
    engine: dict[str, Any]
    variant: dict[str, Any]
    bos_replaced: bool
    stats: LlamaCppKldStats | None
    chunks: list[ChunkStats]
    bar: Bar
    gate: GateResult
    settings: list[str] = field(default_factory=list)
    crash: dict[str, Any] | None = None

    @property
    def passed(self) -> bool:
        return self.gate.passed

    def derived(self) -> dict[str, Any]:
        return {"passed": self.passed}


def _bos(engine: Any) -> int | None:
    """The token an engine's tokenizer puts first (BOS) when it adds one, else None."""
    ids = engine.tokenize("")
    return int(ids[0]) if len(ids) == 1 else None


def _peer_settings(engine: Any, tool: str) -> list[str]:
    """The engine's :meth:`~logitlab.engines.base.Engine.peer_settings` (run where the engine is loaded)."""
    return list(engine.peer_settings(tool))


def _crashed_check(evidence: CrashEvidence) -> GateCheck:
    """The failing check a crash makes."""
    return GateCheck("crashed", evidence.status, "no crash", False, evidence.summary())


def check_kld_base(path: str | Path, variant: Variant, *, bar: Bar | None = None,
                   on_event: Event | None = None) -> KldCheckResult:
    """Run ``variant`` on the tokens of a llama.cpp base file and compute llama.cpp's KLD statistics.

    Args:
        path: the file ``llama-perplexity --kl-divergence-base`` wrote.
        variant: engine, model and options to check.
        bar: limits (mean KLD, the 99 % KLD llama.cpp prints, the same-top rate by its Wilson lower
            bound); its ``allow`` must be ``bit-exact`` (no verdict is made against 16-bit data).
        on_event: ``("start", {"chunks": n})`` then ``("chunk", {"index": i})``.

    The engine runs supervised (:func:`~logitlab.engines.supervised.load_supervised`): when it crashes, the
    result says so (``crash``, a failing ``crashed`` check first in ``gate``) and keeps the chunks run before.

    Raises:
        InputError: a missing, foreign or truncated file; a vocabulary other than the engine's; a
            chunk longer than the engine's context; a bar with a verdict.
        EngineError: the engine failed (an error it raised, not a crash).
    """
    bar = bar or Bar()
    if bar.allow != "bit-exact":
        raise InputError("--allow judges a verdict, which a 16-bit llama.cpp base file does not give: use "
                         "--max-kld-mean, --max-kld-p99 or --min-top1 with --llamacpp-kld")
    on_event = on_event or ignore_event
    base = read_kld_base(path)
    engine = load_supervised(variant)
    logits, nexts, bases, chunks = [], [], [], []
    described: dict[str, Any] = {"engine": variant.engine, "model": variant.model}
    settings: list[str] = []
    bos: int | None = None
    crash: CrashEvidence | None = None
    c: int | None = None
    try:
        engine.require("logits", "a check against a llama.cpp base file (it needs every logit)")
        if engine.n_vocab != base.n_vocab:
            raise InputError(f"{path} was written for a vocabulary of {base.n_vocab}, this engine has "
                             f"{engine.n_vocab}: it is for another model or tokenizer")
        check_fits(engine, base.n_ctx, what=f"a chunk of {path}", fixed=True)
        described = {k: v for k, v in engine.describe().items() if k != "load_seconds"}
        bos = _bos(engine)
        settings = call_engine(engine, _peer_settings, "llama-perplexity", phase="peer settings")
        on_event("start", {"chunks": base.n_chunk})
        for c in range(base.n_chunk):
            tokens = [int(t) for t in base.tokens[c]]
            if bos is not None:
                tokens[0] = bos
            with environment(variant.env):
                out = run_workload(engine, tokens, 0)
            if out.logits.shape != (base.n_ctx, base.n_vocab):
                raise EngineError(f"chunk {c}: the engine returned logits of shape {out.logits.shape}, expected "
                                  f"{(base.n_ctx, base.n_vocab)}")
            rows = np.ascontiguousarray(out.logits[base.first:base.n_ctx - 1])
            part = kld_rows(base.rows[c], rows, base.next_tokens(c))
            chunks.append(ChunkStats(c, int(part.kld.size), float(part.kld.astype(np.float64).mean()),
                                     int(part.same_top.sum()), float(part.nll.astype(np.float64).sum()),
                                     float(part.nll_base.astype(np.float64).sum())))
            logits.append(rows)
            nexts.append(base.next_tokens(c))
            bases.append(np.asarray(base.rows[c]))
            on_event("chunk", {"index": c})
    except EngineCrashed as exc:  # a result: the check fails on it, the chunks run before it stay
        crash = CrashEvidence.of(exc)
        crash.variant = "the engine" if c is None else f"chunk {c + 1}"
    finally:
        engine.close()
    checks = [] if crash is None else [_crashed_check(crash)]
    stats = None
    if chunks:
        stats = kld_statistics(kld_rows(np.concatenate(bases), np.concatenate(logits), np.concatenate(nexts)))
        checks += limit_checks(stats.kld_mean, stats.kld["p99"], int(round(stats.same_top * stats.count)),
                               stats.count, bar)
    else:
        checks += limit_checks(None, None, 0, 0, bar)
    return KldCheckResult(file=str(path), n_ctx=base.n_ctx, n_vocab=base.n_vocab, n_chunk=base.n_chunk,
                          engine=described, variant=variant.to_dict(), bos_replaced=bos is not None, stats=stats,
                          chunks=chunks, bar=bar, gate=GateResult(all(x.passed for x in checks), checks),
                          settings=settings, crash=None if crash is None else crash.to_dict())


@dataclass(frozen=True)
class KldExport:
    """What :func:`export_kld_base` wrote: the file, its dimensions and size (bytes).

    ``decode_scored``: scored positions whose golden logits came from M=1 decode steps (the others from
    the prompt's prefill). llama-perplexity evaluates every chunk in one batch, so at those positions
    its KLD includes the engine's prefill-vs-decode difference (on llama.cpp's CPU backend a near-tie
    difference; ``logitlab invariance prefill-decode`` measures it).
    """

    path: str
    n_ctx: int
    n_chunk: int
    n_vocab: int
    scored: int
    bytes: int
    decode_scored: int = 0


def export_kld_base(manifest: GoldenManifest, path: str | Path, *, n_ctx: int | None = None) -> KldExport:
    """Write a golden's logits as a llama.cpp ``--kl-divergence-base`` file.

    Args:
        manifest: a golden with ``store = "full"``.
        path: the file to write.
        n_ctx: tokens per chunk (default: the shortest prompt's positions, so every prompt is one chunk).

    Raises:
        InputError: a top-k golden, one of selected positions (``--positions``); ``n_ctx`` below 3 or beyond
            the shortest prompt.
    """
    if manifest.top_k is not None:
        raise InputError(f"golden {manifest.folder} stores only the top-{manifest.top_k} logits ({manifest.store}); "
                         "a llama.cpp base file needs the whole vocabulary: record with --store full")
    if manifest.positions is not None:
        raise InputError(f"golden {manifest.folder} stores only the positions {manifest.positions!r} of each run "
                         "(recorded with --positions); a llama.cpp base file needs every position: record without "
                         "--positions")
    shortest = min(len(p.input_ids) for p in manifest.prompts)
    n_ctx = shortest if n_ctx is None else int(n_ctx)
    if not 3 <= n_ctx <= shortest:
        raise InputError(f"--n-ctx {n_ctx}: must be between 3 and the shortest prompt's {shortest} positions")
    first = n_ctx // 2
    tokens = np.array([p.input_ids[:n_ctx] for p in manifest.prompts], dtype=np.int32)
    n_vocab = manifest.provenance.n_vocab
    with GoldenLogits(manifest) as reader:
        chunks = (quantize_log_probs(np.ascontiguousarray(reader.logits(i)[first:n_ctx - 1], dtype=np.float32))
                  for i in range(len(manifest.prompts)))
        write_kld_base(path, tokens, n_vocab, chunks)
    n_chunk = len(manifest.prompts)
    # the logits at position j came from a decode step when j >= the prompt's length - 1 (the last prompt
    # row is prefill; it predicts the first decode token)
    decode = sum(max(0, (n_ctx - 1) - max(first, len(p.prompt_ids))) for p in manifest.prompts)
    return KldExport(path=str(path), n_ctx=n_ctx, n_chunk=n_chunk, n_vocab=n_vocab,
                     scored=n_chunk * (n_ctx - 1 - first), bytes=kld_base_size(n_ctx, n_vocab, n_chunk),
                     decode_scored=decode)
