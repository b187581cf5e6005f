"""VFA's key-summary pre-pass (``kernels.krepr``) at 1 to thousands of programs: ``python3 -m harness.prepass --out DIR``.

Why: the chip model prices the pre-pass by its counted instructions at the issue rate Nsight Compute measured on a
large launch (``kernels/triton.yaml`` ``prepass_rates``), and the pre-pass rows alone (``triton_vfa_minit``) come
out 10-20% too fast, small launches on a floor of about 6 µs the model puts at 5.2: a program's own chain of a load
and its reductions, not the issue rate, may bound a launch of few programs. This sweep times the pre-pass on one K/V
head of P key blocks (P programs of 4 warps), from one program to several waves, at the campaigns' key-block sizes.

Output (``--out DIR``): ``prepass.csv`` (head dim, format, key-block size, programs, the call's timed median and
spread as the campaigns time a call, ``harness.bench.Timer``; and the kernel's GPU time, ``torch.profiler`` around
5 calls), its sidecar, ``log.txt``, ``command.txt``, ``clocks_trace.txt``. The grid needs no torch.
"""

from __future__ import annotations

import argparse
import sys

PROGRAMS = (1, 8, 33, 66, 132, 264, 528, 1056, 2112, 4224)
QUICK_PROGRAMS = (1, 132)
#: (head dim, key-block size) as the campaigns' tiles give the pre-pass its blocks (BLOCK_N of harness.kernels'
#: configs there: 64=128,64;128=128,128;256=128,64), and 64-key blocks at 128 as the decode tiles use
BLOCKS = ((64, 64), (128, 128), (128, 64), (256, 64))
DTYPES = ("fp16", "fp8_e4m3")
COLUMNS = ["head_dim", "dtype", "block_n", "programs", "keys", "call_us", "call_spread_pct", "reps", "kernel_us"]


def grid(quick: bool = False) -> list[tuple[int, str, int, int]]:
    """Cases as (head dim, format, key-block size, programs)."""
    programs = QUICK_PROGRAMS if quick else PROGRAMS
    return [(d, dtype, bn, p) for d, bn in BLOCKS for dtype in DTYPES for p in programs]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m harness.prepass", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for prepass.csv and the rest (created)")
    ap.add_argument("--quick", action="store_true", help="1 and 132 programs (smoke run)")
    a = ap.parse_args(argv[1:])
    from harness.campaign import measurement

    note = {"method": "harness.bench.Timer (L2 flushed, sleep kernel ahead, CUDA events, median); kernel_us: "
                      "torch.profiler around 5 calls after 3 warm-ups",
            "inputs": "standard normal K (seeded) in the format, one batch, one K/V head of programs x block_n keys"}
    m = measurement(a.out, "harness.prepass", argv, note, {"quick": a.quick})
    if m is None:
        return 1
    return m.finish((("prepass.csv", timed(grid(a.quick), m.log), COLUMNS),))


def timed(cases: list[tuple[int, str, int, int]], log) -> list[dict]:
    """A row per case: the pre-pass on one K/V head of its programs' key blocks, timed and profiled."""
    import torch

    from harness import kernels
    from harness.attention import TORCH_DTYPE
    from harness.bench import Timer, cuda_kernels

    timer, rows = Timer(), []
    g = torch.Generator(device="cuda")
    for i, (d, dtype, bn, p) in enumerate(cases):
        g.manual_seed(7000 + i)
        k = torch.randn((1, 1, p * bn, d), device="cuda", generator=g, dtype=torch.float32).to(TORCH_DTYPE[dtype])
        out = kernels.krepr(k, bn)

        def call():
            kernels.krepr(k, bn, out=out)

        for _ in range(3):
            call()
        torch.cuda.synchronize()
        launched = cuda_kernels(call, calls=5)
        t = timer.time(call)
        kernel_us = sum(r["us_per_call"] for r in launched if "krepr" in r["cuda_kernel"])
        rows.append({"head_dim": d, "dtype": dtype, "block_n": bn, "programs": p, "keys": p * bn,
                     "call_us": round(t.median_us, 3), "call_spread_pct": round(t.spread_pct, 2), "reps": t.reps,
                     "kernel_us": round(kernel_us, 4)})
        log(f"d{d} {dtype} block_n {bn}, {p} programs: call {t.median_us:.2f} us, kernel {kernel_us:.2f} us")
        del k, out
    return rows

if __name__ == "__main__":
    raise SystemExit(main())
