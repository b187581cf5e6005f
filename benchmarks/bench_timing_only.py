"""Timing only: long runs with ``--numerics off`` on one core, and a whole Llama-3-8B layer on H100-SXM.

Usage::

    python benchmarks/bench_timing_only.py                          # 128K (a minute or two in all)
    python benchmarks/bench_timing_only.py --quick                  # 16K, a smoke run
    python benchmarks/bench_timing_only.py --one-core --repeats 3   # the one-core rows, medians of 3

Rows (each one ``python -m vfasim.cli run ...`` child: wall, CPU and peak memory from ``os.wait4``;
with ``--repeats N`` the median of each over N children). On a shared machine the CPU seconds
(user + system) are the robust figure; wall time counts whatever else runs.
- one core, C4V16, causal, head_dim 128, blocks 128x128, ``--numerics off``, fa2 and vfa: their
  traces do not depend on the data, so no Q/K/V is made and no arithmetic runs (``trace_only``);
  target 2 s;
- H100-SXM, a Llama-3-8B attention layer (32 query heads, 8 K/V heads, head_dim 128, causal,
  batch 1, the fa2 kernel's tiles), timing only (a chip's default); target 5 s and 1 GiB.
"""

from __future__ import annotations

import argparse
import sys

from bench_targets import median_process

LLAMA = ["--heads", "32", "--kv-heads", "8", "--head-dim", "128"]


def main() -> int:
    parser = argparse.ArgumentParser(description="Timing-only runs at long context.")
    parser.add_argument("--quick", action="store_true", help="16K instead of 128K")
    parser.add_argument("--one-core", action="store_true", help="only the one-core rows (no chip run)")
    parser.add_argument("--repeats", type=int, default=1, help="children per row; medians are printed")
    args = parser.parse_args()
    n = 16384 if args.quick else 131072
    print(f"{'case':<44}{'wall s':>8}{'CPU s':>8}{'MiB':>7}  target")
    cases = [(f"one core {n // 1024}K causal {algo}, numerics off",
              ["run", "--algo", algo, "--seq-len", str(n), "--numerics", "off", "--quiet"], "<= 2 s")
             for algo in ("fa2", "vfa")]
    cases += [(f"H100-SXM Llama-3-8B layer {n // 1024}K {algo}", ["run", "--hw", "H100-SXM", "--algo", algo,
               "--seq-len", str(n), *LLAMA, "--quiet"], "<= 5 s, <= 1 GiB") for algo in ("fa2", "vfa")
              if not args.one_core]
    for name, command, target in cases:
        p = median_process(command, args.repeats)
        print(f"{name:<44}{p.wall_s:>8.2f}{p.cpu_s:>8.2f}{p.peak_mib:>7.0f}  {target}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
