"""The numerics phase's inputs, regenerable anywhere with NumPy alone (no torch: ``experiments/`` draws the same).

``normal``: ``numpy.random.default_rng(seed).standard_normal`` float32 Q [1, H, N, D], K, V, in that order.
``sink`` ("LLM-like") adds a shared direction u (a normal vector scaled to norm sqrt(D), drawn after V) as 0.5·u to
every query and 4·u to key 0 of every head, so key 0 is a large-magnitude attention sink.
"""

from __future__ import annotations

import numpy as np

SEED = 20261117  # the numerics phase's base seed; a case adds n + d (+ 1000 for sink inputs)


def make_inputs(n: int, d: int, heads: int, kind: str, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((1, heads, n, d), dtype=np.float32) for _ in range(3))
    if kind == "sink":
        u = rng.standard_normal(d).astype(np.float32)
        u *= np.float32(np.sqrt(d) / np.linalg.norm(u))
        q = q + 0.5 * u
        k[:, :, 0, :] += 4.0 * u
    return q, k, v
