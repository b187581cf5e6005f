"""Triton forward attention kernels: FA2-style online softmax, VFA (Algorithm 1) and VSA (Algorithm 2).

Written for this harness (not copied): one program per (query block, batch·head), a loop
over key blocks with the online-softmax state (m, l, O) in registers, exp2 on scores
pre-multiplied by scale·log2(e). Layouts: Q [B, H, Nq, D], K [B, Hkv, Nk, D], V [B, Hkv, Nk, D]
with any strides (fp8 runs pass V stored transposed, seq-contiguous, for the fp8 tensor-core
path), O [B, H, Nq, D]. Query row r sits at absolute position r + Nk - Nq (right-aligned, the
decode/prefill-with-cache convention of vfasim's Tiling); ``causal`` hides keys after it.

MODE (compile-time):
- 0 fa2: blocks 0..n_vis-1 in order, exact rowmax + rescale on every block; the causal
  diagonal / sequence-end blocks are the only masked ones.
- 1 vfa: m-init fused into the prologue (per row, max over visible key blocks j of
  scale·q·k_repr_j, k_repr from ``krepr_kernel``, R_CHUNK summaries per tl.dot); then the key
  blocks in VFA's order -- sink block 0, the local block L (the block holding the query block's
  last row), then the others ascending -- with exact max update + rescale on 0 and L only and the
  max frozen on every other block (no rowmax, no rescale, p = exp2(s - m)).
  LOOP=1 (default, the form measured): one software-pipelined loop over the visit order, the block
  index computed arithmetically from the step, run-time branches for "special" (rescale) and
  "masked" (causal diagonal / sequence end); K loads masked on the key index (V too, unless its
  storage is padded to whole blocks, as the fp8 V is). LOOP=0: the two special blocks before four
  loops over the frozen ranges (slower: the special blocks are not pipelined; kept for the
  comparison in harness/NOTES.md).
- 2 vsa: vfa plus the BLASST block test on every visited block (special blocks too, as
  vfasim's policy with protect_special off): skip the block (no exp, no PV; V is still loaded)
  when max over rows of the tile max minus max over rows of max(m, tile max) < log2(lam)
  (= ln(lam) on natural-log scores); padded query rows past Nq are left out of both maxima.
  A query block may keep no block at all (its rows are then 0/0 = NaN, as in vfasim's engine).
- 3 dots: the fa2 loop structure with the softmax removed (P = scale·S cast to the input
  format): the tensor-core + load time of the loop, for the micro table.
"""

from __future__ import annotations

import triton
import triton.language as tl

MODES = {"fa2": 0, "vfa": 1, "vsa": 2, "dots": 3}


@triton.jit
def _globaltimer():
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _clock():
    return tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _smid():
    return tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def _visit(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, stride_vd, j, qpos, row_valid,
           N_K, causal, qk_scale, log2_lam,
           BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr, EXACT: tl.constexpr,
           SKIP: tl.constexpr, DOTS: tl.constexpr):
    offs_n = j * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    kt_ptrs = k_base + offs_n[None, :] * stride_kn + offs_d[:, None]  # [D, N]
    v_ptrs = v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd  # [N, D]
    if MASKED:
        kt = tl.load(kt_ptrs, mask=offs_n[None, :] < N_K, other=0.0)
    else:
        kt = tl.load(kt_ptrs)
    qk = tl.dot(q, kt)  # fp32 [M, N]
    if MASKED:
        vis = (offs_n[None, :] < N_K) & ((causal == 0) | (offs_n[None, :] <= qpos[:, None]))
        qk = tl.where(vis, qk, float("-inf"))
    if DOTS:
        p = qk * qk_scale
        if MASKED:
            v = tl.load(v_ptrs, mask=offs_n[:, None] < N_K, other=0.0)
            p = tl.where(vis, p, 0.0)
        else:
            v = tl.load(v_ptrs)
        acc = tl.dot(p.to(v.dtype), v, acc)
    else:
        if SKIP:
            # V is loaded whatever the test says (a load under the branch broke the pipelined loop)
            if MASKED:
                v = tl.load(v_ptrs, mask=offs_n[:, None] < N_K, other=0.0)
            else:
                v = tl.load(v_ptrs)
            tile_max = tl.max(qk, 1) * qk_scale
            m_cand = tl.maximum(m_i, tile_max)
            gap = tl.max(tl.where(row_valid, tile_max, float("-inf")), 0) - \
                tl.max(tl.where(row_valid, m_cand, float("-inf")), 0)
            if gap >= log2_lam:  # kept (a NaN gap, e.g. all -inf, also keeps the block)
                if EXACT:
                    alpha = tl.math.exp2(m_i - m_cand)
                    p = tl.math.exp2(qk * qk_scale - m_cand[:, None])
                    l_i = l_i * alpha + tl.sum(p, 1)
                    acc = acc * alpha[:, None]
                    m_i = m_cand
                else:
                    p = tl.math.exp2(qk * qk_scale - m_i[:, None])
                    l_i = l_i + tl.sum(p, 1)
                acc = tl.dot(p.to(v.dtype), v, acc)
        else:
            if EXACT:
                m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
                alpha = tl.math.exp2(m_i - m_new)
                p = tl.math.exp2(qk * qk_scale - m_new[:, None])
                l_i = l_i * alpha + tl.sum(p, 1)
                acc = acc * alpha[:, None]
                m_i = m_new
            else:
                p = tl.math.exp2(qk * qk_scale - m_i[:, None])
                l_i = l_i + tl.sum(p, 1)
            if MASKED:
                v = tl.load(v_ptrs, mask=offs_n[:, None] < N_K, other=0.0)
            else:
                v = tl.load(v_ptrs)
            acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_i


@triton.jit
def _visit_one(acc, l_i, m_i, m_top, q, k_base, v_base, stride_kn, stride_vn, stride_vd, j, special, masked, qpos,
               row_valid, N_K, causal, qk_scale, log2_lam,
               BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, SKIP: tl.constexpr, V_UNMASKED: tl.constexpr):
    """One VFA/VSA step of the single-loop form: ``special`` (exact max + rescale) and ``masked`` are run-time.

    ``m_top`` is max over the real rows of m (VSA's block test needs it; it changes only on special
    blocks, so each block costs one cross-row reduction, of the tile max). ``V_UNMASKED``: V's storage
    extends past the last key to a whole block (fp8's padded seq-contiguous V), so its loads need no mask.
    """
    offs_n = j * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    in_seq = offs_n < N_K
    kt = tl.load(k_base + offs_n[None, :] * stride_kn + offs_d[:, None], mask=in_seq[None, :], other=0.0)
    v_ptrs = v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd
    if V_UNMASKED:
        v = tl.load(v_ptrs)
    else:
        v = tl.load(v_ptrs, mask=in_seq[:, None], other=0.0)
    qk = tl.dot(q, kt)
    if masked:
        vis = in_seq[None, :] & ((causal == 0) | (offs_n[None, :] <= qpos[:, None]))
        qk = tl.where(vis, qk, float("-inf"))
    keep = True
    if SKIP:
        tile_max = tl.max(qk, 1) * qk_scale
        tl.debug_barrier()
        t_top = tl.max(tl.where(row_valid, tile_max, float("-inf")), 0)
        tl.debug_barrier()
        # BLASST: skip when max_rows(tile max) - max_rows(max(m, tile max)) < log2(lam)
        keep = t_top - tl.maximum(m_top, t_top) >= log2_lam
    if keep:
        if special:
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha
            acc = acc * alpha[:, None]
            m_i = m_new
            if SKIP:
                tl.debug_barrier()
                m_top = tl.max(tl.where(row_valid, m_i, float("-inf")), 0)
                tl.debug_barrier()
        p = tl.math.exp2(qk * qk_scale - m_i[:, None])
        l_i = l_i + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_i, m_top


@triton.jit(do_not_specialize=["H", "GROUP", "N_Q", "N_K", "causal"])
def attn_fwd(Q, K, V, KR, O, qk_scale, log2_lam,
             sqb, sqh, sqn, skb, skh, skn, svb, svh, svn, svd, sob, soh, son, srb, srh, srn,
             H, GROUP, N_Q, N_K, causal,
             HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MODE: tl.constexpr,
             R_CHUNK: tl.constexpr, LOOP: tl.constexpr = 1, V_UNMASKED: tl.constexpr = False, ST=None,
             STAMP: tl.constexpr = False, ROTATE: tl.constexpr = False):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    if STAMP:  # harness/dispatch.py: when each program ran, where, and for how many SM cycles
        t_start = _globaltimer()
        c_start = _clock()
    b = pid_bh // H
    h = pid_bh % H
    hk = h // GROUP
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_valid = offs_m < N_Q
    q = tl.load(Q + b.to(tl.int64) * sqb + h * sqh + offs_m[:, None] * sqn + offs_d[None, :],
                mask=row_valid[:, None], other=0.0)
    k_base = K + b.to(tl.int64) * skb + hk * skh
    v_base = V + b.to(tl.int64) * svb + hk * svh
    shift = N_K - N_Q
    qpos = offs_m + shift
    first_pos = pid_m * BLOCK_M + shift
    last_pos = tl.minimum(pid_m * BLOCK_M + BLOCK_M, N_Q) - 1 + shift
    nkb = tl.cdiv(N_K, BLOCK_N)
    if causal != 0:
        n_vis = last_pos // BLOCK_N + 1
        n_full = tl.minimum((first_pos + 1) // BLOCK_N, N_K // BLOCK_N)
    else:
        n_vis = nkb
        n_full = N_K // BLOCK_N
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if MODE == 0 or MODE == 3:
        for j in range(0, n_full):
            jj = j
            if ROTATE:  # harness/dispatch.py: each program walks its unmasked blocks from its own starting block
                jj = (j + pid_m * 7) % n_full
            acc, l_i, m_i = _visit(acc, l_i, m_i, q, k_base, v_base, skn, svn, svd, jj, qpos, row_valid,
                                   N_K, causal, qk_scale, log2_lam, BLOCK_N, HEAD_DIM, False, True, False,
                                   MODE == 3)
        for j in range(n_full, n_vis):
            acc, l_i, m_i = _visit(acc, l_i, m_i, q, k_base, v_base, skn, svn, svd, j, qpos, row_valid,
                                   N_K, causal, qk_scale, log2_lam, BLOCK_N, HEAD_DIM, True, True, False,
                                   MODE == 3)
    else:
        # m-init: per row, max over the visible key blocks of scale * q . k_repr_j
        r_base = KR + b.to(tl.int64) * srb + hk * srh
        for c in range(0, n_vis, R_CHUNK):
            offs_r = c + tl.arange(0, R_CHUNK)
            krt = tl.load(r_base + offs_r[None, :] * srn + offs_d[:, None], mask=offs_r[None, :] < n_vis,
                          other=0.0)  # [D, R]
            proxy = tl.dot(q, krt)
            proxy = tl.where(offs_r[None, :] < n_vis, proxy, float("-inf"))
            m_i = tl.maximum(m_i, tl.max(proxy, 1) * qk_scale)
        loc = tl.minimum(last_pos // BLOCK_N, nkb - 1)
        if LOOP == 1:
            # one loop over the visit order: step 0 -> block 0, step 1 -> loc (if loc > 0), then the
            # other blocks in order; the block index is arithmetic in the step, so loads stay pipelined
            first_frozen = 1 + (loc > 0).to(tl.int32)
            m_top = tl.max(tl.where(row_valid, m_i, float("-inf")), 0)
            for s in range(0, n_vis):
                jf = s - first_frozen + 1
                jf = jf + ((jf >= loc) & (loc > 0)).to(tl.int32)
                j = tl.where(s == 0, 0, tl.where(s < first_frozen, loc, jf))
                acc, l_i, m_i, m_top = _visit_one(acc, l_i, m_i, m_top, q, k_base, v_base, skn, svn, svd, j,
                                                  s < first_frozen, j >= n_full, qpos, row_valid, N_K, causal,
                                                  qk_scale, log2_lam, BLOCK_N, HEAD_DIM, MODE == 2, V_UNMASKED)
        else:
            # special blocks: sink (0) and local (loc), exact max update + rescale
            acc, l_i, m_i = _visit(acc, l_i, m_i, q, k_base, v_base, skn, svn, svd, 0, qpos, row_valid,
                                   N_K, causal, qk_scale, log2_lam, BLOCK_N, HEAD_DIM, True, True, MODE == 2, False)
            if loc > 0:
                acc, l_i, m_i = _visit(acc, l_i, m_i, q, k_base, v_base, skn, svn, svd, loc, qpos, row_valid,
                                       N_K, causal, qk_scale, log2_lam, BLOCK_N, HEAD_DIM, True, True, MODE == 2, False)
            # frozen max: unmasked blocks 1..n_full-1 without loc, then masked ones up to n_vis without loc
            for j in range(1, tl.minimum(loc, n_full)):
                acc, l_i, m_i = _visit(acc, l_i, m_i, q, k_base, v_base, skn, svn, svd, j, qpos, row_valid,
                                       N_K, causal, qk_scale, log2_lam, BLOCK_N, HEAD_DIM, False, False, MODE == 2, False)
            for j in range(loc + 1, n_full):
                acc, l_i, m_i = _visit(acc, l_i, m_i, q, k_base, v_base, skn, svn, svd, j, qpos, row_valid,
                                       N_K, causal, qk_scale, log2_lam, BLOCK_N, HEAD_DIM, False, False, MODE == 2, False)
            lo = tl.maximum(n_full, 1)
            for j in range(lo, tl.minimum(loc, n_vis)):
                acc, l_i, m_i = _visit(acc, l_i, m_i, q, k_base, v_base, skn, svn, svd, j, qpos, row_valid,
                                       N_K, causal, qk_scale, log2_lam, BLOCK_N, HEAD_DIM, True, False, MODE == 2, False)
            for j in range(tl.maximum(lo, loc + 1), n_vis):
                acc, l_i, m_i = _visit(acc, l_i, m_i, q, k_base, v_base, skn, svn, svd, j, qpos, row_valid,
                                       N_K, causal, qk_scale, log2_lam, BLOCK_N, HEAD_DIM, True, False, MODE == 2, False)
    if MODE == 3:
        out = acc
    else:
        out = acc / l_i[:, None]
    o_ptrs = O + b.to(tl.int64) * sob + h * soh + offs_m[:, None] * son + offs_d[None, :]
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_valid[:, None])
    if STAMP:  # (SM, start, end, SM cycles) of this program; the end after its O store is issued
        c_end = _clock()
        slot = ST + (pid_bh.to(tl.int64) * tl.num_programs(0) + pid_m) * 4
        tl.store(slot, _smid().to(tl.int64))
        tl.store(slot + 1, t_start)
        tl.store(slot + 2, _globaltimer())
        tl.store(slot + 3, c_end - c_start)


@triton.jit(do_not_specialize=["HKV", "N_K"])
def krepr_kernel(K, KR, skb, skh, skn, srb, srh, srn, HKV, N_K,
                 HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr):
    """k_repr[b, hk, j, :] = per dimension, the key of block j with the largest |k| (sign kept, first on ties)."""
    j = tl.program_id(0)
    pid = tl.program_id(1)
    b = pid // HKV
    hk = pid % HKV
    offs_n = j * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    k = tl.load(K + b.to(tl.int64) * skb + hk * skh + offs_n[:, None] * skn + offs_d[None, :],
                mask=offs_n[:, None] < N_K, other=0.0).to(tl.float32)
    a = tl.abs(k)
    amax = tl.max(a, 0)
    first = tl.min(tl.where(a == amax[None, :], offs_n[:, None], 2147483647), 0)
    val = tl.sum(tl.where(offs_n[:, None] == first[None, :], k, 0.0), 0)
    tl.store(KR + b.to(tl.int64) * srb + hk * srh + j * srn + offs_d, val.to(KR.dtype.element_ty))


# ---- host side ------------------------------------------------------------------------------
#: tile configuration by a fixed rule per head dim (BLOCK_M, BLOCK_N, num_warps, num_stages);
#: set by ``set_configs`` from the smoke run's pick (see harness/NOTES.md)
CONFIGS: dict[int, tuple[int, int, int, int]] = {64: (128, 64, 4, 3), 128: (128, 64, 8, 3), 256: (64, 64, 4, 2)}
DECODE_CONFIG = (16, 64, 4, 3)  # query blocks of 16 rows when Nq <= 16
R_CHUNK = 64
VFA_LOOP = 1  # 1: the visit order as one pipelined loop (_visit_one); 0: special blocks, then four loops


def config_for(head_dim: int, n_q: int) -> tuple[int, int, int, int]:
    return DECODE_CONFIG if n_q <= 16 else CONFIGS[head_dim]


def krepr(k, block_n: int, out=None):
    """k_repr [B, Hkv, ceil(Nk/block_n), D] in K's dtype (its entries are entries of K)."""
    import torch

    B, HKV, NK, D = k.shape
    nkb = triton.cdiv(NK, block_n)
    if out is None:
        out = torch.empty((B, HKV, nkb, D), dtype=k.dtype, device=k.device)
    krepr_kernel[(nkb, B * HKV)](k, out, k.stride(0), k.stride(1), k.stride(2), out.stride(0), out.stride(1),
                                 out.stride(2), HKV, NK, HEAD_DIM=D, BLOCK_N=block_n, num_warps=4)
    return out


def _v_padded(v, block_n: int) -> bool:
    """Whether V is seq-contiguous and its storage holds whole blocks past the last key (no mask needed)."""
    if v.stride(2) != 1:
        return False
    B, H, N, D = v.shape
    last = v.storage_offset() + (B - 1) * v.stride(0) + (H - 1) * v.stride(1) + (D - 1) * v.stride(3)
    last += triton.cdiv(N, block_n) * block_n - 1
    return last < v.untyped_storage().nbytes() // v.element_size()


def attention(q, k, v, causal: bool, mode: str, out=None, kr=None, lam: float = 1e-3,
              config: tuple[int, int, int, int] | None = None, loop: int | None = None, stamps=None,
              rotate: bool = False):
    """Run one forward attention call; for vfa/vsa ``kr`` (from ``krepr``) must be given. ``stamps``: an int64
    tensor of 4 per program (grid order, the query block fastest) that receives each program's SM, its
    ``%globaltimer`` at start and end (ns) and the SM cycles (``%clock64``) between them. ``rotate`` (fa2 and dots):
    program ``pid_m`` walks its unmasked key blocks starting from block ``7 * pid_m mod n`` (the same blocks, in
    another order: the result differs by rounding only)."""
    import math

    import torch

    B, H, NQ, D = q.shape
    _, HKV, NK, _ = k.shape
    bm, bn, warps, stages = config or config_for(D, NQ)
    if out is None:
        odt = torch.bfloat16 if q.dtype == torch.float8_e4m3fn else q.dtype
        out = torch.empty((B, H, NQ, D), dtype=odt, device=q.device)
    m = MODES[mode]
    if m in (1, 2) and kr is None:
        raise ValueError("vfa/vsa need k_repr (krepr(k, block_n))")
    if rotate and m in (1, 2):
        raise ValueError(f"rotate walks the fa2 and dots loops only, not {mode}'s visit order")
    r = kr if kr is not None else k
    grid = (triton.cdiv(NQ, bm), B * H)
    attn_fwd[grid](q, k, v, r, out, (1.0 / math.sqrt(D)) * 1.4426950408889634, math.log2(lam),
                   q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                   v.stride(0), v.stride(1), v.stride(2), v.stride(3), out.stride(0), out.stride(1), out.stride(2),
                   r.stride(0), r.stride(1), r.stride(2), H, H // HKV, NQ, NK, int(bool(causal)),
                   HEAD_DIM=D, BLOCK_M=bm, BLOCK_N=bn, MODE=m, R_CHUNK=R_CHUNK,
                   LOOP=VFA_LOOP if loop is None else loop, V_UNMASKED=_v_padded(v, bn),
                   ST=stamps, STAMP=stamps is not None, ROTATE=rotate, num_warps=warps, num_stages=stages)
    return out
