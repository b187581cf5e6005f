"""The chip's event loop made one event at a time: every running unit's progress, port shares and state per event.

``fluid.py`` says what the model is; this is its plain form (``lazy.py`` makes the same events faster where no
port saturates). Per event the running units' speeds come from the water-filling below, time advances to the
earliest end (of a unit, or of a unit's exposed latency), and units that end free their slots for the next.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

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


class EventLoop:
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
        self.queued, self.finished = n, 0
        self.running: tuple[np.ndarray, ...] | None = None
        z = np.zeros(n)
        self.times = LaunchTimes(z.copy(), z.copy(), np.zeros(n, np.int64), np.zeros(n, np.int64),
                                 np.zeros(n, np.int64), z.copy(), z.copy())

    def run(self, queues: list[list[int]], shared: bool) -> None:
        self._fill(queues, shared)
        while self.finished < self.kind.size:
            self._advance()
            self._fill(queues, shared)

    def _fill(self, queues: list[list[int]], shared: bool, free: list[int] | None = None) -> list[int]:
        """Start the next unit on every free slot (``free``: those slots, in order) whose queue has one; the slots
        started."""
        if not self.queued:
            return []
        started = []
        for s in np.flatnonzero(self.unit < 0).tolist() if free is None else free:
            q = queues[0] if shared else queues[s]
            if not q:
                continue
            started.append(s)
            u = q.pop()
            self.queued -= 1
            self.running = None
            lat, hbm, l2, hits = self.on_start(u)
            self.unit[s], self.rem[s], self.lat[s], self.hb[s], self.lb[s] = u, 1.0, lat, hbm, l2
            self.state_time[s] = 0.0
            tm = self.times
            tm.start[u], tm.core[u], tm.slot[u] = self.t, self.slot_core[s], s
            tm.hbm_bytes[u], tm.l2_hit_bytes[u] = hbm, hits
        return started

    def _running(self) -> tuple[np.ndarray, ...]:
        """(busy slots, their units' compute cycles with the streams now on their cores, HBM and L2 bytes, and those
        bytes per cycle at full speed)."""
        if self.running is None:
            act = np.flatnonzero(self.unit >= 0)
            k = np.bincount(self.slot_core[act], minlength=self.cores)
            period = self._periods(self.kind[self.unit[act]], k[self.slot_core[act]])
            hb, lb = self.hb[act], self.lb[act]
            self.running = act, period, hb, lb, hb / period, lb / period
        return self.running

    def _periods(self, kinds: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Compute cycles per unit with k streams on its core, each (kind, k) asked once."""
        missing = self.table[kinds, k] < 0
        if missing.any():
            for kind, streams in sorted(set(zip(kinds[missing].tolist(), k[missing].tolist()))):
                self.table[kind, streams] = self.cycles(kind, streams)
        return self.table[kinds, k]

    def _advance(self) -> None:
        act, period, hb, lb, d_hbm, d_l2 = self._running()
        lat = self.lat[act]
        going = lat <= 0
        every = bool(going.all())  # no unit waits its latency: the masks below select everything
        if every:
            x, state = waterfill(d_hbm, d_l2, self.ports)
        else:
            x, state = np.zeros(act.size), np.full(act.size, 3)
            x[going], state[going] = waterfill(d_hbm[going], d_l2[going], self.ports)
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
        self.finished += done.size
        if done.size:
            self.running = None
        for s in done.tolist():
            u = self.unit[s]
            self.times.end[u] = self.t
            self.times.bound[u] = int(np.argmax(self.state_time[s]))
            self.unit[s] = -1


    def _sample(self, rate: np.ndarray, hb: np.ndarray, lb: np.ndarray) -> None:
        self.times.samples.append((self.t, float(np.sum(rate * hb)), float(np.sum(rate * lb))))


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
    demands = [(1, d_l2, ports.l2, d_l2.sum()), (2, d_hbm, ports.hbm, d_hbm.sum())]  # each with its total
    if own.min(initial=1.0) == 1.0 and all(cap is None or not need > 0 or not cap / need < 1.0
                                           for _, _, cap, need in demands):
        return x, state  # no port saturates at full speed: every unit computes at x = 1 (the loop's first level)
    free = np.ones(d_hbm.size, bool)
    first = True  # every unit free: the sums below are the totals, nothing is used yet (the same floats)
    while free.any():
        level = float(own.min() if first else own[free].min())
        port = 3 if level < 1.0 else 0
        for code, d, cap, total in demands:
            need = total if first else d[free].sum()
            if cap is not None and need > 0:
                room = max(cap - (0.0 if first else float(np.sum(d[~free] * x[~free]))), 0.0) / need
                if room < level:
                    level, port = room, code
        first = False
        pick = free if port == 0 else free & (own <= level) if port == 3 else free & (demands[port - 1][1] > 0)
        x[pick], state[pick] = level, port
        free &= ~pick
    return x, state
