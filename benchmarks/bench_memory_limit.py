"""Benchmark: does ``ab`` on a long prompt finish inside a memory limit that holds one run but not two (issue #31)?

Run:  PYTHONPATH=src python benchmarks/bench_memory_limit.py [--tokens 2000] [--limit-gb 1.5] [--n-ctx 4096]

``ab`` holds the reference run and the run being compared. A large reference is kept in a file on disk, read
through the page cache (``engines/spill.py``): pages the kernel can drop when memory runs short, so what ab
holds that the kernel cannot give back is one run. This benchmark checks that claim where it matters — under a
hard limit — rather than by reading a peak: it runs the same ``ab`` A/A (2 blocks + 1 warmup, 16 decode tokens,
no detection limit, the memory check off) on a prompt of ``--tokens`` tokens of the embedded model twice inside
a memory cgroup limited to ``--limit-gb``: once with the reference kept in memory (``LOGITLAB_SPILL=off``, as
before) and once spilled (the default). Printed per setting: the exit status, the wall time, the cgroup's peak
usage (page cache included, as the kernel charges it), the OOM kills the cgroup saw, and the verdict of the
JSON ab wrote (or why there is none).

It needs a memory cgroup it can create (root; cgroup v1 ``/sys/fs/cgroup/memory`` or v2 with the ``memory``
controller): elsewhere it says so and exits 2. The cgroup is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))


class Cgroup:
    """A memory cgroup of our own (v1 or v2), limited to ``limit`` bytes, without swap."""

    def __init__(self, limit: int):
        v1 = Path("/sys/fs/cgroup/memory")
        v2 = Path("/sys/fs/cgroup")
        name = f"logitlab-bench-{os.getpid()}"
        controllers = v2 / "cgroup.controllers"
        if (v1 / "memory.limit_in_bytes").exists():
            self.path, self.v2 = v1 / name, False
        elif controllers.exists() and "memory" in controllers.read_text().split():
            self.path, self.v2 = v2 / name, True
        else:
            raise OSError("no memory cgroup here (neither v1 /sys/fs/cgroup/memory nor v2 with memory)")
        self.path.mkdir()
        if self.v2:
            (self.path / "memory.max").write_text(str(limit))
            if (self.path / "memory.swap.max").exists():
                (self.path / "memory.swap.max").write_text("0")
        else:
            (self.path / "memory.limit_in_bytes").write_text(str(limit))
            swap = self.path / "memory.memsw.limit_in_bytes"
            if swap.exists():
                try:
                    swap.write_text(str(limit))
                except OSError:
                    pass

    def enter(self) -> None:
        """Put the calling process into the cgroup (a ``preexec_fn``)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def peak(self) -> int:
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        try:
            return int((self.path / name).read_text())
        except (OSError, ValueError):
            return -1

    def oom_kills(self) -> int:
        name = "memory.events" if self.v2 else "memory.oom_control"
        for line in (self.path / name).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return -1

    def remove(self) -> None:
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2000, help="prompt tokens (default 2000)")
    parser.add_argument("--limit-gb", type=float, default=1.5, help="the cgroup's memory limit, GB (default 1.5)")
    parser.add_argument("--n-ctx", type=int, default=4096)
    args = parser.parse_args()

    from bench_scale import prompt_text
    from logitlab.engines.tokenizers import GgufTokenizer
    from logitlab.models import default_model_path

    tokenizer = GgufTokenizer(default_model_path())
    text, n_prompt = prompt_text(tokenizer, args.tokens)
    positions = n_prompt + 16
    run_gb = positions * tokenizer.n_vocab * 4 / 1e9
    print(f"ab A/A, {positions} positions × {tokenizer.n_vocab} vocabulary: one run's logits {run_gb:.3f} GB; "
          f"memory limit {args.limit_gb:.2f} GB ({args.limit_gb / run_gb:.2f} runs)", flush=True)
    with tempfile.TemporaryDirectory() as work:
        Path(work, "prompt.txt").write_text(text)
        for label, spill in (("reference in memory (LOGITLAB_SPILL=off)", "off"), ("reference spilled (default)", None)):
            try:
                group = Cgroup(int(args.limit_gb * 1e9))
            except OSError as exc:
                print(f"error: cannot limit memory here: {exc}", file=sys.stderr)
                return 2
            env = dict(os.environ)
            env.pop("LOGITLAB_SPILL", None)
            if spill:
                env["LOGITLAB_SPILL"] = spill
            out = Path(work, f"ab-{spill or 'spilled'}.json")
            argv = [sys.executable, "-m", "logitlab", "ab", "--prompt-file", "prompt.txt", "--tokens", "16",
                    "--control", f"n_ctx={args.n_ctx}", "--repeats", "2", "--warmup", "1", "--no-detection-limit",
                    "--no-memory-check", "--quiet", "--json", str(out)]
            start = time.perf_counter()
            try:
                proc = subprocess.run(argv, cwd=work, env=env, preexec_fn=group.enter, capture_output=True, text=True)
                wall = time.perf_counter() - start
                peak, kills = group.peak(), group.oom_kills()
            finally:
                group.remove()
            if out.exists():
                data = json.loads(out.read_text())
                crashed = sum(1 for r in data.get("runs", []) if r.get("crash"))
                verdict = f"verdict {(data.get('verdict') or {}).get('word')}, {len(data.get('runs', []))} runs"
                verdict += (f" ({crashed} crashed)" if crashed else "") + (f"; error: {data['error']}" if data.get("error") else "")
            else:
                lines = [line for line in proc.stderr.splitlines() if line.strip()]
                verdict = "no JSON: " + (lines[-1][:160] if lines else "(no stderr)")
            print(f"  {label:42s} rc={proc.returncode:<4d} wall {wall:6.1f} s  cgroup peak {peak / 1e9:.3f} GB  "
                  f"OOM kills {kills}  {verdict}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
