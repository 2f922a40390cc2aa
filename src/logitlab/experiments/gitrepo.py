"""The engine's git repository: commits, their order, checkouts and worktrees (through the git command).

History and bisect need the same few questions answered about the engine's
repository: which commit is ``HEAD`` and when was it made, in what order do
commits come, which commits lie between a good and a bad one, and how to check
one out and come back. Everything goes through the ``git`` command line
(``subprocess``), so any repository git can read works, and every failure is
one :class:`~logitlab.errors.InputError` naming the git command and git's own
last line of error.

Nothing here prints or logs.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from logitlab.errors import InputError

__all__ = [
    "Commit",
    "Checkout",
    "git",
    "require_repository",
    "resolve",
    "commit_order",
    "commit_info",
    "first_parent_range",
    "dirty_files",
    "current_checkout",
    "checkout",
    "add_worktree",
    "remove_worktree",
]

#: Seconds one git command may take (a checkout of a large tree included).
GIT_TIMEOUT = 600.0


@dataclass(frozen=True)
class Commit:
    """One commit: full hash, subject line and committer date (ISO 8601)."""

    sha: str
    subject: str
    date: str

    @property
    def short(self) -> str:
        return self.sha[:10]


@dataclass(frozen=True)
class Checkout:
    """Where a repository stood: the branch (None when ``HEAD`` was detached) and the commit."""

    branch: str | None
    sha: str

    def describe(self) -> str:
        return f"branch {self.branch} ({self.sha[:10]})" if self.branch else f"detached HEAD at {self.sha[:10]}"


def git(repo: str | os.PathLike[str], *args: str) -> str:
    """Run ``git -C repo ARGS`` and return its stdout.

    Raises
    ------
    InputError
        If git is missing, times out, or exits non-zero (the message names the
        command and git's last line of stderr).
    """
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    try:
        r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False,
                           env=env, stdin=subprocess.DEVNULL, timeout=GIT_TIMEOUT)
    except FileNotFoundError:
        raise InputError("git is not installed: install it, or read the history in record order") from None
    except subprocess.TimeoutExpired:
        raise InputError(f"git {' '.join(args)} in {repo} did not finish within {GIT_TIMEOUT:g} s") from None
    if r.returncode != 0:
        msg = (r.stderr.strip().splitlines() or ["?"])[-1]
        raise InputError(f"git {' '.join(args)} failed in {repo}: {msg}")
    return r.stdout


def require_repository(repo: str | os.PathLike[str], *, option: str = "--repo") -> Path:
    """The top folder of the work tree that holds ``repo``.

    Raises
    ------
    InputError
        If ``repo`` does not exist or is not inside a git work tree.
    """
    path = Path(repo)
    if not path.is_dir():
        raise InputError(f"{option} {repo} is not a folder: give the engine's git repository")
    try:
        top = git(path, "rev-parse", "--show-toplevel").strip()
    except InputError:
        raise InputError(f"{option} {repo} is not a git repository (git rev-parse found none): give the engine's "
                         "git repository") from None
    return Path(top)


def resolve(repo: str | os.PathLike[str], rev: str) -> str:
    """The full hash of the commit ``rev`` names (a hash, tag, branch, ``HEAD~3``...).

    Raises
    ------
    InputError
        If ``rev`` names no commit of ``repo``.
    """
    if not rev or rev.startswith("-"):
        raise InputError(f"revision {rev!r} is not valid: give a commit, tag or branch")
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}").strip()
    except InputError:
        raise InputError(f"unknown revision {rev!r} in {repo}: give a commit, tag or branch of that "
                         "repository") from None


def commit_order(repo: str | os.PathLike[str], ref: str = "HEAD") -> list[str]:
    """Full hashes of ``ref``'s first-parent history, oldest first (``git rev-list --first-parent --reverse``).

    Raises
    ------
    InputError
        If git is missing, ``repo`` is not a git repository or ``ref`` is unknown.
    """
    return git(repo, "rev-list", "--first-parent", "--reverse", ref, "--").split()


def commit_info(repo: str | os.PathLike[str], commit: str = "HEAD") -> tuple[str, str]:
    """Full hash and committer date (ISO 8601) of ``commit``, for a new record.

    Raises
    ------
    InputError
        If git is missing, ``repo`` is not a git repository or ``commit`` is unknown.
    """
    out = git(repo, "show", "-s", "--format=%H%n%cI", commit, "--").split()
    return out[0], out[1]


def first_parent_range(repo: str | os.PathLike[str], good: str, bad: str) -> list[Commit]:
    """The commits after ``good`` up to ``bad`` on ``bad``'s first-parent line, oldest first.

    ``git rev-list --first-parent --reverse good..bad``: a straight line of
    commits (a merge commit stands for its whole branch), so a binary search
    over it is valid.

    Raises
    ------
    InputError
        If ``good`` is not an ancestor of ``bad`` on that line (nothing to
        search) or a revision is unknown.
    """
    good_sha, bad_sha = resolve(repo, good), resolve(repo, bad)
    if good_sha == bad_sha:
        raise InputError(f"{good} and {bad} are the same commit ({good_sha[:10]}): nothing lies between them")
    out = git(repo, "log", "--first-parent", "--reverse", "--format=%H%x00%cI%x00%s", f"{good_sha}..{bad_sha}", "--")
    commits = []
    for line in out.splitlines():
        sha, date, subject = line.split("\x00", 2)
        commits.append(Commit(sha, subject, date))
    line = git(repo, "rev-list", "--first-parent", bad_sha, "--").split()
    if good_sha not in line:
        raise InputError(f"{good} ({good_sha[:10]}) is not on the first-parent history of {bad} ({bad_sha[:10]}): "
                         f"give a GOOD that {bad} descends from")
    return commits


def dirty_files(repo: str | os.PathLike[str]) -> list[str]:
    """Tracked files with uncommitted changes (staged or not); untracked files do not count."""
    out = git(repo, "status", "--porcelain", "--untracked-files=no")
    return [line[3:] for line in out.splitlines() if line.strip()]


def current_checkout(repo: str | os.PathLike[str]) -> Checkout:
    """The branch ``HEAD`` is on (None if detached) and its commit."""
    sha = git(repo, "rev-parse", "HEAD").strip()
    try:
        branch = git(repo, "symbolic-ref", "--quiet", "--short", "HEAD").strip() or None
    except InputError:
        branch = None
    return Checkout(branch, sha)


def checkout(repo: str | os.PathLike[str], target: str | Checkout) -> None:
    """Check out a commit (detached HEAD), or go back to a :class:`Checkout` (its branch, else its commit).

    Raises
    ------
    InputError
        If git refuses (e.g. local changes the checkout would overwrite).
    """
    if isinstance(target, Checkout):
        git(repo, "checkout", "--quiet", target.branch or target.sha, "--")
    else:
        git(repo, "checkout", "--quiet", "--detach", target, "--")


def add_worktree(repo: str | os.PathLike[str], path: str | os.PathLike[str], commit: str) -> Path:
    """A second work tree of ``repo`` at ``commit`` (detached) in the empty or missing folder ``path``."""
    git(repo, "worktree", "add", "--quiet", "--detach", "--force", str(path), commit)
    return Path(path)


def remove_worktree(repo: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Remove a work tree made by :func:`add_worktree` (its untracked build outputs too)."""
    git(repo, "worktree", "remove", "--force", "--force", str(path))
    git(repo, "worktree", "prune")
