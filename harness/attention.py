"""Attention measurements: the shape grid, correctness checks of the Triton kernels, and the timed cases.

Kernels (names in the table's ``kernel`` column):
- sdpa_flash / sdpa_cudnn / sdpa_efficient: torch SDPA under ``sdpa_kernel(backend)``; a backend
  that refuses a shape is recorded in skipped.csv;
- triton_fa2: ``kernels.attention(mode="fa2")``;
- triton_vfa: k_repr pre-pass + attention kernel (m-init fused in its prologue), timed together;
  triton_vfa_attn: the attention kernel alone (k_repr ready); triton_vfa_minit: the pre-pass alone;
- triton_vsa / triton_vsa_attn: the same split for VSA (its pre-pass is the same kernel as VFA's,
  reported once as triton_vfa_minit).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from harness import kernels, reference
from harness.rows import BLIND_BATCHES, BLIND_DECODE, BLIND_DECODE_KEYS, BLIND_HEADS, BLIND_SEQS, DTYPES

BLIND1 = (BLIND_SEQS, BLIND_BATCHES, BLIND_HEADS, BLIND_DECODE, BLIND_DECODE_KEYS, (2, 8), (32, 112, 160, 192),
          ((1536, 8, (12, 12)), (6144, 2, (24, 8))))

TORCH_DTYPE = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8_e4m3": torch.float8_e4m3fn}
SDPA = ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient")
TRITON = ("triton_fa2", "triton_vfa", "triton_vsa")
TOL = {"fp16": 3e-3, "bf16": 1e-2, "fp8_e4m3": 0.5}  # fp8: only garbage is refused; the error is reported


@dataclass(frozen=True)
class Case:
    batch: int
    heads: int
    kv_heads: int
    seq_q: int
    seq_k: int
    head_dim: int
    causal: bool
    tier: str

    @property
    def mode(self) -> str:
        return "decode" if self.seq_q <= 16 and self.seq_q < self.seq_k else "prefill"

    @property
    def flops(self) -> float:
        f = 4.0 * self.seq_q * self.seq_k * self.head_dim * self.heads * self.batch
        return f / 2 if self.causal else f

    @property
    def kv_bytes16(self) -> int:
        return 2 * 2 * self.batch * self.kv_heads * self.seq_k * self.head_dim

    def key(self) -> tuple:
        return (self.batch, self.heads, self.kv_heads, self.seq_q, self.seq_k, self.head_dim, self.causal)


def est_us(case: Case) -> float:
    """A pessimistic guess of one call's time (µs), for the budget: 250 TFLOP/s or 2 TB/s, + 10 µs."""
    return max(case.flops / 250e12, case.kv_bytes16 / 2e12) * 1e6 + 10


# ---- the grid ----------------------------------------------------------------------------------
HEAD_CONFIGS = ((32, 32), (16, 16), (32, 8), (28, 4), (8, 1))
PREFILL_SEQS = (256, 257, 512, 1000, 1024, 2048, 3000, 4096, 8192, 16384)
BATCHES = (1, 4, 16, 64)


def fa3_regime(head_dims=(64, 128, 256), seqs=(512, 1024, 2048, 4096, 8192, 16384)) -> list[Case]:
    """16K tokens in all, hidden 2048 (the FlashAttention-3 paper's forward benchmark)."""
    return [Case(16384 // n, 2048 // d, 2048 // d, n, n, d, c, "fa3_regime")
            for d in head_dims for c in (False, True) for n in seqs]


def units_grid(head_dims=(64, 128, 256), seqs=(128, 256, 512, 1024, 2048, 4096), units=1056) -> list[Case]:
    """The same number of CTAs (``units`` query blocks of 128 rows: 8 per SM on an H100) at a growing K/V length:
    time against key blocks per CTA is a line whose intercept is the per-CTA cost beside the tiles."""
    return [Case(1, units * 128 // n, units * 128 // n, n, n, d, False, "units") for d in head_dims for n in seqs]


def units_decode_grid(head_dims=(64, 128, 256), seqs=(512, 1024, 2048, 4096, 8192, 16384), units=528) -> list[Case]:
    """The decode tile's ``units_grid``: one query per head and ``units`` heads (a CTA each: 4 per SM on an H100) at a
    growing K/V length."""
    return [Case(1, units, units, 1, n, d, False, "units") for d in head_dims for n in seqs]


def chain_grid(sms: int, head_dims=(64, 128, 256), seqs=(2048, 16384), rows: int = 128) -> list[Case]:
    """One query block of ``rows`` rows per head (128: a prefill tile; 16 or fewer: the decode tile), all heads on one
    K/V head (read from L2 after the first): 1 head on the GPU (one tile stream alone on an SM), one per SM and two per
    SM; the slope over K/V length is the time per key block of one CTA alone, and of one or two sharing an SM."""
    return [Case(1, ctas, 1, rows, n, d, False, "chain") for d in head_dims for ctas in (1, sms, 2 * sms) for n in seqs]


def decode_grid(head_dims=(128, 64)) -> list[Case]:
    out = []
    for d in head_dims:
        for sq in (1, 4):
            for sk in (512, 2048, 8192, 32768, 65536):
                for b in (1, 8, 64):
                    for h, hk in ((32, 32), (32, 8), (8, 1)):
                        c = Case(b, h, hk, sq, sk, d, False, "decode")
                        if c.kv_bytes16 <= 6 * (1 << 30) and not (d == 64 and (h, hk) == (8, 1)):
                            out.append(c)
    return _round_robin(out, lambda c: (c.head_dim, c.seq_q, c.seq_k), seed=1)


def prefill_grid(head_dims=(64, 128), max_us: float = 50_000, min_us: float = 20) -> list[Case]:
    """Breadth: every (seq, head_dim, causal) group gets one shape before any gets a second."""
    out = []
    for d in head_dims:
        for n in PREFILL_SEQS:
            for c in (False, True):
                for b in BATCHES:
                    for h, hk in HEAD_CONFIGS:
                        case = Case(b, h, hk, n, n, d, c, f"prefill_d{d}")
                        if min_us <= est_us(case) <= max_us and case.kv_bytes16 <= 4 * (1 << 30):
                            out.append(case)
    return _round_robin(out, lambda c: (c.seq_k, c.head_dim, c.causal), seed=2)


def blind_grid(grid: tuple = BLIND1, tier: str = "blind") -> list[Case]:
    """Shapes no other grid holds, for a held-out check of descriptions finished before it is measured
    (``rows.BLIND_*``; ``rows.BLIND2`` the second such grid): prefill at lengths, batches and head configs no other
    grid uses (head dims 64 and 128, and the grid's other head dims at a few shapes), and decode of a few queries; every
    group gets one shape before any gets a second. ``tier`` prefixes the table's tier names."""
    seqs, batches, head_configs, decode, decode_keys, queries, odd_dims, odd_shapes = grid
    out = []
    for d in (64, 128):
        for n in seqs:
            for c in (False, True):
                for b in batches:
                    for h, hk in head_configs:
                        case = Case(b, h, hk, n, n, d, c, f"{tier}_d{d}")
                        if 20 <= est_us(case) <= 20_000:
                            out.append(case)
    for d in odd_dims:
        for n, b, (h, hk) in odd_shapes:
            for c in (False, True):
                out.append(Case(b, h, hk, n, n, d, c, f"{tier}_d{d}"))
    for d in (128, 64):
        for sq in queries:
            for sk in decode_keys:
                for b, h, hk in decode:
                    out.append(Case(b, h, hk, sq, sk, d, False, f"{tier}_decode"))
    return _round_robin(out, lambda c: (c.tier, c.seq_k, c.causal), seed=3)


def blind5_grid(grid: tuple, tier: str = "blind5") -> list[Case]:
    """The fifth blind grid (``rows.BLIND5``): chunked prefill (head dims 64 and 128, causal and not), decode of a
    few more queries, head dims 80 and 96, one-sequence prefill at 32K and 64K; every group gets one shape before any
    gets a second."""
    chunks, chunk_shapes, decode, decode_keys, queries, odd_dims, odd_seqs, odd_batches, odd_heads, long = grid
    out = []
    for d in (64, 128):
        for sq, sk in chunks:
            for b, h, hk in chunk_shapes:
                for c in (False, True):
                    case = Case(b, h, hk, sq, sk, d, c, f"{tier}_chunk")
                    if 20 <= est_us(case) <= 20_000:
                        out.append(case)
        for sq in queries:
            for sk in decode_keys:
                for b, h, hk in decode:
                    out.append(Case(b, h, hk, sq, sk, d, False, f"{tier}_decode"))
    for d in odd_dims:
        for n in odd_seqs:
            for b in odd_batches:
                for h, hk in odd_heads:
                    for c in (False, True):
                        out.append(Case(b, h, hk, n, n, d, c, f"{tier}_d{d}"))
    out += [Case(1, h, hk, n, n, d, c, f"{tier}_long") for n, h, hk, d, c in long]
    return _round_robin(out, lambda c: (c.tier, c.seq_k, c.causal), seed=5)


def interleave(a: list[Case], b: list[Case], ratio: int = 2) -> list[Case]:
    """``ratio`` cases of ``a``, then one of ``b``, and so on (the rest of the longer list at the end)."""
    out, ia, ib = [], 0, 0
    while ia < len(a) or ib < len(b):
        out.extend(a[ia:ia + ratio])
        ia += ratio
        out.extend(b[ib:ib + 1])
        ib += 1
    return out


def _round_robin(cases: list[Case], group, seed: int) -> list[Case]:
    groups: dict = {}
    for c in cases:
        groups.setdefault(group(c), []).append(c)
    rng = random.Random(seed)
    keys = list(groups)
    rng.shuffle(keys)
    for k in keys:
        rng.shuffle(groups[k])
    out = []
    while any(groups[k] for k in keys):
        for k in keys:
            if groups[k]:
                out.append(groups[k].pop())
    return out


# ---- inputs -------------------------------------------------------------------------------------
class Inputs:
    """Random normal Q, K, V of one case in each format asked for (fp8: V also kept seq-contiguous)."""

    def __init__(self, case: Case, seed: int = 0) -> None:
        self.case = case
        g = torch.Generator(device="cuda")
        g.manual_seed(seed)
        c = case
        self.base = [torch.randn(shape, device="cuda", generator=g, dtype=torch.float32) for shape in
                     ((c.batch, c.heads, c.seq_q, c.head_dim), (c.batch, c.kv_heads, c.seq_k, c.head_dim),
                      (c.batch, c.kv_heads, c.seq_k, c.head_dim))]
        self.cache: dict[str, tuple] = {}

    def get(self, dtype: str):
        if dtype not in self.cache:
            td = TORCH_DTYPE[dtype]
            q, k, v = (x.to(td) for x in self.base)
            if dtype == "fp8_e4m3":
                v = transposed_v(v)
            self.cache[dtype] = (q, k, v)
        return self.cache[dtype]

    def drop(self, dtype: str) -> None:
        self.cache.pop(dtype, None)


def transposed_v(v: torch.Tensor) -> torch.Tensor:
    """V [B, Hkv, N, D] as a view of storage [B, Hkv, D, Npad] (seq-contiguous, zero-padded to a multiple of
    128 keys, so whole key blocks can be loaded without a mask; the FA3-fp8 layout of V)."""
    B, H, N, D = v.shape
    npad = -(-N // 128) * 128
    store = torch.zeros((B, H, D, npad), dtype=v.dtype, device=v.device)
    store[..., :N] = v.transpose(-1, -2)
    return store[..., :N].transpose(-1, -2)


# ---- calls ------------------------------------------------------------------------------------------
def sdpa_call(kernel: str, q, k, v, causal: bool):
    """A zero-argument callable running SDPA with one backend, or raise RuntimeError if it refuses."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
               "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}[kernel]
    gqa = q.shape[1] != k.shape[1]
    kw = {"enable_gqa": True} if gqa else {}

    def fn():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, **kw)

    fn()  # raises if the backend refuses
    return fn


def triton_calls(mode: str, q, k, v, causal: bool) -> dict[str, callable]:
    """Callables per reported kernel name for one Triton algorithm on these inputs."""
    cfg = kernels.config_for(q.shape[-1], q.shape[2])
    odt = torch.bfloat16 if q.dtype == torch.float8_e4m3fn else q.dtype
    out = torch.empty(q.shape, dtype=odt, device=q.device)
    if mode == "fa2":
        return {"triton_fa2": lambda: kernels.attention(q, k, v, causal, "fa2", out=out)}
    kr = kernels.krepr(k, cfg[1])

    def total():
        kernels.krepr(k, cfg[1], out=kr)
        kernels.attention(q, k, v, causal, mode, out=out, kr=kr)

    calls = {f"triton_{mode}": total, f"triton_{mode}_attn": lambda: kernels.attention(q, k, v, causal, mode,
                                                                                        out=out, kr=kr)}
    if mode == "vfa":
        calls["triton_vfa_minit"] = lambda: kernels.krepr(k, cfg[1], out=kr)
    return calls


def loop_calls(q, k, v, causal: bool) -> dict[str, callable]:
    """FA2's, VFA's and VSA's callables (``triton_calls``) and ``triton_dots``: the loop with its softmax removed."""
    out = torch.empty(q.shape, dtype=torch.bfloat16 if q.dtype == torch.float8_e4m3fn else q.dtype, device=q.device)
    return {**triton_calls("fa2", q, k, v, causal), **triton_calls("vfa", q, k, v, causal),
            **triton_calls("vsa", q, k, v, causal),
            "triton_dots": lambda: kernels.attention(q, k, v, causal, "dots", out=out)}


# ---- correctness checks ---------------------------------------------------------------------------------
CHECK_PREFILL = (Case(1, 4, 4, 1000, 1000, 0, True, "check"), Case(2, 4, 1, 1000, 1000, 0, False, "check"),
                 Case(1, 2, 2, 257, 257, 0, True, "check"), Case(1, 8, 2, 512, 512, 0, False, "check"),
                 Case(1, 4, 4, 300, 300, 0, False, "check"), Case(1, 4, 2, 300, 1000, 0, True, "check"),
                 Case(2, 4, 4, 200, 777, 0, False, "check"))  # the last two: a chunk of queries against a longer K/V
CHECK_DECODE = (Case(2, 8, 2, 1, 1000, 0, False, "check"), Case(2, 8, 8, 4, 777, 0, True, "check"),
                Case(1, 4, 1, 4, 2048, 0, False, "check"))


def variants(decode_dims=(128,)) -> list[tuple[str, str, int, bool]]:
    """(mode, dtype, head_dim, decode) of every Triton variant the grid uses."""
    out = [(m, dt, d, False) for d in (64, 128, 256) for dt in DTYPES for m in ("fa2", "vfa", "vsa")]
    out += [(m, "fp16", d, True) for d in decode_dims for m in ("fa2", "vfa", "vsa")]
    return out


def check_variant(mode: str, dtype: str, d: int, decode: bool, seed: int = 123) -> list[dict]:
    """Run one Triton variant on the check shapes against float64; rows for checks.csv.

    fa2/vfa: vs exact attention; vsa: vs its float64 emulation (same skip rule), NaN rows alike."""
    import time

    rows = []
    for i, c0 in enumerate(CHECK_DECODE if decode else CHECK_PREFILL):
        c = Case(c0.batch, c0.heads, c0.kv_heads, c0.seq_q, c0.seq_k, d, c0.causal, "check")
        inp = Inputs(c, seed + i)
        q, k, v = inp.get(dtype)
        cfg = kernels.config_for(d, c.seq_q)
        t0 = time.time()
        name = f"triton_{mode}"
        try:
            kr = kernels.krepr(k, cfg[1]) if mode != "fa2" else None
            odt = torch.bfloat16 if dtype == "fp8_e4m3" else q.dtype
            out = torch.full(q.shape, float("nan"), dtype=odt, device=q.device)  # poisoned: every element must be written
            kernels.attention(q, k, v, c.causal, mode, kr=kr, out=out)
            torch.cuda.synchronize()
            compile_s = time.time() - t0
            qd, kd, vd = (x.float() for x in (q, k, v))
            if mode == "vsa":
                ref, _ = reference.vsa_emulated(qd, kd, vd, c.causal, cfg[0], cfg[1])
            else:
                ref = reference.exact(qd, kd, vd, c.causal)
            o = out.double()
            # VSA may keep no block at all for a query block (sink and local blocks are not protected, as in
            # vfasim's default policy): l = 0 and the rows are NaN in the emulation too. Those rows must match.
            nan_o, nan_r = ~torch.isfinite(o).all(-1), ~torch.isfinite(ref).all(-1)
            if bool((nan_o != nan_r).any()) or bool(nan_r.all()):
                err = float("inf")
            else:
                fin = ~nan_r
                err = float((o[fin] - ref[fin]).norm() / ref[fin].norm())
                if bool(nan_r.any()):
                    print(f"check {mode} {dtype} d{d} {c.key()}: {int(nan_r.sum())} rows NaN in kernel and "
                          "emulation alike (no block kept)", flush=True)
        except Exception as e:  # noqa: BLE001 - a failing variant is recorded, not fatal
            err, compile_s = float("inf"), time.time() - t0
            print(f"check {mode} {dtype} d{d} {c.key()} raised {type(e).__name__}: {str(e).splitlines()[0][:300]}",
                  flush=True)
        rows.append({"kernel": name, "dtype": dtype, "head_dim": d, "causal": c.causal, "seq_len": c.seq_k,
                     "seq_len_q": c.seq_q, "batch": c.batch, "heads": c.heads, "kv_heads": c.kv_heads,
                     "block_m": cfg[0], "block_n": cfg[1], "rel_l2": err if err != float("inf") else 1e30,
                     "tol": TOL[dtype], "passed": err < TOL[dtype], "compile_s": round(compile_s, 3)})
    return rows
