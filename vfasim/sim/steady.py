"""Steady state of the closed-form pass: rows that repeat a period earlier are shifted, not relaxed.

The pass computes ``end[r] = max(end[a], end[b]) + cycles[r]`` row by row (``closed_form``).
A long query-block row of tiles makes the same rows over and over, each period of L rows
(one tile's) a copy of the one before: every predecessor either moves with its row
(*shifted*: ``a(r) = a(r − L) + L``) or is the same op (*fixed*: the row's Q load, say), and
the cycles are equal. Over such a run the ends repeat with a constant step δ,
``end[r] = end[r − L] + δ``, exactly (integers; max-plus sums commute with a shift), once:

1. δ = end[p − 1] − end[p − 1 − L] ≥ 0 at the run's check point p;
2. every shifted predecessor before p already repeats: ``end[q] = end[q − L] + δ``;
3. in the period before p, no fixed predecessor is later than the row's shifted ones (then it
   never is: those only grow).

By induction over the run every row then ends δ after the row L before it, so its ends are
written in one array operation. Rows that fail a condition, and every row outside such runs,
are relaxed one by one as before. The result is identical either way; only the time differs.
"""

from __future__ import annotations

from array import array

import numpy as np

SETTLE = 2  # periods relaxed one by one at a run's start before its steady state is checked
TRIES = 4  # check points tried per run, a period apart
MIN_PERIODS = 8  # shorter runs are relaxed one by one
_CHUNK = 1 << 16  # rows compared at a time


def tile_period(rows: np.ndarray) -> int:
    """The commonest number of rows between successive tiles (0: none), given a row of each tile."""
    gaps, counts = np.unique(np.diff(np.sort(rows)), return_counts=True)
    counts[gaps <= 0] = 0
    return int(gaps[np.argmax(counts)]) if counts.max(initial=0) >= MIN_PERIODS else 0


def steady_runs(pairs: np.ndarray, cycles: np.ndarray, period: int) -> list[tuple[int, int]]:
    """(first row, end row) of the runs of at least ``MIN_PERIODS`` periods each row of which repeats the
    row a period before in shape (its predecessors shifted or fixed, its cycles equal); in order."""
    if period <= 0 or period >= cycles.size:
        return []
    same = _repeats(pairs, cycles, period)
    edges = np.flatnonzero(np.diff(same.view(np.int8), prepend=0, append=0)).reshape(-1, 2) + period
    return [(lo, hi) for lo, hi in edges.tolist() if hi - lo >= MIN_PERIODS * period]


def _repeats(pairs: np.ndarray, cycles: np.ndarray, period: int) -> np.ndarray:
    """Per row r ≥ period (index r − period): r's predecessors shifted or fixed against r − period,
    at least one shifted, and the same cycles (worked out ``_CHUNK`` rows at a time: small temporaries)."""
    same = np.empty(cycles.size - period, bool)
    for lo in range(0, same.size, _CHUNK):
        hi = min(lo + _CHUNK, same.size)
        ok = cycles[period + lo:period + hi] == cycles[lo:hi]
        moved = np.zeros(hi - lo, bool)  # some predecessor shifted
        for c in range(pairs.shape[1]):  # a column at a time: no reductions along the short axis
            before = pairs[lo:hi, c]
            step = pairs[period + lo:period + hi, c] - before
            shifted = (step == period) & (before > 0)
            ok &= shifted | (step == 0)
            moved |= shifted
        same[lo:hi] = ok & moved
    return same


def try_extend(ends: array, pairs: np.ndarray, p: int, end: int, period: int) -> bool:
    """Append the ends of rows [p, end) if the run is steady from row p (module notes); else False.

    ``ends`` holds slot 0 and the ends of rows before p (row r ends in slot r + 1).
    """
    rows = _steady_ends(np.frombuffer(ends, np.int64), pairs, p, end, period)
    if rows is None:
        return False
    ends.frombytes(rows.data.cast("B"))  # the bytes themselves: no copy
    return True


def _steady_ends(ends: np.ndarray, pairs: np.ndarray, p: int, end: int, period: int) -> np.ndarray | None:
    """Ends of rows [p, end), each δ after the row a period before; None where a condition fails."""
    delta = int(ends[p] - ends[p - period])
    if delta < 0 or not _fixed_never_latest(ends, pairs, p, min(end - p, period), period):
        return None
    flat = pairs.reshape(-1)  # row r's inputs at 2r and 2r + 1
    early = np.flatnonzero(flat[2 * p:2 * end] <= p)  # predecessors already relaxed (slot <= p: rows before p)
    now, before = flat[2 * p + early], flat[2 * (p - period) + early]
    early = now[(before > 0) & (now == before + period)]  # those of them shifted
    if np.any(ends[early] - ends[early - period] != delta):
        return None
    periods = -(-(end - p) // period)
    steps = np.arange(1, periods + 1, dtype=np.int64)[:, None] * delta
    return (ends[p - period + 1:p + 1][None, :] + steps).ravel()[:end - p]


def _fixed_never_latest(ends: np.ndarray, pairs: np.ndarray, p: int, n: int, period: int) -> bool:
    """Condition 3: in rows [p − period, p − period + n), no fixed predecessor ends after the shifted ones."""
    base = pairs[p - period:p - period + n]
    shifted = _shifted(pairs, p, n, period)
    latest_shifted = np.where(shifted, ends[base], -1).max(axis=1)
    return not np.any(np.where(shifted, -1, ends[base]).max(axis=1) > latest_shifted)


def _shifted(pairs: np.ndarray, p: int, n: int, period: int) -> np.ndarray:
    """[n, 2]: which predecessors of rows [p, p + n) are those of the row a period before, moved along."""
    before, now = pairs[p - period:p - period + n], pairs[p:p + n]
    return (before > 0) & (now == before + period)
