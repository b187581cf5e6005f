"""A one-thread engine with glibc's malloc thresholds as they come and as ``vfasim.allocator`` fixes them.

Usage::

    python benchmarks/bench_allocator.py                   # 64K causal vfa on C4V16, no trace (about 2 min)
    python benchmarks/bench_allocator.py --seq-len 32768   # any length

Each setting runs in a child process of its own (the thresholds are process-wide and cannot be
unset): the engine alone on one thread, as full checks and one-core sweep workers run it. Prints the
engine's wall time and, from ``os.wait4``, the child's user and system seconds, minor page faults
and peak memory. Writes nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import sys, time
from threadpoolctl import threadpool_limits
from vfasim.allocator import tune_allocator
from vfasim.runner.api import engine_precision
from vfasim.functional import Tiling, run_engine
from vfasim.hw import load_hw
from vfasim.workloads import make_workload
n, tuned = int(sys.argv[1]), sys.argv[2] == "fixed"
if tuned:
    tune_allocator()
wl = make_workload("llm-like", n, 128)
with threadpool_limits(limits=1, user_api="blas"):
    start = time.perf_counter()
    run_engine(wl.q, wl.k, wl.v, Tiling(n, n, 128, 128, 128, True), "vfa", engine_precision(load_hw("C4V16")),
               trace=False, threads=1)
print(time.perf_counter() - start)
"""


def child(seq_len: int, setting: str) -> tuple[float, float, float, int, float]:
    """(engine wall s, user s, system s, minor page faults, peak MiB) of one child process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(seq_len), setting], stdout=subprocess.PIPE,
                            cwd=ROOT, env=env)
    out = proc.stdout.read().decode() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"the {setting} run failed (status {status})")
    return float(out.split()[-1]), usage.ru_utime, usage.ru_stime, usage.ru_minflt, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=65536)
    args = parser.parse_args()
    print(f"{'thresholds':12}{'engine s':>10}{'user s':>9}{'sys s':>8}{'page faults':>13}{'peak MiB':>10}")
    for setting in ("default", "fixed"):
        wall, user, system, faults, peak = child(args.seq_len, setting)
        print(f"{setting:12}{wall:10.1f}{user:9.1f}{system:8.1f}{faults:13,}{peak:10.0f}")


if __name__ == "__main__":
    main()
