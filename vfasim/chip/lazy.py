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
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        s = self.unit.size
        self.steps = array("d")  # every event's step in time
        self.last = [0] * s  # per slot: the events its state is brought up to
        self.rate = [0.0] * s  # per slot: progress per cycle when computing at x = 1
        self.demand = [(0.0, 0.0)] * s  # per slot: (HBM, L2) bytes per cycle at x = 1
        self.version = [0] * s
        self.k = [0] * self.cores
        self.heap: list[tuple[float, int, int]] = []
        self.need = [0.0, 0.0]  # summed demand of the computing units (HBM, L2)
        self.capped = 0  # computing units whose own HBM cap is below 1
        self.lazy, self.eager_for = False, 0
        self.core_of = self.slot_core.tolist()
        self.kinds = self.kind.tolist()
        self.periods: dict[tuple[int, int], float] = {}  # (kind, streams) -> compute cycles, as in ``table``
        margin = 1 - _MARGIN
        self.limits = tuple(math.inf if cap is None else cap * margin for cap in (self.ports.hbm, self.ports.l2))
        self.unit_hbm = self.ports.unit_hbm

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
            for s in np.flatnonzero(self.unit >= 0).tolist():
                self._sync(s)
            self.lazy, self.eager_for, self.running = False, max(64, 2 * self.eager_for), None
        self.eager_for -= 1

    def _restart(self) -> None:
        """Lazy state for every running unit, from the state ``EventLoop`` left."""
        self.steps, self.heap, self.need, self.capped, self.lazy = array("d"), [], [0.0, 0.0], 0, True
        self.last = [0] * self.unit.size
        busy = np.flatnonzero(self.unit >= 0).tolist()
        self.k = np.bincount(self.slot_core[busy], minlength=self.cores).tolist()
        for s in busy:
            self._retime(s, started=True)

    def _retime(self, s: int, started: bool) -> None:
        """Give slot ``s`` its speed with the streams now on its core, and predict when it ends."""
        computing = self.lat[s] <= 0
        if computing and not started:
            self._count(s, -1)
        key = (self.kinds[self.unit[s]], self.k[self.core_of[s]])
        period = self.periods.get(key)
        if period is None:
            period = self.periods[key] = float(self.table[key]) if self.table[key] >= 0 else self._priced(*key)
        self.rate[s] = 1.0 / period
        self.demand[s] = (self.hb[s] / period, self.lb[s] / period)
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
        left = self.rem[s] / self.rate[s] if self.lat[s] <= 0 else self.lat[s]
        heapq.heappush(self.heap, (self.t + left, s, self.version[s]))

    def _unsaturated(self) -> bool:
        return not self.capped and self.need[0] <= self.limits[0] and self.need[1] <= self.limits[1]

    def _event(self, queues: list[list[int]], shared: bool) -> bool:
        """One event made lazily; False (nothing done) where a port might saturate."""
        if not self._unsaturated():
            return False
        heap = self.heap
        while heap[0][2] != self.version[heap[0][1]]:
            heapq.heappop(heap)
        near = heap[0][0] + _MARGIN * abs(heap[0][0]) + 1e-3
        looked = []
        while heap and heap[0][0] <= near:
            _, s, v = heapq.heappop(heap)
            if v == self.version[s]:
                self._sync(s)
                looked.append((s, self.rem[s] / self.rate[s] if self.lat[s] <= 0 else self.lat[s]))
        dt = float(min(until for _, until in looked))
        if not math.isfinite(dt):
            raise RuntimeError("chip event loop stalled: no unit can progress")
        self.steps.append(dt)
        self.t += dt
        ended = []
        for s, until in looked:
            computing = self.lat[s] <= 0
            self._sync(s)
            if computing and until <= dt * (1 + EPS) + EPS:
                self._end(s)
                ended.append(s)
            elif not computing and self.lat[s] <= 0:
                self._count(s, 1)
                self._predict(s)
            else:
                self._predict(s)
        started = self._fill(queues, shared, sorted(ended))  # only a slot just freed can have a unit queued
        for s in started:
            self.last[s] = len(self.steps)
        self._recount({self.core_of[s] for s in ended + started}, set(started))
        return True

    def _end(self, s: int) -> None:
        u = self.unit[s]
        self._count(s, -1)
        self.version[s] += 1
        self.finished += 1
        self.times.end[u] = self.t
        spent = self.state_time[s].tolist()
        self.times.bound[u] = spent.index(max(spent))  # the first of the longest, as argmax
        self.unit[s] = -1

    def _recount(self, cores: set[int], started: set[int]) -> None:
        """Streams on the cores where units ended or started; every unit of a core whose count changed, and
        every unit started, gets its speed anew."""
        for c in cores:
            slots = [s for s in range(c, self.unit.size, self.cores) if self.unit[s] >= 0]
            changed = len(slots) != self.k[c]
            self.k[c] = len(slots)
            for s in slots:
                if s in started:
                    self._retime(s, started=True)
                elif changed:
                    self._sync(s)
                    self._retime(s, started=False)

    def _sync(self, s: int) -> None:
        """Replay the events since slot ``s`` was last brought up to date, as ``EventLoop._advance`` makes them."""
        first, now = self.last[s], len(self.steps)
        if first == now:
            return
        steps = self.steps[first:now]
        if self.lat[s] <= 0:
            self.rem[s], self.state_time[s, 0] = _replay(float(self.rem[s]), float(self.state_time[s, 0]), steps,
                                                         self.rate[s])
        else:
            self.lat[s], self.state_time[s, 3] = _replay(float(self.lat[s]), float(self.state_time[s, 3]), steps, 1.0)
        self.last[s] = now


_MARGIN = 1e-7  # relative: far above the rounding of a predicted end, far below the time between events


_SHORT = 16  # steps replayed in Python; longer replays go through NumPy (the same roundings)


def _replay(left: float, spent: float, steps: array, rate: float) -> tuple[float, float]:
    """(left − s0·rate − s1·rate − …, spent + s0 + s1 + …), one rounding per operation, left to right."""
    if len(steps) <= _SHORT:
        for step in steps:
            left -= step * rate
            spent += step
        return left, spent
    values = np.empty(len(steps) + 1)
    values[1:] = np.frombuffer(steps)
    values[0] = spent
    spent = float(np.add.accumulate(values)[-1])
    if rate != 1.0:
        values[1:] *= rate
    values[0] = left
    return float(np.subtract.accumulate(values)[-1]), spent


