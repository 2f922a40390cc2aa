"""``logitlab bisect``: find the first commit whose build changed the numerics, or the speed.

Over the commits ``git rev-list --first-parent GOOD..BAD`` of the engine's
repository (a straight line, oldest first; a merge commit stands for its
branch), a binary search as ``git bisect`` does it:

1. The repository must have no uncommitted changes to tracked files (a
   checkout would carry or refuse them). Its checkout (branch, or detached
   commit) is remembered.
2. GOOD's build is the reference. The numerics probe checks GOOD out, builds
   it and keeps its logits; the speed probe builds GOOD in a second work tree
   (``git worktree add``), whose benchmark runs beside every tested build.
   A build that fails at GOOD stops the bisection (nothing to compare with).
3. BAD is tested first: if it is not bad, there is nothing to find.
4. Then the midpoint of the commits between the last good and the first bad
   one is checked out (``git checkout --detach``), built (``--build``, a shell
   command in the work tree; a failed build is a *skip*) and probed (good,
   bad or skip, see :mod:`logitlab.experiments.bisect.probes`). A skipped
   commit is replaced by its nearest untested neighbour, alternating sides.
5. The first bad commit is the one after the last good one when every commit
   between them was tested; when skips leave several, all are named.

The repository's original checkout is restored at the end, also after an
error or Ctrl-C, and the second work tree is removed. Build outputs in the
work tree are those of the last commit built (rebuild after a bisection).

Nothing here prints; progress goes to ``on_event``.

JSON format history (``schema_version`` of :class:`BisectResult`):

- 1: first version.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from logitlab.errors import InputError, Interrupted, LogitlabError
from logitlab.events import Event, ignore_event
from logitlab.experiments.bisect.probes import ProbeOutcome
from logitlab.experiments.gitrepo import (
    Commit,
    add_worktree,
    checkout,
    current_checkout,
    dirty_files,
    first_parent_range,
    git,
    remove_worktree,
    require_repository,
    resolve,
)
from logitlab.jsonio import ResultRecord

__all__ = ["SCHEMA_VERSION", "BuildRecord", "BisectStep", "BisectResult", "Probe", "parse_range", "run_bisect",
           "next_commit"]

SCHEMA_VERSION = 1
#: Characters of a failed build's stderr kept in its step.
_BUILD_TAIL = 400


class Probe(Protocol):
    """What :func:`run_bisect` needs of a probe (see :mod:`logitlab.experiments.bisect.probes`)."""

    kind: str

    def prepare(self, good: Path, on_event: Event = ...) -> dict[str, Any]: ...

    def test(self, checkout: Path, on_event: Event = ...) -> ProbeOutcome: ...

    def close(self) -> None: ...

    def config(self) -> dict[str, Any]: ...


@dataclass
class BuildRecord:
    """One run of the build command.

    Attributes:
        ok: it exited 0.
        seconds: wall time (s).
        error: why it failed (exit status, timeout), None if it succeeded.
        stderr_tail: the end of its stderr (kept for a failed build).
    """

    ok: bool
    seconds: float
    error: str | None = None
    stderr_tail: str = ""


@dataclass
class BisectStep:
    """One commit built and probed.

    Attributes:
        commit, subject: the commit (full hash) and its subject line.
        position: its index in the range (0 = the first commit after GOOD; -1 = GOOD itself).
        role: ``good`` (GOOD's reference build), ``bad`` (BAD's check) or ``test`` (a bisection step).
        outcome: ``good``, ``bad``, ``skip``, or ``reference`` for GOOD.
        reason: one line of evidence.
        build: the build command's run (None without ``--build``).
        probe: the probe's answer (None when the build failed, and for GOOD).
    """

    commit: str
    subject: str
    position: int
    role: str
    outcome: str
    reason: str
    build: BuildRecord | None = None
    probe: ProbeOutcome | None = None


@dataclass
class BisectResult(ResultRecord):
    """A bisection: the range, every step with its evidence, and the first bad commit.

    Attributes:
        config: repository, range, probe kind and settings, build command.
        good, bad: full hashes of GOOD and BAD.
        commits: the range after GOOD up to BAD, oldest first (``sha``, ``subject``, ``date``).
        original: where the repository stood before (``branch``, ``sha``).
        reference: what GOOD's build gave (numerics: token counts, greedy ids, fingerprint).
        steps: every build and probe, in the order run.
        first_bad: the first bad commit, when the steps single it out.
        suspects: when skipped commits leave several, all of them (oldest first), the first bad among them.
        restored: the original checkout was restored (and the second work tree removed).
        error: why the bisection stopped early, if it did.
    """

    KIND: ClassVar[str] = "bisect"
    SCHEMA_VERSION: ClassVar[int] = SCHEMA_VERSION

    config: dict[str, Any]
    good: str
    bad: str
    commits: list[dict[str, str]]
    original: dict[str, Any]
    reference: dict[str, Any] = field(default_factory=dict)
    steps: list[BisectStep] = field(default_factory=list)
    first_bad: str | None = None
    suspects: list[str] = field(default_factory=list)
    restored: bool = False
    error: str | None = None

    def commit(self, sha: str) -> dict[str, str]:
        return next(c for c in self.commits if c["sha"] == sha)

    def step_of(self, sha: str) -> BisectStep | None:
        """The last step that probed ``sha``."""
        return next((s for s in reversed(self.steps) if s.commit == sha), None)

    @property
    def n_built(self) -> int:
        return sum(1 for s in self.steps if s.build is not None)


def parse_range(text: str) -> tuple[str, str]:
    """``GOOD..BAD`` -> (GOOD, BAD); BAD may be left out (``v1.2..`` = ``v1.2..HEAD``).

    Raises:
        InputError: no ``..``, an empty GOOD, or ``...``.
    """
    good, sep, bad = text.partition("..")
    if not sep or not good or bad.startswith("."):
        raise InputError(f"range {text!r} is not GOOD..BAD (e.g. v1.2..HEAD): GOOD is the last commit known good")
    return good, bad or "HEAD"


def next_commit(lo: int, hi: int, skipped: set[int]) -> int | None:
    """The index to test between the last good ``lo`` and the first bad ``hi``: the midpoint, or the untested
    index nearest to it (below first on a tie); None when every index between is skipped."""
    mid = (lo + hi) // 2
    for distance in range(0, hi - lo):
        for i in (mid - distance, mid + distance):
            if lo < i < hi and i not in skipped:
                return i
    return None


def _build(command: str | None, where: Path, timeout: float | None) -> BuildRecord | None:
    """Run the build command in ``where`` (its own process group: on a timeout or Ctrl-C the whole
    group is killed, so no build keeps writing into the work tree after the checkout is restored)."""
    if not command:
        return None
    start = time.perf_counter()
    try:
        proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=str(where), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        raise InputError(f"cannot start the build command {command!r}: {exc.strerror or exc}") from None
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        return BuildRecord(ok=False, seconds=time.perf_counter() - start, error=f"timed out after {timeout:g} s")
    except BaseException:
        _kill(proc)
        raise
    seconds = time.perf_counter() - start
    tail = err.decode("utf-8", errors="replace")[-_BUILD_TAIL:]
    if proc.returncode != 0:
        code = proc.returncode
        error = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        return BuildRecord(ok=False, seconds=seconds, error=error, stderr_tail=tail)
    return BuildRecord(ok=True, seconds=seconds)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()


def _build_failure(build: BuildRecord) -> str:
    last = [line.strip() for line in build.stderr_tail.strip().splitlines() if line.strip()][-1:]
    return f"build failed ({build.error})" + (f": {last[0][:200]}" if last else "")


def run_bisect(
    repo: str | Path,
    good: str,
    bad: str,
    probe: Probe,
    *,
    build: str | None = None,
    build_timeout: float | None = None,
    on_event: Event | None = None,
) -> BisectResult:
    """Find the first commit of ``good..bad`` whose build the probe calls bad.

    Args:
        repo: the engine's git repository (any folder inside its work tree).
        good, bad: revisions (hash, tag, branch, ``HEAD~3``); ``good`` must be
            on ``bad``'s first-parent history.
        probe: a :class:`~logitlab.experiments.bisect.probes.NumericsProbe` or
            :class:`~logitlab.experiments.bisect.probes.SpeedProbe`.
        build: shell command that builds a checkout, run in its work tree
            (None: nothing to build).
        build_timeout: seconds one build may take (None: no limit).
        on_event: progress callback: ``range`` (``commits``), ``build`` and
            ``probe`` (``commit``, ``role``), ``step`` (``step``), and the
            speed probe's ``bench-*`` events.

    Returns:
        BisectResult: with ``first_bad`` (or ``suspects`` when skips leave several).

    Raises:
        InputError: not a git repository, unknown revisions, ``good`` not an
            ancestor of ``bad``, uncommitted changes, a build that fails at
            GOOD or at BAD, the probe unable to judge BAD, or BAD not bad
            (the error's ``partial`` holds the steps run).
        Interrupted: Ctrl-C (``partial`` holds the steps run).
        LogitlabError: the engine fails on GOOD's build.
            In every case the original checkout is restored first.
    """
    emit = on_event or ignore_event
    top = require_repository(repo)
    good_sha, bad_sha = resolve(top, good), resolve(top, bad)
    commits = first_parent_range(top, good_sha, bad_sha)
    dirty = dirty_files(top)
    if dirty:
        raise InputError(f"{top} has uncommitted changes ({', '.join(dirty[:3])}{' ...' if len(dirty) > 3 else ''}): "
                         "commit or stash them first; bisect checks out other commits")
    original = current_checkout(top)
    config = {"repo": str(top), "range": f"{good}..{bad}", "probe": probe.kind, "build": build,
              "build_timeout": build_timeout, **probe.config()}
    result = BisectResult(config=config, good=good_sha, bad=bad_sha,
                          commits=[{"sha": c.sha, "subject": c.subject, "date": c.date} for c in commits],
                          original={"branch": original.branch, "sha": original.sha})
    emit("range", {"commits": len(commits)})
    scratch = Path(tempfile.mkdtemp(prefix="logitlab-bisect-"))
    worktree: Path | None = None
    try:
        good_commit = Commit(good_sha, _subject(top, good_sha), "")
        if probe.kind == "speed":
            worktree = add_worktree(top, scratch / "good", good_sha)
            where = worktree
        else:
            checkout(top, good_sha)
            where = top
        _reference(result, probe, good_commit, where, build, build_timeout, emit)
        lo, hi = -1, len(commits) - 1
        step = _test(result, probe, top, commits[hi], hi, "bad", build, build_timeout, emit)
        if step.outcome != "bad":
            what = ("is not bad: " + step.reason) if step.outcome == "good" else ("cannot be judged: " + step.reason)
            raise InputError(f"BAD {bad} ({bad_sha[:10]}) {what}; nothing to bisect")
        calibrate = getattr(probe, "calibrate", None)
        if calibrate is not None and step.probe is not None:
            result.reference.update(calibrate(step.probe))
        skipped: set[int] = set()
        while (i := next_commit(lo, hi, skipped)) is not None:
            step = _test(result, probe, top, commits[i], i, "test", build, build_timeout, emit)
            if step.outcome == "good":
                lo = i
            elif step.outcome == "bad":
                hi = i
            else:
                skipped.add(i)
        if hi - lo == 1:
            result.first_bad = commits[hi].sha
        else:
            result.suspects = [c.sha for c in commits[lo + 1:hi + 1]]
    except KeyboardInterrupt:
        result.error = "interrupted"
        raise Interrupted("interrupted; the repository's checkout was restored", partial=result) from None
    except LogitlabError as exc:
        result.error = str(exc)
        exc.partial = result
        raise
    finally:
        result.restored = _restore(top, original, worktree)
        shutil.rmtree(scratch, ignore_errors=True)
        probe.close()
    return result


def _subject(top: Path, sha: str) -> str:
    return git(top, "show", "-s", "--format=%s", sha, "--").strip()


def _reference(result: BisectResult, probe: Probe, good: Commit, where: Path, build: str | None,
               timeout: float | None, emit: Event) -> None:
    emit("build", {"commit": good.sha, "role": "good"})
    built = _build(build, where, timeout)
    if built is not None and not built.ok:
        result.steps.append(BisectStep(good.sha, good.subject, -1, "good", "skip", _build_failure(built), built))
        raise InputError(f"the build command {build!r} fails at GOOD ({good.sha[:10]}): {_build_failure(built)}")
    emit("probe", {"commit": good.sha, "role": "good"})
    result.reference = probe.prepare(where, emit)
    result.steps.append(BisectStep(good.sha, good.subject, -1, "good", "reference",
                                   f"GOOD: the reference build of the {probe.kind} probe", built))


def _test(result: BisectResult, probe: Probe, top: Path, commit: Commit, position: int, role: str,
          build: str | None, timeout: float | None, emit: Event) -> BisectStep:
    checkout(top, commit.sha)
    emit("build", {"commit": commit.sha, "role": role})
    built = _build(build, top, timeout)
    if built is not None and not built.ok:
        step = BisectStep(commit.sha, commit.subject, position, role, "skip", _build_failure(built), built)
    else:
        emit("probe", {"commit": commit.sha, "role": role})
        outcome = probe.test(top, emit)
        step = BisectStep(commit.sha, commit.subject, position, role, outcome.outcome, outcome.reason, built,
                          outcome)
    result.steps.append(step)
    emit("step", {"step": step})
    return step


def _restore(top: Path, original: Any, worktree: Path | None) -> bool:
    """Back to the original checkout; remove the GOOD work tree. True when both worked."""
    ok = True
    try:
        checkout(top, original)
    except LogitlabError:
        ok = False
    if worktree is not None:
        try:
            remove_worktree(top, worktree)
        except LogitlabError:
            ok = False
    return ok
