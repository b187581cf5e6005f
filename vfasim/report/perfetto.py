"""Chrome / Perfetto trace export of a simulated run (open in ui.perfetto.dev or chrome://tracing).

Layout: one process (pid 1, "vfasim"), one thread track per pipeline in config
order, then a "fused" track for zero-cycle fused ops (only if there are any), a
"critical path" track repeating the ops the latency waits on (when given) and
an "algorithm" track of instant events (only if events are given). Each op is
one complete ("X") event named by its op kind (``exp``, ``qk_matmul``: Perfetto
aggregates by name), with args ``op`` (id), ``row``, ``step``, ``kblock``,
``start_cycle``, ``cycles``, ``work`` and ``dtype``; its category is the op
class (tensor, vector, exp, memory).

Time: every boundary is mapped once from integer cycles to integer nanoseconds
at the configured clock (``ns_of``: one monotone map, so slices that touch in
cycles touch in ns and none overlaps its neighbour), then written in Chrome's
microseconds with three decimals: Perfetto rounds ``ts * 1000`` back to the same
integer. The document says so in ``otherData`` (``time_unit``, ``clock_ghz``).
Pass ``clock_ghz=1`` to read one cycle as one nanosecond.

Size: about 200 bytes per event. A document over ``MAX_EVENTS`` events is
refused with a line that says how to write part of it (``window``: the ops
that overlap a ``(start, end)`` range of cycles).

Assumptions:
- Algorithm events are ``(cycle, name, args)`` tuples produced elsewhere; they
  are drawn as thread-scoped instant events and their args are made JSON-safe
  (NumPy scalars to Python, non-finite floats to null).
- The document is built in memory.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from vfasim.errors import VfasimError
from vfasim.io.outputs import stdout_error, write_with
from vfasim.sim.engine import Timeline
from vfasim.trace import DTYPES, KIND_CODE, KIND_NAMES, OP_KINDS, Trace

PID = 1
FUSED_TRACK = "fused"
CRITICAL_TRACK = "critical path"
ALGORITHM_TRACK = "algorithm"
MAX_EVENTS = 1_000_000  # about 200 MB of JSON
BYTES_PER_EVENT = 200
STDOUT = "-"  # trace_out naming standard output
AlgorithmEvent = tuple[int, str, Mapping[str, object]]
Window = tuple[int, int]  # [start, end) in cycles


def ns_of(cycles: np.ndarray | float, clock_ghz: float) -> np.ndarray:
    """Integer nanoseconds of cycle times: one monotone map for every boundary of a trace."""
    return np.rint(np.asarray(cycles, dtype=np.float64) / clock_ghz).astype(np.int64)


def us(ns: int) -> float:
    """Chrome's microseconds for an integer ns; Perfetto's ``llround(us * 1000)`` gives ``ns`` back."""
    return ns / 1000


def document(events: list[dict], clock_ghz: float) -> dict:
    """The JSON-object trace format, stating its time base (``displayTimeUnit`` is left out: Perfetto ignores it
    and older importers read it as the unit of ``ts``)."""
    return {"traceEvents": events,
            "otherData": {"time_unit": "ns (integer, from integer cycles; written as us with 3 decimals)",
                          "clock_ghz": clock_ghz}}


def in_window(start: np.ndarray, end: np.ndarray, window: Window | None) -> np.ndarray:
    """Mask of the spans that overlap ``[window[0], window[1])`` cycles (every span without a window)."""
    if window is None:
        return np.ones(np.shape(start), bool)
    lo, hi = window
    return (start < hi) & ((end > lo) | (start >= lo))


def check_size(events: int, window: Window | None, latency_cycles: float) -> None:
    """Refuse a document of more than ``MAX_EVENTS`` events, saying how to write part of it."""
    if events <= MAX_EVENTS:
        return
    part = max(1, int(latency_cycles * MAX_EVENTS / events) // 2)
    raise VfasimError(f"trace of {events:,} events (about {events * BYTES_PER_EVENT / 1e6:,.0f} MB) is over the "
                      f"{MAX_EVENTS:,}-event limit{' even in its window' if window else ''}; write part of it with "
                      f"--trace-window START:END (cycles; e.g. 0:{part} of {int(latency_cycles):,})")


def chrome_trace(trace: Trace, timeline: Timeline, events: Iterable[AlgorithmEvent] | None = None,
                 clock_ghz: float = 1.0, critical_ops: np.ndarray | None = None,
                 window: Window | None = None) -> dict:
    """The trace document of one core's run (see the module's note for its layout and time base)."""
    if not clock_ghz > 0:
        raise ValueError(f"clock_ghz must be > 0, got {clock_ghz}")
    keep = in_window(timeline.start_cycles, timeline.end_cycles, window)
    crit = np.asarray(critical_ops if critical_ops is not None else [], dtype=np.int64)
    crit = crit[keep[crit]]
    instants = [e for e in events or () if window is None or window[0] <= e[0] < window[1]]
    check_size(int(keep.sum()) + crit.size + len(instants), window, float(timeline.end_cycles.max(initial=0)))
    tracks = _tracks(timeline, critical_ops is not None, events is not None)
    out = [_meta("process_name", 0, "vfasim")]
    for name, tid in tracks.items():
        out += [_meta("thread_name", tid, name), _meta("thread_sort_index", tid, tid, key="sort_index")]
    pipe_tid = [tracks[n] for n in timeline.pipeline_names] + [tracks.get(FUSED_TRACK, 0)]
    out += _op_events(trace, timeline, np.flatnonzero(keep), np.take(pipe_tid, timeline.pipeline), clock_ghz)
    if critical_ops is not None:
        out += _op_events(trace, timeline, crit, np.full(len(trace), tracks[CRITICAL_TRACK]), clock_ghz)
    if events is not None:
        out += [_instant(c, n, a, tracks[ALGORITHM_TRACK], clock_ghz) for c, n, a in instants]
    return document(out, clock_ghz)


def write_chrome_trace(path: str | Path, doc: dict) -> None:
    """Write ``doc`` as JSON atomically (see ``vfasim.io.outputs``), or to standard output for ``"-"``."""
    def dump(f: object) -> None:
        json.dump(doc, f, allow_nan=False, separators=(",", ":"))  # type: ignore[arg-type]

    if str(path) == STDOUT:
        try:
            dump(sys.stdout)
            sys.stdout.write("\n")
            sys.stdout.flush()
        except OSError as exc:  # full, or a reader that left: one line, as for any output
            raise stdout_error(exc, "the trace") from None
        return

    def to_file(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            dump(f)

    write_with(path, to_file, "trace file")


def _tracks(timeline: Timeline, with_critical: bool, with_events: bool) -> dict[str, int]:
    """Track name -> tid (1-based, in display order)."""
    names = list(timeline.pipeline_names)
    if np.any(timeline.pipeline < 0):
        names.append(FUSED_TRACK)
    if with_critical:
        names.append(CRITICAL_TRACK)
    if with_events:
        names.append(ALGORITHM_TRACK)
    return {name: tid for tid, name in enumerate(names, start=1)}


def _meta(what: str, tid: int, value: object, key: str = "name") -> dict:
    return {"ph": "M", "name": what, "pid": PID, "tid": tid, "args": {key: value}}


def _op_events(trace: Trace, timeline: Timeline, ops: np.ndarray, tids: np.ndarray, clock_ghz: float) -> list[dict]:
    """One X event per op in ``ops``, on track ``tids[op]``, named by its kind."""
    start, end = timeline.start_cycles[ops], timeline.end_cycles[ops]
    t0, t1 = ns_of(start, clock_ghz).tolist(), ns_of(end, clock_ghz).tolist()
    columns = zip(ops.tolist(), trace.kind[ops].tolist(), trace.dtype[ops].tolist(), trace.work[ops].tolist(),
                  trace.row[ops].tolist(), trace.step[ops].tolist(), trace.kblock[ops].tolist(), start.tolist(),
                  end.tolist(), t0, t1, tids[ops].tolist())
    return [{"ph": "X", "name": KIND_NAMES[k], "cat": OP_KINDS[KIND_NAMES[k]][0], "pid": PID, "tid": tid,
             "ts": us(a), "dur": us(b - a),
             "args": {"op": i, "row": row, "step": step, "kblock": kb, "start_cycle": s, "cycles": e - s,
                      "work": work, "dtype": DTYPES[dt]}}
            for i, k, dt, work, row, step, kb, s, e, a, b, tid in columns]


def _instant(cycle: int, name: str, args: Mapping[str, object], tid: int, clock_ghz: float) -> dict:
    return {"ph": "i", "s": "t", "name": str(name), "cat": ALGORITHM_TRACK, "pid": PID, "tid": tid,
            "ts": us(int(ns_of(cycle, clock_ghz))), "args": {str(k): _plain(v) for k, v in dict(args).items()}}


def _plain(value: object) -> object:
    """A JSON-safe copy: NumPy scalars/arrays to Python, non-finite floats to None."""
    if isinstance(value, np.generic | np.ndarray):
        value = value.tolist()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def algorithm_events(trace: Trace, timeline: Timeline, above_max: np.ndarray | None = None) -> list[AlgorithmEvent]:
    """Instant events read off the trace: where the max was updated, a rescale or a block skipped.

    "max updated" marks each rescale-factor op; "rescale skipped" a tile that computed its
    running max but needed no rescale (FA4, VFA special blocks without growth); "block
    skipped" a tile whose skip test ended its work; with ``above_max`` ([rows, steps] bool
    from the engine), "frozen max below true max" a tile whose exp ran with scores above the
    max it used.
    """
    tile = trace.tile_ids()
    has = {k: np.zeros(int(tile.max(initial=-1)) + 1, bool) for k in ("running_max", "rescale_factor", "sub")}
    for kind in has:
        has[kind][tile[trace.kind == KIND_CODE[kind]]] = True
    events: list[AlgorithmEvent] = []
    for i in np.flatnonzero(np.isin(trace.kind, [KIND_CODE["running_max"], KIND_CODE["skip_test"]])):
        t, kind = tile[i], KIND_NAMES[trace.kind[i]]
        args = {"row": int(trace.row[i]), "kblock": int(trace.kblock[i])}
        if kind == "skip_test" and not has["sub"][t]:
            events.append((int(timeline.end_cycles[i]), "block skipped", args))
        elif kind == "running_max":
            name = "max updated" if has["rescale_factor"][t] else "rescale skipped"
            events.append((int(timeline.end_cycles[i]), name, args))
    if above_max is not None:
        for i in np.flatnonzero(trace.kind == KIND_CODE["sub"]):
            if above_max[trace.row[i], trace.step[i] - 1]:
                args = {"row": int(trace.row[i]), "kblock": int(trace.kblock[i])}
                events.append((int(timeline.end_cycles[i]), "frozen max below true max", args))
    return events


def row_failure_events(trace: Trace, timeline: Timeline, failures: Iterable[Mapping[str, float | str]],
                       block_q: int, n_qblocks: int) -> list[AlgorithmEvent]:
    """A "row failed: CAUSE" instant per failed output row, where its query block is normalised.

    ``failures`` are dicts with ``head``, ``row`` (query row), ``cause`` and ``max_gap``.
    """
    normalize = np.flatnonzero(trace.kind == KIND_CODE["normalize"])
    end_of = dict(zip(trace.row[normalize].tolist(), timeline.end_cycles[normalize].tolist()))
    events: list[AlgorithmEvent] = []
    for f in failures:
        engine_row = int(f["head"]) * n_qblocks + int(f["row"]) // block_q
        events.append((end_of[engine_row], f"row failed: {f['cause']}", dict(f)))
    return events
