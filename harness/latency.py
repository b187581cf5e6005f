"""Memory latency by pointer chase, and the kernels one SDPA call launches with their own GPU times.

Latency: one program of one warp follows a chain of dependent loads (``p = X[p]``) through a buffer
with a random cyclic permutation at a 128-byte stride (one L2 line per step), reading the SM's
``%clock64`` before and after; cycles per load = span / steps. The chain is loaded with the
``.cg`` modifier (cached in L2 only, not L1). A 4 MiB buffer (chased once to warm it) gives the
L2-hit latency; a 1 GiB buffer (20x the L2) the HBM latency (L2 miss, TLB effects included).

Kernels: ``torch.profiler`` around a few SDPA decode and small-prefill calls records every CUDA
kernel the call launches (name and GPU duration): what splits a call's time between the attention
kernel, the split-KV combine kernel and any copies.

Calls: the same, timed as the campaigns time a call (L2 flushed, the GPU held by a sleep so the host has queued the
call): each kernel's start after the sleep ends and its duration, in launch order, beside the whole call's CUDA-event
time measured without the profiler. What a call's time is made of: the kernels and the gaps between them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from harness.micro import _clock

LINE = 128  # bytes per chase step: one L2 line


@triton.jit(do_not_specialize=["STEPS"])
def _chase_kernel(X, OUT, STEPS):
    p = tl.load(X).to(tl.int64)
    t0 = _clock()
    for _ in range(STEPS):
        p = tl.load(X + p, cache_modifier=".cg").to(tl.int64)
    t1 = _clock()
    tl.store(OUT, p)
    tl.store(OUT + 1, t1 - t0)


def _chain(nbytes: int, seed: int) -> torch.Tensor:
    """int64 buffer whose every LINE-th element points (in elements) to the next line of a random cycle."""
    lines = nbytes // LINE
    step = LINE // 8
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(lines, generator=g)
    nxt = torch.empty(lines, dtype=torch.int64)
    nxt[order] = torch.roll(order, -1)
    buf = torch.zeros(lines * step, dtype=torch.int64)
    buf[order * step] = nxt[order] * step
    return buf.cuda()


def chase_cycles(nbytes: int, steps: int, warm: bool) -> float:
    x = _chain(nbytes, 20261125 + nbytes)
    out = torch.zeros(2, dtype=torch.int64, device="cuda")
    if warm:
        _chase_kernel[(1,)](x, out, nbytes // LINE, num_warps=1)
    else:
        _chase_kernel[(1,)](x, out, 4, num_warps=1)  # compile
        torch.cuda.synchronize()
        big = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        big.zero_()  # evict the chain from the L2
        del big
    torch.cuda.synchronize()
    _chase_kernel[(1,)](x, out, steps, num_warps=1)
    torch.cuda.synchronize()
    cycles = float(out[1].item()) / steps
    del x
    return cycles


def run_latency(add, quick: bool, log) -> None:
    """Pointer-chase latencies; ``add(name, value, unit, notes)`` records one micro row."""
    for name, nbytes, warm, steps in (("l2_hit_latency_cycles", 4 << 20, True, 4096),
                                      ("hbm_latency_cycles", 1 << 30, False, 2048 if quick else 8192)):
        vals = sorted(chase_cycles(nbytes, steps, warm) for _ in range(3))
        add(name, vals[1], "cycles", f"pointer chase, 1 warp, {steps} dependent 8-byte loads (.cg) over a random "
            f"cycle of {LINE}-byte lines in a {nbytes >> 20} MiB buffer ({'warm' if warm else 'cold'}); "
            f"%clock64 span / steps, median of 3 ({vals[0]:.0f}-{vals[2]:.0f})")
        log(f"latency {name}: {vals[1]:.0f} cycles ({vals[0]:.0f}-{vals[2]:.0f})")


#: (batch, heads, kv_heads, head_dim, seq_q, seq_k, causal) of the profiled SDPA calls
PROFILE_CASES = [
    (1, 8, 1, 128, 1, 512, False), (1, 8, 1, 128, 1, 8192, False), (1, 8, 1, 128, 1, 65536, False),
    (8, 32, 8, 128, 1, 8192, False), (8, 32, 8, 128, 4, 8192, False), (64, 8, 1, 128, 4, 2048, False),
    (1, 32, 32, 128, 1, 2048, False), (1, 8, 8, 128, 1024, 1024, True), (1, 32, 8, 128, 512, 512, False),
    (4, 32, 32, 64, 2048, 2048, True),
]


def run_profile(add, log, kernels=("sdpa_flash", "sdpa_cudnn")) -> None:
    """``add(row)`` one row per (case, CUDA kernel): the kernel's name, launches per call and GPU us per call."""
    from harness.attention import sdpa_call
    from harness.bench import cuda_kernels

    for b, h, hk, d, sq, sk, causal in PROFILE_CASES:
        q = torch.randn(b, h, sq, d, device="cuda", dtype=torch.float16)
        k = torch.randn(b, hk, sk, d, device="cuda", dtype=torch.float16)
        v = torch.randn(b, hk, sk, d, device="cuda", dtype=torch.float16)
        for kern in kernels:
            try:
                for _ in range(3):
                    sdpa_call(kern, q, k, v, causal)
                torch.cuda.synchronize()
                launched = cuda_kernels(lambda: sdpa_call(kern, q, k, v, causal), calls=5)
            except Exception as e:  # noqa: BLE001 - a refused backend is recorded in the log, the run goes on
                log(f"profile {kern} {(b, h, hk, d, sq, sk, causal)} failed: {type(e).__name__}")
                continue
            for row in launched:
                add({"kernel": kern, "batch": b, "heads": h, "kv_heads": hk, "head_dim": d, "seq_len_q": sq,
                     "seq_len": sk, "causal": causal, **row})
            log(f"profile {kern} {(b, h, hk, d, sq, sk, causal)}: "
                + "; ".join(f"{r['cuda_kernel'][:40]} {r['us_per_call']:.1f}us" for r in launched))
        del q, k, v


#: held longer than a timed call's sleep (~60 us): the profiler slows the host's launches
PROFILED_SLEEP_CYCLES = 1_000_000
#: calls profiled a case, the medians' sample
PROFILED_CALLS = 5


def _device_events(call, calls: int) -> list[tuple[str, float, float]]:
    """(name, start us, end us) of every kernel, copy and memset ``calls`` calls of ``call`` ran, in start order."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    evs = [(ev.name, ev.time_range.start, ev.time_range.end) for ev in prof.events() if ev.device_type.name == "CUDA"]
    return sorted(evs, key=lambda e: e[1])


def call_kernels(fn, pre, calls: int = PROFILED_CALLS) -> list[dict] | None:
    """The kernels of ``fn`` run after ``pre`` (the flush and the sleep), in launch order (``split_calls``)."""
    from harness.launches import split_calls

    pre_names = [n for n, _, _ in _device_events(pre, 1)]
    return split_calls(_device_events(lambda: (pre(), fn()), calls), pre_names, calls)


def run_calls(add, timer, log, cases, kernels=("sdpa_flash", "sdpa_cudnn", "sdpa_efficient"), budget=None) -> None:
    """``add(row)`` one row per (case, backend, kernel of the call) in fp16: ``call_kernels`` beside the call's
    CUDA-event time (``timer``, as the campaigns time it)."""
    from harness.attention import Inputs, sdpa_call

    def pre():
        timer.buf.zero_()
        torch.cuda._sleep(PROFILED_SLEEP_CYCLES)

    for case in cases:
        if budget is not None and budget.left() < 20:
            log(f"calls: budget spent, {case.key()} and the rest not measured")
            return
        c = case
        q, k, v = Inputs(c).get("fp16")
        for kern in kernels:
            try:
                fn = sdpa_call(kern, q, k, v, c.causal)
                t = timer.time(fn)
                parts = call_kernels(fn, pre)
            except Exception as e:  # noqa: BLE001 - a refused backend is recorded in the log, the run goes on
                log(f"calls {kern} {c.key()} failed: {type(e).__name__}")
                continue
            if parts is None:
                log(f"calls {kern} {c.key()}: the calls launched different kernels, not recorded")
                continue
            for row in parts:
                add({"kernel": kern, "dtype": "fp16", "batch": c.batch, "heads": c.heads, "kv_heads": c.kv_heads,
                     "head_dim": c.head_dim, "seq_len_q": c.seq_q, "seq_len": c.seq_k, "causal": c.causal, **row,
                     "call_us": t.median_us, "call_spread_pct": t.spread_pct, "calls": PROFILED_CALLS})
            log(f"calls {kern} {c.key()}: {t.median_us:.1f}us = "
                + " + ".join(f"[{r['start_us']:.1f}] {r['cuda_kernel'][:30]} {r['us']:.1f}" for r in parts))
        del q, k, v


@triton.jit(do_not_specialize=["ITERS"])
def _stream_kernel(X, OUT, ITERS, ROWS: tl.constexpr, COLS: tl.constexpr):
    """Each program sums its own contiguous region, one [ROWS, COLS] fp16 tile per step (Triton pipelines the loads
    over num_stages, as its attention kernels do)."""
    pid = tl.program_id(0)
    base = X + pid.to(tl.int64) * ITERS * ROWS * COLS
    offs = tl.arange(0, ROWS)[:, None] * COLS + tl.arange(0, COLS)[None, :]
    acc = tl.zeros([ROWS, COLS], dtype=tl.float32)
    for i in tl.range(0, ITERS, num_stages=3):
        acc += tl.load(base + i * ROWS * COLS + offs).to(tl.float32)
    tl.store(OUT + pid * ROWS * COLS + offs, acc)


def run_stream(add, timer, log) -> None:
    """Streaming bandwidth of one CTA (and of a few): ``programs`` CTAs of 4 warps each read 32 MiB of their own
    (cold L2) in 64 x 128 fp16 tiles, 3 stages; GB/s per CTA = bytes per CTA / kernel time."""
    rows, cols, per = 64, 128, 32 << 20
    iters = per // (rows * cols * 2)
    for programs in (1, 4, 16, 66, 132):
        x = torch.empty(programs * per // 2, device="cuda", dtype=torch.float16).normal_()
        out = torch.empty(programs * rows * cols, device="cuda", dtype=torch.float32)
        fn = lambda: _stream_kernel[(programs,)](x, out, iters, ROWS=rows, COLS=cols, num_warps=4)  # noqa: E731
        fn()
        t = timer.time(fn, reps=10)
        gbps = per / (t.median_us * 1e-6) / 1e9
        add(f"cta_stream_gbps_{programs}cta", gbps, "GB/s per CTA",
            f"{programs} CTAs of 4 warps, each summing its own 32 MiB (L2 flushed) in 64x128 fp16 tiles, "
            f"tl.range num_stages=3; bytes per CTA / kernel median ({t.median_us:.0f} us, {t.reps} reps); "
            f"all CTAs together {gbps * programs:.0f} GB/s")
        log(f"stream {programs} CTAs: {gbps:.1f} GB/s per CTA, {gbps * programs:.0f} GB/s in all")
        del x, out
