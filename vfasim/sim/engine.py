"""Timing model of one core: the static schedule of a trace, computed in closed form, in integer cycles.

Conventions (the tests pin these down):
- Time starts at cycle 0. An op of c cycles that starts at t occupies its
  pipeline over [t, t + c) and ends at t + c; a dependant may start at t + c.
  Total latency is the end of the last op (fill and drain both included).
- Each pipeline runs its own instruction stream *in order*, like an in-order
  issue queue: an op starts once its dependencies have ended and the op before
  it in its pipeline's stream has ended (with ``units`` > 1, the op ``units``
  places before it; with ``units_by: row``, the previous op of its trace row on
  unit row mod ``units``, each row keeping its own queue). Pipelines marked
  ``shares_issue_with`` share one stream: their ops take turns in issue order and
  never overlap one another.
- ``pipelined`` (software pipelining over B = score_buffers tiles in flight):
  the trace gives each op a stage; stage s of tile t is issued in step
  t + min(s, B − 1), and within a step stages go in order, so the cube runs
  ahead of the vector side by up to B − 1 tiles. A tile buffer taken by a load
  is free again once the op the trace names as freeing it has ended, and the
  core has B buffers of each kind. Ops of the pipeline roles a config names in
  ``take_turns`` (set by a kernel whose exps never run beside its matmuls) also
  wait for the previous such op in issue order (of their own row with
  ``turns_within: row``: a loop each stream runs in program order). ``serial``: one stream for the
  whole core, in issue order — no overlap at all. (``schedule.py`` has the details.)

Method: ops are visited in issue order, a topological order of every edge
above (where a trace's buffer use runs against it, the earliest-issued-first
topological order instead; a cycle is refused). Each op starts at the latest
end among its predecessors (0 if none) and ends at start + cycles
(``closed_form.py``). This is exactly what an event simulation with each
pipeline a resource of ``units`` slots gives: op k of a stream waits for op
k − units, so a pipeline's ops form ``units`` chains (stream index mod units,
or row mod units under ``units_by: row``, each unit then a one-slot resource)
and never more than ``units`` run at once; the resource never makes an op wait
(a test checks the two agree on random traces and cores). Each op records the
predecessor whose end it waited for and the edge kind (ties: data
dependencies, then stream, then buffer, then turn; lower op id first); the critical path
is read from that record.

A faster unit never slows the kernel: every end is a maximum over paths of a
fixed graph of sums of op cycles, so no end grows when an op's cycles shrink.
This holds because the schedule is static — the order of every stream is fixed
before timing. It fails where the order itself is decided by timing: when
cores share an arbitrated memory port served first come, first served, a
faster unit can make one core's request arrive earlier and take the port ahead
of another core's, delaying that core's critical path (Graham's anomalies).

Assumptions:
- Ops mapped to ``fused`` take zero cycles, no pipeline and no stream slot.
- Ops are priced by their own dtype in the trace, and by bytes for data moves.
- An op kind with a result latency L (``result_latency``) holds its pipeline for its cycles only; the ops that
  read its result, and the op taking its turn after it, start no earlier than L cycles after it starts (``ready``:
  the later of its end and start + L), its stream and buffer successors at its end.
- Q loads and m-init of a query block are issued with its first tile.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from vfasim.hw.config import HardwareConfig
from vfasim.sim.closed_form import end_cycles
from vfasim.sim.schedule import (BUFFER, DATA, SCHEDULES, STREAM, TURN, buffer_predecessors, check_schedule,
                                 issue_order, op_cycles, op_latency, schedule_edges, stream_order, stream_predecessors,
                                 turn_predecessors)
from vfasim.sim.sums import sums_by
from vfasim.trace import Trace

__all__ = ["SCHEDULES", "Timeline", "op_cycles", "schedule_edges", "simulate", "stream_order"]

_CHUNK = 65536  # ops whose wait record is worked out at a time


@dataclass(frozen=True, eq=False)
class Timeline:
    """Per-op spans of one run, and what each op's start waited for."""

    start_cycles: np.ndarray
    end_cycles: np.ndarray
    pipeline: np.ndarray  # index into pipeline_names, -1 for fused ops
    pipeline_names: tuple[str, ...]
    total_cycles: int
    waited_on: np.ndarray | None = None  # int32 op whose end (ready, for a data edge) the start waited for, -1 if none
    wait_kind: np.ndarray | None = None  # int8 code into EDGE_KINDS of that edge, -1 if none
    schedule: str | None = None
    ready_cycles: np.ndarray | None = None  # when each op's result may be read (end + result latency); None: the end

    @functools.cached_property
    def durations(self) -> np.ndarray:
        """Cycles each op runs: end − start (made once, read by the statistics and the critical path)."""
        return self.end_cycles - self.start_cycles

    @functools.cached_property
    def busy_cycles(self) -> tuple[int, ...]:
        """Per pipeline (as ``pipeline_names``), the cycles it runs ops: the sum of their durations."""
        return tuple(sums_by(self.pipeline, self.durations, len(self.pipeline_names)).tolist())


def simulate(trace: Trace, hw: HardwareConfig, schedule: str = "pipelined", waits: bool = True) -> Timeline:
    """Run ``trace`` on ``hw``; deterministic for equal inputs. ``waits=False`` leaves out the wait record (what each
    op's start waited for; the critical path reads it), for a caller that needs only the spans."""
    check_schedule(schedule)
    pipe, cycles = op_cycles(trace, hw)
    order = issue_order(trace, hw, schedule)
    stream = stream_predecessors(pipe, order, hw, schedule, trace.row)
    buffer = buffer_predecessors(trace, hw.score_buffers, schedule)
    turn = turn_predecessors(pipe, order, hw, schedule, trace.row)
    latency = op_latency(trace, hw, cycles)
    end, ready = end_cycles(trace, order, cycles, stream, buffer, turn, schedule, latency)
    del order
    start = end - cycles
    del cycles
    waited_on, wait_kind = _wait_record(trace, stream, buffer, turn, start, end, ready) if waits else (None, None)
    return Timeline(start, end, pipe, tuple(hw.pipelines), int(end.max(initial=0)), waited_on, wait_kind,
                    schedule, None if latency is None else ready)


def _wait_record(trace: Trace, stream: np.ndarray, buffer: np.ndarray, turn: np.ndarray, start: np.ndarray,
                 end: np.ndarray, ready: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per op, the predecessor whose end (``ready``, for a data dependency) its start equals and the edge kind
    (-1, -1 if none); ties go to data dependencies, then stream, then buffer, then turn, then the lower op id."""
    dep_ptr, dep_idx = trace.dep_ptr, trace.dep_idx
    n = len(trace)
    waited_on, wait_kind = np.empty(n, np.int32), np.empty(n, np.int8)
    for lo in range(0, n, _CHUNK):
        hi = min(lo + _CHUNK, n)
        begins = start[lo:hi]
        found = np.full(hi - lo, n, np.int32)  # n: none yet
        ptr = dep_ptr[lo:hi + 1]
        deps, owner = dep_idx[ptr[0]:ptr[-1]], np.repeat(np.arange(hi - lo), np.diff(ptr))
        hit = np.flatnonzero(ready[deps] == begins[owner])
        np.minimum.at(found, owner[hit], deps[hit])  # data: the lowest id among those it waited for
        kind = np.where(found < n, DATA, -1).astype(np.int8)
        for code, parent, at in ((STREAM, stream[lo:hi], end), (BUFFER, buffer[lo:hi], end),
                                 (TURN, turn[lo:hi], ready)):
            take = (kind < 0) & (parent >= 0) & (at[parent] == begins)
            np.copyto(found, parent, where=take)
            np.copyto(kind, code, where=take)
        waited_on[lo:hi] = np.where(kind >= 0, found, -1)
        wait_kind[lo:hi] = kind
    return waited_on, wait_kind
