"""Speed of whole-chip runs: a Llama-3-8B prefill layer (batch 1 and 8) and a long-context decode step on H100-SXM, FA4 on B200.

Usage::

    python benchmarks/bench_chip.py              # the scale cases (a minute or so)
    python benchmarks/bench_chip.py --quick      # 2K prefill, 8K decode, 2K FA4 (a smoke run)
    python benchmarks/bench_chip.py --numerics   # also the layer's numerics on all 32 heads (minutes)

Cases (timing only; numerics off, as ``vfasim run --hw H100-SXM`` does by default):
- prefill: 32 query heads, 8 K/V heads, head dim 128, 16K causal, blocks 128x64, fa2-style kernel;
  batch 1 with fa2 and vfa, batch 8 with fa2 (target 2 s);
- decode: batch 32, one query token, 64K K/V, GQA 32/8, algorithm fa2; target 10 s.
- fa4 B200: the same layer's prefill at 8K on B200, algorithm fa4 on the fa4 kernel, batch 1. Its conditional
  rescale makes the trace depend on the data: every head's QK side is computed (``engine_trace``), so most of
  its time is outside the event loop, and its figure per unit is not the loop's.
- with ``--numerics``: the batch-1 prefill layer with numerics on all 32 heads (target 90 s), spread over one local
  process per core a chunk of K/V heads each (``vfasim.run``'s default ``jobs``; ``--jobs 1``: one pass), the
  references computed, not read from the cache; its CPU seconds count those processes too.

How these sizes are reachable: fa2 and vfa traces do not depend on the data, so the trace is
emitted without arithmetic for two heads of one K/V-head group (its first, which carries the key
summaries, and one for the others) and every (batch, head) maps onto one of them; units with the
same ops are timed once per number of streams sharing a core; the chip's event loop runs over work
units, not ops. Each row is one in-process ``vfasim.run``: wall (``time.perf_counter``) and CPU
(``time.process_time``) seconds, and CPU microseconds per work unit (target 20), of the whole run and of its
event loops alone (``loop us``: the CPU time spent in ``vfasim.chip.run.run_launch``, L2 look-ups and unit
timing on first use included).
"""

from __future__ import annotations

import argparse
import resource
import time
from typing import Any

import vfasim
import vfasim.chip.run as chip_run
from vfasim.chip.fluid import LaunchTimes

PREFILL = dict(heads=32, kv_heads=8, head_dim=128, causal=True, block_q=128, block_k=64)
DECODE = dict(batch=32, heads=32, kv_heads=8, head_dim=128, decode=True, queries=1)
TARGET_S = {"prefill b8": 2.0, "decode": 10.0, "numerics": 90.0}
TARGET_US_PER_UNIT = 20.0  # timing-only rows


LOOP_CPU = [0.0]  # CPU seconds in the chip's event loops since the last case began


def _timed_launch(*args: Any, **kwargs: Any) -> LaunchTimes:
    start = time.process_time()
    try:
        return _run_launch(*args, **kwargs)
    finally:
        LOOP_CPU[0] += time.process_time() - start


_run_launch, chip_run.run_launch = chip_run.run_launch, _timed_launch


def _cpu() -> float:
    """CPU seconds of this process and of its children that have ended (the processes a run's numerics spread
    over: ``vfasim.run``'s ``jobs``)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def case(name: str, algo: str, hw: str = "H100-SXM", **kwargs) -> tuple[str, str, float, float, float, dict]:
    start, cpu, LOOP_CPU[0] = time.perf_counter(), _cpu(), 0.0
    result = vfasim.run(hw, algo, **kwargs)
    return name, algo, time.perf_counter() - start, _cpu() - cpu, LOOP_CPU[0], result.chip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2K prefill, 8K decode, 2K FA4")
    parser.add_argument("--numerics", action="store_true", help="also numerics on all 32 heads of the layer")
    parser.add_argument("--jobs", type=int, default=None,
                        help="processes for those numerics (default vfasim.run's: one per core; 1: one pass)")
    args = parser.parse_args()
    prefill_len, decode_len = (2048, 8192) if args.quick else (16384, 65536)
    rows = [case("prefill b1", algo, seq_len=prefill_len, batch=1, **PREFILL) for algo in ("fa2", "vfa")]
    rows.append(case("prefill b8", "fa2", seq_len=prefill_len, batch=8, **PREFILL))
    rows.append(case("decode", "fa2", seq_len=decode_len, **DECODE))
    fa4 = {**PREFILL, "block_q": None, "block_k": None}  # the kernel's own tiles
    rows.append(case("fa4 B200", "fa4", "B200", kernel="fa4", seq_len=2048 if args.quick else 8192, batch=1, **fa4))
    if args.numerics:
        rows.append(case("numerics", "vfa", seq_len=prefill_len, batch=1, numerics_heads=32, jobs=args.jobs,
                         cache=False, **PREFILL))
    print(f"{'case':<12}{'algo':<6}{'wall s':>8}{'CPU s':>8}{'us/unit':>9}{'loop us':>9}{'target':>7}{'target s':>10}"
          f"{'units':>8}{'model us':>11}{'TFLOP/s':>9}{'HBM TB/s':>10}  bound")
    for name, algo, seconds, cpu, loop, chip in rows:
        target = TARGET_S.get(name)
        per_unit = '' if name in ("numerics", "fa4 B200") else f"{TARGET_US_PER_UNIT:.0f}"
        print(f"{name:<12}{algo:<6}{seconds:>8.2f}{cpu:>8.2f}{1e6 * cpu / chip['units']:>9.0f}"
              f"{1e6 * loop / chip['units']:>9.0f}{per_unit:>7}"
              f"{target if target else '':>10}{chip['units']:>8,}{chip['latency_us']:>11.1f}{chip['tflops']:>9.1f}"
              f"{chip['achieved_hbm_tbps']:>10.2f}  {chip['bound']}")


if __name__ == "__main__":
    main()
