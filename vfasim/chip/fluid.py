"""The chip's event loop: work units on stream slots of cores, sharing the L2 and HBM ports.

A small deterministic event loop over work units (not ops). Each core has
``streams`` slots; a slot runs one unit at a time. Dispatch policies:
- ``waves``: unit i goes to slot i mod (cores × streams) — units dealt to the
  cores in order, in waves; a slot runs its units one after another.
- ``greedy``: one queue in launch order; each slot that frees takes the next
  unit (a GPU's hardware block scheduler handing thread blocks to free SMs).
- ``persistent``: one queue (longest unit first for causal launches); each slot
  that frees takes the next unit.
Slot s sits on core s mod cores, so the first wave spreads over all cores.

A unit first waits the exposed memory latency, then progresses at speed
x / T, where T is its compute time with k streams busy on its core (k counts
the units on that core now) and x ∈ [0, 1] its share of the memory ports. The
shares are max-min fair (progressive filling): all units' x rise together; a
port (L2 or HBM, capacity in bytes per cycle) that saturates freezes the units
that use it, and x stops at 1 (compute-bound) otherwise. A memory-bound unit
therefore stretches, and what bound each unit is recorded: compute, L2 port,
HBM port, or latency, whichever held it longest. Time is continuous between
events (a fluid model); reported spans are in (fractional) core cycles.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

POLICIES = ("waves", "greedy", "persistent")
BOUNDS = ("compute", "l2", "hbm", "latency")
EPS = 1e-9


@dataclass(frozen=True)
class Ports:
    """Shared port capacities in bytes per cycle (None: unlimited / absent)."""

    l2: float | None
    hbm: float | None
    unit_hbm: float | None = None  # the most one unit streams from HBM on its own (bytes per cycle)


@dataclass
class LaunchTimes:
    start: np.ndarray
    end: np.ndarray
    core: np.ndarray
    slot: np.ndarray  # stream slot; the slot's stream index on its core is slot // cores
    bound: np.ndarray  # index into BOUNDS
    hbm_bytes: np.ndarray
    l2_hit_bytes: np.ndarray
    samples: list[tuple[float, float, float]] = field(default_factory=list)  # (t, hbm B/cyc, l2 B/cyc)


def dispatch_queues(n_units: int, slots: int, policy: str, order: np.ndarray) -> list[list[int]]:
    """Per-slot unit lists (waves) or one queue shared by every slot (greedy, persistent), in order."""
    if policy == "waves":
        return [list(range(s, n_units, slots)) for s in range(slots)]
    return [order.tolist()]


def run_launch(kind: np.ndarray, cores: int, streams: int, policy: str, order: np.ndarray,
               cycles: Callable[[int, int], float], on_start: Callable[[int], tuple[float, float, float, float]],
               ports: Ports, t0: float = 0.0, samples: bool = False) -> LaunchTimes:
    """Event loop of one launch of units of ``kind``.

    ``cycles(kind, k)`` is a unit's compute time with k streams busy on its core;
    ``on_start(u)`` gives (latency, hbm bytes, l2 port bytes, l2 hit bytes) of unit u.
    ``samples``: also record the ports' throughput at every event (``LaunchTimes.samples``).
    """
    loop = _Loop(kind, cores, streams, cycles, on_start, ports, t0) if samples else \
        _LazyLoop(kind, cores, streams, cycles, on_start, ports, t0)
    queues = dispatch_queues(kind.size, cores * streams, policy, order)
    shared = policy != "waves"
    loop.run([q[::-1] for q in queues], shared)  # popped from the end
    return loop.times


class _Loop:
    """The loop's state per stream slot; what follows from the set of running units is kept until it changes."""

    def __init__(self, kind: np.ndarray, cores: int, streams: int, cycles: Callable[[int, int], float],
                 on_start: Callable[[int], tuple[float, float, float, float]], ports: Ports, t0: float) -> None:
        self.cores, self.cycles, self.on_start, self.ports, self.t = cores, cycles, on_start, ports, t0
        self.kind = kind
        self.table = np.full((int(kind.max(initial=0)) + 1, streams + 1), -1.0)
        n, s = kind.size, cores * streams
        self.slot_core = np.arange(s) % cores
        self.unit = np.full(s, -1)
        self.rem, self.lat = np.zeros(s), np.zeros(s)
        self.hb, self.lb = np.zeros(s), np.zeros(s)
        self.state_time = np.zeros((s, len(BOUNDS)))  # per slot: its unit's time in each state so far
        self.queued = n
        self.running: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        z = np.zeros(n)
        self.times = LaunchTimes(z.copy(), z.copy(), np.zeros(n, np.int64), np.zeros(n, np.int64),
                                 np.zeros(n, np.int64), z.copy(), z.copy())

    def run(self, queues: list[list[int]], shared: bool) -> None:
        self._fill(queues, shared)
        while np.any(self.unit >= 0):
            self._advance()
            self._fill(queues, shared)

    def _fill(self, queues: list[list[int]], shared: bool) -> None:
        if not self.queued:
            return
        for s in np.flatnonzero(self.unit < 0).tolist():
            q = queues[0] if shared else queues[s]
            if not q:
                continue
            u = q.pop()
            self.queued -= 1
            self.running = None
            lat, hbm, l2, hits = self.on_start(u)
            self.unit[s], self.rem[s], self.lat[s], self.hb[s], self.lb[s] = u, 1.0, lat, hbm, l2
            self.state_time[s] = 0.0
            tm = self.times
            tm.start[u], tm.core[u], tm.slot[u] = self.t, self.slot_core[s], s
            tm.hbm_bytes[u], tm.l2_hit_bytes[u] = hbm, hits

    def _running(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(busy slots, their units' compute cycles with the streams now on their cores, HBM and L2 bytes)."""
        if self.running is None:
            act = np.flatnonzero(self.unit >= 0)
            k = np.bincount(self.slot_core[act], minlength=self.cores)
            self.running = act, self._periods(self.kind[self.unit[act]], k[self.slot_core[act]]), self.hb[act], \
                self.lb[act]
        return self.running

    def _periods(self, kinds: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Compute cycles per unit with k streams on its core, each (kind, k) asked once."""
        missing = self.table[kinds, k] < 0
        if missing.any():
            for kind, streams in sorted(set(zip(kinds[missing].tolist(), k[missing].tolist()))):
                self.table[kind, streams] = self.cycles(kind, streams)
        return self.table[kinds, k]

    def _advance(self) -> None:
        act, period, hb, lb = self._running()
        lat = self.lat[act]
        going = lat <= 0
        every = bool(going.all())  # no unit waits its latency: the masks below select everything
        if every:
            x, state = waterfill(hb / period, lb / period, self.ports)
        else:
            x, state = np.zeros(act.size), np.full(act.size, 3)
            x[going], state[going] = waterfill(hb[going] / period[going], lb[going] / period[going], self.ports)
        rate = x / period
        with np.errstate(divide="ignore"):
            until = np.where(rate > 0, self.rem[act] / rate, np.inf)
        if not every:
            until = np.where(going, until, lat)
        dt = float(until.min())
        if not np.isfinite(dt):
            raise RuntimeError("chip event loop stalled: no unit can progress")
        self._sample(rate, hb, lb)
        self.state_time[act, state] += dt
        if every:
            self.rem[act] -= rate * dt
        else:
            self.rem[act] -= np.where(going, rate * dt, 0.0)
            self.lat[act] = np.where(going, 0.0, lat - dt)
        self.t += dt
        ended = until <= dt * (1 + EPS) + EPS
        done = act[ended if every else going & ended]
        if done.size:
            self.running = None
        for s in done.tolist():
            u = self.unit[s]
            self.times.end[u] = self.t
            self.times.bound[u] = int(np.argmax(self.state_time[s]))
            self.unit[s] = -1


    def _sample(self, rate: np.ndarray, hb: np.ndarray, lb: np.ndarray) -> None:
        self.times.samples.append((self.t, float(np.sum(rate * hb)), float(np.sum(rate * lb))))


class _LazyLoop(_Loop):
    """The same loop, each unit's state brought up to date only when it may end, start computing or change speed.

    While no port saturates and no unit's own HBM cap binds, every computing unit runs at x = 1, so a
    unit's progress and its time in each state follow from the events' steps alone: they are replayed,
    in the same order and float arithmetic as ``_Loop`` makes them, when the unit is next looked at.
    Each event looks at the units whose predicted end (or end of latency) lies within ``_MARGIN`` of
    the earliest, far more than the rounding of those predictions; the rest cannot end at it. Where a
    port might saturate, events are made one by one as ``_Loop`` makes them (without samples).
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

    def run(self, queues: list[list[int]], shared: bool) -> None:
        self._fill(queues, shared)
        while self.unit.max(initial=-1) >= 0:
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
        """Lazy state for every running unit, from the state ``_Loop`` left."""
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
        kind, k = int(self.kind[self.unit[s]]), self.k[self.slot_core[s]]
        period = self.table[kind, k]
        if period < 0:
            period = self.table[kind, k] = self.cycles(kind, k)
        self.rate[s] = 1.0 / period
        self.demand[s] = (self.hb[s] / period, self.lb[s] / period)
        if computing:
            self._count(s, 1)
        self._predict(s)

    def _count(self, s: int, sign: int) -> None:
        hbm, l2 = self.demand[s]
        self.need = [self.need[0] + sign * hbm, self.need[1] + sign * l2]
        if self.ports.unit_hbm is not None and hbm > 0 and self.ports.unit_hbm / hbm < 1.0:
            self.capped += sign

    def _predict(self, s: int) -> None:
        self.version[s] += 1
        left = self.rem[s] / self.rate[s] if self.lat[s] <= 0 else self.lat[s]
        heapq.heappush(self.heap, (self.t + left, s, self.version[s]))

    def _unsaturated(self) -> bool:
        return not self.capped and all(cap is None or need <= cap * (1 - _MARGIN)
                                       for need, cap in zip(self.need, (self.ports.hbm, self.ports.l2)))

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
        if not np.isfinite(dt):
            raise RuntimeError("chip event loop stalled: no unit can progress")
        self.steps.append(dt)
        self.t += dt
        cores = set()
        for s, until in looked:
            computing = self.lat[s] <= 0
            self._sync(s)
            if computing and until <= dt * (1 + EPS) + EPS:
                self._end(s)
                cores.add(int(self.slot_core[s]))
            elif not computing and self.lat[s] <= 0:
                self._count(s, 1)
                self._predict(s)
            else:
                self._predict(s)
        free = self.unit < 0
        self._fill(queues, shared)
        for s in np.flatnonzero(free & (self.unit >= 0)).tolist():
            self.last[s] = len(self.steps)
            cores.add(int(self.slot_core[s]))
        self._recount(cores, free)
        return True

    def _end(self, s: int) -> None:
        u = self.unit[s]
        self._count(s, -1)
        self.version[s] += 1
        self.times.end[u] = self.t
        self.times.bound[u] = int(np.argmax(self.state_time[s]))
        self.unit[s] = -1

    def _recount(self, cores: set[int], free: np.ndarray) -> None:
        """Streams on the cores where units ended or started; every unit of a core whose count changed, and
        every unit started, gets its speed anew."""
        for c in cores:
            slots = [s for s in range(c, self.unit.size, self.cores) if self.unit[s] >= 0]
            changed = len(slots) != self.k[c]
            self.k[c] = len(slots)
            for s in slots:
                if free[s]:
                    self._retime(s, started=True)
                elif changed:
                    self._sync(s)
                    self._retime(s, started=False)

    def _sync(self, s: int) -> None:
        """Replay the events since slot ``s`` was last brought up to date, as ``_Loop._advance`` makes them."""
        first, now = self.last[s], len(self.steps)
        if first == now:
            return
        steps = self.steps[first:now]
        if self.lat[s] <= 0:
            self.rem[s] = _fold(np.subtract, self.rem[s], np.frombuffer(steps) * self.rate[s])
            self.state_time[s, 0] = _fold(np.add, self.state_time[s, 0], np.frombuffer(steps))
        else:
            self.lat[s] = _fold(np.subtract, self.lat[s], np.frombuffer(steps))
            self.state_time[s, 3] = _fold(np.add, self.state_time[s, 3], np.frombuffer(steps))
        self.last[s] = now


_MARGIN = 1e-7  # relative: far above the rounding of a predicted end, far below the time between events


def _fold(op: np.ufunc, start: float, values: np.ndarray) -> float:
    """((start op v0) op v1) op ..., one rounding per step, left to right."""
    return float(op.accumulate(np.concatenate([[start], values]))[-1])


def waterfill(d_hbm: np.ndarray, d_l2: np.ndarray, ports: Ports) -> tuple[np.ndarray, np.ndarray]:
    """Max-min fair speed x ∈ (0, 1] per unit given its port demand at full speed (bytes/cycle).

    With ``ports.unit_hbm`` a unit's own HBM stream is capped too: x ≤ unit_hbm / d_hbm, one more level a unit may
    stop at (state ``latency``: its loads in flight, not a shared port, hold it).
    """
    x, state = np.ones(d_hbm.size), np.zeros(d_hbm.size, np.int64)
    own = x.copy()
    if ports.unit_hbm is not None:
        with np.errstate(divide="ignore"):
            own = np.where(d_hbm > 0, np.minimum(1.0, ports.unit_hbm / d_hbm), 1.0)
    demands = [(1, d_l2, ports.l2), (2, d_hbm, ports.hbm)]
    if own.min(initial=1.0) == 1.0 and all(cap is None or not need > 0 or not cap / need < 1.0
                                           for _, d, cap in demands for need in [d.sum()]):
        return x, state  # no port saturates at full speed: every unit computes at x = 1 (the loop's first level)
    free = np.ones(d_hbm.size, bool)
    while free.any():
        level = float(own[free].min())
        port = 3 if level < 1.0 else 0
        for code, d, cap in demands:
            need = d[free].sum()
            if cap is not None and need > 0:
                room = max(cap - float(np.sum(d[~free] * x[~free])), 0.0) / need
                if room < level:
                    level, port = room, code
        pick = free if port == 0 else free & (own <= level) if port == 3 else free & (demands[port - 1][1] > 0)
        x[pick], state[pick] = level, port
        free &= ~pick
    return x, state
