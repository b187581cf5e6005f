"""Peak memory of long runs: whole processes, and the trace and timing stages on their own.

Usage::

    python benchmarks/bench_memory.py                        # 32K and 64K, fa2 and vfa (several minutes)
    python benchmarks/bench_memory.py --seq-lens 131072      # the 128K target (several minutes a run)
    python benchmarks/bench_memory.py --numerics off         # without the oracle and the fa2 baseline
    python benchmarks/bench_memory.py --stages-only --seq-lens 131072   # trace + timing only (a minute or two)
    python benchmarks/bench_memory.py --estimates            # each command's peak beside its own estimate

Whole-process rows run ``python -m vfasim.cli run --hw C4V16 --algo A --seq-len N`` (causal,
one head, head_dim 128, blocks 128x128) as a child, one at a time, and read its peak
resident memory from the operating system (``os.wait4``), what ``/usr/bin/time -v`` reports
as "Maximum resident set size". The stage rows take the engine out: the trace of causal fa2
and vfa is built without arithmetic (``trace_only``, the same trace the engine emits), then
timed; each stage's peak is tracemalloc's (NumPy reports its buffers to it) above what the
stage was handed, in MiB and in bytes per op. Prints a table; writes nothing; asserts nothing.

``--estimates`` runs one case of every command (run on one core with and without numerics, chip
prefill and decode, sweep, sensitivity, validate, figure) as a child whose ``check_memory`` (the
one place an estimate meets the machine) records the largest estimate the command made, and
prints the child's peak beside it: a peak above ``ESTIMATE_LIMIT`` times the estimate is flagged.
The peak is the largest of the process and the workers it waited for, each alone.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
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
ESTIMATE_LIMIT = 2.0  # no command's peak above this many times its own estimate
ROOT = Path(__file__).resolve().parents[1]
#: name -> vfasim command line: a case of every command, each a few seconds on 2 cores
COMMANDS = {
    "run default": ["run"],
    "run 16K full numerics": ["run", "--seq-len", "16384", "--numerics", "full"],
    "run 128K numerics off": ["run", "--algo", "fa2", "--seq-len", "131072", "--numerics", "off"],
    "run decode 32K": ["run", "--decode", "--seq-len", "32768"],
    "run qkv file": ["run", "--hw", "C16V32", "--qkv", "qkv.npz"],
    "chip prefill": ["run", "--hw", "H100-SXM", "--algo", "vfa", "--kernel", "fa3", "--seq-len", "4096",
                     "--heads", "16", "--batch", "4"],
    "chip prefill 8x32 16K": ["run", "--hw", "H100-SXM", "--algo", "fa2", "--seq-len", "16384", "--heads", "32",
                              "--kv-heads", "8", "--batch", "8"],
    "chip decode": ["run", "--hw", "H100-SXM", "--algo", "fa2", "--decode", "--seq-len", "32768", "--heads", "32",
                    "--kv-heads", "8", "--batch", "8"],
    "chip numerics 2 heads": ["run", "--hw", "H100-SXM", "--algo", "vfa", "--seq-len", "4096", "--heads", "8",
                              "--numerics-heads", "2"],
    "sweep": ["sweep", "--hw", "C4V16", "--algo", "fa2,vfa", "--exp-scale", "0.5,1,2,4,8", "--seq-len", "1024",
              "--out", "sweep_out", "--quiet"],
    "sensitivity": ["sensitivity", "--hw", "C4V16", "--algo", "vfa", "--seq-len", "1024"],
    "validate --rows 1": ["validate", "--rows", "1", "--jobs", "1"],  # its rows estimated in this process
    "figure": ["figure", "latency-ratio", "--out", "figure_out"],
}
#: the child: vfasim's command line with ``check_memory`` recording the largest estimate it is given
CHILD = """
import sys
import vfasim.runner.inputs as inputs
from vfasim.cli import main
largest, check = [0.0], inputs.check_memory
def recording(need, what):
    largest[0] = max(largest[0], need)
    check(need, what)
inputs.check_memory = recording
status = main(sys.argv[1:])
print(f"estimate-bytes {largest[0]:.0f}", file=sys.stderr)
sys.exit(status)
"""


def estimate_rows(names: list[str]) -> list[str]:
    """Each command's peak resident memory beside its own estimate; returns the names of those above the limit."""
    print(f"{'command':<26}{'estimate MiB':>13}{'peak MiB':>10}{'peak/est':>9}{'wall s':>8}")
    over = []
    with tempfile.TemporaryDirectory() as folder:
        _qkv_file(Path(folder) / "qkv.npz")
        for name in names:
            peak_mib, estimate_mib, wall = _measured(COMMANDS[name], folder)
            ratio = peak_mib / estimate_mib if estimate_mib else float("nan")
            flag = "  OVER" if not ratio <= ESTIMATE_LIMIT else ""
            over += [name] if flag else []
            shown = f"{estimate_mib:>13.0f}" if estimate_mib else f"{'none':>13}"
            print(f"{name:<26}{shown}{peak_mib:>10.0f}{ratio:>9.2f}{wall:>8.1f}{flag}", flush=True)
    print(f"limit: peak <= {ESTIMATE_LIMIT:g}x the command's own estimate; "
          + (f"over: {', '.join(over)}" if over else "none over"))
    return over


def _measured(args: list[str], folder: str) -> tuple[float, float, float]:
    """(peak MiB, largest estimate MiB, wall s) of ``vfasim args`` run in ``folder``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", CHILD, *args], cwd=folder, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    err = child.stderr.read() if child.stderr else ""
    _, status, usage = os.wait4(child.pid, 0)
    lines = err.strip().splitlines()
    if status != 0 or not lines or not lines[-1].startswith("estimate-bytes "):
        raise SystemExit(f"vfasim {' '.join(args)} failed: {err.strip()}")
    return usage.ru_maxrss / 1024, float(lines[-1].split()[1]) / 2**20, time.perf_counter() - start


def _qkv_file(path: Path) -> None:
    """Q, K and V of 4 heads x 4096 tokens x head dim 128 (float32), for the ``--qkv`` case."""
    import numpy as np

    rng = np.random.default_rng(0)
    np.savez(path, **{n: rng.standard_normal((4, 4096, 128), np.float32) for n in "qkv"})


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
    parser.add_argument("--estimates", nargs="*", choices=list(COMMANDS), metavar="NAME",
                        help="each command's peak beside its own memory estimate (the names: all of "
                             f"{', '.join(COMMANDS)}); exit 1 if one is over the limit")
    args = parser.parse_args(argv)
    if args.estimates is not None:
        return 1 if estimate_rows(args.estimates or list(COMMANDS)) else 0
    if not args.stages_only:
        run_rows(args.seq_lens, args.algos, args.numerics)
    stage_rows(args.seq_lens, args.algos)
    return 0


if __name__ == "__main__":
    sys.exit(main())
