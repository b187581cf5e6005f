"""Chrome / Perfetto trace export of a simulated run (open in ui.perfetto.dev or chrome://tracing).

Layout: one process (pid 1, "vfasim"), one thread track per pipeline in config
order, then a "fused" track for zero-cycle fused ops (only if there are any)
and an "algorithm" track of instant events (only if events are given). Each op
is one complete ("X") event named ``"{kind} r{row} k{kblock}"`` with args
``op`` (id), ``row``, ``step``, ``kblock``, ``work`` and ``dtype``; its
category is the op class (tensor, vector, exp, memory).

Time: Chrome's ``ts``/``dur`` are microseconds, so cycles are converted with
the configured clock, ``us = cycles / (clock_ghz * 1e3)``; ``displayTimeUnit``
is ``ns`` so the UI shows nanoseconds. Pass ``clock_ghz=1e-3`` to read one
cycle as one microsecond.

Assumptions:
- Algorithm events are ``(cycle, name, args)`` tuples produced elsewhere; they
  are drawn as thread-scoped instant events and their args are made JSON-safe
  (NumPy scalars to Python, non-finite floats to null).
- The document is built in memory: about 200 bytes per op (≈20 MB for 100K ops).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from vfasim.io.outputs import write_with
from vfasim.sim.engine import Timeline
from vfasim.trace import DTYPES, KIND_CODE, KIND_NAMES, OP_KINDS, Trace

PID = 1
FUSED_TRACK = "fused"
ALGORITHM_TRACK = "algorithm"
AlgorithmEvent = tuple[int, str, Mapping[str, object]]


def chrome_trace(trace: Trace, timeline: Timeline, events: Iterable[AlgorithmEvent] | None = None,
                 clock_ghz: float = 1.0) -> dict:
    """The JSON-object trace format: ``{"traceEvents": [...], "displayTimeUnit": "ns"}``."""
    if not clock_ghz > 0:
        raise ValueError(f"clock_ghz must be > 0, got {clock_ghz}")
    us_per_cycle = 1.0 / (clock_ghz * 1e3)
    tracks = _tracks(timeline, events is not None)
    out = [_meta("process_name", 0, "vfasim")]
    for name, tid in tracks.items():
        out += [_meta("thread_name", tid, name), _meta("thread_sort_index", tid, tid, key="sort_index")]
    out += _op_events(trace, timeline, tracks, us_per_cycle)
    if events is not None:
        out += [_instant(c, n, a, tracks[ALGORITHM_TRACK], us_per_cycle) for c, n, a in events]
    return {"traceEvents": out, "displayTimeUnit": "ns"}


def write_chrome_trace(path: str | Path, doc: dict) -> None:
    """Write ``doc`` as JSON atomically (see ``vfasim.io.outputs``): a folder's temp file, then a rename."""
    def dump(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, allow_nan=False, separators=(",", ":"))

    write_with(path, dump, "trace file")


def _tracks(timeline: Timeline, with_events: bool) -> dict[str, int]:
    """Track name -> tid (1-based, in display order)."""
    names = list(timeline.pipeline_names)
    if np.any(timeline.pipeline < 0):
        names.append(FUSED_TRACK)
    if with_events:
        names.append(ALGORITHM_TRACK)
    return {name: tid for tid, name in enumerate(names, start=1)}


def _meta(what: str, tid: int, value: object, key: str = "name") -> dict:
    return {"ph": "M", "name": what, "pid": PID, "tid": tid, "args": {key: value}}


def _op_events(trace: Trace, timeline: Timeline, tracks: dict[str, int], us_per_cycle: float) -> list[dict]:
    # pipeline index -1 (fused) picks the last entry: the fused track
    pipe_tid = [tracks[n] for n in timeline.pipeline_names] + [tracks.get(FUSED_TRACK, 0)]
    kinds = [KIND_NAMES[k] for k in trace.kind.tolist()]
    columns = zip(range(len(trace)), kinds, trace.dtype.tolist(), trace.work.tolist(), trace.row.tolist(),
                  trace.step.tolist(), trace.kblock.tolist(), timeline.start_cycles.tolist(),
                  timeline.end_cycles.tolist(), timeline.pipeline.tolist())
    return [{"ph": "X", "name": f"{kind} r{row} k{kb}", "cat": OP_KINDS[kind][0], "pid": PID,
             "tid": pipe_tid[p], "ts": start * us_per_cycle, "dur": (end - start) * us_per_cycle,
             "args": {"op": i, "row": row, "step": step, "kblock": kb, "work": work, "dtype": DTYPES[dt]}}
            for i, kind, dt, work, row, step, kb, start, end, p in columns]


def _instant(cycle: int, name: str, args: Mapping[str, object], tid: int, us_per_cycle: float) -> dict:
    return {"ph": "i", "s": "t", "name": str(name), "cat": ALGORITHM_TRACK, "pid": PID, "tid": tid,
            "ts": float(cycle) * us_per_cycle, "args": {str(k): _plain(v) for k, v in dict(args).items()}}


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
