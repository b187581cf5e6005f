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

import numpy as np

from vfasim.chip.units import Launch


class L2Cache:
    """LRU of K/V tiles sized in bytes, over integer keys in [0, n_keys), held in arrays.

    ``log`` is the touch history in order, ``stamp[key]`` the key's latest place in it (-1: not
    resident); a place that is no longer its key's stamp is stale. The resident keys in LRU order
    are the log's live places from ``front`` on. A look-up of a unit's keys touches them in order,
    each missing key evicting least recently used keys while the bytes exceed the capacity. All at
    once where those evictions reach none of the unit's keys (the usual case); where they do, from each
    key's reuse distance (``_overflowing``); one key at a time where neither applies.
    """

    def __init__(self, capacity_bytes: int, n_keys: int) -> None:
        self.capacity, self.used = capacity_bytes, 0
        self.stamp = np.full(n_keys, -1, np.int64)
        self.size = np.zeros(n_keys, np.int64)
        self.log = np.empty(max(4 * n_keys, 1024), np.int64)
        self.places = np.arange(self.log.size)  # place i of the log is i (a view of it, not a new arange, per look-up)
        self.front = self.fill = 0
        self.intact = False  # the last look-up left every one of its keys resident

    def access(self, keys: np.ndarray, sizes: np.ndarray, total: int | None = None) -> int:
        """Look up (and make resident) every key, distinct, in order; return the bytes that hit (``total``: their
        sum, if known)."""
        stamps = self.stamp[keys]
        self.intact = True
        if keys.size and stamps.min() >= 0:  # all resident: nothing enters, nothing is evicted
            self._append(keys)
            return int(sizes.sum()) if total is None else total
        new = stamps < 0
        missed = sizes[new]
        miss = int(missed.sum())
        over = self.used + miss - self.capacity
        if over > self.used:  # its misses alone overflow the L2
            return self._overflowing(keys, sizes, stamps)
        if over > 0:
            pos, freed = self._front_until(over, int(sizes[0]))
            if freed < over or np.where(new, self.fill, stamps).min() < pos:  # the unit evicts its own keys
                return self._overflowing(keys, sizes, stamps)
            self._drop_front(pos, freed)
        if miss:
            self.used += miss
            self.size[keys[new]] = missed
        self._append(keys)
        return int(sizes.sum()) - miss

    def after_prefix(self, head: int, rest: list[int], sizes: list[int]) -> int | None:
        """``access`` of the keys ``rest`` (with ``sizes``, a few, as Python lists) that follow a prefix whose first
        key is ``head``: the bytes that missed; None (nothing done) where the look-up's evictions would reach the
        unit's own keys. The prefix is the last look-up's keys, in its order, and that look-up left them all resident
        (``intact``): they are the newest keys in that order already, so looking them up again would change
        nothing."""
        stamp = self.stamp
        stamps = [stamp.item(key) for key in rest]
        miss = sum(size for size, at in zip(sizes, stamps) if at < 0)
        if miss:
            over = self.used + miss - self.capacity
            if over > self.used:
                return None
            if over > 0:
                pos, freed = self._front_until(over, sizes[0])
                oldest = min(stamp.item(head), *(self.fill if at < 0 else at for at in stamps))
                if freed < over or oldest < pos:
                    return None
                self._drop_front(pos, freed)
            self.used += miss
            for key, size, at in zip(rest, sizes, stamps):
                if at < 0:
                    self.size[key] = size
        if self.fill + len(rest) > self.log.size:
            self._compact(len(rest))
        log, fill = self.log, self.fill
        for key in rest:
            log[fill] = key
            stamp[key] = fill
            fill += 1
        self.fill = fill
        return miss

    def _front_until(self, over: int, key_bytes: int) -> tuple[int, int]:
        """(place, bytes): the fewest least recently used keys, those before the place, that hold ``over``
        bytes; all of them (place ``fill``) where they hold less. ``key_bytes``: a key's usual size (windows of
        the log start at a few times the keys that would hold ``over``, and double)."""
        pos, freed = self.front, 0
        log, stamp, size = self.log, self.stamp, self.size
        for place in range(pos, min(pos + _SCAN, self.fill)):  # one by one first: most evictions are a few keys
            if freed >= over:
                break
            key = log.item(place)
            freed += size.item(key) if stamp.item(key) == place else 0
            pos = place + 1
        chunk = 4 * (over // max(key_bytes, 1)) + 64
        while freed < over and pos < self.fill:
            window = self.log[pos:min(pos + chunk, self.fill)]
            chunk *= 2
            sizes = np.where(self.stamp[window] == self.places[pos:pos + window.size], self.size[window], 0)
            total = freed + np.cumsum(sizes)
            end = min(int(np.searchsorted(total, over)) + 1, window.size)
            freed, pos = int(total[end - 1]), pos + end
        return pos, freed

    def _drop_front(self, pos: int, freed: int) -> None:
        """Evict the keys live before place ``pos``, which hold ``freed`` bytes."""
        if pos - self.front <= _SCAN:
            for place in range(self.front, pos):
                key = self.log.item(place)
                if self.stamp.item(key) == place:
                    self.stamp[key] = -1
        else:
            window = self.log[self.front:pos]
            self.stamp[window[self.stamp[window] == self.places[self.front:pos]]] = -1
        self.used -= freed
        self.front = pos

    def _overflowing(self, keys: np.ndarray, sizes: np.ndarray, stamps: np.ndarray) -> int:
        """A look-up whose own misses evict some of its keys (a unit streaming more than the L2 holds).

        An LRU of bytes holds the most recently used keys that fit, so a key hits when its bytes and those of
        every key used since its last use fit. With the unit's resident keys last used in the order it looks
        them up, those are the resident bytes from the key to the most recently used, plus the unit's bytes
        looked up before it; afterwards the L2 holds the most recent keys that fit, the unit's last. Look-ups
        in another order go one key at a time."""
        self.intact = False
        resident = stamps >= 0
        if np.any(np.diff(stamps[resident]) <= 0):
            return self._one_by_one(keys.tolist(), sizes.tolist())
        if self.fill - self.front > 2 * keys.size:  # the log is mostly stale places: drop them (stamps move)
            self._compact(0)
            stamps = self.stamp[keys]
        window = self.log[self.front:self.fill]
        live = np.where(self.stamp[window] == self.places[self.front:self.fill], self.size[window], 0)
        recent = self.used - (np.cumsum(live) - live)[stamps[resident] - self.front]  # its bytes and newer keys'
        before = (np.cumsum(sizes) - sizes)[resident]  # the unit's bytes looked up before it
        hit = int(sizes[resident][recent + before <= self.capacity].sum())
        self.used += int(sizes[~resident].sum())
        self.size[keys[~resident]] = sizes[~resident]
        self._append(keys)
        if self.used > self.capacity:
            self._drop_front(*self._evicted(keys))
        return hit

    def _evicted(self, keys: np.ndarray) -> tuple[int, int]:
        """``_front_until`` for the bytes over the capacity once ``keys`` were looked up (the log's newest places).
        Where those keys alone overflow the L2, every other resident key goes before some of them: the place
        follows from their own sizes, without reading the log."""
        held = np.cumsum(self.size[keys])
        over, others = self.used - self.capacity, self.used - int(held[-1])  # others: the other keys' bytes
        if others >= over:
            return self._front_until(over, int(self.size[keys[0]]))
        end = int(np.searchsorted(held, over - others))  # the first of its keys to hold what is left to free
        return self.fill - keys.size + end + 1, others + int(held[end])

    def _one_by_one(self, keys: list[int], sizes: list[int]) -> int:
        self.intact = False
        hit = 0
        for key, size in zip(keys, sizes):
            if self.stamp[key] >= 0:
                hit += size
            else:
                self.size[key] = size
                self.used += size
            self._append(np.array([key]))
            while self.used > self.capacity and self.front < self.fill:
                oldest = int(self.log[self.front])
                if self.stamp[oldest] == self.front:
                    self.stamp[oldest] = -1
                    self.used -= int(self.size[oldest])
                self.front += 1
        return hit

    def _append(self, keys: np.ndarray) -> None:
        if self.fill + keys.size > self.log.size:
            self._compact(keys.size)
        self.log[self.fill:self.fill + keys.size] = keys
        self.stamp[keys] = self.places[self.fill:self.fill + keys.size]
        self.fill += keys.size

    def _compact(self, room: int) -> None:
        """Drop the log's stale places (the order of the live ones kept), with ``room`` places free after."""
        window = self.log[self.front:self.fill]
        live = window[self.stamp[window] == self.places[self.front:self.fill]]
        if live.size + room > self.log.size // 2:
            self.log = np.empty(2 * (live.size + room), np.int64)
            self.places = np.arange(self.log.size)
        self.log[:live.size] = live
        self.stamp[live] = np.arange(live.size)
        self.front, self.fill = 0, live.size


_SCAN = 16  # log places looked at one by one (in Python) before whole windows (in NumPy)


class UnitMemory:
    """Bytes of each unit of a launch, decided (for L2 residency) when the unit starts."""

    def __init__(self, launch: Launch, l2_capacity: int | None, has_hbm: bool, blocks: int) -> None:
        self.launch, self.has_hbm = launch, has_hbm
        keys = 2 * blocks * (int(launch.kv_key.max(initial=0)) + 1)  # (global K/V head, key block, K or V)
        self.cache = L2Cache(l2_capacity, keys) if l2_capacity is not None else None
        self.tiles = [k.kv_blocks[:, 0] * 2 + k.kv_blocks[:, 1] for k in launch.kinds]  # a kind's keys, less its head's
        self.first_key = (launch.kv_key * (2 * blocks)).tolist()  # per unit: its K/V head's first key
        self.kinds = launch.kind.tolist()
        self.totals = [(float(k.kv_bytes.sum()) + k.q_bytes + k.o_bytes) for k in launch.kinds]
        self.kv_bytes = [(k.kv_bytes, int(k.kv_bytes.sum())) for k in launch.kinds]
        self.last = (-1, -1)  # (kind, first key) of the last look-up
        self.prefixes: dict[tuple[int, int], tuple[list[int], list[int]] | None] = {}  # (kind, next kind) -> ``_after``

    def on_start(self, u: int) -> tuple[float, float, float]:
        """(HBM, L2 port, L2 hit) bytes of unit ``u``: from or to HBM, through the L2 port (everything), K/V
        served by the L2."""
        if not self.has_hbm:
            return 0.0, 0.0, 0.0
        kind = self.kinds[u]
        total = self.totals[kind]
        if self.cache is None:
            return total, 0.0, 0.0
        first = self.first_key[u]
        last, self.last = self.last, (kind, first)
        sizes, kv = self.kv_bytes[kind]
        missed = None
        if last[1] == first and self.cache.intact:
            after = self._after(last[0], kind)
            if after is not None:
                missed = self.cache.after_prefix(self.tiles[kind].item(0) + first, [key + first for key in after[0]],
                                                 after[1])
        hits = float(kv - missed if missed is not None else self.cache.access(self.tiles[kind] + first, sizes, kv))
        return total - hits, total, hits

    def _after(self, before: int, kind: int) -> tuple[list[int], list[int]] | None:
        """(keys less their head's first key, sizes) of kind ``kind`` after those of kind ``before``, where its keys
        start with all of ``before``'s (at least one) in order and a few follow (at most ``_SCAN``); else None."""
        key = (before, kind)
        if key not in self.prefixes:
            a, b = self.tiles[before], self.tiles[kind]
            n = a.size
            self.prefixes[key] = (b[n:].tolist(), self.kv_bytes[kind][0][n:].tolist()) \
                if 0 < n <= b.size <= n + _SCAN and np.array_equal(a, b[:n]) else None
        return self.prefixes[key]
