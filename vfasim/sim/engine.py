"""Discrete-event timing model: executes a trace on one core's pipelines, in integer cycles.

Conventions (the tests pin these down):
- Time starts at cycle 0. An op of c cycles that starts at t occupies its
  pipeline over [t, t + c) and ends at t + c; a dependant may start at t + c.
  Total latency is the end of the last op (fill and drain both included).
- An op starts once all its dependencies have ended and a unit of its pipeline
  is free. Among ready ops, a pipeline serves the earliest in issue order
  (non-preemptive), so the schedule is deterministic.
- ``pipelined``: tile t (one query block × one key block) may not load its K
  until tile t − B has finished entirely, B = ``score_buffers``; this is how far
  the cube can run ahead of the vector side. ``serial``: every op also waits
  for the previous op in issue order — no overlap at all.

Assumptions:
- Ops mapped to ``fused`` take zero cycles and no pipeline.
- Ops with no dependencies (Q loads) may be prefetched as soon as the mover is idle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import simpy

from vfasim.errors import VfasimError
from vfasim.hw.config import FUSED, HardwareConfig
from vfasim.trace import KIND_NAMES, Trace

SCHEDULES = ("pipelined", "serial")


@dataclass(frozen=True, eq=False)
class Timeline:
    """Per-op spans of one simulated run."""

    start_cycles: np.ndarray
    end_cycles: np.ndarray
    pipeline: np.ndarray  # index into pipeline_names, -1 for fused ops
    pipeline_names: tuple[str, ...]
    total_cycles: int


def op_cycles(trace: Trace, hw: HardwareConfig) -> tuple[np.ndarray, np.ndarray]:
    """(pipeline index, duration in cycles) of every op under ``hw``."""
    names = tuple(hw.pipelines)
    pipe_of_kind = np.array([names.index(hw.op_map[k]) if hw.op_map[k] != FUSED else -1
                             for k in KIND_NAMES])
    cost_of_kind = np.zeros((len(KIND_NAMES), 4))  # rate, factor, startup, overhead
    for code, kind in enumerate(KIND_NAMES):
        if pipe_of_kind[code] >= 0:
            p = hw.pipelines[hw.op_map[kind]]
            cost_of_kind[code] = (p.throughput[hw.rate_key(kind)], hw.work_factor.get(kind, 1.0),
                                  p.startup_cycles, p.issue_overhead_cycles)
    rate, factor, startup, overhead = cost_of_kind[trace.kind].T
    pipe = pipe_of_kind[trace.kind]
    with np.errstate(divide="ignore", invalid="ignore"):
        body = np.ceil(trace.work * factor / rate)
    cycles = np.where(pipe >= 0, startup + body + overhead, 0).astype(np.int64)
    return pipe, cycles


def simulate(trace: Trace, hw: HardwareConfig, schedule: str = "pipelined") -> Timeline:
    """Run ``trace`` on ``hw``; deterministic for equal inputs."""
    if schedule not in SCHEDULES:
        raise VfasimError(f"unknown schedule {schedule!r} (valid: {', '.join(SCHEDULES)})")
    pipe, cycles = op_cycles(trace, hw)
    run = _Run(trace, hw, pipe, cycles, schedule)
    run.env.run()
    if run.finished != len(trace):
        raise VfasimError(f"timing model deadlocked: {len(trace) - run.finished} ops never ran")
    return Timeline(run.start, run.end, pipe, tuple(hw.pipelines), int(run.end.max(initial=0)))


class _Run:
    """One SimPy environment: a process per op, started when its last dependency ends."""

    def __init__(self, trace: Trace, hw: HardwareConfig, pipe: np.ndarray, cycles: np.ndarray,
                 schedule: str) -> None:
        n = len(trace)
        self.env = simpy.Environment()
        self.units = [simpy.PriorityResource(self.env, capacity=p.units) for p in hw.pipelines.values()]
        self.pipe, self.cycles = pipe.tolist(), cycles.tolist()
        self.start = np.zeros(n, np.int64)
        self.end = np.zeros(n, np.int64)
        self.finished = 0
        self.children, self.waiting = _edges(trace, schedule, hw.score_buffers)
        self.tile, self.tile_left, self.tile_gates = _tiles(trace, hw.score_buffers, schedule)
        for i in range(n):
            if self.waiting[i] == 0:
                self.env.process(self._op(i))

    def _op(self, i: int):
        p = self.pipe[i]
        if p >= 0:
            with self.units[p].request(priority=i) as slot:
                yield slot
                self.start[i] = self.env.now
                yield self.env.timeout(self.cycles[i])
        else:
            self.start[i] = self.env.now
        self.end[i] = self.env.now
        self.finished += 1
        for child in self.children[i]:
            self._release(child)
        self._tile_done(i)

    def _release(self, child: int) -> None:
        self.waiting[child] -= 1
        if self.waiting[child] == 0:
            self.env.process(self._op(child))

    def _tile_done(self, i: int) -> None:
        tile = self.tile[i]
        if tile < 0:
            return
        self.tile_left[tile] -= 1
        if self.tile_left[tile] == 0 and tile in self.tile_gates:
            self._release(self.tile_gates[tile])


def _edges(trace: Trace, schedule: str, buffers: int) -> tuple[list[list[int]], list[int]]:
    """Children lists and pending-dependency counts (buffer gates counted in _tiles)."""
    n = len(trace)
    owner = np.repeat(np.arange(n), np.diff(trace.dep_ptr))
    parent = trace.dep_idx.astype(np.int64)
    if schedule == "serial":
        owner = np.concatenate([owner, np.arange(1, n)])
        parent = np.concatenate([parent, np.arange(n - 1)])
    pairs = np.unique(np.stack([parent, owner], axis=1), axis=0) if owner.size else np.empty((0, 2), int)
    children: list[list[int]] = [[] for _ in range(n)]
    for p, c in pairs.tolist():
        children[p].append(c)
    waiting = np.bincount(pairs[:, 1], minlength=n).tolist() if n else []
    if schedule == "pipelined":
        for gated in _gated_loads(trace, buffers).values():
            waiting[gated] += 1
    return children, waiting


def _gated_loads(trace: Trace, buffers: int) -> dict[int, int]:
    """tile id -> op id of the K load that must wait for that tile to finish."""
    tile = _tile_of(trace)
    first_op = {}
    for i, t in enumerate(tile.tolist()):
        if t >= 0 and t not in first_op:
            first_op[t] = i
    n_tiles = int(tile.max(initial=-1)) + 1
    return {t: first_op[t + buffers] for t in range(n_tiles - buffers)}


def _tiles(trace: Trace, buffers: int, schedule: str) -> tuple[list[int], list[int], dict[int, int]]:
    tile = _tile_of(trace)
    left = np.bincount(tile[tile >= 0], minlength=int(tile.max(initial=-1)) + 1).tolist()
    gates = _gated_loads(trace, buffers) if schedule == "pipelined" else {}
    return tile.tolist(), left, gates


def _tile_of(trace: Trace) -> np.ndarray:
    """Tile id per op in issue order; -1 for prelude and epilogue ops (no score buffer)."""
    in_tile = trace.kblock >= 0
    ids = np.full(len(trace), -1, np.int64)
    groups = trace.tile_ids()[in_tile]
    _, dense = np.unique(groups, return_inverse=True)
    ids[in_tile] = dense
    return ids
