"""Steady state of the closed-form pass: ops that repeat a period earlier are shifted, not relaxed.

The pass computes ``end[r] = max(end[a] for each predecessor a of r) + cycles[r]`` op by op, in issue
order (``closed_form``; r is an issue position, its predecessors a table row of positions).
A long query-block row of tiles issues the same ops over and over, each period of L ops
(one tile's) a copy of the one before: every predecessor either moves with its op
(*shifted*: ``a(r) = a(r − L) + L``) or is the same op (*fixed*: the row's Q load, say), and
the cycles are equal. Over such a run the ends repeat with a constant step δ,
``end[r] = end[r − L] + δ``, exactly (integers; max-plus sums commute with a shift), once:

1. δ = end[p − 1] − end[p − 1 − L] ≥ 0 at the run's check point p;
2. every shifted predecessor before p already repeats: ``end[q] = end[q − L] + δ``;
3. in the period before p, no fixed predecessor is later than the op's shifted ones (then it
   never is: those only grow).

By induction over the run every op then ends δ after the op L before it, so its ends are
written in one array operation. Ops that fail a condition, and every op outside such runs,
are relaxed one by one as before. The result is identical either way; only the time differs.
"""

from __future__ import annotations

from array import array

import numpy as np

SETTLE = 4  # periods relaxed one by one at a run's start before its steady state is checked (engine traces: 3-4)
TRIES = 4  # check points tried per run, a period apart
MIN_PERIODS = 8  # shorter runs are relaxed one by one
_CHUNK = 1 << 16  # ops compared at a time


def tile_period(starts: np.ndarray) -> int:
    """The commonest number of ops between successive tiles (0: none), given a position of each tile."""
    gaps, counts = np.unique(np.diff(np.sort(starts)), return_counts=True)
    counts[gaps <= 0] = 0
    return int(gaps[np.argmax(counts)]) if counts.max(initial=0) >= MIN_PERIODS else 0


def steady_runs(table: np.ndarray, cycles: np.ndarray, order: np.ndarray, period: int) -> list[tuple[int, int]]:
    """(first op, end op) of the runs of at least ``MIN_PERIODS`` periods each op of which repeats the
    op a period before in shape (its predecessors shifted or fixed, its cycles equal); in order.

    ``table``: per op (issue position), its predecessors' positions + 1 (0: none), a column each; ``cycles``: per op
    id, ``order`` the op id at each issue position."""
    if period <= 0 or period >= order.size:
        return []
    same = np.zeros(order.size - period + 2, bool)  # a False either side: every run has two edges
    same[1:-1] = _repeats(table, cycles, order, period)
    edges = np.flatnonzero(same[1:] != same[:-1]).reshape(-1, 2) + period
    return [(lo, hi) for lo, hi in edges.tolist() if hi - lo >= MIN_PERIODS * period]


def _repeats(table: np.ndarray, cycles: np.ndarray, order: np.ndarray, period: int) -> np.ndarray:
    """Per op r ≥ period (index r − period): r's predecessors shifted or fixed against r − period,
    at least one shifted, and the same cycles (worked out ``_CHUNK`` ops at a time: small temporaries)."""
    same = np.empty(order.size - period, bool)
    for lo in range(0, same.size, _CHUNK):
        hi = min(lo + _CHUNK, same.size)
        ok = cycles[order[period + lo:period + hi]] == cycles[order[lo:hi]]
        moved = np.zeros(hi - lo, bool)  # some predecessor shifted
        for c in range(table.shape[1]):  # a column at a time: no reductions along the short axis
            before = table[lo:hi, c]
            step = table[period + lo:period + hi, c] - before
            shifted = (step == period) & (before > 0)
            ok &= shifted | (step == 0)
            moved |= shifted
        same[lo:hi] = ok & moved
    return same


def try_extend(ends: array, table: np.ndarray, p: int, end: int, period: int) -> bool:
    """Append the ends of ops [p, end) if the run is steady from op p (module notes); else False.

    ``ends`` holds slot 0 and the ends of ops before p (op r ends in slot r + 1).
    """
    op_ends = _steady_ends(np.frombuffer(ends, np.int64), table, p, end, period)
    if op_ends is None:
        return False
    ends.frombytes(op_ends.data.cast("B"))  # the bytes themselves: no copy
    return True


def _steady_ends(ends: np.ndarray, table: np.ndarray, p: int, end: int, period: int) -> np.ndarray | None:
    """Ends of ops [p, end), each δ after the op a period before; None where a condition fails."""
    delta = int(ends[p] - ends[p - period])
    if delta < 0 or not _fixed_never_latest(ends, table, p, min(end - p, period), period):
        return None
    window = min(end, p + _reach(table, p, period))  # the ops whose shifted predecessors may lie before p
    for c in range(table.shape[1]):  # predecessors already relaxed (slot <= p: ops before p) and shifted
        now, before = table[p:window, c], table[p - period:window - period, c]
        early = now[(now <= p) & (before > 0) & (now == before + period)]
        if np.any(ends[early] - ends[early - period] != delta):
            return None
    periods = -(-(end - p) // period)
    steps = np.arange(1, periods + 1, dtype=np.int64)[:, None] * delta
    return (ends[p - period + 1:p + 1][None, :] + steps).ravel()[:end - p]


def _reach(table: np.ndarray, p: int, period: int) -> int:
    """How far back a shifted predecessor lies at most, in ops, over the period before p: in a run each op's
    shifted predecessors lie as far back as those of the op a period before, so past p + reach none lies before p."""
    rows = table[p - period:p]
    back = np.arange(p - period + 1, p + 1)[:, None] - rows  # an op's slot less its predecessor's
    shifted = (rows > 0) & (table[p:p + period] == rows + period)
    return int(np.where(shifted, back, 0).max(initial=0)) + 1


def _fixed_never_latest(ends: np.ndarray, table: np.ndarray, p: int, n: int, period: int) -> bool:
    """Condition 3: in ops [p − period, p − period + n), no fixed predecessor ends after the shifted ones."""
    base = table[p - period:p - period + n]
    shifted = (base > 0) & (table[p:p + n] == base + period)  # the predecessors of ops [p, p + n), moved along
    latest_shifted = np.where(shifted, ends[base], -1).max(axis=1)
    return not np.any(np.where(shifted, -1, ends[base]).max(axis=1) > latest_shifted)
