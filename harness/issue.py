"""Do the SFU (MUFU.EX2) and the FP32 pipe overlap, and how long is one dependent step of each?

Overlap: every thread runs independent chains of two kinds side by side, ``EXPS`` exp2 steps on one
set and ``FMAS`` FFMA steps on another per loop trip (16 CTAs/SM x 4 warps, as ``micro._pipe``); the
SM's ``%clock64`` span gives cycles per trip. Run alone, each kind gives its own cycles per trip; run
together, a trip takes their sum if the two share one issue path that each holds for its whole time,
and their maximum if they overlap fully. ``overlap`` = (alone_exp + alone_ffma − mixed) /
min(alone_exp, alone_ffma): 1 full overlap, 0 none.

Latency: one program of one warp (or of one warp group for the row reductions) runs one dependent
chain; cycles per step = span / steps. Row reductions work on a [64, 64] fp32 tile held by 4 warps,
as one warp group holds its half of a 128-row FlashAttention score tile: each step is one ``tl.max``
(or ``tl.sum``) along the rows and one FFMA that feeds the result back, so the step's latency is the
reduction's plus one FFMA's.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from harness.micro import _clock, _smid

BLOCK, WARPS, PER_SM = 1024, 4, 16  # as micro._pipe: 8 independent chains per thread


@triton.jit(do_not_specialize=["ITERS"])
def _mix_kernel(X, T, ITERS, BLOCK: tl.constexpr, EXPS: tl.constexpr, FMAS: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    a = tl.load(X + offs)
    b = a + 0.125
    t0 = _clock()
    for _ in range(ITERS):
        for _e in tl.static_range(EXPS):
            a = tl.math.exp2(-a)
        for _f in tl.static_range(FMAS):
            b = b * 0.999 + 0.001
    t1 = _clock()
    tl.store(X + offs, a + b)
    sm = _smid()
    tl.store(T + pid * 3, sm.to(tl.int64))
    tl.store(T + pid * 3 + 1, t0)
    tl.store(T + pid * 3 + 2, t1)


@triton.jit(do_not_specialize=["STEPS"])
def _chain_kernel(X, OUT, STEPS, OP: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr):
    """OP 0: x = exp2(-x); 1: x = x*a + b; 2: x = x*a + rowmax(x)*b; 3: x = x*a + rowsum(x)*b (a [ROWS, COLS] tile)."""
    r = tl.arange(0, ROWS)[:, None]
    c = tl.arange(0, COLS)[None, :]
    x = tl.load(X + r * COLS + c)
    t0 = _clock()
    for _ in range(STEPS):
        if OP == 0:
            x = tl.math.exp2(-x)
        elif OP == 1:
            x = x * 0.999 + 0.001
        elif OP == 2:
            x = x * 0.999 + tl.max(x, axis=1)[:, None] * 0.001
        else:
            x = x * 0.5 + tl.sum(x, axis=1)[:, None] * 0.0001
    t1 = _clock()
    tl.store(X + r * COLS + c, x)
    tl.store(OUT, t1 - t0)


def _span_per_trip(exps: int, fmas: int, sms: int, iters: int) -> float:
    """Median over SMs of (%clock64 span of the SM's programs) / trips each program made."""
    grid = sms * PER_SM
    x = torch.rand(grid * BLOCK, device="cuda", dtype=torch.float32) * 0.5 + 0.25
    t = torch.zeros(grid * 3, device="cuda", dtype=torch.int64)
    for _ in range(2):  # compile, then the measured launch
        _mix_kernel[(grid,)](x, t, iters, BLOCK=BLOCK, EXPS=exps, FMAS=fmas, num_warps=WARPS)
        torch.cuda.synchronize()
    spans: dict[int, tuple[int, int]] = {}
    for sm, a, b in t.view(grid, 3).cpu().tolist():
        lo, hi = spans.get(sm, (a, b))
        spans[sm] = (min(lo, a), max(hi, b))
    per = sorted((hi - lo) / iters for lo, hi in spans.values() if hi > lo)
    return per[len(per) // 2]


def _chain_cycles(op: int, rows: int, cols: int, warps: int, steps: int) -> float:
    x = torch.rand(rows * cols, device="cuda", dtype=torch.float32) * 0.5 + 0.25
    out = torch.zeros(1, device="cuda", dtype=torch.int64)
    _chain_kernel[(1,)](x, out, 4, OP=op, ROWS=rows, COLS=cols, num_warps=warps)  # compile
    torch.cuda.synchronize()
    _chain_kernel[(1,)](x, out, steps, OP=op, ROWS=rows, COLS=cols, num_warps=warps)
    torch.cuda.synchronize()
    return int(out.item()) / steps


def run_issue(add, sms: int, quick: bool, log) -> None:
    """Measure the overlap of exp2 and FFMA chains and the dependent latencies; ``add(name, value, unit, notes)``."""
    iters = 128 if quick else 1024
    threads = WARPS * 32
    chains = BLOCK // threads
    base = (f"{PER_SM} CTAs/SM x {WARPS} warps x {chains} independent chains/thread of each kind, {iters} trips; "
            "median over SMs of the %clock64 span / trips")
    alone_e = _span_per_trip(1, 0, sms, iters)
    for fmas in (4, 8, 16):
        alone_f = _span_per_trip(0, fmas, sms, iters)
        mixed = _span_per_trip(1, fmas, sms, iters)
        overlap = (alone_e + alone_f - mixed) / min(alone_e, alone_f)
        note = (f"1 exp2 + {fmas} FFMA per trip on separate chains: alone {alone_e:.1f} and {alone_f:.1f}, "
                f"together {mixed:.1f} SM cycles per trip; {base}")
        add(f"exp2_ffma_1to{fmas}_overlap", overlap, "fraction", note)
        log(f"issue 1 exp2 : {fmas} FFMA: alone {alone_e:.1f} + {alone_f:.1f}, mixed {mixed:.1f} -> overlap "
            f"{overlap:.2f}")
    steps = 256 if quick else 4096
    for op, name, rows, cols, warps, what in (
            (0, "exp2_dependent_latency", 1, 32, 1, "x = exp2(-x), one warp, one element per thread"),
            (1, "ffma_dependent_latency", 1, 32, 1, "x = x*a + b, one warp, one element per thread"),
            (2, "rowmax_64x64_step_latency", 64, 64, 4, "x = x*a + rowmax(x)*b on a [64, 64] fp32 tile, 4 warps"),
            (3, "rowsum_64x64_step_latency", 64, 64, 4, "x = x*a + rowsum(x)*b on a [64, 64] fp32 tile, 4 warps")):
        cyc = _chain_cycles(op, rows, cols, warps, steps)
        add(name, cyc, "cycles", f"{what}; one program, {steps} dependent steps, %clock64 span / steps")
        log(f"issue {name}: {cyc:.1f} cycles")
