"""Critical-path attribution: which pipeline and op kind every cycle of the latency waits on.

The path is walked back from the op that ends last (the lowest id on a tie)
along the record the timing model keeps: for every op, the predecessor whose
end its start waited for and the kind of that edge (data dependency, pipeline
stream, tile buffer, or a memory port in a chip model). Ties were settled when
the record was made: data dependencies first, then the lower op id. Every
cycle of ``[0, latency)`` is then charged to the path op running at that
moment; cycles when no path op runs are ``idle``: on one core, the cycles a path
op waits out the result latency of the op before it (``result_latency``; zero
without one, since an op starts as soon as its last predecessor ends); kept so the
attribution always sums to the latency.

Definitions (per pipeline, as reported in ``CriticalPath.pipelines``):
- ``critical_cycles``: latency cycles during which the pipeline runs the path
  op. It bounds, to first order, what making this pipeline infinitely fast
  could save; the pipeline with the largest share is what the config is bound by.
- ``busy_cycles``: all cycles the pipeline runs ops (as in ``timing_stats``).
- ``off_path_cycles`` = busy − critical: work hidden behind the critical path;
  speeding only that up saves nothing until the path moves.
``bound_by`` counts the path's edges by type: many ``stream`` edges mean ops
queue for a busy pipeline (throughput-bound), many ``data`` edges mean a
dependency chain (latency-bound), ``buffer`` edges mean too few score buffers,
``port`` edges a contended memory port.

Assumptions:
- The timeline was produced by ``simulate`` for the same trace and schedule;
  a timeline whose record does not match its spans is refused.
- Fused ops (zero cycles) can lie on the path; they carry no cycles.
- First-order only: speeding up a path op can move the path elsewhere.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np

from vfasim.errors import VfasimError
from vfasim.hw.config import HardwareConfig
from vfasim.sim.engine import Timeline
from vfasim.sim.schedule import DATA, EDGE_KINDS, TURN, check_schedule
from vfasim.sim.sums import sums_by
from vfasim.trace import KIND_NAMES, Trace

IDLE = "idle"
_CHUNK = 1 << 16  # ops whose record is checked at a time
_STEPS = 1 << 20  # path ops followed one by one before the walk jumps
_JUMP_BITS = 3  # the walk then follows 2^3 links at a time


@dataclass(frozen=True, eq=False)
class CriticalPath:
    """Attribution of every latency cycle to the op on the critical path at that moment."""

    latency_cycles: int
    ops: np.ndarray  # op ids on the path, in time order
    by_pipeline: dict[str, int]  # pipeline name (and "idle") -> cycles; sums to latency_cycles
    by_kind: dict[str, int]  # op kind -> cycles on the path, largest first
    pipelines: dict[str, dict[str, float]]  # name -> critical_cycles, busy_cycles, off_path_cycles, critical_share
    bound_by: dict[str, int]  # edge type -> edges on the path
    bottleneck: str  # pipeline with the most critical cycles

    def to_dict(self) -> dict:
        """JSON-ready summary (the op ids are left out: they can be 100K long)."""
        return {"latency_cycles": self.latency_cycles, "path_ops": int(self.ops.size),
                "bottleneck": self.bottleneck, "by_pipeline": dict(self.by_pipeline),
                "by_kind": dict(self.by_kind), "pipelines": {k: dict(v) for k, v in self.pipelines.items()},
                "bound_by": dict(self.bound_by)}


def critical_path(trace: Trace, timeline: Timeline, hw: HardwareConfig,
                  schedule: str = "pipelined") -> CriticalPath:
    """Walk back from the last op along what each op waited on and attribute its cycles.

    ``hw`` is the config the timeline was made on; the timeline's record already holds all
    the walk needs.
    """
    check_schedule(schedule)
    waited_on, wait_kind = _wait_record(trace, timeline, schedule)
    path = walk(waited_on, timeline.end_cycles)
    return attribute(path, timeline.pipeline[path], trace.kind[path], timeline.durations[path], wait_kind[path[1:]],
                     timeline.total_cycles, timeline.busy_cycles, timeline.pipeline_names)


def _wait_record(trace: Trace, timeline: Timeline, schedule: str) -> tuple[np.ndarray, np.ndarray]:
    """The timeline's record of what each op waited on, once it is checked against the spans."""
    waited_on, wait_kind = timeline.waited_on, timeline.wait_kind
    if waited_on is None or wait_kind is None:
        raise VfasimError("timeline carries no record of what its ops waited on")
    if timeline.schedule not in (None, schedule) or timeline.end_cycles.size != len(trace):
        raise VfasimError(f"timeline does not match the trace/schedule: {timeline.end_cycles.size} ops "
                          f"timed {timeline.schedule or 'by an unnamed schedule'}, asked for {len(trace)} "
                          f"ops {schedule}")
    for lo in range(0, waited_on.size, _CHUNK):  # a chunk at a time: small temporaries
        at = slice(lo, lo + _CHUNK)
        parent, kind = waited_on[at], wait_kind[at]
        ready = timeline.end_cycles[parent]  # -1 (none) reads the last op's: left out below
        if timeline.ready_cycles is not None:  # a data or turn edge waits for the result, ready after its latency
            ready = np.where((kind == DATA) | (kind == TURN), timeline.ready_cycles[parent], ready)
        late = (parent >= 0) & (ready != timeline.start_cycles[at])
        if np.any(late):
            i = lo + int(np.flatnonzero(late)[0])
            raise VfasimError(f"timeline does not match its record: op {i} does not start when op "
                              f"{waited_on[i]}, which it waited for, ends")
    return waited_on, wait_kind


def walk(bound: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Op ids from the first path op to the one that ends last (lowest id on a tie).

    The first ``_STEPS`` links are followed one by one; a longer path (a pipeline busy throughout, millions of
    ops) is then followed ``2^_JUMP_BITS`` links at a time, through a table of each op's ancestor that many links
    back, and the ops between filled in with one array look-up per link."""
    if end.size == 0:
        return np.empty(0, np.int64)
    links = np.ascontiguousarray(bound, np.int32)
    op = int(np.argmax(end))  # argmax returns the lowest id on a tie
    path = array("q", [op])  # 8 bytes a path op
    append, view = path.append, links.data  # a memoryview: no Python int per op, unlike tolist()
    for _ in range(min(_STEPS, len(links))):  # a path without a cycle has fewer links than ops
        op = view[op]
        if op < 0:
            return np.frombuffer(path, np.int64)[::-1].copy()
        append(op)
    rest = _jumped(links, op)[::-1]  # the path's first ops, in time order
    walked = np.frombuffer(path, np.int64)[-2::-1]
    return np.concatenate([rest, walked])


def _jumped(links: np.ndarray, op: int) -> np.ndarray:
    """The path from ``op`` on (op first), followed ``2^_JUMP_BITS`` links at a time."""
    n, stride = links.size, 1 << _JUMP_BITS
    link = np.empty(n + 1, np.int32)  # int32, as the ids
    link[:n] = links
    link[np.flatnonzero(links < 0)] = link[n] = n  # n: no predecessor, its own
    jump, spare = link[link], np.empty_like(link)
    for _ in range(_JUMP_BITS - 1):  # each op's ancestor twice as far back
        for lo in range(0, n + 1, _CHUNK):  # a chunk at a time: no temporary as large as the table
            spare[lo:lo + _CHUNK] = jump[jump[lo:lo + _CHUNK]]
        jump, spare = spare, jump
    del spare
    marks = array("q", [op])  # every stride-th path op
    mark, hop = marks.append, jump.data
    for _ in range(n // stride + 1):
        op = hop[op]
        if op == n:
            break
        mark(op)
    else:
        raise VfasimError("timeline's record of what ops waited on has a cycle")
    del hop, jump
    rows: list[np.ndarray] = [np.frombuffer(marks, np.int64)]
    for _ in range(stride - 1):
        rows.append(link[rows[-1]])
    between = np.stack(rows, axis=1).ravel()  # each mark, then the ops up to the next
    return between[:np.argmax(between == n)] if between[-1] == n else between


def attribute(path: np.ndarray, pipeline: np.ndarray, kind: np.ndarray, dur: np.ndarray, waits: np.ndarray,
              latency: int, busy: tuple[int, ...], names: tuple[str, ...],
              times: np.ndarray | None = None) -> CriticalPath:
    """The attribution of a path (op ids, in time order) from its ops' pipelines, kinds and cycles and the edge kinds
    of what each but the first waited on, in a timeline of ``latency`` cycles whose pipelines (``names``) were busy
    ``busy`` cycles. With ``times``, those are given once for ops that each stand ``times`` times on the path."""
    if times is not None:
        dur = dur * times
    crit = sums_by(pipeline, dur, len(names))
    idle = latency - int(dur.sum())
    if idle < 0:
        raise VfasimError("critical path is longer than the latency: ops on the path overlap")
    by_pipeline = {**{name: int(crit[p]) for p, name in enumerate(names)}, IDLE: idle}
    pipelines = {name: _pipeline_entry(int(crit[p]), busy[p], latency) for p, name in enumerate(names)}
    edge_counts = np.bincount(waits, None if times is None else times[1:], minlength=len(EDGE_KINDS))
    return CriticalPath(
        latency_cycles=latency, ops=path, by_pipeline=by_pipeline, by_kind=_by_kind(kind, dur), pipelines=pipelines,
        bound_by={k: int(c) for k, c in zip(EDGE_KINDS, edge_counts)},
        bottleneck=max(names, key=lambda n: by_pipeline[n]) if names else IDLE)


def _pipeline_entry(critical: int, busy: int, latency: int) -> dict[str, float]:
    return {"critical_cycles": critical, "busy_cycles": busy, "off_path_cycles": busy - critical,
            "critical_share": critical / latency if latency else 0.0}


def _by_kind(kinds: np.ndarray, dur: np.ndarray) -> dict[str, int]:
    cycles = sums_by(kinds, dur, len(KIND_NAMES))
    order = sorted((k for k in range(len(KIND_NAMES)) if cycles[k] > 0), key=lambda k: (-cycles[k], k))
    return {KIND_NAMES[k]: int(cycles[k]) for k in order}
