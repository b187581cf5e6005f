"""Speed figures of the three stages: functional engine, timing model, and ``vfasim.run`` end to end.

Usage::

    python benchmarks/bench_run.py                 # seq 4096 and 16384
    python benchmarks/bench_run.py --seq-lens 4096  # chosen lengths
    python benchmarks/bench_run.py --quick          # seq 1024 only (a smoke run)

Every case is causal, head_dim 128, blocks 128x128, the llm-like workload, on
C4V16, for algorithms vfa and fa2. Each figure is the best (smallest) of a few
wall-clock repeats (time.perf_counter); lengths above 4096 run once. Prints a
table; writes nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # measure this checkout's vfasim, whatever is installed

import vfasim  # noqa: E402
from vfasim.runner.api import engine_precision
from vfasim.functional import Tiling, run_engine
from vfasim.hw import load_hw
from vfasim.sim import simulate
from vfasim.workloads import make_workload

HW = "C4V16"
ALGOS = ("vfa", "fa2")
HEAD_DIM = 128
BLOCK = 128
WORKLOAD = "llm-like"
DEFAULT_SEQ_LENS = (4096, 16384)
QUICK_SEQ_LENS = (1024,)
REPEATS_SHORT = 3  # seq <= 4096
REPEATS_LONG = 1  # seq > 4096
#: end-to-end targets on a 2-core machine: (seq_len, algo) -> seconds; (4096, vfa) is `vfasim run`'s default
TARGETS_S: dict[tuple[int, str], float] = {(4096, "vfa"): 1.0, (16384, "vfa"): 5.0}

T = TypeVar("T")


@dataclass(frozen=True)
class Row:
    seq_len: int
    algo: str
    tiles: int
    engine_s: float
    trace_ops: int
    sim_s: float
    run_s: float
    latency_cycles: int


def best_of(fn: Callable[[], T], repeats: int) -> tuple[float, T]:
    """(smallest wall time in seconds, last result) of ``repeats`` >= 1 calls of ``fn``."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def bench_case(seq_len: int, algo: str, repeats: int) -> Row:
    """Time the engine, the timing model and the whole run for one (seq_len, algo)."""
    hw = load_hw(HW)
    wl = make_workload(WORKLOAD, seq_len, HEAD_DIM)
    tiling = Tiling(seq_len, seq_len, HEAD_DIM, BLOCK, BLOCK, True)
    engine_s, engine = best_of(lambda: run_engine(wl.q, wl.k, wl.v, tiling, algo, engine_precision(hw)),
                               repeats)
    sim_s, _ = best_of(lambda: simulate(engine.trace, hw), repeats)
    run_s, result = best_of(lambda: vfasim.run(HW, algo, seq_len=seq_len, head_dim=HEAD_DIM, block_q=BLOCK,
                                               block_k=BLOCK, causal=True, workload=WORKLOAD), repeats)
    return Row(seq_len, algo, engine.counts["visited_tiles"], engine_s, len(engine.trace), sim_s, run_s,
               result.latency_cycles)


def target_note(row: Row) -> str:
    target = TARGETS_S.get((row.seq_len, row.algo))
    if target is None:
        return ""
    return f"< {target:g} s {'ok' if row.run_s < target else 'MISSED'}"


HEADER = (f"{'seq':>6} {'algo':<5}{'tiles':>8}{'engine s':>10}{'tiles/s':>10}"
          f"{'ops':>9}{'sim s':>8}{'ops/s':>10}{'run s':>8}  {'target':<14}{'latency cycles':>15}")


def format_row(row: Row) -> str:
    return (f"{row.seq_len:>6} {row.algo:<5}{row.tiles:>8,}{row.engine_s:>10.3f}"
            f"{row.tiles / row.engine_s:>10,.0f}{row.trace_ops:>9,}{row.sim_s:>8.3f}"
            f"{row.trace_ops / row.sim_s:>10,.0f}{row.run_s:>8.2f}  {target_note(row):<14}"
            f"{row.latency_cycles:>15,}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Print engine, timing-model and end-to-end speed figures.")
    parser.add_argument("--seq-lens", type=int, nargs="+", default=list(DEFAULT_SEQ_LENS))
    parser.add_argument("--quick", action="store_true", help="seq 1024 only")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seq_lens = QUICK_SEQ_LENS if args.quick else tuple(args.seq_lens)
    print(f"vfasim {vfasim.__version__} | hw {HW} | {WORKLOAD} causal d {HEAD_DIM} "
          f"blocks {BLOCK}x{BLOCK} | best of {REPEATS_SHORT} (seq <= 4096) or {REPEATS_LONG}")
    print(HEADER)
    for seq_len in seq_lens:
        repeats = REPEATS_SHORT if seq_len <= 4096 else REPEATS_LONG
        for algo in ALGOS:
            print(format_row(bench_case(seq_len, algo, repeats)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
