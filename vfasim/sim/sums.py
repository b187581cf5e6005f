"""Exact per-code counts and sums over a trace's ops, a chunk at a time (no whole-trace temporaries).

Assumptions:
- Codes are small non-negative integers (-1 is left out), values non-negative integers; a chunk's codes
  usually span a narrow range (op kinds, pipelines, or codes that grow along the trace).
"""

from __future__ import annotations

import numpy as np

CHUNK = 1 << 16  # ops a whole-trace pass works on at a time


def sums_by(codes: np.ndarray, values: np.ndarray | None, size: int) -> np.ndarray:
    """Per code in [0, size), the exact int64 sum of the ``values`` (None: ones) of the ops with that code; code -1
    is left out. Summed a chunk at a time in float64 where it holds every partial sum exactly (all values together
    below 2^53), else code by code in integers."""
    out = np.zeros(size + 1, np.int64)  # entry 0: code -1
    if values is not None and int(values.sum()) >= 2**53:
        for code in range(size):
            out[code + 1] = values[codes == code].sum()
        return out[1:]
    for lo in range(0, codes.size, CHUNK):
        shifted = codes[lo:lo + CHUNK].astype(np.intp) + 1
        base = int(shifted.min())
        part = np.bincount(shifted - base, None if values is None else values[lo:lo + CHUNK])
        out[base:base + part.size] += part.astype(np.int64)
    return out[1:]
