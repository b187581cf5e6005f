"""Speed of whole-chip runs: a Llama-3-8B prefill layer and a long-context decode step on H100-SXM.

Usage::

    python benchmarks/bench_chip.py           # both scale cases
    python benchmarks/bench_chip.py --quick   # 2K prefill and 8K decode (a smoke run)

Cases (timing only; numerics off, as ``vfasim run --hw H100-SXM`` does by default):
- prefill: batch 1, 32 query heads, 8 K/V heads, head dim 128, 16K causal, blocks 128x64,
  fa2-style kernel, algorithms fa2 and vfa; target 30 s each on a 2-core machine;
- decode: batch 32, one query token, 64K K/V, GQA 32/8, algorithm fa2; target 10 s.

How these sizes are reachable: fa2 and vfa traces do not depend on the data, so the
trace is emitted without arithmetic for one K/V-head group (4 query heads) and every
(batch, head) maps onto it; units with the same ops are timed once per number of
streams sharing a core; the chip's event loop runs over work units, not ops.
Each figure is one wall-clock run (time.perf_counter) of ``vfasim.run``; prints a table.
"""

from __future__ import annotations

import argparse
import time

import vfasim

PREFILL = dict(batch=1, heads=32, kv_heads=8, head_dim=128, causal=True, block_q=128, block_k=64)
DECODE = dict(batch=32, heads=32, kv_heads=8, head_dim=128, decode=True, queries=1)
TARGET_S = {"prefill": 30.0, "decode": 10.0}


def case(name: str, algo: str, **kwargs) -> tuple[str, str, float, dict]:
    start = time.perf_counter()
    result = vfasim.run("H100-SXM", algo, **kwargs)
    return name, algo, time.perf_counter() - start, result.chip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2K prefill and 8K decode")
    args = parser.parse_args()
    prefill_len, decode_len = (2048, 8192) if args.quick else (16384, 65536)
    rows = [case("prefill", algo, seq_len=prefill_len, **PREFILL) for algo in ("fa2", "vfa")]
    rows.append(case("decode", "fa2", seq_len=decode_len, **DECODE))
    print(f"{'case':<9}{'algo':<6}{'wall s':>8}{'target s':>10}{'units':>8}{'model us':>11}"
          f"{'TFLOP/s':>9}{'HBM TB/s':>10}  bound")
    for name, algo, seconds, chip in rows:
        print(f"{name:<9}{algo:<6}{seconds:>8.2f}{TARGET_S[name]:>10.0f}{chip['units']:>8,}"
              f"{chip['latency_us']:>11.1f}{chip['tflops']:>9.1f}{chip['achieved_hbm_tbps']:>10.2f}  {chip['bound']}")


if __name__ == "__main__":
    main()
