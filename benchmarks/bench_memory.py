"""Peak memory of long runs: whole processes, and the trace and timing stages on their own.

Usage::

    python benchmarks/bench_memory.py                        # 32K and 64K, fa2 and vfa (several minutes)
    python benchmarks/bench_memory.py --seq-lens 131072      # the 128K target (several minutes a run)
    python benchmarks/bench_memory.py --numerics off         # without the oracle and the fa2 baseline
    python benchmarks/bench_memory.py --stages-only --seq-lens 131072   # trace + timing only (a minute or two)

Whole-process rows run ``python -m vfasim.cli run --hw C4V16 --algo A --seq-len N`` (causal,
one head, head_dim 128, blocks 128x128) as a child, one at a time, and read its peak
resident memory from the operating system (``os.wait4``), what ``/usr/bin/time -v`` reports
as "Maximum resident set size". The stage rows take the engine out: the trace of causal fa2
and vfa is built without arithmetic (``trace_only``, the same trace the engine emits), then
timed; each stage's peak is tracemalloc's (NumPy reports its buffers to it) above what the
stage was handed, in MiB and in bytes per op. Prints a table; writes nothing; asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_targets import whole_process  # runs this checkout's vfasim as a child

from vfasim.runner.api import engine_precision
from vfasim.functional import Tiling
from vfasim.functional.trace_only import trace_only
from vfasim.hw import load_hw
from vfasim.sim import simulate, timing_stats
from vfasim.sim.critical import critical_path

TARGET_GIB = 2.0  # 128K causal, one head, fa2 and vfa with numerics, on 2 cores


def run_rows(seq_lens: list[int], algos: list[str], numerics: str | None) -> None:
    extra = [] if numerics is None else ["--numerics", numerics]
    print(f"{'whole process':<16}{'numerics':<10}{'wall s':>8}{'CPU s':>8}{'peak MiB':>10}{'peak GiB':>10}")
    for n in seq_lens:
        for algo in algos:
            p = whole_process(["run", "--hw", "C4V16", "--algo", algo, "--seq-len", str(n), "--quiet", *extra])
            print(f"{f'{n // 1024}K {algo}':<16}{numerics or 'default':<10}{p.wall_s:>8.0f}{p.cpu_s:>8.0f}"
                  f"{p.peak_mib:>10.0f}{p.peak_mib / 1024:>10.2f}", flush=True)
    print(f"target: 128K fa2 and vfa with numerics <= {TARGET_GIB:.0f} GiB peak")


def stage_rows(seq_lens: list[int], algos: list[str]) -> None:
    print(f"\n{'trace + timing':<16}{'stage':<16}{'ops':>11}{'held MiB':>10}{'peak+ MiB':>11}{'B/op':>7}{'s':>7}")
    for n in seq_lens:
        for algo in algos:
            tracemalloc.start()
            _stages(n, algo)
            tracemalloc.stop()


def _stages(n: int, algo: str) -> None:
    """The trace of causal ``algo`` at ``n`` tokens built without arithmetic, then timed, stage by stage."""
    config = load_hw("C4V16")
    tiling = Tiling(n, n, 128, 128, 128, True)
    trace = _stage(f"{n // 1024}K {algo}", "trace build", lambda: trace_only(tiling, algo, engine_precision(config)), 0)
    timeline = _stage("", "simulate", lambda: simulate(trace, config), len(trace))
    _stage("", "timing_stats", lambda: timing_stats(trace, timeline, config), len(trace))
    _stage("", "critical_path", lambda: critical_path(trace, timeline, config), len(trace))


def _stage(label: str, name: str, fn: Callable[[], Any], ops: int) -> Any:
    gc.collect()
    tracemalloc.reset_peak()
    held = tracemalloc.get_traced_memory()[0]
    start = time.perf_counter()
    out = fn()
    wall = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1] - held
    ops = ops or len(out)
    print(f"{label:<16}{name:<16}{ops:>11,}{held / 2**20:>10.0f}{peak / 2**20:>11.0f}{peak / ops:>7.0f}"
          f"{wall:>7.1f}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print peak memory figures of long runs.")
    parser.add_argument("--seq-lens", type=int, nargs="+", default=[32768, 65536])
    parser.add_argument("--algos", nargs="+", default=["fa2", "vfa"])
    parser.add_argument("--numerics", choices=["full", "sample", "off"], default=None,
                        help="the runs' numerics mode (default: the run's own default, sample above 16K)")
    parser.add_argument("--stages-only", action="store_true", help="only the trace and timing stages")
    args = parser.parse_args(argv)
    if not args.stages_only:
        run_rows(args.seq_lens, args.algos, args.numerics)
    stage_rows(args.seq_lens, args.algos)
    return 0


if __name__ == "__main__":
    sys.exit(main())
