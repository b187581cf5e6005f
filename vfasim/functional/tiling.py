"""Block layout of one attention call: which key blocks each query block visits, in which order.

Assumptions:
- Query positions are right-aligned with key positions (query row r sits at
  absolute position r + kv_len - seq_len), the usual convention for prefill
  with a cache and for decode; with kv_len == seq_len it is the plain layout.
- The *local* block of a query block is the key block holding its last row's
  position (the diagonal block under a causal mask).
- Causal masking hides keys after the query position; padded keys past the
  sequence end are always hidden. Work is counted on full (padded) tiles.
- A tile is masked where the mask hides some entry of it, and under a causal
  mask also where it is one of its query block's last ``mask_steps`` visible
  key blocks (a kernel whose source runs a fixed count of masked iterations per
  query block, FlashAttention-2's ``n_masking_steps``), and every tile where
  ``mask_all`` says so (a kernel that checks the K/V bounds in each iteration).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from vfasim.errors import VfasimError


@dataclass(frozen=True)
class Tiling:
    seq_len: int
    kv_len: int
    head_dim: int
    block_q: int
    block_k: int
    causal: bool
    heads: int = 1
    kv_heads: int = 1
    mask_steps: int = 0  # causal: each query block's last mask_steps visible key blocks are masked (0: as needed)
    mask_all: bool = False  # every tile is masked (a kernel's bounds check in each iteration)

    def __post_init__(self) -> None:
        for name in ("seq_len", "kv_len", "head_dim", "block_q", "block_k", "heads", "kv_heads"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise VfasimError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.mask_steps, (int, np.integer)) or self.mask_steps < 0:
            raise VfasimError(f"mask_steps must be an integer >= 0, got {self.mask_steps!r}")
        if self.heads % self.kv_heads:
            raise VfasimError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.causal and self.seq_len > self.kv_len:
            raise VfasimError(f"causal attention needs kv_len >= seq_len, got {self.kv_len} < {self.seq_len}")

    @property
    def n_qblocks(self) -> int:
        return -(-self.seq_len // self.block_q)

    @property
    def n_kblocks(self) -> int:
        return -(-self.kv_len // self.block_k)

    @property
    def n_rows(self) -> int:
        """Rows of the engine's batch: one per (head, query block)."""
        return self.heads * self.n_qblocks

    @cached_property
    def last_position(self) -> np.ndarray:
        """Absolute position of each query block's last real row."""
        last_row = np.minimum((np.arange(self.n_qblocks) + 1) * self.block_q, self.seq_len) - 1
        return last_row + (self.kv_len - self.seq_len)

    @cached_property
    def n_visible(self) -> np.ndarray:
        """Number of key blocks each query block visits (before any skipping)."""
        if not self.causal:
            return np.full(self.n_qblocks, self.n_kblocks)
        return self.last_position // self.block_k + 1

    @cached_property
    def local_block(self) -> np.ndarray:
        return np.minimum(self.last_position // self.block_k, self.n_kblocks - 1)

    def order(self, reorder: bool) -> np.ndarray:
        """[n_qblocks, n_kblocks] key block visited at each step, -1 when done.

        ``reorder`` gives the VFA order (sink 0, local i, then 1, 2, … without i).
        """
        out = np.full((self.n_qblocks, self.n_kblocks), -1, dtype=np.int64)
        for i, n in enumerate(self.n_visible):
            blocks = np.arange(n)
            if reorder and self.local_block[i] > 0:
                loc = self.local_block[i]
                blocks = np.concatenate([[0, loc], np.delete(blocks, [0, loc])])
            out[i, :n] = blocks
        return out

    def real_rows(self, qblock: np.ndarray) -> np.ndarray:
        """[A, block_q] bool: which rows of each query block hold a query (the last block's padding does not)."""
        return qblock[:, None] * self.block_q + np.arange(self.block_q) < self.seq_len

    def tile_needs_mask(self, qblock: np.ndarray, kblock: np.ndarray) -> np.ndarray:
        """True where some entry of tile (qblock, kblock) is hidden, or (causal) it is one of its query block's last
        ``mask_steps`` visible key blocks; everywhere with ``mask_all``."""
        if self.mask_all:
            return np.ones(np.broadcast(qblock, kblock).shape, dtype=bool)
        first_pos = qblock * self.block_q + (self.kv_len - self.seq_len)
        last_key = (kblock + 1) * self.block_k - 1
        past_end = last_key >= self.kv_len
        if self.causal and self.mask_steps:
            past_end = past_end | (kblock >= self.n_visible[qblock] - self.mask_steps)
        return past_end | (self.causal & (last_key > first_pos))

    def visible(self, qblock: np.ndarray, kblock: np.ndarray) -> np.ndarray:
        """[A, block_q, block_k] bool: which entries of each tile count."""
        qpos = qblock[:, None] * self.block_q + np.arange(self.block_q) + (self.kv_len - self.seq_len)
        kpos = kblock[:, None] * self.block_k + np.arange(self.block_k)
        vis = np.broadcast_to((kpos < self.kv_len)[:, None, :], (qblock.size, self.block_q, self.block_k))
        if self.causal:
            vis = vis & (kpos[:, None, :] <= qpos[:, :, None])
        return vis
