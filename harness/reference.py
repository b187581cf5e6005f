"""References in float64 (torch, on whatever device the inputs live): exact attention, and the
block-skipping of VSA emulated block by block, with the same tiling and right-aligned causal mask
as the Triton kernels (for VFA the exact-arithmetic output equals softmax attention: the max only
scales; VSA's block test changes what is summed).
"""

from __future__ import annotations

import math

import torch


def _expand(q, k, v):
    g = q.shape[1] // k.shape[1]
    return q.double(), k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)


def visible(nq: int, nk: int, causal: bool, device) -> torch.Tensor:
    """[nq, nk] bool: key j visible to query row i (row i sits at position i + nk - nq)."""
    if not causal:
        return torch.ones((nq, nk), dtype=torch.bool, device=device)
    qpos = torch.arange(nq, device=device)[:, None] + (nk - nq)
    return torch.arange(nk, device=device)[None, :] <= qpos


def exact(q, k, v, causal: bool) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v in float64, [B, H, Nq, D]; GQA by repeating K/V heads."""
    qd, kd, vd = _expand(q, k, v)
    s = qd @ kd.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~visible(q.shape[2], k.shape[2], causal, q.device), float("-inf"))
    return torch.softmax(s, -1) @ vd


def vsa_emulated(q, k, v, causal: bool, block_m: int, block_n: int, lam: float = 1e-3):
    """VSA in float64: (output, fraction of visited blocks skipped).

    m-init from k_repr (signed absmax per dim over each key block), blocks visited in the order
    sink, local, rest; exact max only on sink/local; a block is skipped when max over (real) rows
    of the tile max minus max over rows of max(m, tile max) < ln(lam).
    """
    qd, kd, vd = _expand(q, k, v)
    B, H, NQ, D = qd.shape
    NK = kd.shape[2]
    scale = 1.0 / math.sqrt(D)
    vis = visible(NQ, NK, causal, q.device)
    out = torch.empty_like(qd)
    nkb = -(-NK // block_n)
    kpad = torch.zeros((B, H, nkb * block_n, D), dtype=torch.float64, device=q.device)
    kpad[:, :, :NK] = kd
    kb = kpad.view(B, H, nkb, block_n, D)
    pick = kb.abs().argmax(dim=3, keepdim=True)
    krep = torch.take_along_dim(kb, pick, dim=3).squeeze(3)  # [B, H, nkb, D]
    visited = skipped = 0
    for i0 in range(0, NQ, block_m):
        i1 = min(i0 + block_m, NQ)
        qi = qd[:, :, i0:i1]
        last = i1 - 1 + NK - NQ
        n_vis = last // block_n + 1 if causal else nkb
        loc = min(last // block_n, nkb - 1)
        proxy = (qi @ krep[:, :, :n_vis].transpose(-1, -2)) * scale
        m = proxy.max(-1).values  # [B, H, rows]
        l = torch.zeros_like(m)
        o = torch.zeros_like(qi)
        order = [0] + ([loc] if loc > 0 else []) + [j for j in range(1, n_vis) if j != loc]
        for j in order:
            j0, j1 = j * block_n, min((j + 1) * block_n, NK)
            s = (qi @ kd[:, :, j0:j1].transpose(-1, -2)) * scale
            s = s.masked_fill(~vis[i0:i1, j0:j1], float("-inf"))
            tmax = s.max(-1).values
            cand = torch.maximum(m, tmax)
            gap = tmax.amax(-1) - cand.amax(-1)  # [B, H]
            keep = ~(gap < math.log(lam))
            visited += keep.numel()
            skipped += int((~keep).sum())
            special = j == 0 or j == loc
            m_new = torch.where(keep[..., None], cand, m) if special else m
            alpha = torch.exp(m - m_new)
            p = torch.exp(s - m_new[..., None]) * keep[..., None, None]
            l = l * alpha + p.sum(-1)
            o = o * alpha[..., None] + p @ vd[:, :, j0:j1]
            m = m_new
        out[:, :, i0:i1] = o / l[..., None]
    return out, skipped / max(visited, 1)
