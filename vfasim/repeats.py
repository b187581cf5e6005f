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

from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from vfasim.errors import VfasimError
from vfasim.trace import COLUMNS, Trace

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
        copies = [g.copies for g in self.gaps] if copies is None else copies
        kept = [(Gap(g.first, g.after, c), m) for g, m, c in zip(self.gaps, self.moves, copies) if c > 0]
        if not kept:
            return self.compressed
        size = len(self.compressed) + sum(g.copies * (g.after - g.first) for g, _ in kept)
        if size >= 2**31:
            raise VfasimError("trace too large: op ids must fit in 32 bits")
        return _filled(self.compressed, [g for g, _ in kept], [m for _, m in kept], size)


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
    moves = [_moved_deps(trace, g) for g in gaps]
    if any(m is None for m in moves) or not _only_next_reads(trace, gaps):
        return None
    return Repeated(trace, gaps, [m for m in moves if m is not None])


def _moved_deps(t: Trace, g: Gap) -> np.ndarray | None:
    """Per dependency of the template, whether it moves with each copy; None if the gap is not a repeat."""
    n = g.after - g.first
    before, next_end = g.first - n, g.after + n
    if before < 0 or next_end > len(t):
        return None
    tiles = (slice(before, g.first), slice(g.first, g.after), slice(g.after, next_end))
    for name in _SAME:
        col = getattr(t, name)
        if not (np.array_equal(col[tiles[0]], col[tiles[1]]) and np.array_equal(col[tiles[1]], col[tiles[2]])):
            return None
    for name in _MOVED:
        col = getattr(t, name)
        if not (np.array_equal(col[tiles[0]] + 1, col[tiles[1]])
                and np.array_equal(col[tiles[1]] + g.copies + 1, col[tiles[2]])):
            return None
    ptr = t.dep_ptr
    counts = [np.diff(ptr[s.start:s.stop + 1]) for s in tiles]
    if not (np.array_equal(counts[0], counts[1]) and np.array_equal(counts[1], counts[2])):
        return None
    prev, tmpl, nxt = (t.dep_idx[ptr[s.start]:ptr[s.stop]].astype(np.int64) for s in tiles)
    moves = tmpl - prev == n
    kept = tmpl == prev
    ok = (np.all(moves | kept) and np.all(tmpl[moves] >= before) and np.all(tmpl[kept] < before)
          and np.array_equal(nxt - tmpl, np.where(moves, n, 0)))
    return moves if ok else None


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


def _filled(t: Trace, gaps: list[Gap], moved: list[np.ndarray], size: int) -> Trace:
    """The full columns: the compressed trace's ops between gaps, and each gap's copies of its template."""
    ptr, n_c = t.dep_ptr, len(t)
    inserted = np.zeros(n_c + 1, np.int64)
    for g in gaps:  # ops from the tile after a gap on move by its copies
        inserted[g.after] += g.copies * (g.after - g.first)
    shift = np.cumsum(inserted)[:n_c]
    target = t.dep_idx + shift[t.dep_idx]
    for g in gaps:  # the tile after the gap reads the last copy, not the template
        deps = slice(ptr[g.after], ptr[2 * g.after - g.first])
        reads = (t.dep_idx[deps] >= g.first) & (t.dep_idx[deps] < g.after)
        target[deps] += np.where(reads, g.copies * (g.after - g.first), 0)
    n_deps = t.dep_idx.size + sum(g.copies * int(ptr[g.after] - ptr[g.first]) for g in gaps)
    out = {name: np.empty(size, getattr(t, name).dtype) for name in COLUMNS}
    dep_ptr, dep_idx = np.empty(size + 1, np.int64), np.empty(n_deps, np.int32)
    at = _At()
    for g, moves in zip(gaps, moved):
        _copy(t, out, dep_ptr, dep_idx, target, at, at.src, g.after)
        _repeat(t, out, dep_ptr, dep_idx, target, at, g, moves)
    _copy(t, out, dep_ptr, dep_idx, target, at, at.src, n_c)
    dep_ptr[size] = n_deps
    return Trace(**cast(dict[str, Any], out), dep_ptr=dep_ptr, dep_idx=dep_idx, meta=t.meta)


class _At:
    """Where the writing stands: the next compressed op to copy, the next op and dependency written."""

    def __init__(self) -> None:
        self.src, self.op, self.dep = 0, 0, 0


def _copy(t: Trace, out: dict[str, np.ndarray], dep_ptr: np.ndarray, dep_idx: np.ndarray, target: np.ndarray,
          at: _At, lo: int, hi: int) -> None:
    """Compressed ops [lo, hi) as they are, their dependencies moved to the full ids."""
    n, d_lo, d_hi = hi - lo, int(t.dep_ptr[lo]), int(t.dep_ptr[hi])
    for name in COLUMNS:
        out[name][at.op:at.op + n] = getattr(t, name)[lo:hi]
    dep_ptr[at.op:at.op + n] = t.dep_ptr[lo:hi] - d_lo + at.dep
    dep_idx[at.dep:at.dep + d_hi - d_lo] = target[d_lo:d_hi]
    at.src, at.op, at.dep = hi, at.op + n, at.dep + d_hi - d_lo


def _repeat(t: Trace, out: dict[str, np.ndarray], dep_ptr: np.ndarray, dep_idx: np.ndarray, target: np.ndarray,
            at: _At, g: Gap, moves: np.ndarray) -> None:
    """The gap's copies of its template, each a tile on."""
    n, d_lo, d_hi = g.after - g.first, int(t.dep_ptr[g.first]), int(t.dep_ptr[g.after])
    nd, copy = d_hi - d_lo, np.arange(1, g.copies + 1)[:, None]
    ops, deps = slice(at.op, at.op + g.copies * n), slice(at.dep, at.dep + g.copies * nd)
    for name in _SAME:
        out[name][ops].reshape(g.copies, n)[:] = getattr(t, name)[g.first:g.after]
    for name in _MOVED:
        out[name][ops].reshape(g.copies, n)[:] = getattr(t, name)[g.first:g.after] + copy
    dep_ptr[ops].reshape(g.copies, n)[:] = t.dep_ptr[g.first:g.after] - d_lo + at.dep + (copy - 1) * nd
    dep_idx[deps].reshape(g.copies, nd)[:] = target[d_lo:d_hi] + copy * np.where(moves, n, 0)
    at.op, at.dep = at.op + g.copies * n, at.dep + g.copies * nd
