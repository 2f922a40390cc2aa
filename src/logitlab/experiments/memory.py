"""The memory a command's runs will need, estimated before any engine loads, and the refusal when it cannot fit.

One run of N positions × V vocabulary is N·V·4 bytes of float32 logits. Today's commands hold several such
arrays at once — the reference run and the run compared with it, the comparison's work arrays, and in each
engine's worker llama-cpp-python's ``scores`` array, llama.cpp's output buffer and the shared logits buffer the
run crosses the process boundary in — so a command's peak is about

    peak ≈ base + model file + F × N × V × 4 bytes  [+ W × 2 × min(N, 512) × V × 4 bytes]

For a command whose F was measured as the slope past llama.cpp's ``n_batch`` (``ab``: :attr:`Footprint.workers`
W > 0), the last term counts apart what each of its W engine workers holds whatever N once a run passes 512
rows: llama.cpp's output buffer and its compute graph's logits tensor, one ``n_batch`` (512) rows each
(:data:`BATCH_ROWS`); for the others it is inside F (measured against a 57-token prompt).

with F, the run-sized arrays held at once, measured per command (:data:`FOOTPRINTS`: the peak of the summed
proportional set size of logitlab and its engine workers, a long prompt against a short one on the embedded
model). N is the longest run's positions (its prompt tokens + ``--tokens``), V the vocabulary read from the
model file's metadata (:func:`~logitlab.engines.base.Engine.vocab_before_load`), ``base`` the Python processes
with their libraries. The estimate describes today's implementation, which holds whole runs in memory; it is
not a bound the harness enforces.

:func:`check_memory` compares it with the memory the machine has available (``MemAvailable`` of
``/proc/meminfo``, :func:`logitlab.device.available_memory`) and refuses a workload that would not fit with one
:class:`~logitlab.errors.InputError` naming the expected peak, the available memory and the largest N that
would fit — before any engine loads. Where V or the available memory is unknown (an engine that returns top-k
rows, a model without readable metadata, no ``/proc/meminfo``) there is no check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from logitlab.errors import InputError

#: Bytes of one logit (float32).
LOGIT_BYTES = 4
#: The Python processes of a command without logits: the command's own and its engine workers' interpreters,
#: numpy, numba, llama-cpp-python (measured: 0.44 GB for ``ab`` with two workers on an 86-position run, model
#: file included; 0.35 GB is the rest).
BASE_BYTES = 350 * 10 ** 6
#: Headroom kept free: the estimate must leave this much of the available memory (page cache, other processes).
HEADROOM = 0.9
#: The option a refused run is given to run anyway.
OVERRIDE = "--no-memory-check"
#: Rows of logits an engine worker holds whatever the run's length, once the run passes them: llama.cpp's output
#: buffer (sized by the outputs of one ``llama_decode``: ``n_batch`` rows, llama-cpp-python's default 512) and
#: its compute graph's logits tensor (``n_ubatch`` rows, 512), 2 × 512 rows in all. Measured with
#: ``benchmarks/bench_memory_footprint.py --breakdown``: an idle ``ab`` worker held 0.114 GB after a 73-position
#: run and 0.381 GB after 1,061 positions at n_ctx 4096 (0.267 GB more: 2 × (512 − 73) × 49,152 × 4 = 0.173 GB of
#: these, 0.082 GB of KV cache for the larger n_ctx, the rest the graph's other activations).
BATCH_ROWS = 2 * 512


@dataclass(frozen=True)
class Footprint:
    """How many run-sized logit arrays a command holds at its peak, today.

    Attributes:
        runs: F, the peak's slope in runs of N × V × 4 bytes (for a command that holds a number of runs that an
            option sets, F at none of them).
        source: where F comes from (the measurement).
        per: runs added to F per unit of ``units`` (``invariance determinism``: per --runs; ``invariance
            batch``: per sequence run).
        units: what ``per`` counts, for the docs.
        fewer: the options that lower N, for the refusal's advice.
        whole_run: for a command that takes ``--positions``, F with one row of each run kept (``--positions
            last``): what the run itself costs while the engine computes it and it crosses into the command,
            whatever is selected; the rest of F scales with the rows kept (:func:`estimate`). None: no
            ``--positions``.
        workers: W, the engine workers alive at once whose :data:`BATCH_ROWS` are counted apart from F (F is
            then the slope between two prompts past 512 rows); 0: they are inside F.
        spilled: for a command that keeps its large runs on disk where it can (``ab``'s reference,
            ``explain``'s pair, ``invariance determinism``'s runs: :mod:`~logitlab.engines.spill`), F when it
            does: the memory the kernel cannot drop (anonymous and shared), the kept runs' pages being page cache.
            None: the command does not spill.
        spilled_per: runs added to :attr:`spilled` per unit of :attr:`units` (``invariance batch``: per sequence
            run, where what is held is the engine's own output buffer, every row of its largest batch, and one
            sequence's copy: counted per sequence run, which is never fewer).
        on_disk: the whole runs a spilling command keeps on disk at once (``explain``: its pair, 2), for the disk
            check; for a command whose runs grow with :attr:`units`, per unit.
    """

    runs: float
    source: str
    per: float = 0.0
    units: str = ""
    fewer: str = "a shorter prompt or fewer --tokens"
    whole_run: float | None = None
    workers: int = 0
    spilled: float | None = None
    spilled_per: float = 0.0
    on_disk: int = 1

    def factor(self, units: int = 0) -> float:
        """F for ``units`` of :attr:`units` (at least 1: a run is held once)."""
        return max(1.0, self.runs + self.per * units)


#: F per command, measured on the embedded model (49,152 vocabulary), llama.cpp, a 2-core machine
#: (``benchmarks/bench_memory_footprint.py``): the peak of the summed PSS of logitlab and its engine workers,
#: sampled every 0.1 s, for a 1,045-token prompt + 16 decode tokens (1,061 positions) against a 57-token one
#: (73 positions), over the difference of one run's logits (988 × 49,152 × 4 bytes = 0.194 GB). Re-measured
#: after the llamacpp engine stopped keeping llama-cpp-python's copy of every row (``logits_all=False``);
#: ``golden check`` and ``invariance prefill-decode`` were not, and keep their earlier (larger) F.
#: ``ab`` (issue #31: no copy across the worker boundary, the first candidate run not kept, the comparison's and the
#: detection limits' work in blocks) is measured as the slope between two prompts past ``n_batch`` at one n_ctx
#: (``--short 1000 --long 2000 --n-ctx 4096``: 1,061 vs 2,053 positions, 0.195 GB a run more), with its two
#: workers' batch buffers apart (``workers``); its ``whole_run`` the same way with ``--positions last``.
FOOTPRINTS: dict[str, Footprint] = {
    "ab": Footprint(2.7, "A/A, 2 blocks + 1 warmup, detection limit on, 2,053 vs 1,061 positions at n_ctx 4096: "
                         "1.924 vs 1.405 GB, F 2.66 (the reference and the run compared, 2; the rest the attention "
                         "scores that grow with the context, and the libraries' share of PSS, ±0.1 GB: counting only "
                         "anonymous and shared memory, --made, 1.732 vs 1.313 GB, F 2.15); against 73 "
                         "positions, batch buffers inside: 1.345 vs 0.503 GB, F 4.33 (main the same day: 1.980 vs "
                         "0.593 GB, F 7.14); --positions last the same way: 1.347 vs 1.120 GB, F 1.16 (the run "
                         "itself, written whole by the worker); with the reference kept on disk "
                         "(engines/spill.py), --made (anonymous and shared memory: the reference's pages are page "
                         "cache), 1.304 vs 1.122 GB, F 0.93: the run being compared; --positions last the same way, "
                         "1.208 vs 1.014 GB, F 1.00: the run crossing whole",
                    whole_run=1.2, workers=2, spilled=1.0),
    "verify": Footprint(1.4, "--k 1 4, one prompt (prompts run one at a time: the longest counts), 2,053 vs 1,061 "
                             "positions at n_ctx 4096, --made (2026-12-06): 0.837 vs 0.578 GB, F 1.33, with the "
                             "worker's batch buffers apart (before, against 57 tokens, PSS: 0.83 vs 0.36 GB, F 2.4)",
                        workers=1),
    "explain": Footprint(3.1, "--candidate flash_attn=1 --no-dump, 2,053 vs 1,061 positions at n_ctx 4096, --made "
                              "(2026-12-06, issue #31): the pair kept on disk (engines/spill.py) and the "
                              "alone-vs-in-a-batch control's last rows only, 1.219 vs 1.013 GB, F 1.05 (the rerun "
                              "crossing whole; main the same day: 2.867 vs 2.171 GB, F 3.57); LOGITLAB_SPILL=off, "
                              "2.026 vs 1.430 GB, F 3.05 (the pair and the rerun); with the two workers' batch buffers "
                              "apart (before, PSS against 73 positions: 2.86 vs 0.93 GB, F 10)",
                         workers=2, spilled=1.1, on_disk=2),
    "explain --k": Footprint(3.1, "not measured: M=1 vs M=K keeps its pair on disk too, but its worker builds each "
                                  "side's rows as a list and stacks them (two of a run's decode rows at once), so it "
                                  "is counted as explain with its pair in memory", workers=1),
    "golden record": Footprint(1.1, "--store full, one prompt (prompts are recorded one at a time: the longest "
                                    "counts), 2,053 vs 1,061 positions at n_ctx 4096, --made (2026-12-06): 0.796 vs "
                                    "0.590 GB, F 1.06, with the worker's batch buffers apart (before, against 57 "
                                    "tokens, PSS: 0.84 vs 0.23 GB, F 3.1)", workers=1),
    "golden record --store topk": Footprint(
        1.0, "--store topk:64, one prompt, the top-k selected 16 rows at a time: 1,061 vs 2,053 positions at n_ctx "
             "4096, 0.763 vs 0.955 GB, slope 0.99, with the worker's batch buffers apart (whole runs, before: 4.099 "
             "vs 7.472 GB, slope 17.3; against 73 positions 4.09 vs 0.51 GB, F 18.4)", workers=1),
    "golden check": Footprint(1.1, "a --store full golden of one prompt, detection limit on, 2,016 vs 1,016 "
                                   "positions at n_ctx 4096 (2026-12-06): --made 0.904 vs 0.698 GB, F 1.05, the run "
                                   "checked; the golden's logits are a read-only mapping of its file (page cache: "
                                   "PSS 1.495 vs 1.092 GB, F 2.05); a golden on a memory file system is not "
                                   "counted apart (before: 1.66 vs 0.43 GB against 57 tokens, F 6.4)",
                              fewer="a golden recorded with fewer positions", workers=1),
    "invariance batch": Footprint(
        0.0, "--batch 1 4, --made, 2,053 vs 1,061 positions at n_ctx 4096 (2026-12-06, issue #31): each run kept on "
             "disk in the worker as llama.cpp's batch gives it, crossing back in a file of its own "
             "(engines/call_buffers.py), the stacked copies written to disk: 2.644 vs 1.484 GB, F 5.95 for 6 "
             "sequences, the command's own process 0.07 GB, the rest the worker: llama.cpp's output buffer holding "
             "every row of the B=4 batch and one sequence's copy (main the same day: 8.373 vs 4.401 GB, F 20.4); in "
             "memory (LOGITLAB_SPILL=off) 5.874 vs 2.851 GB, F 15.50 for 6 sequences, all in the command's process; "
             "on disk at once: each run in the worker's spill, again in the file it crosses in, and the two stacks",
        per=2.6, units="sequences run (the prompt alone, each --batch size at each padding, B batches each with "
                       "--slots)", fewer="a shorter prompt or smaller --batch sizes",
        spilled=0.0, spilled_per=1.0, on_disk=4),
    "invariance prefill-decode": Footprint(
        11.3, "a 135-token prompt + 4 against a 17-token one + 4 (the probe runs a prefill per position: a long "
              "prompt takes hours here): 0.51 and 0.56 GB (two runs) vs 0.27 GB, F 10.4 and 12.2, every way of "
              "computing each row coming back at once (before the engine change); an upper bound since issue #31 "
              "(each way fills one array kept on disk, crossing back in a file of its own): 404 positions, --made, "
              "0.459 GB against main's 0.544 GB the same day, no slope measured"),
    "invariance determinism": Footprint(
        1.4, "--runs 3: 1.28 vs 0.42 GB (4.4 runs), of which one per run: every run is kept to be compared; with "
             "the runs kept on disk (engines/spill.py), --made, 2,053 vs 1,061 positions at n_ctx 4096: 0.813 "
             "vs 0.623 GB, F 0.97, the run being made",
        per=1.0, units="--runs", fewer="a shorter prompt, fewer --tokens or fewer --runs", spilled=1.0),
}


@dataclass(frozen=True)
class MemoryEstimate:
    """The expected peak of a command's runs.

    Attributes:
        command: the command (``ab``, ``verify``, ...).
        positions: N, the longest run's positions (prompt tokens + decode tokens).
        n_vocab: V, the logits' width.
        factor: F of :data:`FOOTPRINTS`.
        base_bytes: the processes and the model files.
        exact: whether N comes from the tokenizer (else a bound: from above, UTF-8 bytes + 2, on a run that fits;
            from below, the decode tokens alone, on one refused).
        available_bytes: what the machine has available (None: unknown).
        selected: the rows of each run kept (``--positions``; None: all of them).
        workers: W of :attr:`Footprint.workers`.
        spilled: the command's large runs are kept on disk (F is :attr:`Footprint.spilled` + its
            :attr:`~Footprint.spilled_per` per unit).
    """

    command: str
    positions: int
    n_vocab: int
    factor: float
    base_bytes: int
    exact: bool
    available_bytes: int | None = None
    selected: int | None = None
    workers: int = 0
    spilled: bool = False

    @property
    def run_bytes(self) -> int:
        """One run's logits: N × V × 4 bytes."""
        return self.positions * self.n_vocab * LOGIT_BYTES

    @property
    def batch_bytes(self) -> int:
        """What the engine workers hold whatever N past 512 rows: W × min(N, 512) × 2 × V × 4 bytes."""
        return self.workers * min(self.positions, BATCH_ROWS // 2) * 2 * self.n_vocab * LOGIT_BYTES

    @property
    def peak_bytes(self) -> int:
        """base + F × N × V × 4 bytes + :attr:`batch_bytes`."""
        return self.base_bytes + int(self.factor * self.run_bytes) + self.batch_bytes

    @property
    def fits(self) -> bool | None:
        """Whether the peak stays under :data:`HEADROOM` of the available memory (None: unknown)."""
        if self.available_bytes is None:
            return None
        return self.peak_bytes <= HEADROOM * self.available_bytes

    def positions_that_fit(self) -> int:
        """The largest N whose peak stays under :data:`HEADROOM` of the available memory (0: none)."""
        if self.available_bytes is None:
            return self.positions
        room = HEADROOM * self.available_bytes - self.base_bytes
        row = self.n_vocab * LOGIT_BYTES
        batch = self.workers * 2 * row  # per position, up to 512 positions
        short = min(BATCH_ROWS // 2, math.floor(room / (self.factor * row + batch)))  # N <= 512
        if short < BATCH_ROWS // 2:
            return max(0, short)
        return max(short, math.floor((room - batch * BATCH_ROWS // 2) / (self.factor * row)))


def estimate(command: str, positions: int, n_vocab: int, model_bytes: int = 0, *, exact: bool = True,
             available_bytes: int | None = None, units: int = 0, selected: int | None = None,
             spilled: bool = False) -> MemoryEstimate:
    """The expected peak of ``command`` on runs of ``positions`` × ``n_vocab`` logits.

    Args:
        command: a key of :data:`FOOTPRINTS`.
        positions: N, the longest run's positions.
        n_vocab: V.
        model_bytes: the model files' size (they are memory-mapped and read whole).
        exact: N comes from the tokenizer.
        available_bytes: the machine's available memory, for :attr:`MemoryEstimate.fits`.
        units: what :attr:`Footprint.units` counts (``--runs``, the batch probe's sequences run).
        selected: S, the rows of each run kept (``--positions``); for a command with a
            :attr:`Footprint.whole_run`, F is then ``whole_run + (F - whole_run) × S / N``.
        spilled: a whole run would be kept on disk as the reference (:func:`~logitlab.engines.spill.spill_folder`
            gives a folder for N × V × 4 bytes): F is :attr:`Footprint.spilled` (+ :attr:`~Footprint.spilled_per`
            × ``units``), for a command that has one, whatever
            ``selected`` (one run is held either way: the run compared, or the run crossing whole before its rows
            are taken — measured the same, F 0.93 and 1.00).

    Raises:
        KeyError: an unknown command.

    Examples:
        >>> e = estimate("ab", 8192, 129_280, available_bytes=24 * 10**9)
        >>> round(e.run_bytes / 1e9, 2), round(e.peak_bytes / 1e9, 1), e.fits
        (4.24, 12.8, True)
    """
    footprint = FOOTPRINTS[command]
    spilled = spilled and footprint.spilled is not None
    factor = footprint.spilled + footprint.spilled_per * units if spilled else footprint.factor(units)
    if not spilled and selected is not None and footprint.whole_run is not None and positions > 0:
        factor = footprint.whole_run + (factor - footprint.whole_run) * min(selected, positions) / positions
    return MemoryEstimate(command, positions, n_vocab, round(factor, 1), BASE_BYTES + model_bytes, exact,
                          available_bytes, selected, footprint.workers, spilled)


def refusal(e: MemoryEstimate) -> str:
    """The one line that refuses ``e`` (without ``error:``)."""
    from logitlab.dumps.sizes import format_bytes
    from logitlab.engines.spill import SPILL_BYTES

    footprint = FOOTPRINTS[e.command]
    fit = e.positions_that_fit()
    advice = (f"at most {fit:,} positions would fit ({footprint.fewer})" if fit
              else "no run of this model fits")
    bound = "" if e.exact else "at least "
    batch = f" and {format_bytes(e.batch_bytes)} for the engines' batch buffers" if e.batch_bytes else ""
    kept = e.positions if e.selected is None else e.selected
    disk = " (a large reference kept on disk)" if e.spilled and kept * e.n_vocab * LOGIT_BYTES > SPILL_BYTES else ""
    return (f"{e.command} would need about {format_bytes(e.peak_bytes)} of memory at its peak ({bound}"
            f"{e.positions:,} positions × {e.n_vocab:,} vocabulary × 4 bytes = {format_bytes(e.run_bytes)} a run, "
            f"about {e.factor:g} such array{'' if e.factor == 1 else 's'} held at once today{disk}, plus "
            f"{format_bytes(e.base_bytes)} for the processes and "
            f"the model{batch}), but this machine has {format_bytes(e.available_bytes or 0)} available: {advice}; "
            f"{OVERRIDE} runs it anyway")


def check_memory(command: str, engines: Sequence[tuple[type, str | None, dict]], prompts: Sequence[str],
                 n_decode: int, *, positions: int | None = None, units: int = 0,
                 available: Callable[[], int | None] | None = None,
                 selected: Callable[[int], int] | None = None) -> MemoryEstimate | None:
    """Refuse, before any engine loads, a workload whose expected peak would not fit the available memory.

    Args:
        command: a key of :data:`FOOTPRINTS`.
        engines: the engines the command loads, as ``(engine class, model or None, options)``; the widest
            vocabulary counts (two engines on one model file count the file once).
        prompts: every prompt's text (runs are held one prompt at a time: the longest counts).
        n_decode: decode tokens after each prompt.
        positions: N itself, where the token ids are known (``golden check`` replays a golden's): then
            ``prompts`` and ``n_decode`` are not used.
        units: what :attr:`Footprint.units` counts.
        available: the available memory in bytes (default :func:`logitlab.device.available_memory`).
        selected: ``--positions``: the rows kept of a run of N positions (None: all).

    Returns:
        The estimate (None: no check, as the vocabulary or the available memory is unknown).

    Raises:
        InputError: the run would not fit (:func:`refusal`).

    Notes:
        The prompt's tokens are first bounded from above by its UTF-8 bytes + 2 (a BOS and a leading space: a
        byte-level or byte-fallback tokenizer makes no more tokens than that): a run that fits so is not
        tokenized. A run whose decode tokens alone (N = 1 + ``n_decode``) do not fit is refused without
        tokenizing (the line says "at least"). In between the longest prompt is tokenized
        (:meth:`~logitlab.engines.base.Engine.token_counter_before_load`: a vocabulary-only load, no weights);
        where it cannot be, the run is not refused.
    """
    from logitlab.device import available_memory
    from logitlab.engines.spill import spill_folder

    vocabs = [cls.vocab_before_load(model, options) for cls, model, options in engines]
    if not vocabs or any(v is None for v in vocabs):
        return None
    have = (available or available_memory)()
    if have is None:
        return None
    models = {str(cls.model_file(model)) for cls, model, _ in engines if cls.model_file(model) is not None}
    model_bytes = sum(_size(m) for m in models)
    n_vocab = max(vocabs)  # type: ignore[type-var]

    def at(n: int, exact: bool = True) -> MemoryEstimate:
        # the disk must take every run the command keeps (invariance determinism: --runs of them; explain: 2)
        kept_runs = FOOTPRINTS[command].on_disk * (max(1, units) if FOOTPRINTS[command].per else 1)
        spills = (FOOTPRINTS[command].spilled is not None
                  and spill_folder(kept_runs * n * n_vocab * LOGIT_BYTES) is not None)
        return estimate(command, n, n_vocab, model_bytes, exact=exact, available_bytes=have, units=units,
                        selected=None if selected is None else selected(n), spilled=spills)

    if positions is not None:
        e = at(positions)
        if e.fits is False:
            raise InputError(refusal(e))
        return e
    longest = max((len(p.encode("utf-8")) for p in prompts), default=0)
    upper = at(longest + 2 + n_decode, exact=False)
    if upper.fits:
        return upper
    lower = at(1 + n_decode, exact=False)
    if lower.fits is False:  # the decode tokens alone do not fit: no need to count the prompt's
        raise InputError(refusal(lower))
    cls, model, options = engines[0]
    counter = cls.token_counter_before_load(model, options)
    if counter is None:
        return lower
    e = at(max(counter(p) for p in prompts) + n_decode)
    if e.fits is False:
        raise InputError(refusal(e))
    return e


def _size(path: str) -> int:
    try:
        return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) if Path(path).is_dir() \
            else Path(path).stat().st_size
    except OSError:
        return 0
