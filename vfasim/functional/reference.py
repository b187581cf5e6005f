"""The float64 oracle: exact softmax(Q Kᵀ / sqrt(d)) V, computed a stripe of query rows at a time.

Assumptions: inputs are used as given (no matmul-format rounding); masking
follows the same right-aligned causal convention as ``Tiling``. Under a causal
mask a stripe reads only the keys its last row can see (the others weigh exactly
0; leaving them out moves results by float64 rounding, ~1e-16 relative). A subset
of rows agrees with the whole to the same rounding (BLAS may block a shorter
stripe differently), not bit for bit.
"""

from __future__ import annotations

import numpy as np

#: query rows per stripe: bounds the float64 score buffer to CHUNK × kv_len
CHUNK = 256


def reference_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool,
                        rows: np.ndarray | None = None) -> np.ndarray:
    """Q [H, N, d], K/V [Hkv, Nk, d] -> O [H, N, d] in float64.

    With ``rows`` (sorted query row indices) only those rows: O [H, len(rows), d].
    """
    heads, n, d = q.shape
    kv_len, group = k.shape[1], heads // k.shape[0]
    rows = np.arange(n) if rows is None else np.asarray(rows, dtype=np.int64)
    out = np.empty((heads, rows.size, d), dtype=np.float64)
    for h in range(heads):
        kh, vh = k[h // group], v[h // group]
        if rows.size == n:  # every stripe reads them: convert once; a sample converts only what its stripes read
            kh, vh = kh.astype(np.float64), vh.astype(np.float64)
        for start in range(0, n, CHUNK):
            lo, hi = np.searchsorted(rows, [start, start + CHUNK])
            if lo == hi:
                continue
            positions = rows[lo:hi] + (kv_len - n)
            keys = min(start + CHUNK, n) + (kv_len - n) if causal else kv_len  # visible to the stripe's last row
            out[h, lo:hi] = _stripe(q[h, rows[lo:hi]].astype(np.float64), kh[:keys], vh[:keys], positions, causal)
    return out


def _stripe(q: np.ndarray, k: np.ndarray, v: np.ndarray, positions: np.ndarray, causal: bool) -> np.ndarray:
    s = q @ k.astype(np.float64, copy=False).T
    s /= np.sqrt(q.shape[1])  # in place: one float64 stripe of scores is held, not three
    if causal:  # only keys past the stripe's first row can be hidden: mask that band alone
        lo = int(positions.min()) + 1
        band = s[:, lo:]
        band[np.arange(lo, k.shape[0])[None, :] > positions[:, None]] = -np.inf
    s -= s.max(axis=1, keepdims=True)
    p = np.exp(s, out=s)
    return (p @ v.astype(np.float64, copy=False)) / p.sum(axis=1, keepdims=True)
