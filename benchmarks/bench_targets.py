"""The speed targets, one figure each: whole-process runs, the engine against a plain NumPy FA2, sweep reuse.

Usage::

    python benchmarks/bench_targets.py            # default run, 16K twice, engine vs plain FA2, sweep (minutes)
    python benchmarks/bench_targets.py --long     # also 128K causal fa2 and vfa (several minutes each)
    python benchmarks/bench_targets.py --quick    # smaller sizes, a smoke run

Whole-process figures run ``python -m vfasim.cli run ...`` as a child and read its wall
time, CPU time and peak resident memory from the operating system (``os.wait4``), like
``/usr/bin/time -v``. Each prints the median of ``--repeats`` runs (1 for 16K and 128K).
Prints a table; writes nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # measure this checkout's vfasim, whatever is installed

#: (figure, target) as the targets state them; wall seconds unless said
TARGETS = {"default run": "<= 1.0 s", "16K causal vfa C4V16": "<= 3 s", "16K again, references cached": "<= 1.5 s",
           "128K causal fa2": "<= 120 s, <= 2 GiB", "128K causal vfa": "<= 120 s, <= 2 GiB",
           "engine / plain FA2": "<= 1.5x"}


@dataclass(frozen=True)
class Proc:
    wall_s: float
    cpu_s: float
    peak_mib: float


def whole_process(args: list[str], env: dict[str, str] | None = None) -> Proc:
    """One ``vfasim`` process: wall, user+system CPU and peak resident memory (from wait4); ``env``: more
    environment variables."""
    start = time.perf_counter()
    env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, "-m", "vfasim.cli", *args], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, cwd=ROOT, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    err = child.stderr.read().decode() if child.stderr else ""
    if status != 0:
        raise SystemExit(f"vfasim {' '.join(args)} failed: {err.strip()}")
    return Proc(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


def median_process(args: list[str], repeats: int, env: dict[str, str] | None = None) -> Proc:
    runs = [whole_process(args, env) for _ in range(repeats)]
    return Proc(*(statistics.median(getattr(r, f) for r in runs) for f in ("wall_s", "cpu_s", "peak_mib")))


def plain_fa2(q: np.ndarray, k: np.ndarray, v: np.ndarray, block: int, vector16: bool) -> np.ndarray:
    """FlashAttention-2 written the obvious way, causal: fp16 inputs, fp32 accumulation; ``vector16``
    rounds every vector step to fp16 with NumPy's cast, as a V16 core does."""
    r = (lambda x: x.astype(np.float16).astype(np.float32)) if vector16 else (lambda x: x)
    q16, k16, v16 = (x.astype(np.float16).astype(np.float32) for x in (q, k, v))
    n, d = q.shape
    scale = r(np.float32(1 / np.sqrt(d)))
    out = np.zeros((n, d), np.float32)
    for i in range(0, n, block):
        qi = q16[i:i + block]
        m, l, o = np.full(qi.shape[0], -np.inf, np.float32), np.zeros(qi.shape[0], np.float32), np.zeros_like(qi)
        for j in range(0, i + block, block):
            s = r(r(qi @ k16[j:j + block].T) * scale)
            s = np.where(np.arange(j, j + s.shape[1])[None, :] > np.arange(i, i + qi.shape[0])[:, None], -np.inf, s)
            m_new = np.maximum(m, s.max(axis=1))
            alpha = r(np.exp(r(m - m_new)))
            p = r(np.exp(r(s - m_new[:, None])))
            l = r(r(alpha * l) + r(p.sum(axis=1, dtype=np.float32)))
            o = r(r(alpha[:, None] * o) + r(p.astype(np.float16).astype(np.float32) @ v16[j:j + block]))
            m = m_new
        out[i:i + block] = r(o / l[:, None])
    return out


def engine_vs_plain(seq_len: int, vector: str) -> tuple[float, float, bool]:
    """(engine s, plain s, bit-identical) for causal fa2, fp16 matmul inputs, ``vector`` vector side."""
    from vfasim.functional import Precision, Tiling, run_engine
    from vfasim.workloads import make_workload

    wl = make_workload("llm-like", seq_len, 128)
    tiling = Tiling(seq_len, seq_len, 128, 128, 128, True)
    with threadpool_limits(limits=1, user_api="blas"):
        start = time.process_time()
        res = run_engine(wl.q, wl.k, wl.v, tiling, "fa2", Precision(matmul="float16", vector=vector))
        engine_s = time.process_time() - start
        start = time.process_time()
        plain = plain_fa2(wl.q[0], wl.k[0], wl.v[0], 128, vector == "float16")
        plain_s = time.process_time() - start
    same = np.array_equal(res.out[0].astype(np.float32).view(np.uint32), plain.astype(res.out.dtype).astype(
        np.float32).view(np.uint32))
    return engine_s, plain_s, same


def sweep_reuse(seq_len: int) -> tuple[int, int, float]:
    """(points computed, functional runs, wall s) of an exp-throughput sweep of fa2 and vfa on C4V16."""
    from vfasim.sweep import Axis, make_points, run_sweep

    points = make_points(["C4V16"], ["fa2", "vfa"], [Axis("exp_scale", (0.5, 1, 2, 4, 8))], {"seq_len": seq_len})
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        result = run_sweep(points, out, jobs=2)
    return result.computed, result.functional_runs, time.perf_counter() - start


def row(name: str, figure: str) -> str:
    return f"{name:<28}{figure:<58}{TARGETS.get(name, '')}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print the speed targets' figures.")
    parser.add_argument("--long", action="store_true", help="also 128K causal fa2 and vfa, one head")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (not the targets' sizes)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of the default case (median)")
    args = parser.parse_args(argv)
    long_n, mid_n = (16384, 4096) if args.quick else (131072, 16384)
    print(f"{'figure':<28}{'measured':<58}target")
    default = median_process(["run", "--quiet", "--no-cache"], args.repeats)
    print(row("default run", f"{default.wall_s:.2f} s wall, {default.cpu_s:.2f} s CPU, {default.peak_mib:.0f} MiB"),
          flush=True)
    with tempfile.TemporaryDirectory() as cache:  # an empty reference cache: a first run, then a second
        env = {"VFASIM_CACHE_DIR": cache}
        mid_args = ["run", "--hw", "C4V16", "--algo", "vfa", "--seq-len", str(mid_n), "--quiet"]
        for name, proc in ((f"{mid_n // 1024}K causal vfa C4V16", whole_process(mid_args, env)),
                           (f"{mid_n // 1024}K again, references cached", whole_process(mid_args, env))):
            print(row(name, f"{proc.wall_s:.1f} s wall, {proc.cpu_s:.1f} s CPU, {proc.peak_mib:.0f} MiB"), flush=True)
    for vector in ("float32", "float16"):
        engine_s, plain_s, same = engine_vs_plain(mid_n, vector)
        print(row("engine / plain FA2", f"{engine_s / plain_s:.2f}x (fa2 {mid_n // 1024}K, fp16 in, {vector} vector: "
                  f"{engine_s:.1f} / {plain_s:.1f} s CPU, {'bit-identical' if same else 'outputs differ'})"),
              flush=True)
    computed, runs, wall = sweep_reuse(1024)
    print(row("sweep reuse", f"{computed} points, numerics computed {runs} times ({wall:.1f} s wall, seq 1024)"),
          flush=True)
    if args.long:
        for algo in ("fa2", "vfa"):
            p = whole_process(["run", "--hw", "C4V16", "--algo", algo, "--seq-len", str(long_n), "--quiet",
                               "--no-cache"])
            print(row(f"{long_n // 1024}K causal {algo}", f"{p.wall_s:.0f} s wall, {p.cpu_s:.0f} s CPU, "
                      f"{p.peak_mib / 1024:.2f} GiB peak (numerics: the default)"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
