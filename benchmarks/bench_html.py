"""HTML reports: page size and render time per result kind.

Renders each saved result (``--json`` files) as its HTML page, in process, and
prints the result's JSON size, the page size, the number of figures and the
median time of ``report.html(result)`` over ``--times`` renders (matplotlib's
first import, timed once on its own, is not in it).

Target: the demo report (``make demo``: out/demo.html) under 2 MB.

    python benchmarks/bench_html.py [RESULT.json ...] [--times 3]

Without files: out/demo.json (``make demo`` writes it).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from logitlab import report

TARGET_BYTES = 2 * 1024 * 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="*", default=["out/demo.json"])
    parser.add_argument("--times", type=int, default=3)
    args = parser.parse_args()
    start = time.perf_counter()
    import matplotlib.figure  # noqa: F401  (the import a first page pays once)

    print(f"matplotlib import: {time.perf_counter() - start:.2f} s")
    print(f"{'kind':<22} {'file':<28} {'JSON KiB':>9} {'page KiB':>9} {'figures':>8} {'render s':>9}")
    demo_ok = True
    for name in args.results:
        path = Path(name)
        if not path.exists():
            print(f"{name}: missing (make demo writes out/demo.json)", file=sys.stderr)
            return 2
        result = report.read_result(path)
        times, page = [], ""
        for _ in range(args.times):
            t0 = time.perf_counter()
            page = report.html(result)
            times.append(time.perf_counter() - t0)
        size = len(page.encode("utf-8"))
        figures = page.count('<figure class="plot"')
        print(f"{result.KIND:<22} {path.name:<28} {path.stat().st_size / 1024:>9.0f} {size / 1024:>9.0f} "
              f"{figures:>8} {statistics.median(times):>9.2f}")
        if path.name == "demo.json":
            demo_ok = size < TARGET_BYTES
            print(f"demo page {size / 2**20:.2f} MiB, target < 2 MiB: {'met' if demo_ok else 'NOT met'}")
    return 0 if demo_ok else 1


if __name__ == "__main__":
    sys.exit(main())
