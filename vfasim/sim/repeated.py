"""Timing a trace whose long rows repeat a tile, from two short versions of it.

``vfasim.repeats`` writes a long row's middle tiles as copies of one. In the timeline those copies
settle into a steady state: each period of L ops (a tile's, in issue order) ends δ cycles after the one
before, and everything issued after the copies moves by δ per copy. So a gap of m copies need not be
simulated: the trace is timed with k and with k + 1 copies in each long gap (short traces), and the full
trace's figures follow from the first: each further copy a period on (ends δ later, op ids L on, what it
waited on a period on where that moved between the last two copies), everything after a gap moved along
by the copies inserted before it.

It is exact, not an estimate: every end is a maximum of sums over paths that, in a gap's steady state,
gain δ ≥ 0 per copy along the paths that pass through the gap and nothing along those that do not; so
an op whose latest predecessor at k copies already moves with the gap keeps it at any larger count. The
trace with k + 1 copies is simulated and must equal what the extension gives for one copy more, op by op
(ends, pipelines, what each op waited on and why), and so must its statistics and critical path; where
it does not (the steady state not reached, a predecessor that does not move winning a tie, a critical
path that does not repeat), None is returned and the caller simulates the full trace.

The statistics sum the short trace's op cycles and each inserted copy's; the critical path is the short
trace's with each long gap's walk through a middle copy repeated (its walk through the copies between
the first and the last must repeat a period apart).

Assumptions:
- The ``pipelined`` schedule without result latencies; ``serial`` and late results are simulated whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vfasim.hw.config import HardwareConfig
from vfasim.repeats import Repeated
from vfasim.sim.critical import CriticalPath, attribute, critical_path, walk
from vfasim.sim.engine import Timeline, simulate
from vfasim.sim.schedule import issue_order
from vfasim.sim.stats import TimingStats, stats_of, timing_stats
from vfasim.sim.sums import sums_by
from vfasim.trace import KIND_NAMES, Trace

_COPIES = 8  # copies timed in each long gap (and one more, to check); at least the buffers and units they reach


@dataclass(frozen=True)
class _Short:
    """A short version of the trace timed, issued in ``order`` (``position``: each op's place in it), and per long
    gap: its template's first op, the op after its copies, the ops of a tile, the first issue position after its
    copies and its step δ."""

    trace: Trace
    timed: Timeline
    copies: int  # in each long gap
    order: np.ndarray
    position: np.ndarray
    first: np.ndarray
    after: np.ndarray
    size: np.ndarray
    at: np.ndarray
    delta: np.ndarray


def timing_repeated(rep: Repeated, hw: HardwareConfig,
                    schedule: str = "pipelined") -> tuple[TimingStats, CriticalPath] | None:
    """The full trace's statistics and critical path (as ``timing_stats`` and ``critical_path`` give them) from two
    short versions; None where they do not apply (module notes)."""
    found = _checked(rep, hw, schedule)
    if found is None:
        return None
    short, extra = found
    stats = _stats(short, extra, hw)
    crit = _critical(short, extra, stats)
    return None if crit is None else (stats, crit)


def timeline_repeated(rep: Repeated, hw: HardwareConfig, schedule: str = "pipelined") -> Timeline | None:
    """The full trace's timeline (as ``simulate`` gives it) from two short versions; None where it does not apply.
    A run needs only its statistics and critical path (``timing_repeated``); this shows what they follow from."""
    found = _checked(rep, hw, schedule)
    return None if found is None else _extended(*found)


def _checked(rep: Repeated, hw: HardwareConfig, schedule: str) -> tuple[_Short, np.ndarray] | None:
    """The short version with k copies in each long gap and the copies each needs more, once the version with k + 1
    is what one copy more gives (timeline, statistics and critical path); None where it is not."""
    copies = np.array([g.copies for g in rep.gaps], np.int64)
    k = max(_COPIES, 2 * hw.score_buffers, 2 * max((p.units for p in hw.pipelines.values()), default=1))
    long = copies > k + 1
    if schedule != "pipelined" or any(hw.result_latency.values()) or hw.load_latency_cycles or not long.any():
        return None
    short = _short(rep, hw, schedule, np.where(long, k, copies), long)
    if short is None:
        return None
    check = rep.with_copies(np.where(long, k + 1, copies).tolist())
    timed = simulate(check, hw, schedule)
    one = np.ones(int(long.sum()), np.int64)
    stats = _stats(short, one, hw)
    crit, expected = _critical(short, one, stats), critical_path(check, timed, hw, schedule)
    if not (_same(_extended(short, one), timed) and stats == timing_stats(check, timed, hw)
            and crit is not None and crit.to_dict() == expected.to_dict()
            and np.array_equal(crit.ops, expected.ops)):
        return None
    return short, (copies - k)[long]


def _short(rep: Repeated, hw: HardwareConfig, schedule: str, copies: np.ndarray, long: np.ndarray) -> _Short | None:
    """The trace with ``copies`` in each gap, timed; None where a long gap's last copies are not steady (the same
    ops a period apart, ending δ ≥ 0 later)."""
    trace = rep.with_copies(copies.tolist())
    timed = simulate(trace, hw, schedule)
    size = np.array([g.after - g.first for g in rep.gaps], np.int64)
    first = np.array([g.first for g in rep.gaps], np.int64) + np.concatenate([[0], np.cumsum(copies * size)[:-1]])
    after = first + (copies + 1) * size  # the tile after the copies
    order = issue_order(trace, hw, schedule).astype(np.int64)
    position = np.empty(order.size, np.int64)
    position[order] = np.arange(order.size)
    first, after, size = first[long], after[long], size[long]
    at = np.array([position[a:a + n].min() for a, n in zip(after.tolist(), size.tolist())], np.int64)
    end = timed.end_cycles[order]
    delta = end[at - 1] - end[at - 1 - size]
    for p, n, d in zip(at.tolist(), size.tolist(), delta.tolist()):
        period, earlier = slice(p - n, p), slice(p - 2 * n, p - n)
        if d < 0 or not (np.all(end[period] - end[earlier] == d) and np.all(order[period] - order[earlier] == n)):
            return None
    return _Short(trace, timed, int(copies[long][0]), order, position, first, after, size, at, delta)


def _new_ids(s: _Short, ops: np.ndarray, at: np.ndarray, extra: np.ndarray) -> np.ndarray:
    """The id of each op of ``ops`` (-1: none) once the copies are inserted, as named from issue position ``at``:
    moved by the copies inserted before it in trace order, and an op of a gap's copies named from after them (a
    later stage of the last copies, or what the tile after the copies reads) by its own gap's too."""
    inserted = np.concatenate([[0], np.cumsum(extra * s.size)])
    gap = np.searchsorted(s.first, ops, side="right") - 1  # the gap whose copies may hold the op
    ids = ops + inserted[np.searchsorted(s.after, ops, side="right")]
    inside = (gap >= 0) & (ops < s.after[gap]) & (at >= s.at[gap])
    return np.where(ops >= 0, ids + np.where(inside, (extra * s.size)[gap], 0), -1)


def _moved_by(n: int, positions: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """Per issue position, the sum of ``shifts`` of the gaps at or before it."""
    moved = np.zeros(n + 1, np.int64)
    np.add.at(moved, positions, shifts)
    return np.cumsum(moved)[:n]


def _periods(s: _Short) -> np.ndarray:
    """The issue positions of each long gap's last copy, gap after gap."""
    return np.concatenate([np.arange(p - n, p) for p, n in zip(s.at.tolist(), s.size.tolist())]).astype(np.int64)


def _stats(s: _Short, extra: np.ndarray, hw: HardwareConfig) -> TimingStats:
    """The full trace's statistics: the short trace's sums and each inserted copy's."""
    names, timed = s.timed.pipeline_names, s.timed
    last = s.order[_periods(s)]
    times = np.repeat(extra, s.size)  # each last copy's op counts once per copy inserted
    dur = timed.durations[last] * times
    busy = np.array(timed.busy_cycles, np.int64)
    piped = timed.pipeline[last] >= 0
    np.add.at(busy, timed.pipeline[last][piped], dur[piped])
    by_kind = sums_by(s.trace.kind, timed.durations, len(KIND_NAMES))
    np.add.at(by_kind, s.trace.kind[last], dur)
    present = sums_by(s.trace.kind, None, len(KIND_NAMES)) > 0
    return stats_of(_latency(s, extra), tuple(busy.tolist()), by_kind, present, names, hw)


def _latency(s: _Short, extra: np.ndarray) -> int:
    """The full trace's last end: the short trace's ends moved along, and each gap's last copy's inserted again."""
    end = s.timed.end_cycles[s.order] + _moved_by(s.order.size, s.at, extra * s.delta)
    copies = [int(end[p - n:p].max()) + int(e) * int(d)
              for p, n, e, d in zip(s.at.tolist(), s.size.tolist(), extra.tolist(), s.delta.tolist())]
    return max([int(end.max(initial=0)), *copies])


def _critical(s: _Short, extra: np.ndarray, stats: TimingStats) -> CriticalPath | None:
    """The full trace's critical path (``stats``: its statistics): the short trace's, each long gap's walk through
    its next-to-last copy repeated once per copy inserted; None where the walk through the middle copies does not
    repeat a period apart."""
    timed = s.timed
    assert timed.waited_on is not None and timed.wait_kind is not None, "simulated with its wait record"
    path = walk(timed.waited_on, timed.end_cycles)
    at = s.position[path]  # increasing: an op waits on one issued before it
    ids = _new_ids(s, path, at, extra)
    pieces, times, done = [], np.ones(path.size, np.int64), 0
    for p, n, more in zip(s.at.tolist(), s.size.tolist(), extra.tolist()):
        middle = _middle_walk(at, p, n, s.copies)
        if middle is None:
            return None
        cut, last = int(np.searchsorted(at, p - n)), int(np.searchsorted(at, p))
        ids[cut:last] += more * n  # the walk through the last copy: in the last of the full trace's copies
        times[middle] += more
        pieces += [ids[done:cut], (ids[middle][None, :] + n * np.arange(1, more + 1)[:, None]).ravel()]
        done = cut
    if times[0] != 1:  # the first op waited on nothing: it stands once
        return None
    busy = tuple(int(p["busy_cycles"]) for p in stats.pipelines.values())
    return attribute(np.concatenate([*pieces, ids[done:]]), timed.pipeline[path], s.trace.kind[path],
                     timed.durations[path], timed.wait_kind[path[1:]], stats.latency_cycles, busy,
                     timed.pipeline_names, times)


def _middle_walk(at: np.ndarray, p: int, n: int, copies: int) -> slice | None:
    """The walk's steps (``at``: their issue positions, increasing) through the next-to-last of the copies before
    position ``p``, once its steps through each copy but the first and the last are those through the copy before,
    a period on; else None."""
    bounds = np.searchsorted(at, p - n * np.arange(copies, 0, -1))  # where each copy's steps begin, and the last's
    steps = [at[bounds[j]:bounds[j + 1]] for j in range(1, copies - 1)]  # copies 2 .. k - 1
    if any(not np.array_equal(b, a + n) for a, b in zip(steps, steps[1:])):
        return None
    return slice(int(bounds[copies - 2]), int(bounds[copies - 1]))


def _extended(s: _Short, extra: np.ndarray) -> Timeline:
    """The short trace's timeline with ``extra`` more copies in each long gap, by op id."""
    timed, order, n = s.timed, s.order, s.order.size
    assert timed.waited_on is not None and timed.wait_kind is not None, "simulated with its wait record"
    at, waited = np.arange(n), timed.waited_on[order].astype(np.int64)
    source, copy, gap = _inserted(n, s, extra)
    moving = np.zeros(n, np.int64)  # per position of a last copy: what it waited on moves a period with each copy
    for p, size in zip(s.at.tolist(), s.size.tolist()):
        moving[p - size:p] = (waited[p - size:p] - waited[p - 2 * size:p - size] == size) & (waited[p - size:p] >= 0)
    step = np.where(copy > 0, np.concatenate([[0], s.size])[gap + 1] * copy, 0)  # op ids a copy moves by
    ids = _new_ids(s, order, at, extra)[source] + step
    total = ids.size
    end, cycles = np.empty(total, np.int64), np.empty(total, np.int64)
    end[ids] = (timed.end_cycles[order] + _moved_by(n, s.at, extra * s.delta))[source] + np.where(
        copy > 0, np.concatenate([[0], s.delta])[gap + 1] * copy, 0)
    cycles[ids] = timed.durations[order][source]
    pipe, waits, kinds = np.empty(total, np.int16), np.empty(total, np.int32), np.empty(total, np.int8)
    pipe[ids] = timed.pipeline[order][source]
    waits[ids] = _new_ids(s, waited, at, extra)[source] + step * moving[source]
    kinds[ids] = timed.wait_kind[order][source]
    return Timeline(end - cycles, end, pipe, timed.pipeline_names, int(end.max(initial=0)), waits, kinds,
                    timed.schedule, None)


def _inserted(n: int, s: _Short, extra: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per issue position of the extended trace: the short trace's position it copies, the copy (0: itself) and the
    gap whose copy it is (-1: none)."""
    lengths = extra * s.size
    total = n + int(lengths.sum())
    source, copy, gap = np.empty(total, np.int64), np.zeros(total, np.int64), np.full(total, -1, np.int64)
    source[np.arange(n) + _moved_by(n, s.at, lengths)] = np.arange(n)
    before = np.cumsum(lengths) - lengths  # ops inserted before each gap
    g = np.repeat(np.arange(lengths.size), lengths)
    within = np.arange(int(lengths.sum())) - before[g]
    put = (s.at + before)[g] + within
    source[put] = (s.at - s.size)[g] + within % s.size[g]
    copy[put] = within // s.size[g] + 1
    gap[put] = g
    return source, copy, gap


def _same(a: Timeline, b: Timeline) -> bool:
    """Whether two timelines hold the same spans, pipelines and record of what each op waited on."""
    pairs = ((a.start_cycles, b.start_cycles), (a.end_cycles, b.end_cycles), (a.pipeline, b.pipeline),
             (a.waited_on, b.waited_on), (a.wait_kind, b.wait_kind))
    return a.total_cycles == b.total_cycles and all(x is not None and y is not None and np.array_equal(x, y)
                                                    for x, y in pairs)
