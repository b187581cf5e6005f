"""The applications as whole processes: ``vfasim figure latency-ratio`` and ``vfasim validate``.

Usage::

    python benchmarks/bench_apps.py                 # both (validate takes minutes on 2 cores)
    python benchmarks/bench_apps.py --figure-only

Each row is one ``python -m vfasim.cli ...`` child: wall, CPU and peak memory from ``os.wait4``. The
figure writes into a temporary folder. Targets (the speed issue): figure 5 s, validate 15 s.
"""

from __future__ import annotations

import argparse
import sys
import tempfile

from bench_targets import whole_process


def main() -> int:
    parser = argparse.ArgumentParser(description="Whole-process cost of the figure and of validate.")
    parser.add_argument("--figure-only", action="store_true")
    args = parser.parse_args()
    print(f"{'command':<34}{'wall s':>8}{'CPU s':>8}{'MiB':>7}  target")
    with tempfile.TemporaryDirectory() as out:
        cases = [("vfasim figure latency-ratio", ["figure", "latency-ratio", "--out", out], "<= 5 s")]
        if not args.figure_only:
            cases.append(("vfasim validate", ["validate"], "<= 15 s"))
        for name, command, target in cases:
            p = whole_process(command)
            print(f"{name:<34}{p.wall_s:>8.1f}{p.cpu_s:>8.1f}{p.peak_mib:>7.0f}  {target}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
