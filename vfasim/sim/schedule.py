"""The static schedule of a trace on one core: what each op costs, the issue order, what it waits on.

Everything here is read from the trace's columns and the config; no op kind is
named. An op waits on three kinds of edge (``EDGE_KINDS``; ``port`` is kept for
arbitrated memory ports of a chip model and never made here):
- data: its dependencies (``dep_ptr``/``dep_idx``);
- stream: the op before it on the same unit of its pipeline's in-order
  instruction stream, which pipelines with ``shares_issue_with`` share: the op
  ``units`` places before it, or (``units_by: row``) its row's previous op on
  that unit (``serial``: the op before it in issue order);
- buffer: the i-th op taking a tile buffer waits for the (i − B)-th op freeing
  it, B = ``score_buffers`` (``pipelined`` only);
- turn: an op of a pipeline whose role is in ``take_turns`` waits for the
  previous such op in issue order, whatever its stream, or (``turns_within:
  row``) the previous such op of its own row (``pipelined`` only: ``serial``
  already runs every op in turn).

The ``pipelined`` issue order places an op in slot g + min(stage, B − 1), where
g is the index of its tile (prelude ops take the index of their row's next
tile, epilogue ops that of the last one, and g never decreases in issue
order); within a slot, ops go by stage, then trace order.

Assumptions:
- The core has B buffers of every kind in ``BUFFERS`` (K and V tiles), B = ``score_buffers``.
- ``serial`` is one in-order stream for the whole core: it ignores ``units`` and buffers,
  which cannot bind when nothing overlaps.
- An op is priced at its pipeline's throughput for the op's dtype, or for ``bytes`` when its
  work is counted in bytes; a missing rate is an error, never a fallback.
"""

from __future__ import annotations

import numpy as np

from vfasim.errors import VfasimError
from vfasim.hw.config import FUSED, HardwareConfig
from vfasim.sim.sums import sums_by
from vfasim.trace import BUFFERS, DTYPES, KIND_NAMES, OP_KINDS, Trace, tile_ids

SCHEDULES = ("pipelined", "serial")
#: what an op can wait on; codes are indices (data first: the tie-break order of the critical path)
EDGE_KINDS: tuple[str, ...] = ("data", "stream", "buffer", "port", "turn")
DATA, STREAM, BUFFER, PORT, TURN = range(len(EDGE_KINDS))
_CHUNK = 1 << 16  # ops priced at a time


def check_schedule(schedule: str) -> None:
    if schedule not in SCHEDULES:
        raise VfasimError(f"unknown schedule {schedule!r} (valid: {', '.join(SCHEDULES)})")


def op_cycles(trace: Trace, hw: HardwareConfig, ops: np.ndarray | slice | None = None,
              table: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(pipeline index, -1 if fused; cycles on its stream) of every op, priced by the op's own dtype; with ``ops``
    (sorted ids, or a slice, of whole tiles, such as a chip unit's stream), of those ops alone. ``table``: the
    trace's ``price_table`` for ``hw``, where it is made already.

    An op of a pipeline with ``issue_share`` s < 1 holds its shared stream for start-up + ceil(s × body)
    + overhead cycles, but no less than its full cycles less those of its tile's (row and step's) other
    ops on that stream: streamed through the registers beside them, its unit still needs its full time.
    """
    table = price_table(trace, hw) if table is None else table
    kind, dtype, work = (trace.kind, trace.dtype, trace.work) if ops is None else \
        (trace.kind[ops], trace.dtype[ops], trace.work[ops])
    combo = _codes(kind, dtype)
    n = combo.size
    pipe = table[:, 0].astype(np.int16)[combo]
    rate, factor, fixed, share = table[:, 1], table[:, 2], table[:, 3] + table[:, 4], table[:, 5]
    shared = bool(np.any(share < 1.0))
    cycles, held = np.empty(n, np.int64), np.empty(n if shared else 0)
    total = 0.0
    for lo in range(0, n, _CHUNK):  # a chunk at a time: small temporaries
        c, at = combo[lo:lo + _CHUNK], slice(lo, lo + _CHUNK)
        body = work[at] * factor[c]
        body /= rate[c]
        full = np.ceil(body)
        full += fixed[c]
        total += float(full.sum())
        cycles[at] = full
        if shared:
            held[at] = fixed[c] + np.ceil(body * share[c])
    if shared:
        row, step = (trace.row, trace.step) if ops is None else (trace.row[ops], trace.step[ops])
        full = _issue_shared(tile_ids(row, step), hw, pipe, cycles, held, share[combo] < 1.0)
        total = float(full.sum())
        cycles = full.astype(np.int64)
    if total >= 2**62:  # the schedule's sums would leave int64
        raise VfasimError(f"{hw.name}: this trace would take over 2^62 cycles; the rates are implausibly low")
    return pipe, cycles


def price_table(trace: Trace, hw: HardwareConfig) -> np.ndarray:
    """Per (kind, dtype) code (``_codes``): pipeline index (-1: fused, or no such op in ``trace``), rate, work
    factor, start-up and overhead cycles and issue share, for every code of the trace's ops (refusing one ``hw`` has
    no rate for)."""
    n_dtypes = len(DTYPES)
    present = np.zeros(len(KIND_NAMES) * n_dtypes, bool)
    for lo in range(0, len(trace), _CHUNK):
        present[_codes(trace.kind[lo:lo + _CHUNK], trace.dtype[lo:lo + _CHUNK])] = True
    table = np.zeros((present.size, 6))
    table[:, 0], table[:, 5] = -1, 1.0
    for code in np.flatnonzero(present).tolist():
        table[code] = _price(hw, KIND_NAMES[code // n_dtypes], DTYPES[code % n_dtypes])
    return table


def _codes(kind: np.ndarray, dtype: np.ndarray) -> np.ndarray:
    """(kind, dtype) code of each op: kind × len(DTYPES) + dtype (fewer than 2^15 codes)."""
    return kind.astype(np.int16) * len(DTYPES) + dtype


def op_latency(trace: Trace, hw: HardwareConfig, cycles: np.ndarray) -> np.ndarray | None:
    """Cycles each op's result arrives after the op ends: its kind's ``result_latency`` (counted from its start)
    beyond its ``cycles``, and for an op on a memory pipeline ``load_latency_cycles`` more; None where neither is
    given."""
    if not any(hw.result_latency.values()) and not hw.load_latency_cycles:
        return None
    per_kind = np.zeros(len(KIND_NAMES), np.int64)
    for kind, latency in hw.result_latency.items():
        per_kind[KIND_NAMES.index(kind)] = latency
    after = np.zeros(len(KIND_NAMES), np.int64)
    if hw.load_latency_cycles:
        memory = [KIND_NAMES.index(k) for k, pipe in hw.op_map.items()
                  if pipe in hw.pipelines and hw.pipelines[pipe].role == "memory"]
        after[memory] = hw.load_latency_cycles
    return np.maximum(per_kind[trace.kind] - cycles, 0) + after[trace.kind]


def _issue_shared(tile: np.ndarray, hw: HardwareConfig, pipe: np.ndarray, full: np.ndarray, held: np.ndarray,
                  partial: np.ndarray) -> np.ndarray:
    """Cycles with the partly issuing ops at max(held, full − their tile's (``tile``: its id per op) other cycles on
    the same stream)."""
    names = list(hw.pipelines)
    group = np.full(len(names) + 1, -1)  # by pipeline index; the last entry stands for fused ops (-1)
    for g, members in enumerate(hw.issue_streams()):
        group[[names.index(n) for n in members]] = g
    key = tile * len(names) + group[pipe]
    others = ~partial & (group[pipe] >= 0)
    by_key = np.bincount(key[others], weights=full[others], minlength=int(key.max(initial=0)) + 1)
    return np.where(partial, np.maximum(held, full - by_key[np.maximum(key, 0)]), full)


def _price(hw: HardwareConfig, kind: str, dtype: str) -> tuple[float, ...]:
    """(pipeline index, rate, work factor, startup, overhead, issue share) of ``kind`` ops in ``dtype``."""
    name = hw.op_map[kind]
    if name == FUSED:
        return (-1, 1.0, 0.0, 0.0, 0.0, 1.0)
    p = hw.pipelines[name]
    key = "bytes" if OP_KINDS[kind][1] == "bytes" else dtype
    if key not in p.throughput:
        raise VfasimError(f"{kind} ops in {dtype} have no rate on pipeline {name!r} of {hw.name} "
                          f"(it has rates for {', '.join(p.throughput)})")
    return (list(hw.pipelines).index(name), p.throughput[key], hw.work_factor.get(kind, 1.0),
            p.startup_cycles, p.issue_overhead_cycles, p.issue_share)


def issue_order(trace: Trace, hw: HardwareConfig, schedule: str) -> np.ndarray:
    """Op ids (int32) in the order the schedule issues them (see the module notes)."""
    check_schedule(schedule)
    if schedule == "serial":
        return np.arange(len(trace), dtype=np.int32)
    return stream_order(trace, hw.score_buffers)


def stream_order(trace: Trace, buffers: int) -> np.ndarray:
    """Op ids (int32) in software-pipelined issue order with ``buffers`` tiles in flight.

    A counting sort by (slot, stage), each stage's ops in trace order: within one stage the slots never decrease
    in trace order, so an op's place is its rank among its stage's ops, plus the ops of earlier (slot, stage)
    buckets, less those of its own stage in earlier slots."""
    n = len(trace)
    stages = np.flatnonzero(sums_by(trace.stage, None, 256))  # stages fit uint8
    if n == 0:
        return np.empty(0, np.int32)
    code = np.zeros(256, np.int8 if stages.size < 128 else np.int32)
    code[stages] = np.arange(stages.size)
    bucket = _slots(trace)  # becomes (slot + min(stage, B - 1)) × stages + the stage's code
    bucket += np.minimum(trace.stage, min(buffers - 1, 255))
    bucket *= stages.size
    for lo in range(0, n, _CHUNK):
        bucket[lo:lo + _CHUNK] += code[trace.stage[lo:lo + _CHUNK]]
    counts = sums_by(bucket, None, (int(bucket.max(initial=0)) // stages.size + 1) * stages.size)
    counts = counts.reshape(-1, stages.size)
    before = np.cumsum(counts.ravel()).reshape(counts.shape) - counts  # ops in earlier (slot, stage) buckets
    before -= np.cumsum(counts, axis=0) - counts  # less those of the same stage in earlier slots
    before = before.ravel()
    order, placed = np.empty(n, np.int32), np.zeros(stages.size, np.int64)  # each stage's ops placed so far
    for lo in range(0, n, _CHUNK):  # a chunk at a time: small temporaries
        at, stage = before[bucket[lo:lo + _CHUNK]], code[trace.stage[lo:lo + _CHUNK]]
        for s in range(stages.size):
            mine = np.flatnonzero(stage == s)
            at[mine] += placed[s] + np.arange(mine.size)
            placed[s] += mine.size
        order[at] = np.arange(lo, lo + at.size, dtype=np.int32)
    return order


def _slots(trace: Trace) -> np.ndarray:
    """Per op (int32), the index of its tile among the tiles in trace order: a prelude op takes its row's next
    tile's, an epilogue op its last one's, so the index never decreases in trace order."""
    begins = np.empty(len(trace), bool)  # the op begins a (row, step) group
    begins[:1] = True
    np.not_equal(trace.row[1:], trace.row[:-1], out=begins[1:])
    begins[1:] |= trace.step[1:] != trace.step[:-1]
    begins &= trace.kblock >= 0
    slot = np.cumsum(begins, dtype=np.int32)  # tiles begun so far, this op's included
    slot -= trace.step != 0
    return np.maximum.accumulate(slot, out=slot)


def stream_predecessors(pipe: np.ndarray, order: np.ndarray, hw: HardwareConfig, schedule: str,
                        row: np.ndarray) -> np.ndarray:
    """Per op, the op its stream runs before it on the same unit (-1 if none).

    A stream is an entry of ``hw.issue_streams()`` (the whole core under ``serial``): with ``units_by: issue``
    op k of the stream is on unit k mod ``units`` (so it follows the op ``units`` places before it), with
    ``units_by: row`` on unit ``row`` mod ``units``. Fused ops are on no stream. Op ids fit int32, as in the
    trace's ``dep_idx``.
    """
    before = np.full(pipe.size, -1, np.int32)
    if schedule == "serial":
        before[1:] = np.arange(pipe.size - 1)
        return before
    names, streams = list(hw.pipelines), hw.issue_streams()
    of_pipe = np.full(len(names) + 1, -1, np.int8)  # stream of each pipeline index; the last: fused ops (-1)
    for g, group in enumerate(streams):
        of_pipe[[names.index(n) for n in group]] = g
    of_issued = of_pipe[pipe[order]]  # each issued op's stream
    for g, group in enumerate(streams):
        head = hw.pipelines[group[0]]
        stream = order[of_issued == g]
        if head.units_by == "row":
            unit = row[stream] % head.units
            grouped = np.argsort(unit, kind="stable")  # each unit's ops, in issue order
            by_unit, same = stream[grouped], np.diff(unit[grouped]) == 0  # same: i + 1 follows i on its unit
            before[by_unit[1:][same]] = by_unit[:-1][same]
        elif stream.size > head.units:
            before[stream[head.units:]] = stream[: -head.units]
    return before


def buffer_predecessors(trace: Trace, buffers: int, schedule: str) -> np.ndarray:
    """Per op, the op that frees the buffer it takes (B takes earlier); -1 if none."""
    before = np.full(len(trace), -1, np.int32)
    if schedule == "serial":
        return before
    for b in range(len(BUFFERS)):
        takes, frees = np.flatnonzero(trace.take_buffer == b), np.flatnonzero(trace.free_buffer == b)
        if takes.size > buffers:
            before[takes[buffers:]] = frees[: takes.size - buffers]
    return before


def turn_predecessors(pipe: np.ndarray, order: np.ndarray, hw: HardwareConfig, schedule: str,
                      row: np.ndarray) -> np.ndarray:
    """Per op, the op of a ``take_turns`` role issued before it, on the core or in its row (``turns_within``); -1 if
    none, or not such an op."""
    before = np.full(pipe.size, -1, np.int32)
    if schedule == "serial" or not hw.take_turns:
        return before
    taking = np.array([p.role in hw.take_turns for p in hw.pipelines.values()] + [False])  # last: fused ops
    turns = order[taking[pipe[order]]]
    if hw.turns_within == "row":
        turns = turns[np.argsort(row[turns], kind="stable")]  # by row, each in issue order
        same = row[turns[1:]] == row[turns[:-1]]
        before[turns[1:][same]] = turns[:-1][same]
        return before
    before[turns[1:]] = turns[:-1]
    return before


def schedule_edges(trace: Trace, hw: HardwareConfig, pipe: np.ndarray,
                   schedule: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(parent, child, edge kind code) of every edge the schedule makes an op wait on."""
    n = len(trace)
    order = issue_order(trace, hw, schedule)
    stream = stream_predecessors(pipe, order, hw, schedule, trace.row)
    buffer = buffer_predecessors(trace, hw.score_buffers, schedule)
    turn = turn_predecessors(pipe, order, hw, schedule, trace.row)
    ids = np.arange(n)
    parts = [(trace.dep_idx, np.repeat(ids, np.diff(trace.dep_ptr)), DATA),
             (stream[stream >= 0], ids[stream >= 0], STREAM), (buffer[buffer >= 0], ids[buffer >= 0], BUFFER),
             (turn[turn >= 0], ids[turn >= 0], TURN)]
    return (np.concatenate([p.astype(np.int64) for p, _, _ in parts]), np.concatenate([c for _, c, _ in parts]),
            np.concatenate([np.full(p.size, k, np.int8) for p, _, k in parts]))
