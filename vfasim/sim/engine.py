"""Discrete-event timing model: executes a trace on one core's pipelines, in integer cycles.

Conventions (the tests pin these down):
- Time starts at cycle 0. An op of c cycles that starts at t occupies its
  pipeline over [t, t + c) and ends at t + c; a dependant may start at t + c.
  Total latency is the end of the last op (fill and drain both included).
- Each pipeline runs its own instruction stream *in order*, like an in-order
  issue queue: an op starts once its dependencies have ended and the op before
  it in its pipeline's stream has ended (with ``units`` > 1, the op ``units``
  places before it). The schedule is a static order plus dependencies, so it is
  deterministic and a faster pipeline can never make the kernel slower.
- ``pipelined`` (software pipelining over B = score_buffers tiles in flight):
  a tile's ops fall in four stages — 0 K load and QK; 1 scale to exp; 2 rowsum,
  l update, cast of P, V load and PV; 3 O rescale and accumulate. Stage s of
  tile t is issued in step t + min(s, B − 1), and within a step stages go in
  order, so while tile t's exp runs the vector side already prepares tile
  t + 1, and at most B score tiles are live. K and V have B buffers each:
  tile t loads K after QK of tile t − B, and V after PV of tile t − B.
  ``serial``: one stream for the whole core, in issue order — no overlap at all.

Assumptions:
- Ops mapped to ``fused`` take zero cycles, no pipeline and no stream slot.
- Q loads and m-init of a query block are issued with its first tile.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import simpy

from vfasim.errors import VfasimError
from vfasim.hw.config import FUSED, HardwareConfig
from vfasim.trace import KIND_CODE, KIND_NAMES, Trace

SCHEDULES = ("pipelined", "serial")
#: software-pipeline stage of each op kind (prelude kinds run with stage 0 of their first tile)
STAGE: dict[str, int] = {
    "key_summary": 0, "load_q": 0, "minit_matmul": 0, "minit_max": 0, "load_k": 0, "qk_matmul": 0,
    "move_s": 1, "scale": 1, "mask": 1, "rowmax": 1, "running_max": 1, "skip_test": 1,
    "rescale_factor": 1, "sub": 1, "exp": 1, "exp_emul": 1,
    "rowsum": 2, "accumulate_l": 2, "quant_p": 2, "cast_p": 2, "move_p": 2, "load_v": 2, "pv_matmul": 2,
    "rescale_o": 3, "accumulate_o": 3, "accumulate_pv": 3, "normalize": 3, "store_o": 3,
}


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
        self.units = [simpy.Resource(self.env, capacity=p.units) for p in hw.pipelines.values()]
        self.pipe, self.cycles = pipe.tolist(), cycles.tolist()
        self.start = np.zeros(n, np.int64)
        self.end = np.zeros(n, np.int64)
        self.finished = 0
        self.children, self.waiting = _edges(trace, hw, pipe, schedule)
        for i in range(n):
            if self.waiting[i] == 0:
                self.env.process(self._op(i))

    def _op(self, i: int):
        p = self.pipe[i]
        if p >= 0:
            with self.units[p].request() as slot:
                yield slot
                self.start[i] = self.env.now
                yield self.env.timeout(self.cycles[i])
        else:
            self.start[i] = self.env.now
        self.end[i] = self.env.now
        self.finished += 1
        for child in self.children[i]:
            self.waiting[child] -= 1
            if self.waiting[child] == 0:
                self.env.process(self._op(child))


def _edges(trace: Trace, hw: HardwareConfig, pipe: np.ndarray, schedule: str) -> tuple[list[list[int]], list[int]]:
    """Children lists and pending-dependency counts: data deps plus the schedule's order edges."""
    parent, child, _ = schedule_edges(trace, hw, pipe, schedule)
    pairs = np.unique(np.stack([parent, child], axis=1), axis=0)
    children: list[list[int]] = [[] for _ in range(len(trace))]
    for p, c in pairs.tolist():
        children[p].append(c)
    return children, np.bincount(pairs[:, 1], minlength=len(trace)).tolist()


def schedule_edges(trace: Trace, hw: HardwareConfig, pipe: np.ndarray,
                   schedule: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(parent, child, edge kind code) of every edge the schedule makes an op wait on.

    Kinds: 0 data dependency, 1 stream order (or the serial chain), 2 buffer reuse.
    """
    n = len(trace)
    parts = [(trace.dep_idx.astype(np.int64), np.repeat(np.arange(n), np.diff(trace.dep_ptr)), 0)]
    if schedule == "serial":
        parts.append((np.arange(n - 1), np.arange(1, n), 1))
    else:
        parts += [(p, c, 1) for p, c in _stream_edges(trace, hw, pipe)]
        parts += [(p, c, 2) for p, c in _buffer_edges(trace, hw.score_buffers)]
    parent = np.concatenate([np.asarray(p, np.int64) for p, _, _ in parts])
    child = np.concatenate([np.asarray(c, np.int64) for _, c, _ in parts])
    kind = np.concatenate([np.full(len(p), k, np.int8) for p, _, k in parts])
    return parent, child, kind


def _stream_edges(trace: Trace, hw: HardwareConfig, pipe: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per pipeline, each op waits for the op ``units`` places before it in the stream order."""
    order = stream_order(trace, hw.score_buffers)
    edges = []
    for p, spec in enumerate(hw.pipelines.values()):
        stream = order[pipe[order] == p]
        edges.append((stream[:-spec.units] if spec.units < stream.size else stream[:0], stream[spec.units:]))
    return edges


def stream_order(trace: Trace, buffers: int) -> np.ndarray:
    """Op ids in software-pipelined issue order (see the module notes)."""
    tile = trace.tile_ids()
    starts = (trace.kblock >= 0) & np.concatenate([[True], tile[1:] != tile[:-1]])
    seen = np.cumsum(starts)  # tiles begun so far, in issue order
    stage = np.array([STAGE[k] for k in KIND_NAMES])[trace.kind]
    step = np.where(trace.step == 0, seen, seen - 1) + np.minimum(stage, buffers - 1)
    return np.lexsort((np.arange(len(trace)), stage, step))


def _buffer_edges(trace: Trace, buffers: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """K (V) load of tile t waits for the QK (PV) of tile t − B that frees its buffer."""
    tile = trace.tile_ids()
    edges = []
    for load, use in (("load_k", "qk_matmul"), ("load_v", "pv_matmul")):
        loads = np.flatnonzero(trace.kind == KIND_CODE[load])
        users = np.flatnonzero(trace.kind == KIND_CODE[use])
        rank = np.searchsorted(tile[users], tile[loads])  # users are in tile order, like loads
        ok = rank >= buffers
        edges.append((users[rank[ok] - buffers], loads[ok]))
    return edges
