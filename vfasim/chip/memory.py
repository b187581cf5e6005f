"""Where a work unit's bytes come from: L2 reuse of K/V among units, HBM for the rest.

Model:
- Every load's bytes come from the trace: Q loads (``load_q``), K and V tile
  loads (``load_k``, ``load_v``) and O stores (``store_o``).
- The L2 is an LRU of K/V tiles keyed by (global K/V head, key block, K or V),
  sized in bytes, capacity ``chip.l2.capacity_bytes``. When a unit starts it
  looks up all its K/V tiles: a resident tile is an L2 hit; a missing one is
  read from HBM and becomes resident (evicting the least recently used). So
  reuse follows from which units are in flight together and from L2 capacity:
  query blocks of one head, and heads of one GQA group, hit each other's K/V.
- Q loads and O stores go to HBM (each is touched once per unit).
- All bytes pass the L2 port; HBM sees the misses, Q loads and O stores.
- Residency is decided at unit start, for the whole unit; the whole L2 is
  available to K/V tiles (Q and O streaming through are not charged capacity).
- A chip without memory figures has neither port: its cores are independent.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from vfasim.chip.units import Launch


@dataclass(frozen=True)
class UnitBytes:
    hbm: float  # bytes from/to HBM
    l2_port: float  # bytes through the L2 port (everything)
    l2_hits: float  # K/V bytes served by L2


class L2Cache:
    """LRU of K/V tiles sized in bytes."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity = capacity_bytes
        self.used = 0
        self.lines: OrderedDict[int, int] = OrderedDict()

    def access(self, keys: list[int], sizes: list[int]) -> int:
        """Look up (and make resident) every key; return the bytes that hit."""
        hit = 0
        lines = self.lines
        for key, size in zip(keys, sizes):
            if key in lines:
                lines.move_to_end(key)
                hit += size
                continue
            lines[key] = size
            self.used += size
            while self.used > self.capacity and lines:
                self.used -= lines.popitem(last=False)[1]
        return hit


class UnitMemory:
    """Bytes of each unit of a launch, decided (for L2 residency) when the unit starts."""

    def __init__(self, launch: Launch, l2_capacity: int | None, has_hbm: bool, blocks: int) -> None:
        self.launch, self.has_hbm = launch, has_hbm
        self.cache = L2Cache(l2_capacity) if l2_capacity is not None else None
        self.blocks = blocks  # key blocks per K/V head, to make integer keys

    def on_start(self, u: int) -> UnitBytes:
        kind = self.launch.kinds[self.launch.kind[u]]
        kv = float(kind.kv_bytes.sum())
        total = kv + kind.q_bytes + kind.o_bytes
        if not self.has_hbm:
            return UnitBytes(0.0, 0.0, 0.0)
        hits = 0.0
        if self.cache is not None:
            keys = (self.launch.kv_key[u] * self.blocks + kind.kv_blocks[:, 0]) * 2 + kind.kv_blocks[:, 1]
            hits = float(self.cache.access(keys.tolist(), kind.kv_bytes.tolist()))
        return UnitBytes(total - hits, total if self.cache is not None else 0.0, hits)

