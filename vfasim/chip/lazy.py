"""The chip's event loop made lazily: each unit's state brought up to date only when it may end, start computing or
change speed, with the same float arithmetic as ``loop.EventLoop`` makes it event by event."""

from __future__ import annotations

import heapq
import math
from array import array

import numpy as np

from vfasim.chip.loop import EPS, EventLoop


class LazyLoop(EventLoop):
    """The same loop, each unit's state brought up to date only when it may end, start computing or change speed.

    While no port saturates and no unit's own HBM cap binds, every computing unit runs at x = 1, so a
    unit's progress and its time in each state follow from the events' steps alone: they are replayed,
    in the same order and float arithmetic as ``EventLoop`` makes them, when the unit is next looked at.
    Each event looks at the units whose predicted end (or end of latency) lies within ``_MARGIN`` of
    the earliest, far more than the rounding of those predictions; the rest cannot end at it. Where a
    port might saturate, events are made one by one as ``EventLoop`` makes them (without samples).

    While lazy, each slot's state lives in Python lists (``left``: its latency or its work left, ``spent``: its
    unit's time in each state), written back to ``EventLoop``'s arrays when the loop turns eager. A computing
    unit's compute time is summed (the same additions in the same order) only where it is needed: where the loop
    turns eager, or where its unit ends with compute and latency times too close to tell which is longer from
    the clock (``_bound``).
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        s = self.unit.size
        self.steps = _Steps()  # every lazy event's step in time
        self.last = [0] * s  # per slot: the steps its state is brought up to
        self.rate = [0.0] * s  # per slot: progress per cycle when computing at x = 1
        self.demand = [(0.0, 0.0)] * s  # per slot: (HBM, L2) bytes per cycle at x = 1
        self.version = [0] * s
        self.k = [0] * self.cores
        self.heap: list[tuple[float, int, int]] = []
        self.need = [0.0, 0.0]  # summed demand of the computing units (HBM, L2)
        self.capped = 0  # computing units whose own HBM cap is below 1
        self.lazy, self.eager_for = False, 0
        self.core_of = self.slot_core.tolist()
        self.on_core = [list(range(c, s, self.cores)) for c in range(self.cores)]
        self.kinds = self.kind.tolist()
        self.periods: dict[tuple[int, int], float] = {}  # (kind, streams) -> compute cycles, as in ``table``
        margin = 1 - _MARGIN
        self.limits = tuple(math.inf if cap is None else cap * margin for cap in (self.ports.hbm, self.ports.l2))
        self.unit_hbm = self.ports.unit_hbm
        # the lazy state per slot (see the class notes)
        self.units, self.computing, self.left = [-1] * s, [False] * s, [0.0] * s
        self.spent = [[0.0] * 4 for _ in range(s)]  # compute time: up to step ``began``, later steps not yet added
        self.began, self.began_t = [0] * s, [0.0] * s  # per slot: that step, and the clock then
        self.hbm, self.l2 = [0.0] * s, [0.0] * s

    def run(self, queues: list[list[int]], shared: bool) -> None:
        self._fill(queues, shared)
        while self.finished < self.kind.size:
            if self.eager_for <= 0 and not self.lazy:
                self._restart()
            if not (self.lazy and self._event(queues, shared)):
                self._go_eager()
                self._advance()
                self._fill(queues, shared)

    def _sample(self, rate: np.ndarray, hb: np.ndarray, lb: np.ndarray) -> None:
        pass

    def _go_eager(self) -> None:
        if self.lazy:
            busy = [s for s, u in enumerate(self.units) if u >= 0]
            for s in busy:
                self._sync(s)
                self._add_compute_time(s)
            self.unit[:] = self.units
            self.hb[:], self.lb[:] = self.hbm, self.l2
            self.state_time[:] = self.spent
            for s in busy:
                self.rem[s], self.lat[s] = (self.left[s], 0.0) if self.computing[s] else (1.0, self.left[s])
            self.lazy, self.eager_for, self.running = False, max(64, 2 * self.eager_for), None
        self.eager_for -= 1

    def _restart(self) -> None:
        """Lazy state for every running unit, from the state ``EventLoop`` left."""
        self.steps, self.heap, self.need, self.capped, self.lazy = _Steps(), [], [0.0, 0.0], 0, True
        n = self.unit.size
        self.last, self.began, self.began_t = [0] * n, [0] * n, [self.t] * n
        self.units, self.spent = self.unit.tolist(), self.state_time.tolist()
        self.hbm, self.l2 = self.hb.tolist(), self.lb.tolist()
        self.computing = (self.lat <= 0).tolist()
        self.left = np.where(self.lat <= 0, self.rem, self.lat).tolist()
        busy = [s for s, u in enumerate(self.units) if u >= 0]
        self.k = np.bincount(self.slot_core[busy], minlength=self.cores).tolist()
        for s in busy:
            self._retime(s, started=True)

    def _retime(self, s: int, started: bool) -> None:
        """Give slot ``s`` its speed with the streams now on its core, and predict when it ends."""
        computing = self.computing[s]
        if computing and not started:
            self._count(s, -1)
        key = (self.kinds[self.units[s]], self.k[self.core_of[s]])
        period = self.periods.get(key)
        if period is None:
            period = self.periods[key] = float(self.table[key]) if self.table[key] >= 0 else self._priced(*key)
        self.rate[s] = 1.0 / period
        self.demand[s] = (self.hbm[s] / period, self.l2[s] / period)
        if computing:
            self._count(s, 1)
        self._predict(s)

    def _priced(self, kind: int, k: int) -> float:
        self.table[kind, k] = self.cycles(kind, k)
        return float(self.table[kind, k])

    def _count(self, s: int, sign: int) -> None:
        hbm, l2 = self.demand[s]
        self.need = [self.need[0] + sign * hbm, self.need[1] + sign * l2]
        if self.unit_hbm is not None and hbm > 0 and self.unit_hbm / hbm < 1.0:
            self.capped += sign

    def _predict(self, s: int) -> None:
        self.version[s] += 1
        left = self.left[s] / self.rate[s] if self.computing[s] else self.left[s]
        heapq.heappush(self.heap, (self.t + left, s, self.version[s]))

    def _event(self, queues: list[list[int]], shared: bool) -> bool:
        """One event made lazily; False (nothing done) where a port might saturate."""
        if self.capped or self.need[0] > self.limits[0] or self.need[1] > self.limits[1]:
            return False
        heap, version, left, rate, computing = self.heap, self.version, self.left, self.rate, self.computing
        while heap[0][2] != version[heap[0][1]]:
            heapq.heappop(heap)
        near = heap[0][0] + _MARGIN * abs(heap[0][0]) + 1e-3
        looked = []
        while heap and heap[0][0] <= near:
            _, s, v = heapq.heappop(heap)
            if v == version[s]:
                self._sync(s)
                looked.append((s, left[s] / rate[s] if computing[s] else left[s]))
        dt = looked[0][1] if len(looked) == 1 else min(until for _, until in looked)
        if not math.isfinite(dt):
            raise RuntimeError("chip event loop stalled: no unit can progress")
        now = self.steps.append(dt)
        self.t += dt
        ended = []
        for s, until in looked:  # each one step on, as ``_sync`` makes it
            self.last[s] = now
            if computing[s]:
                left[s] -= dt * rate[s]
                if until <= dt * (1 + EPS) + EPS:
                    self._end(s)
                    ended.append(s)
                    continue
            else:
                left[s] -= dt
                self.spent[s][3] += dt
                if left[s] <= 0:
                    computing[s], left[s], self.began[s], self.began_t[s] = True, 1.0, now, self.t  # all work left
                    self._count(s, 1)
            self._predict(s)
        if not ended:
            return True
        started = self._start(queues, shared, sorted(ended)) if self.queued else []
        if started == ended and len(ended) == 1:  # a unit in the place of another: no core's count changes
            self._retime(ended[0], started=True)
        else:
            self._recount({self.core_of[s] for s in ended + started}, started)
        return True

    def _start(self, queues: list[list[int]], shared: bool, free: list[int]) -> list[int]:
        """Start the next unit on every slot of ``free`` whose queue has one, as ``EventLoop._fill``; the slots
        started."""
        started = []
        tm, now = self.times, self.steps.n
        for s in free:
            q = queues[0] if shared else queues[s]
            if not q:
                continue
            started.append(s)
            u = q.pop()
            self.queued -= 1
            lat, hbm, l2, hits = self.on_start(u)
            self.units[s], self.hbm[s], self.l2[s], self.last[s] = u, hbm, l2, now
            self.computing[s], self.left[s] = lat <= 0, 1.0 if lat <= 0 else lat
            self.spent[s], self.began[s], self.began_t[s] = [0.0] * 4, now, self.t
            tm.start[u], tm.core[u], tm.slot[u] = self.t, self.core_of[s], s
            tm.hbm_bytes[u], tm.l2_hit_bytes[u] = hbm, hits
        return started

    def _end(self, s: int) -> None:
        u = self.units[s]
        self._count(s, -1)
        self.version[s] += 1
        self.finished += 1
        self.times.end[u] = self.t
        self.times.bound[u] = self._bound(s)
        self.units[s] = -1

    def _bound(self, s: int) -> int:
        """The state slot ``s``'s unit spent longest in, the first of the longest (as argmax).

        A unit whose compute time is all lazy has only compute and latency time. Its compute time, summed step by
        step, lies within ``_CLOCK`` of the clock's advance since it began computing (both are sums of the same
        steps, each rounding at most 2^-53 of the clock), so that decides unless the two are closer than that.
        """
        spent = self.spent[s]
        if spent[0] == spent[1] == spent[2] == 0.0:
            ahead = (self.t - self.began_t[s]) - spent[3]
            if abs(ahead) > _CLOCK * abs(self.t):
                return 0 if ahead > 0 else 3
        self._add_compute_time(s)
        return spent.index(max(spent))

    def _add_compute_time(self, s: int) -> None:
        """Add the steps slot ``s`` computed since ``began`` to its compute time."""
        if self.computing[s]:
            self.spent[s][0] = self.steps.plus(self.began[s], self.last[s], self.spent[s][0])
            self.began[s] = self.last[s]

    def _recount(self, cores: set[int], started: list[int]) -> None:
        """Streams on the cores where units ended or started; every unit of a core whose count changed, and
        every unit started, gets its speed anew."""
        units = self.units
        for c in cores:
            slots = [s for s in self.on_core[c] if units[s] >= 0]
            changed = len(slots) != self.k[c]
            self.k[c] = len(slots)
            for s in slots:
                if s in started:
                    self._retime(s, started=True)
                elif changed:
                    self._sync(s)
                    self._retime(s, started=False)

    def _sync(self, s: int) -> None:
        """Replay the events since slot ``s`` was last brought up to date, as ``EventLoop._advance`` makes them
        (a computing unit's compute time is added later: ``_add_compute_time``)."""
        first, now = self.last[s], self.steps.n
        if first == now:
            return
        if self.computing[s]:
            self.left[s] = self.steps.minus(first, now, self.left[s], self.rate[s])
        else:
            self.left[s] = self.steps.minus(first, now, self.left[s], 1.0)
            self.spent[s][3] = self.steps.plus(first, now, self.spent[s][3])
        self.last[s] = now


_MARGIN = 1e-7  # relative: far above the rounding of a predicted end, far below the time between events
_CLOCK = 1e-6  # relative to the clock: far above the rounding of 10^9 steps' sums
_SHORT = 16  # steps replayed in Python; longer replays go through NumPy (the same roundings)


class _Steps:
    """The lazy events' steps in time, in order: a growing buffer seen both from Python and as a NumPy array.

    Step i sits at place i + 1, so a replay's values are one slice of the buffer with its first place
    overwritten by the starting value."""

    def __init__(self) -> None:
        self.n = 0  # steps so far
        self.buf = array("d", bytes(8 * 4096))
        self.view = np.frombuffer(self.buf)

    def append(self, step: float) -> int:
        """Add a step; the count of steps after it."""
        if self.n + 1 == len(self.buf):
            self.buf = self.buf + self.buf
            self.view = np.frombuffer(self.buf)
        self.n += 1
        self.buf[self.n] = step
        return self.n

    def minus(self, first: int, now: int, left: float, rate: float) -> float:
        """left − s·rate − … over steps [first, now), one rounding per operation, left to right."""
        if now - first <= _SHORT:
            buf = self.buf
            for i in range(first + 1, now + 1):
                left -= buf[i] * rate
            return left
        values = self.view[first:now + 1] * rate
        values[0] = left
        return float(np.subtract.accumulate(values, out=values)[-1])

    def plus(self, first: int, now: int, spent: float) -> float:
        """spent + s + … over steps [first, now), one rounding per addition, left to right."""
        if now - first <= _SHORT:
            buf = self.buf
            for i in range(first + 1, now + 1):
                spent += buf[i]
            return spent
        values = self.view[first:now + 1].copy()
        values[0] = spent
        return float(np.add.accumulate(values, out=values)[-1])
