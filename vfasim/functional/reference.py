"""The float64 oracle: exact softmax(Q Kᵀ / sqrt(d)) V, computed a stripe of query rows at a time.

Assumptions: inputs are used as given (no matmul-format rounding); masking
follows the same right-aligned causal convention as ``Tiling``.
"""

from __future__ import annotations

import numpy as np

#: query rows per stripe: bounds the float64 score buffer to CHUNK × kv_len
CHUNK = 256


def reference_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """Q [H, N, d], K/V [Hkv, Nk, d] -> O [H, N, d] in float64."""
    heads, n, d = q.shape
    group = heads // k.shape[0]
    out = np.empty((heads, n, d), dtype=np.float64)
    for h in range(heads):
        kh = k[h // group].astype(np.float64)
        vh = v[h // group].astype(np.float64)
        for start in range(0, n, CHUNK):
            rows = q[h, start:start + CHUNK].astype(np.float64)
            out[h, start:start + CHUNK] = _stripe(rows, kh, vh, start, causal, n)
    return out


def _stripe(q: np.ndarray, k: np.ndarray, v: np.ndarray, start: int, causal: bool, n: int) -> np.ndarray:
    s = (q @ k.T) / np.sqrt(q.shape[1])
    if causal:
        qpos = np.arange(start, start + q.shape[0]) + (k.shape[0] - n)
        s[np.arange(k.shape[0])[None, :] > qpos[:, None]] = -np.inf
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p @ v) / p.sum(axis=1, keepdims=True)
