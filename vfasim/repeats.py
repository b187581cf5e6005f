"""A trace emitted with the middle of its long rows left out, and those tiles put back by repeating one.

A long query-block row visits key blocks that differ only in their index: the same ops, work and
stages, each tile depending on the tile before it (its m, l and O writers) or on the same earlier
ops (the row's Q load, a frozen max). ``trace_only`` emits such a row's first tiles and its last
ones, leaving a *gap*; ``Repeated.with_copies`` writes the full trace from that *compressed* trace, each left-out
tile a copy of the tile before the gap (the *template*): its step and key block moved along, its
dependencies on the tile before it moved along with it, its other dependencies kept. The columns,
dependencies and so the digest are those the full emission gives (a test compares them).

The compressed trace shows whether this holds before anything is written: the template must repeat
the tile before it (same columns, key block one on, every dependency either a tile on or the same
op, the moved ones inside those two tiles, the kept ones before them) and the tile after the gap must
repeat the template likewise; only that tile may depend on the template. Where a gap fails,
``repeated`` returns None and the caller emits the full trace. A gap may also be filled with fewer
copies than its own: a shorter trace of the same shape, which the timing model times in its place
(``vfasim.sim.repeated``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from vfasim.errors import VfasimError
from vfasim.trace import COLUMNS, Trace, digest_of

_SAME = ("kind", "dtype", "work", "stage", "take_buffer", "free_buffer", "row")  # equal in every copy
_MOVED = ("step", "kblock")  # one more in each copy


@dataclass(frozen=True)
class Gap:
    """Tiles left out of one row: ``copies`` tiles after the template, whose ops are [``first``, ``after``) of the
    compressed trace; the tile before it begins at ``first`` less its length, the one after it at ``after``."""

    first: int
    after: int
    copies: int


@dataclass(frozen=True, eq=False)
class Repeated:
    """A compressed trace whose gaps are repeats (``repeated``), and per gap which template dependencies move."""

    compressed: Trace
    gaps: list[Gap]
    moves: list[np.ndarray]

    def with_copies(self, copies: list[int] | None = None) -> Trace:
        """The trace with ``copies`` (per gap; None: each gap's own) filling the gaps: the full trace or a shorter."""
        if copies is None:
            return self.whole
        full = self._full(copies)
        if full is None:
            return self.compressed
        return Trace(**cast(dict[str, Any], {name: full.joined(name) for name in COLUMNS}),
                     dep_ptr=full.joined("dep_ptr"), dep_idx=full.joined("dep_idx"), meta=self.compressed.meta)

    @functools.cached_property
    def whole(self) -> Trace:
        """The full trace, written once."""
        return self.with_copies([g.copies for g in self.gaps])

    def digest(self) -> str:
        """The full trace's digest (``Trace.digest``), its columns hashed a piece at a time: never written whole."""
        full = self._full([g.copies for g in self.gaps])
        if full is None:
            return self.compressed.digest()
        return digest_of(full.pieces(name) for name in (*COLUMNS, "dep_ptr", "dep_idx"))

    def __len__(self) -> int:
        """The full trace's ops."""
        return len(self.compressed) + sum(g.copies * (g.after - g.first) for g in self.gaps)

    def _full(self, copies: list[int]) -> _Full | None:
        """The pieces of the trace with ``copies`` in each gap; None where no gap has any."""
        kept = [(Gap(g.first, g.after, c), m) for g, m, c in zip(self.gaps, self.moves, copies) if c > 0]
        if not kept:
            return None
        return _Full(self.compressed, [g for g, _ in kept], [m for _, m in kept])


def gaps(trace: Trace, template: np.ndarray, copies: np.ndarray) -> list[Gap]:
    """The gap of each row of ``trace`` whose ``copies`` > 0 after its tile in slot ``template`` (per row)."""
    rows = np.flatnonzero(copies > 0)
    span = int(trace.step.max(initial=0)) + 1
    group = trace.row.astype(np.int64) * span + trace.step  # (row, step) in trace order: never decreasing
    first = np.searchsorted(group, rows * span + template[rows])
    after = np.searchsorted(group, rows * span + template[rows] + 1)
    return [Gap(f, a, c) for f, a, c in zip(first.tolist(), after.tolist(), copies[rows].tolist())]


def repeated(trace: Trace, gaps: list[Gap]) -> Repeated | None:
    """``trace`` with ``gaps`` to fill, once each gap is checked to be a repeat (module notes); else None."""
    moves = _moved_deps(trace, gaps) if gaps else []
    if moves is None or not _only_next_reads(trace, gaps):
        return None
    return Repeated(trace, gaps, moves)


def _moved_deps(t: Trace, gaps: list[Gap]) -> list[np.ndarray] | None:
    """Per gap, per dependency of its template, whether it moves with each copy; None if some gap is not a repeat.
    The three tiles of every gap (the one before the template, the template, the one after) are compared at once."""
    first, after = (np.array([getattr(g, f) for g in gaps], np.int64) for f in ("first", "after"))
    n = after - first
    if (first - n).min() < 0 or (after + n).max() > len(t):
        return None
    tmpl, gap = _ranges(first, n)  # each template op, and its gap
    prev, nxt = tmpl - n[gap], tmpl + n[gap]
    copies = np.array([g.copies for g in gaps], np.int64)[gap]
    ptr = t.dep_ptr
    same = [getattr(t, c) for c in _SAME] + [np.diff(ptr)]  # equal in the three tiles, as the dependency counts
    if not (all(np.array_equal(c[prev], c[tmpl]) and np.array_equal(c[tmpl], c[nxt]) for c in same)
            and all(np.array_equal(getattr(t, c)[prev] + 1, getattr(t, c)[tmpl])
                    and np.array_equal(getattr(t, c)[tmpl] + copies + 1, getattr(t, c)[nxt]) for c in _MOVED)):
        return None
    count = ptr[after] - ptr[first]  # each template's dependencies
    at, dep_gap = _ranges(ptr[first], count)
    step, low = n[dep_gap], (first - n)[dep_gap]  # a tile's ops; where the tile before the template begins
    before, now, later = (t.dep_idx[at + ptr[f][dep_gap] - ptr[first][dep_gap]].astype(np.int64)
                          for f in (first - n, first, after))
    moves = now - before == step
    kept = now == before
    if not (np.all(moves | kept) and np.all(now[moves] >= low[moves]) and np.all(now[kept] < low[kept])
            and np.array_equal(later - now, np.where(moves, step, 0))):
        return None
    return np.split(moves, np.cumsum(count)[:-1])


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The integers of the ranges [start, start + length), one after the other, and the range each lies in."""
    which = np.repeat(np.arange(starts.size), lengths)
    return np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths) + starts[which], which


def _only_next_reads(t: Trace, gaps: list[Gap]) -> bool:
    """Whether every op that depends on a template's op lies in that template or in the tile after it."""
    owner_of = np.full(len(t) + 1, -1, np.int64)  # per op: the gap whose template holds it, -1 none
    for i, g in enumerate(gaps):
        owner_of[g.first:g.after] = i
    reads = owner_of[t.dep_idx]
    hit = np.flatnonzero(reads >= 0)
    if hit.size == 0:
        return True
    owner = np.searchsorted(t.dep_ptr, hit, side="right") - 1  # the op holding each such dependency
    first = np.array([g.first for g in gaps])[reads[hit]]
    next_end = np.array([2 * g.after - g.first for g in gaps])[reads[hit]]
    return bool(np.all((owner >= first) & (owner < next_end)))


class _Full:
    """A full trace's columns a piece at a time: the compressed trace's ops between gaps, and each gap's copies of its
    template (step and key block one on a copy, the dependencies that move a tile on a copy)."""

    def __init__(self, t: Trace, gaps: list[Gap], moves: list[np.ndarray]) -> None:
        self.t, self.gaps, self.moves = t, gaps, moves
        ptr = t.dep_ptr
        inserted = np.zeros(len(t) + 1, np.int64)
        for g in gaps:  # ops from the tile after a gap on move by its copies
            inserted[g.after] += g.copies * (g.after - g.first)
        self.target = t.dep_idx + np.cumsum(inserted)[:len(t)][t.dep_idx]  # each dependency's id in the full trace
        for g in gaps:  # the tile after the gap reads the last copy, not the template
            deps = slice(ptr[g.after], ptr[2 * g.after - g.first])
            reads = (t.dep_idx[deps] >= g.first) & (t.dep_idx[deps] < g.after)
            self.target[deps] += np.where(reads, g.copies * (g.after - g.first), 0)
        self.size = len(t) + int(inserted.sum())
        if self.size >= 2**31:
            raise VfasimError("trace too large: op ids must fit in 32 bits")
        self.n_deps = t.dep_idx.size + sum(g.copies * int(ptr[g.after] - ptr[g.first]) for g in gaps)
        self.copy = [np.arange(1, g.copies + 1)[:, None] for g in gaps]  # each copy's number, a row each

    def joined(self, name: str) -> np.ndarray:
        """Column ``name`` (a ``Trace`` field) whole."""
        dtype = np.int64 if name == "dep_ptr" else np.int32 if name == "dep_idx" else getattr(self.t, name).dtype
        out = np.empty(self.n_deps if name == "dep_idx" else self.size + (name == "dep_ptr"), dtype)
        done = 0
        for piece in self.pieces(name):
            out[done:done + piece.size] = piece
            done += piece.size
        return out

    def pieces(self, name: str) -> Iterator[np.ndarray]:
        """Column ``name`` (a ``Trace`` field), in its own dtype, a piece at a time."""
        if name == "dep_ptr":
            yield from self._dep_ptr()
            return
        deps = name == "dep_idx"
        col = self.target if deps else getattr(self.t, name)
        dtype, ptr, done = (np.int32 if deps else col.dtype), self.t.dep_ptr, 0
        for g, copy, moves in zip(self.gaps, self.copy, self.moves):
            lo, first, stop = (int(ptr[i]) for i in (done, g.first, g.after)) if deps else (done, g.first, g.after)
            yield col[lo:stop].astype(dtype, copy=False)
            if deps:
                yield (col[first:stop] + copy * np.where(moves, g.after - g.first, 0)).astype(dtype).ravel()
            elif name in _MOVED:
                yield (col[first:stop] + copy).astype(dtype).ravel()
            else:
                yield np.tile(col[first:stop], g.copies)
            done = g.after
        yield col[int(ptr[done]) if deps else done:].astype(dtype, copy=False)

    def _dep_ptr(self) -> Iterator[np.ndarray]:
        """The ``dep_ptr`` column a piece at a time."""
        ptr, done, deps = self.t.dep_ptr, 0, 0  # deps: those written so far
        for g in self.gaps:
            yield ptr[done:g.after] - ptr[done] + deps
            deps += int(ptr[g.after] - ptr[done])
            nd = int(ptr[g.after] - ptr[g.first])
            yield (ptr[g.first:g.after] - ptr[g.first] + deps + nd * np.arange(g.copies)[:, None]).ravel()
            deps += g.copies * nd
            done = g.after
        yield ptr[done:] - ptr[done] + deps  # with the last entry: every dependency
