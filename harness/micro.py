"""Microbenchmarks: exp2 (MUFU) and FFMA rates per SM per clock, GEMM rates, tl.dot rate at the
FA tile shapes, HBM copy and L2 read bandwidth, launch latency and the cost of an empty CTA.

Per-clock rates come from the SM's own cycle counter: every program of the exp2/FFMA kernels
records %smid and %clock64 at its start and end; per SM, the busy span is max(end) - min(start)
over its programs, and the rate is the operations its programs did over that span. The same
rates per second, with the SM clock nvidia-smi read meanwhile, are recorded too.
"""

from __future__ import annotations

import math
import time

import torch
import triton
import triton.language as tl

from harness import kernels
from harness.kernels import _clock, _smid  # noqa: F401 - the microbenchmarks' timers, imported from here too
from harness.bench import Timer


@triton.jit(do_not_specialize=["ITERS"])
def _pipe_kernel(X, T, ITERS, BLOCK: tl.constexpr, OP: tl.constexpr):
    """OP 0: x = exp2(-x) (tl.math.exp2, ex2.approx.ftz.f32); 1: ex2.approx.f16x2 on packed halves (inline
    asm; two exps per instruction, conversions to/from fp16 once per trip); 2: x = x*a + b (FFMA).

    Four steps of the chain per loop trip; every thread holds BLOCK / threads independent chains.
    """
    pid = tl.program_id(0)
    t0 = _clock()
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs)
    for _ in range(ITERS):
        if OP == 0:
            x = tl.math.exp2(-x)
            x = tl.math.exp2(-x)
            x = tl.math.exp2(-x)
            x = tl.math.exp2(-x)
        elif OP == 1:
            y = -x.to(tl.float16)
            y = tl.inline_asm_elementwise("ex2.approx.f16x2 $0, $1;", "=r,r", [y], dtype=tl.float16,
                                          is_pure=True, pack=2)
            y = tl.inline_asm_elementwise("ex2.approx.f16x2 $0, $1;", "=r,r", [-y], dtype=tl.float16,
                                          is_pure=True, pack=2)
            y = tl.inline_asm_elementwise("ex2.approx.f16x2 $0, $1;", "=r,r", [-y], dtype=tl.float16,
                                          is_pure=True, pack=2)
            y = tl.inline_asm_elementwise("ex2.approx.f16x2 $0, $1;", "=r,r", [-y], dtype=tl.float16,
                                          is_pure=True, pack=2)
            x = y.to(tl.float32)
        else:
            x = x * 0.999 + 0.001
            x = x * 0.999 + 0.001
            x = x * 0.999 + 0.001
            x = x * 0.999 + 0.001
    tl.store(X + offs, x)
    t1 = _clock()
    sm = _smid()
    tl.store(T + pid * 3, sm.to(tl.int64))
    tl.store(T + pid * 3 + 1, t0)
    tl.store(T + pid * 3 + 2, t1)


@triton.jit(do_not_specialize=["N", "ITERS"])
def _l2_read_kernel(X, OUT, N, ITERS, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    ar = tl.arange(0, BLOCK)
    for i in range(ITERS):
        base = ((pid + i * 4 * nprog) * BLOCK) % N
        a = tl.load(X + base + ar)
        b = tl.load(X + (base + nprog * BLOCK) % N + ar)
        c = tl.load(X + (base + 2 * nprog * BLOCK) % N + ar)
        d = tl.load(X + (base + 3 * nprog * BLOCK) % N + ar)
        acc += (a + b) + (c + d)
    tl.store(OUT + pid * BLOCK + ar, acc)


@triton.jit
def _empty_kernel(X):
    pass


@triton.jit
def _cta_kernel(X):
    pid = tl.program_id(0)
    if pid < 0:  # never: a CTA that does nothing but exist
        tl.store(X, 0.0)


def _pipe(op: int, sms: int, iters: int, timer: Timer, clocks) -> dict:
    block, warps, per_sm = 1024, 4, 16
    grid = sms * per_sm
    x = torch.rand(grid * block, device="cuda", dtype=torch.float32) * 0.5 + 0.25
    t = torch.zeros(grid * 3, device="cuda", dtype=torch.int64)
    fn = lambda: _pipe_kernel[(grid,)](x, t, iters, BLOCK=block, OP=op, num_warps=warps)  # noqa: E731
    fn()
    torch.cuda.synchronize()
    w0 = time.time()
    timing = timer.time(fn, reps=10)
    w1 = time.time()
    tt = t.view(grid, 3).cpu()
    ops_per_prog = block * iters * 4
    per_sm = {}
    for sm, a, b in tt.tolist():
        lo, hi, n = per_sm.get(sm, (a, b, 0))
        per_sm[sm] = (min(lo, a), max(hi, b), n + 1)
    rates = sorted(n * ops_per_prog / (hi - lo) for lo, hi, n in per_sm.values() if hi > lo)
    sm_clk = clocks.sm_clocks(w0, w1) if clocks else []
    per_s = grid * ops_per_prog / (timing.median_us * 1e-6)
    return {"per_sm_per_clk": rates[len(rates) // 2] if rates else float("nan"), "per_s": per_s,
            "sms_seen": len(per_sm), "sm_clock_mhz": (sorted(sm_clk)[len(sm_clk) // 2] if sm_clk else float("nan")),
            "median_us": timing.median_us}


def run_micro(add, sms: int, timer: Timer, clocks, quick: bool, log) -> None:
    """Measure everything; ``add(name, value, unit, notes)`` records one row."""
    iters = 256 if quick else 2048
    for op, name, note in ((0, "exp2_f32", "tl.math.exp2(-x) chains (PTX ex2.approx.ftz.f32: MUFU.EX2)"),
                           (1, "exp2_f16x2", "inline PTX ex2.approx.f16x2 chains, counted per fp16 result "
                            "(+2 conversions per 4 exps)"),
                           (2, "ffma", "x = x*0.999 + 0.001 chains")):
        try:
            r = _pipe(op, sms, iters, timer, clocks)
        except Exception as e:  # noqa: BLE001 - a failed micro is recorded, the run goes on
            log(f"micro {name} failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            continue
        unit = "FFMA" if op == 2 else "exp2"
        common = (f"16 CTAs/SM x 4 warps x 8 independent chains/thread, {iters * 4} steps; "
                  f"{r['sms_seen']} SMs seen by %smid")
        add(f"{name}_per_sm_per_clk", r["per_sm_per_clk"], f"{unit}/SM/clk",
            f"{note}; median over SMs of ops / (%clock64 span of the SM's programs); {common}")
        add(f"{name}_rate", r["per_s"] / 1e9, f"G{unit}/s",
            f"{note}; whole GPU, kernel median {r['median_us']:.1f} us; nvidia-smi SM clock meanwhile "
            f"{r['sm_clock_mhz']} MHz")
        if math.isfinite(r["sm_clock_mhz"]) and r["sm_clock_mhz"] > 0:
            add(f"{name}_per_sm_per_clk_smi", r["per_s"] / sms / (r["sm_clock_mhz"] * 1e6), f"{unit}/SM/clk",
                f"{note}; whole-GPU rate / SMs / nvidia-smi SM clock ({r['sm_clock_mhz']} MHz)")
        log(f"micro {name}: {r['per_sm_per_clk']:.2f}/SM/clk, {r['per_s'] / 1e9:.0f} G/s")

    # dense GEMM through torch (cuBLAS / wgmma), square
    n = 4096 if quick else 8192
    for dt, name in ((torch.float16, "fp16"), (torch.bfloat16, "bf16")):
        a = torch.randn(n, n, device="cuda", dtype=dt)
        b = torch.randn(n, n, device="cuda", dtype=dt)
        tm = timer.time(lambda: torch.matmul(a, b), reps=10)
        add(f"gemm_{name}_tflops", 2 * n ** 3 / (tm.median_us * 1e-6) / 1e12, "TFLOP/s",
            f"torch.matmul {n}x{n}x{n} random normal, median of {tm.reps}, spread {tm.spread_pct:.1f}%")
        log(f"micro gemm {name}: {2 * n ** 3 / (tm.median_us * 1e-6) / 1e12:.0f} TFLOP/s")
    try:
        a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        one = torch.tensor(1.0, device="cuda")
        tm = timer.time(lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                        reps=10)
        add("gemm_fp8_e4m3_tflops", 2 * n ** 3 / (tm.median_us * 1e-6) / 1e12, "TFLOP/s",
            f"torch._scaled_mm {n}^3 e4m3 x e4m3 -> bf16, per-tensor scales 1, median of {tm.reps}")
        log(f"micro gemm fp8: {2 * n ** 3 / (tm.median_us * 1e-6) / 1e12:.0f} TFLOP/s")
    except Exception as e:  # noqa: BLE001
        log(f"micro gemm fp8 failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    del a, b

    # SM clock while a GEMM runs back to back
    if clocks is not None:
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        w0 = time.time()
        while time.time() - w0 < (0.6 if quick else 1.5):
            for _ in range(20):
                torch.matmul(a, a)
            torch.cuda.synchronize()
        w1 = time.time()
        clk = sorted(clocks.sm_clocks(w0 + 0.3, w1))
        if clk:
            add("sm_clock_under_gemm_mhz", clk[len(clk) // 2], "MHz",
                f"nvidia-smi clocks.sm median of {len(clk)} samples during back-to-back bf16 8192^3 GEMMs "
                f"(min {clk[0]}, max {clk[-1]}); clocks not locked")
        del a

    run_loop(add, timer, quick, log, MICRO_LOOPS)

    # HBM: device-to-device copy
    nbytes = (1 << 28) if quick else (1 << 30)
    src = torch.empty(nbytes // 4, device="cuda", dtype=torch.float32).normal_()
    dst = torch.empty_like(src)
    tm = timer.time(lambda: dst.copy_(src), reps=10)
    add("hbm_copy_gbps", 2 * nbytes / (tm.median_us * 1e-6) / 1e9, "GB/s",
        f"dst.copy_(src), {nbytes >> 20} MiB each, bytes read + written, median of {tm.reps}")
    log(f"micro hbm copy: {2 * nbytes / (tm.median_us * 1e-6) / 1e9:.0f} GB/s")
    del src, dst

    # L2 read bandwidth: a 12 MiB buffer read over and over
    n_el = 12 * (1 << 20) // 4
    block = 4096
    grid = sms * 8
    x = torch.randn(n_el, device="cuda")
    out = torch.empty(grid * block, device="cuda")
    iters = 16 if quick else 64
    fn = lambda: _l2_read_kernel[(grid,)](x, out, n_el, iters, BLOCK=block, num_warps=8)  # noqa: E731
    fn()
    tm = Timer(flush=False)
    tm.buf = timer.buf
    t = tm.time(fn, reps=10)
    nb = grid * iters * 4 * block * 4
    add("l2_read_gbps", nb / (t.median_us * 1e-6) / 1e9, "GB/s",
        f"Triton kernel reading a 12 MiB buffer (L2 {timer.l2 >> 20} MiB) {nb >> 20} MiB in all, "
        f"{grid} programs x 8 warps, fp32, warm L2")
    log(f"micro l2 read: {nb / (t.median_us * 1e-6) / 1e9:.0f} GB/s")

    # launch latency
    y = torch.zeros(16, device="cuda")
    _empty_kernel[(1,)](y)
    torch.cuda.synchronize()
    n_launch = 300 if quick else 1000
    w0 = time.perf_counter()
    for _ in range(n_launch):
        _empty_kernel[(1,)](y)
    torch.cuda.synchronize()
    host = (time.perf_counter() - w0) / n_launch * 1e6
    add("launch_host_us", host, "us", f"wall time per launch of an empty Triton kernel, {n_launch} back to back "
        "from Python then one sync (host-bound: Triton launcher + driver)")
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    n_gpu = 300
    torch.cuda._sleep(int(host * n_gpu * 3 * 2000))  # hold the GPU while the host queues the launches
    s.record()
    for _ in range(n_gpu):
        _empty_kernel[(1,)](y)
    e.record()
    torch.cuda.synchronize()
    add("launch_gpu_back_to_back_us", s.elapsed_time(e) * 1000 / n_gpu, "us",
        f"GPU time per empty kernel when {n_gpu} launches are queued ahead (events around them)")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(100):
            _empty_kernel[(1,)](y)
    g.replay()
    torch.cuda.synchronize()
    tg = Timer(flush=False).time(g.replay, reps=20)
    add("launch_graph_us", tg.median_us / 100, "us", "per kernel, CUDA graph of 100 empty Triton kernels, replay "
        "median / 100")
    t1 = timer.time(lambda: _empty_kernel[(1,)](y), reps=50)
    add("launch_single_event_us", t1.median_us, "us",
        "one empty kernel between two events (queued ahead; L2 flushed before), median of 50")
    log(f"micro launch: host {host:.1f} us, single {t1.median_us:.2f} us")

    # empty CTAs: slope of time over CTA count
    tn = Timer(flush=False)
    tn.buf = timer.buf
    g1, g2 = sms * 64, sms * 2048
    a1 = tn.time(lambda: _cta_kernel[(g1,)](y, num_warps=4), reps=20)
    a2 = tn.time(lambda: _cta_kernel[(g2,)](y, num_warps=4), reps=20)
    per = (a2.median_us - a1.median_us) / (g2 - g1)
    add("empty_cta_ns_per_sm", per * sms * 1000, "ns", f"per CTA per SM: slope of kernel time from {g1} to {g2} "
        f"CTAs of 4 warps that do nothing ({a1.median_us:.1f} -> {a2.median_us:.1f} us) x {sms} SMs")
    add("empty_cta_ns_gpu", per * 1000, "ns", "per CTA, whole GPU (same slope)")
    log(f"micro empty CTA: {per * sms * 1000:.0f} ns per CTA per SM")


#: (head dim, format) of the no-softmax loop in the micro phase; the loop phase runs LOOPS, every tile config's
#: head dim in every format
MICRO_LOOPS = ((64, "fp16"), (128, "fp16"), (128, "bf16"), (128, "fp8_e4m3"))
LOOPS = tuple((d, f) for d in (64, 128, 256) for f in ("fp16", "bf16", "fp8_e4m3"))


def _loop_inputs(d: int, name: str, seq: int):
    """(q, k, v, out) of the loop phases' shape: 16K query rows in all, 2048 // d heads, standard normal in format
    ``name`` (V in the layout the campaigns time fp8 in)."""
    from harness.attention import TORCH_DTYPE, transposed_v

    dt = TORCH_DTYPE[name]
    heads, batch = 2048 // d, 16384 // seq
    q, k, v = (torch.randn(batch, heads, seq, d, device="cuda").to(dt) for _ in range(3))
    if dt == torch.float8_e4m3fn:
        v = transposed_v(v)
    return q, k, v, torch.empty(batch, heads, seq, d, device="cuda", dtype=torch.float16)


def run_loop(add, timer: Timer, quick: bool, log, cases=LOOPS) -> None:
    """The tl.dot rate at the FA tile shapes: the kernel's loop with the softmax taken out (``dots`` mode: P =
    scale*S cast), non-causal, 16K query rows in all and 2048 // d heads; one row per (head dim, format) case."""
    seq = 2048 if quick else 8192
    for d, name in cases:
        try:
            q, k, v, o = _loop_inputs(d, name, seq)
            heads, batch = q.shape[1], q.shape[0]
            cfg = kernels.config_for(d, seq)
            tm = timer.time(lambda: kernels.attention(q, k, v, False, "dots", out=o), reps=10)
            fl = 4 * seq * seq * d * heads * batch
            add(f"tl_dot_fa_loop_{name}_d{d}_tflops", fl / (tm.median_us * 1e-6) / 1e12, "TFLOP/s",
                f"Triton FA loop, softmax removed (P = scale*S cast), tiles {cfg[0]}x{cfg[1]}, "
                f"{cfg[2]} warps, {cfg[3]} stages; seq {seq}, batch {batch}, heads {heads}, non-causal")
            log(f"micro tl.dot {name} d{d}: {fl / (tm.median_us * 1e-6) / 1e12:.0f} TFLOP/s")
        except Exception as e:  # noqa: BLE001
            log(f"micro tl.dot {name} d{d} failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")


#: tile configs (BLOCK_M, BLOCK_N, warps, stages) the stages phase times per head dim: the campaign's own, its K/V
#: stages from 2 to 4, half the query rows (the K/V bytes a tile reads stay, its flops halve) and half or double the
#: key block (bytes and flops together); a config that does not fit an SM's shared memory fails and is logged
STAGE_CONFIGS = {64: ((128, 64, 8, 2), (128, 64, 8, 3), (128, 64, 8, 4), (64, 64, 4, 3), (128, 32, 8, 3),
                      (128, 128, 8, 3)),
                 128: ((128, 128, 8, 2), (128, 128, 8, 3), (128, 128, 8, 4), (64, 128, 4, 3), (128, 64, 8, 3),
                       (128, 64, 8, 2)),
                 256: ((128, 64, 8, 2), (128, 64, 8, 3), (128, 64, 8, 1), (64, 64, 4, 2), (128, 32, 8, 2),
                       (128, 32, 8, 3))}
STAGE_MODES = ("dots", "fa2", "vfa")  # the loop without its softmax, FA2, VFA's attention kernel (k_repr made first)


def run_stages(add, timer: Timer, quick: bool, log, formats=("fp16", "fp8_e4m3")) -> None:
    """The loop without its softmax, FA2 and VFA's kernel at every ``STAGE_CONFIGS`` tile, non-causal, 16K query
    rows in all and 2048 // d heads (the loop phase's shapes): what the K/V stages, the query rows and the key block
    change, with and without the softmax. One row per (mode, format, head dim, config), with the compiled kernel's
    registers per thread and shared memory in its notes where Triton reports them."""
    seq = 2048 if quick else 8192
    for d, configs in STAGE_CONFIGS.items():
        for name in formats:
            q, k, v, o = _loop_inputs(d, name, seq)
            heads, batch = q.shape[1], q.shape[0]
            fl = 4 * seq * seq * d * heads * batch
            for cfg in configs[:2] if quick else configs:
                kr = kernels.krepr(k, cfg[1])
                for mode in STAGE_MODES:
                    tag = f"stages_{mode}_{name}_d{d}_m{cfg[0]}_n{cfg[1]}_w{cfg[2]}_s{cfg[3]}"
                    try:
                        def call(mode=mode, cfg=cfg, kr=kr) -> None:
                            kernels.attention(q, k, v, False, mode, out=o, kr=kr if mode == "vfa" else None,
                                              config=cfg)
                        call()
                        torch.cuda.synchronize()
                        tm = timer.time(call, reps=10)
                        tf = fl / (tm.median_us * 1e-6) / 1e12
                        add(f"{tag}_tflops", tf, "TFLOP/s",
                            f"Triton attn_fwd {mode}, tiles {cfg[0]}x{cfg[1]}, {cfg[2]} warps, {cfg[3]} stages; "
                            f"seq {seq}, batch {batch}, heads {heads}, non-causal; median {tm.median_us:.1f} us, "
                            f"spread {tm.spread_pct:.1f}%{_compiled(kernels.attn_fwd)}")
                        log(f"stages {tag}: {tf:.0f} TFLOP/s")
                    except Exception as e:  # noqa: BLE001
                        log(f"stages {tag} failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")


def _compiled(fn) -> str:
    """'; N registers, S bytes of shared memory' of the last kernel Triton compiled for ``fn``, or '' where its
    version does not say."""
    try:
        caches = getattr(fn, "device_caches", None) or {}
        for entry in caches.values():
            kernel = list(entry[0].values())[-1]
            return f"; {kernel.n_regs} registers, {kernel.metadata.shared} bytes of shared memory"
    except Exception:  # noqa: BLE001
        pass
    return ""
