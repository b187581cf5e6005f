"""The array L2 is exactly an LRU of sized keys, checked against a plain OrderedDict one on random look-ups."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from vfasim.chip.memory import L2Cache


class ReferenceLRU:
    """The LRU as a dict in use order: each key in turn hits (moves last) or enters, evicting the oldest while over."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.used, self.lines = capacity, 0, OrderedDict[int, int]()

    def access(self, keys: list[int], sizes: list[int]) -> int:
        hit = 0
        for key, size in zip(keys, sizes):
            if key in self.lines:
                self.lines.move_to_end(key)
                hit += size
                continue
            self.lines[key] = size
            self.used += size
            while self.used > self.capacity and self.lines:
                self.used -= self.lines.popitem(last=False)[1]
        return hit


@pytest.mark.parametrize("capacity", [0, 5, 40, 300, 2000, 10**9])
@pytest.mark.parametrize("seed", range(4))
def test_array_lru_equals_the_reference(capacity, seed):
    rng = np.random.default_rng(seed)
    n_keys = 200
    size_of = rng.integers(1, 20, n_keys)  # a key's size is its own, as a tile's bytes are
    fast, ref = L2Cache(capacity, n_keys), ReferenceLRU(capacity)
    for _ in range(400):
        start = int(rng.integers(0, n_keys))
        keys = np.unique(rng.integers(start, start + rng.integers(1, 60), 30) % n_keys)  # runs of nearby keys
        keys = rng.permutation(keys) if rng.random() < 0.3 else keys
        assert fast.access(keys, size_of[keys]) == ref.access(keys.tolist(), size_of[keys].tolist())
        assert fast.used == ref.used
    resident = np.flatnonzero(fast.stamp >= 0)
    assert resident[np.argsort(fast.stamp[resident])].tolist() == list(ref.lines)  # the same keys, in use order


@pytest.mark.parametrize("capacity", [0, 7, 350, 999, 1000, 5000])
def test_units_streaming_more_than_the_cache_holds_equal_the_reference(capacity):
    # Units reading a head's keys in order, each more than the L2 holds (long-context prefill), some
    # starting further on, some reading another head's keys in between: every one evicts its own early keys.
    rng = np.random.default_rng(capacity)
    size_of = rng.integers(5, 15, 300)
    fast, ref = L2Cache(capacity, 300), ReferenceLRU(capacity)
    for unit in range(60):
        head = 100 * int(rng.integers(0, 3))
        keys = np.arange(head + int(rng.integers(0, 20)), head + 100)
        assert fast.access(keys, size_of[keys]) == ref.access(keys.tolist(), size_of[keys].tolist()), unit
        assert fast.used == ref.used
    resident = np.flatnonzero(fast.stamp >= 0)
    assert resident[np.argsort(fast.stamp[resident])].tolist() == list(ref.lines)


@pytest.mark.parametrize("capacity", [0, 30, 120, 400, 10**9])
@pytest.mark.parametrize("seed", range(3))
def test_a_look_up_after_an_intact_prefix_equals_the_reference(capacity, seed):
    # A causal head's query blocks in turn: each unit reads the last one's keys in order and a few more; given
    # the prefix, the cache looks up only the rest (falling back to the whole look-up where evictions would reach
    # the unit's own keys), and ends as the plain LRU does.
    rng = np.random.default_rng(seed)
    size_of = rng.integers(1, 12, 500)
    fast, ref = L2Cache(capacity, 500), ReferenceLRU(capacity)
    last = np.array([], np.int64)
    for _ in range(300):
        if rng.random() < 0.15 or last.size > 60:  # another head: a fresh run of keys
            start = int(rng.integers(0, 400))
            keys, prefix = np.arange(start, start + int(rng.integers(1, 8))), 0
        else:
            extra = np.arange(int(last[-1]) + 1, int(last[-1]) + 1 + int(rng.integers(0, 4))) % 500 \
                if last.size else np.array([], np.int64)
            keys = np.concatenate([last, extra[~np.isin(extra, last)]]).astype(np.int64)
            prefix = last.size if fast.intact else 0
        missed = fast.after_prefix(int(keys[0]), keys[prefix:].tolist(), size_of[keys[prefix:]].tolist()) \
            if prefix else None  # as UnitMemory.on_start: the rest alone where it can, else the whole look-up
        hit = int(size_of[keys].sum()) - missed if missed is not None else fast.access(keys, size_of[keys])
        assert hit == ref.access(keys.tolist(), size_of[keys].tolist())
        assert fast.used == ref.used
        last = keys
    resident = np.flatnonzero(fast.stamp >= 0)
    assert resident[np.argsort(fast.stamp[resident])].tolist() == list(ref.lines)
