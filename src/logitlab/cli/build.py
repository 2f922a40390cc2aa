"""``logitlab build``: build an engine's library from its sources, cached, for a ``lib=DIR`` variant."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import click

from logitlab.cli.common import handle_errors, make_progress
from logitlab.cli.options import quiet_option
from logitlab.cli.outputs import STDOUT, write_json_output
from logitlab.errors import InputError


@click.command()
@click.argument("engine", type=click.Choice(["llamacpp"]))
@click.argument("source", required=False, metavar="[SRC]")
@click.option("--llama-cpp-python", "release", default=None, metavar="VERSION",
              help="Build the llama.cpp that this llama-cpp-python release vendors (its sdist from the package "
                   "index, downloaded once), with that release's bindings; instead of SRC.")
@click.option("-D", "--define", "defines", multiple=True, metavar="NAME=VALUE",
              help="A CMake flag, as for cmake -D (repeatable), e.g. -D GGML_NATIVE=OFF.")
@click.option("-o", "--out", "--output", "output", default=None, metavar="DIR",
              help="Also copy the built library folder to DIR (replacing a library folder there); "
                   "default: print the cached folder only. (--output: the same, its former name.)")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Parallel compile jobs (default: CPUs).")
@click.option("--json", "json_path", default=None, metavar="PATH",
              help="Write what was built (folder, cache key, seconds, flags, source digest) as JSON. '-': to "
                   "stdout (then the rest goes to stderr).")
@quiet_option
@handle_errors
def build(**opts: Any) -> None:
    """Build an engine's library from its sources, cached by sources and flags, for a lib=DIR variant.

    Builds llama.cpp's shared libraries only (libllama and its ggml
    libraries; no tools: about 1.5 min on 2 cores) from SRC, a llama.cpp
    tree or a llama-cpp-python tree (vendor/llama.cpp with its bindings),
    or from a llama-cpp-python release (--llama-cpp-python). The folder is
    cached under $LOGITLAB_CACHE/llama-builds by a hash of the source files,
    the flags and the compiler: the same sources and flags build once. Load
    it with the llamacpp engine's lib option; each build runs in a process
    of its own. Prints the folder on stdout, also with --quiet (it is the
    command's answer, as the JSON of --json -; --quiet drops the line on
    stderr that says how it was built).

    \b
    Examples:
      logitlab build llamacpp --llama-cpp-python 0.3.36 -D GGML_NATIVE=OFF -o generic
      logitlab ab --candidate lib=generic
      logitlab build llamacpp ../llama.cpp -o ../llama.cpp/build-lib
      logitlab bisect v1..v2 --repo ../llama.cpp --build 'logitlab build llamacpp . -q -o .logitlab-lib' \\
          --probe numerics -- 'llamacpp:?lib=.logitlab-lib'
    """
    from logitlab.engines.llamacpp_build import build_library, find_source, normalize_flags, release_source

    if (opts["source"] is None) == (opts["release"] is None):
        raise InputError("give the sources: SRC (a llama.cpp or llama-cpp-python tree) or --llama-cpp-python "
                         + ("VERSION, not both" if opts["source"] is not None else "VERSION"))
    flags = normalize_flags(opts["defines"])
    output = Path(opts["output"]).expanduser() if opts["output"] else None
    if output is not None and output.exists() and not _is_library_folder(output):
        raise InputError(f"--out {opts['output']} exists and is not a library folder of logitlab build: "
                         "give a new folder")
    tree = release_source(opts["release"]) if opts["release"] else find_source(opts["source"])
    with make_progress(opts["quiet"]) as progress:
        task = progress.add_task(f"building llama.cpp ({tree.origin})", total=None)

        def on_progress(done: int, total: int, line: str) -> None:
            progress.update(task, completed=done, total=total)

        def on_wait() -> None:
            progress.update(task, description=f"waiting for another process building llama.cpp ({tree.origin}) "
                                              "with these flags")

        result = build_library(tree, flags, jobs=opts["jobs"], on_progress=on_progress, on_wait=on_wait)
    folder = result.folder
    if output is not None:
        if output.exists():
            shutil.rmtree(output)
        shutil.copytree(folder, output, symlinks=True)
        folder = output.resolve()
    if opts["json_path"]:
        write_json_output(opts["json_path"], {"folder": str(folder), "cache": str(result.folder), "key": result.key,
                                              "cached": result.cached, "waited": result.waited,
                                              "seconds": round(result.seconds, 1), "meta": result.meta})
        if opts["json_path"] == STDOUT:  # the JSON alone: the folder is in it
            return
    how = ("built by another process meanwhile (this one waited for it)" if result.waited
           else "cached, built before" if result.cached
           else f"built in {int(result.seconds // 60)} min {result.seconds % 60:.0f} s")
    if not opts["quiet"]:
        click.echo(f"llama.cpp library ({tree.origin}, {' '.join(flags) or 'default flags'}): {how}", err=True)
    click.echo(str(folder))


def _is_library_folder(path: Path) -> bool:
    from logitlab.engines.build_cache import read_meta

    meta = read_meta(path)
    return bool(meta and meta.get("kind") == "llama.cpp library")
