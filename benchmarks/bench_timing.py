"""Speed and memory of the timing model alone: ``simulate`` and ``critical_path`` on a ready trace.

Usage::

    python benchmarks/bench_timing.py                 # 16K causal fa2 (the trace takes ~10 s to build)
    python benchmarks/bench_timing.py --seq-len 4096  # another length
    python benchmarks/bench_timing.py --repeats 5

The trace is the functional engine's: fa2, causal, head_dim 128, blocks 128x128,
one head, seeded random Q/K/V (an fa2 trace does not depend on the values), on
C4V16, ``pipelined`` schedule. Wall figures are the smallest of ``--repeats``
calls (time.perf_counter); peak memory is tracemalloc's peak over one separate
call (NumPy reports its buffers to tracemalloc), divided by the op count for
bytes per op. The trace's own columns are built before and not counted.
Prints a table; writes nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from collections.abc import Callable

import numpy as np

from vfasim.runner.api import engine_precision
from vfasim.functional import Tiling, run_engine
from vfasim.hw import load_hw
from vfasim.sim import simulate
from vfasim.sim.critical import critical_path
from vfasim.trace import Trace

HW = "C4V16"
HEAD_DIM = 128
BLOCK = 128


def make_trace(seq_len: int) -> Trace:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, seq_len, HEAD_DIM)).astype(np.float32) for _ in range(3))
    tiling = Tiling(seq_len, seq_len, HEAD_DIM, BLOCK, BLOCK, True)
    return run_engine(q, k, v, tiling, "fa2", engine_precision(load_hw(HW))).trace


def best_seconds(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def peak_bytes(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print the timing model's ops/s and peak memory per op.")
    parser.add_argument("--seq-len", type=int, default=16384)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    hw, trace = load_hw(HW), make_trace(args.seq_len)
    timeline = simulate(trace, hw)
    n = len(trace)
    stages = {"simulate": lambda: simulate(trace, hw),
              "critical_path": lambda: critical_path(trace, timeline, hw)}
    print(f"fa2 causal seq {args.seq_len} d {HEAD_DIM} blocks {BLOCK}x{BLOCK} on {HW}: {n:,} ops, "
          f"latency {timeline.total_cycles:,} cycles | best of {args.repeats}")
    print(f"{'stage':<15}{'s':>9}{'ops/s':>13}{'peak MiB':>10}{'bytes/op':>10}")
    for name, fn in stages.items():
        seconds = best_seconds(fn, args.repeats)
        peak = peak_bytes(fn)
        print(f"{name:<15}{seconds:>9.3f}{n / seconds:>13,.0f}{peak / 2**20:>10.1f}{peak / n:>10.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
