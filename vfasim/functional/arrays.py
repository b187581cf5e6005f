"""Array helpers of the engine loop: tiling reshapes and three exact shortcuts.

The shortcuts give the same bits as the plain NumPy expression they replace (the
tests compare them on NaN, Inf and -0), only faster.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from vfasim.functional.tiling import Tiling


def rescaled(o: np.ndarray, alpha: np.ndarray, sr: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """sr(alpha · O) for O [A, Br, d] (a fresh copy, changed in place), alpha [A, Br].

    A tile whose alpha is exactly 1 in every row keeps O as it is: O already holds
    values of its format, so multiplying by 1 and rounding would change no bit. Frozen
    tiles (VFA, and FA2 once its maxima settle) skip two passes over O this way.
    """
    moved = np.flatnonzero(~(alpha == 1).all(axis=1))
    if moved.size:
        o[moved] = sr(alpha[moved, :, None] * o[moved])
    return o


def tile_matmul(a: np.ndarray, blocks: np.ndarray, head: np.ndarray, kb: np.ndarray,
                transpose: bool = False) -> np.ndarray:
    """[A, M, N]: a[i] @ blocks[head[i], kb[i]] for each i (the block transposed with ``transpose``), one
    product a tile.

    Where every i takes the same block (a step's rows of one K/V head in key order) the block is
    broadcast, not copied once per tile: each tile's product is the same BLAS call on the same
    values in the same layout, so the same bits. (One product of the stacked rows, [A·M, K] @
    block, is faster but BLAS may sum its entries in another order: OpenBLAS does for 32 x 32
    tiles, which would make a tile's bits depend on the rows batched with it.)
    """
    if head.size > 1 and (head == head[0]).all() and (kb == kb[0]).all():
        tiles = blocks[head[0], kb[0]][None]
    else:
        tiles = blocks[head, kb]
    return np.matmul(a, tiles.transpose(0, 2, 1) if transpose else tiles)


def all_finite(x: np.ndarray) -> bool:
    """``np.isfinite(x).all()`` for a float array, from one dot product when that is finite.

    x · x is Inf or NaN when any element is, so a finite result proves every element
    finite in one read of ``x`` (a BLAS dot: faster than NumPy's own sum or isfinite).
    A non-finite result (also from finite elements past ~1e19, whose squares overflow)
    and a non-contiguous ``x`` fall back to the elementwise test.
    """
    if x.flags.c_contiguous and x.size:
        flat = x.reshape(-1)
        with np.errstate(over="ignore", invalid="ignore"):
            if np.isfinite(np.dot(flat, flat)):
                return True
    return bool(np.isfinite(x).all())


def rowmax(x: np.ndarray) -> np.ndarray:
    """``x.max(axis=-1)``, NaN and all, at about half its cost.

    ``fmax`` reduces along a short last axis twice as fast as ``max`` but skips NaN, so
    it serves only when a whole-array ``max`` (contiguous, fast) is not NaN.
    """
    if x.size and np.isnan(x.max()):
        return x.max(axis=-1)
    return np.fmax.reduce(x, axis=-1)


def blocks(x: np.ndarray, block: int) -> np.ndarray:
    """[H, N, d] -> [H, ceil(N/block), block, d], zero padded."""
    h, n, d = x.shape
    nb = -(-n // block)
    padded = np.zeros((h, nb * block, d), dtype=x.dtype)
    padded[:, :n] = x
    return padded.reshape(h, nb, block, d)


def unblock(x: np.ndarray, heads: int, seq_len: int) -> np.ndarray:
    """[H*Tr, Bq, d] -> [H, seq_len, d]."""
    rows, bq, d = x.shape
    return x.reshape(heads, rows // heads * bq, d)[:, :seq_len]


def per_row(x: np.ndarray, t: Tiling) -> np.ndarray:
    """[H*Tr, Bq] per-row values -> [H, seq_len]."""
    return unblock(x[:, :, None], t.heads, t.seq_len)[..., 0]
