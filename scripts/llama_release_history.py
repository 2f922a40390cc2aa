"""Make a git repository whose commits are the sources of successive llama-cpp-python releases.

Each commit holds one release's sdist as published (its ``vendor/llama.cpp`` and its ``llama_cpp`` bindings),
tagged ``vVERSION``, in the order given: real llama.cpp history, release by release, for ``logitlab bisect``
with ``logitlab build`` as its build step (docs/commands/build.md)::

    python scripts/llama_release_history.py history-repo 0.3.16 0.3.20 0.3.24 0.3.28 0.3.32 0.3.36
    logitlab bisect v0.3.16..v0.3.36 --repo history-repo \\
        --build 'logitlab build llamacpp . -q -o .logitlab-lib' --probe numerics -- 'lib=.logitlab-lib'

The sdists are downloaded once into logitlab's build cache (``logitlab.engines.llamacpp_build.release_source``,
about 75 MB each). OUT must not exist or be an empty folder. The commit dates are fixed (one day apart from
2026-01-01), so the same versions make the same commits.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="the repository to make (a new or empty folder)")
    parser.add_argument("versions", nargs="+", help="llama-cpp-python releases, oldest first")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from logitlab.engines.llamacpp_build import release_source
    from logitlab.errors import LogitlabError

    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        print(f"error: {out} exists and is not empty", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    git = ["git", "-C", str(out), "-c", "user.name=logitlab", "-c", "user.email=logitlab@localhost"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    (out / ".git" / "info" / "exclude").write_text(".logitlab-lib/\n")
    for day, version in enumerate(args.versions, start=1):
        try:
            tree = release_source(version)
        except LogitlabError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        root = tree.llama_cpp.parent.parent  # the unpacked sdist
        for entry in out.iterdir():
            if entry.name not in (".git", ".logitlab-lib"):
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        for entry in root.iterdir():
            if entry.name in ("logitlab.json", ".git"):  # the cache's own note; a submodule's pointer
                continue
            target = out / entry.name
            if entry.is_dir():
                shutil.copytree(entry, target, symlinks=True, ignore=shutil.ignore_patterns(".git"))
            else:
                shutil.copy2(entry, target)
        date = f"2026-01-{day:02d}T12:00:00+00:00" if day <= 28 else f"2026-02-{day - 28:02d}T12:00:00+00:00"
        env = {**os.environ, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
        # -f: every file of the release, also those its .gitignore files name (llama.cpp's "models/" pattern
        # matches src/models/, the model builders): an ignored file is neither committed nor replaced by a checkout
        subprocess.run([*git, "add", "-A", "-f"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", f"llama-cpp-python {version}"], check=True, env=env)
        subprocess.run([*git, "tag", f"v{version}"], check=True, env=env)
        print(f"v{version}: {subprocess.run([*git, 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
