"""Sampled numerics for long runs: the checks on a stated, deterministic subset of query blocks.

In attention every query block is independent of the others, so the float64 oracle and
the fa2 baseline can be computed for a few query blocks only, and compared with the
engine's output there. The subset (the same blocks in every head): the first and the last
query block, the blocks holding the largest and the smallest query-row norm (the most and
least extreme scores), and ``SAMPLE_RANDOM`` more drawn with the run's seed.

Assumptions: a sample bounds nothing about the blocks it leaves out; the report says
which blocks were checked. NaN and Inf counts always cover the whole output.
"""

from __future__ import annotations

import numpy as np

from vfasim.errors import VfasimError

MODES = ("full", "sample", "off")
#: ``full`` is the default up to this many score entries (heads × seq_len × kv_len): 16K tokens, one head
FULL_LIMIT = 2**28
SAMPLE_RANDOM = 6  # seeded blocks beside first, last and the two norm extremes


def resolve_mode(mode: str | None, heads: int, seq_len: int, kv_len: int) -> str:
    """``mode`` checked, or the default for this size (None): full up to FULL_LIMIT, else sample."""
    if mode is None:
        return "full" if heads * seq_len * kv_len <= FULL_LIMIT else "sample"
    if mode not in MODES:
        raise VfasimError(f"unknown numerics mode {mode!r} (valid: {', '.join(MODES)})")
    return mode


def sample_blocks(q: np.ndarray, block_q: int, seed: int) -> np.ndarray:
    """Sorted query-block indices to check, from Q [H, N, d] alone (so they are known before the run)."""
    n_blocks = -(-q.shape[1] // block_q)
    norms = np.linalg.norm(q.astype(np.float32), axis=2).max(axis=0)  # [N] largest over heads
    padded = np.full(n_blocks * block_q, np.nan, np.float32)
    padded[: norms.size] = norms
    per_block = padded.reshape(n_blocks, block_q)
    extremes = [int(np.nanargmax(np.nanmax(per_block, axis=1))), int(np.nanargmin(np.nanmin(per_block, axis=1)))]
    chosen = {0, n_blocks - 1, *extremes}
    others = np.setdiff1d(np.arange(n_blocks), sorted(chosen))
    rng = np.random.default_rng(seed)
    chosen |= set(rng.choice(others, size=min(SAMPLE_RANDOM, others.size), replace=False).tolist())
    return np.array(sorted(chosen), dtype=np.int64)


def block_rows(blocks: np.ndarray, block_q: int, seq_len: int) -> np.ndarray:
    """Query row indices of ``blocks`` (sorted), the last block cut at seq_len."""
    rows = (blocks[:, None] * block_q + np.arange(block_q)).ravel()
    return rows[rows < seq_len]
