"""End cycles of a static schedule in closed form: each op ends at the latest end among its
predecessors plus its own cycles, computed in one pass over the ops in issue order.

Issue order is a topological order of all edges for the engine's traces. Where a trace's
buffer use runs against its issue order (a load that must wait for a buffer only a later
op frees), the pass follows the topological order that issues the earliest-issued ready op
first; a cycle — ops waiting on each other — is refused.

The pass is a tight Python loop over the ops in issue order, ``end = max(ends of its predecessors) + cycles``,
reading a table of predecessor positions (one column per predecessor, 0 for none: slot 0 ends at cycle 0). Ends
live in an ``array('q')`` (8 bytes each) and ops are handed to the loop in chunks, so the pass holds no Python object
per op. Runs of ops that repeat a tile earlier are shifted instead once steady (``steady.py``).

An op whose result arrives L > 0 cycles after it ends (``op_latency``) gets an arrival op after it,
``ready = end + L``: the ops that read its result (its data dependents) and the op that takes its turn after it
(program order) wait on the arrival, while its stream and buffer successors wait on its end, so its pipeline is
free meanwhile.
"""

from __future__ import annotations

import heapq
from array import array
from dataclasses import dataclass

import numpy as np

from vfasim.errors import VfasimError
from vfasim.sim.steady import SETTLE, TRIES, steady_runs, tile_period, try_extend
from vfasim.trace import KIND_NAMES, Trace

_CHUNK = 8192  # ops converted to Python lists at a time
_PLACE_CHUNK = 1 << 17  # ops whose predecessors are written with one set of array operations
_STEADY_OPS = 50_000  # fewer ops are all relaxed one by one: looking for steady runs would cost more


@dataclass(frozen=True)
class _Graph:
    """What the pass reads of a trace: its data dependencies and, for the error message and the steady state, each
    op's kind, row, step and key block; ops from ``real`` on are arrivals (``end_cycles``)."""

    dep_ptr: np.ndarray
    dep_idx: np.ndarray
    kind: np.ndarray
    row: np.ndarray
    step: np.ndarray
    kblock: np.ndarray
    real: int

    def __len__(self) -> int:
        return self.kind.size


def end_cycles(trace: Trace, order: np.ndarray, cycles: np.ndarray, stream: np.ndarray, buffer: np.ndarray,
               turn: np.ndarray, schedule: str,
               latency: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(end, ready) of every op (by op id), visited in ``order`` (the issue order) where it is topological.

    ``stream``, ``buffer`` and ``turn`` give each op's stream, buffer and turn predecessor (-1 if none).
    ``latency``: the cycles each op's result arrives after it ends (None: none is late); ``ready`` is
    ``end + latency``, when its data dependents and the op taking its turn after it may start (``end`` itself
    without).
    """
    n = len(trace)
    graph = _Graph(trace.dep_ptr, trace.dep_idx, trace.kind, trace.row, trace.step, trace.kblock, n)
    if latency is None or not np.any(latency):
        end = _ends(graph, order, cycles, stream, buffer, turn, schedule)
        return end, end
    late = np.flatnonzero(latency > 0)
    arrival = np.arange(n, dtype=np.int64)
    arrival[late] = n + np.arange(late.size)
    deps = np.concatenate([arrival[graph.dep_idx], late])  # readers wait on the arrival; an arrival on its op
    ptr = np.concatenate([graph.dep_ptr, graph.dep_ptr[-1] + 1 + np.arange(late.size)])
    def also(a: np.ndarray) -> np.ndarray:  # each arrival as its op
        return np.concatenate([a, a[late]])

    graph = _Graph(ptr, deps, also(graph.kind), also(graph.row), also(graph.step), also(graph.kblock), n)
    follows = latency[order] > 0  # an arrival is issued right after its op
    at = np.arange(n) + np.cumsum(follows) - follows
    full = np.empty(n + late.size, np.int64)
    full[at] = order
    full[at[follows] + 1] = arrival[order[follows]]
    none = np.full(late.size, -1, stream.dtype)
    turn = np.where(turn >= 0, arrival[np.maximum(turn, 0)], -1).astype(turn.dtype)  # a turn waits for the result
    end = _ends(graph, full, np.concatenate([cycles, latency[late]]), np.concatenate([stream, none]),
                np.concatenate([buffer, none]), np.concatenate([turn, none]), schedule)
    return end[:n], end[arrival]


def _ends(trace: _Graph, order: np.ndarray, cycles: np.ndarray, stream: np.ndarray, buffer: np.ndarray,
          turn: np.ndarray, schedule: str) -> np.ndarray:
    """End of every op of ``trace`` (see ``end_cycles``)."""
    table = _predecessor_table(trace, order, stream, buffer, turn)
    if _ahead(table):
        order = _topological(trace, table, order, schedule)
        table = _predecessor_table(trace, order, stream, buffer, turn)
    steady = len(trace) >= _STEADY_OPS
    issued = _relax(table, cycles, order, tile_period(_tile_starts(trace, order)) if steady else 0)
    del table
    end = np.empty(len(trace), np.int64)
    end[order] = issued
    return end


def _ahead(table: np.ndarray) -> bool:
    """Whether some predecessor lies at or after its op's issue position (table rows are positions)."""
    position = np.arange(1, table.shape[0] + 1, dtype=np.int32)  # entries are positions + 1
    return any(bool(np.any(table[:, c] >= position)) for c in range(table.shape[1]))


def _predecessor_table(trace: _Graph, order: np.ndarray, stream: np.ndarray, buffer: np.ndarray,
                       turn: np.ndarray) -> np.ndarray:
    """Per issue position, predecessor positions + 1 (0 = none).

    The table is column-major (every pass over it reads one column at a time) and is written ``_PLACE_CHUNK``
    ops at a time (small temporaries)."""
    n = len(trace)
    pos = np.empty(n, np.int32)
    pos[order] = np.arange(n, dtype=np.int32)
    width = 1  # the most predecessors of an op
    for lo in range(0, n, _PLACE_CHUNK):
        part = slice(lo, lo + _PLACE_CHUNK)
        count = np.diff(trace.dep_ptr[lo:lo + _PLACE_CHUNK + 1]) + (stream[part] >= 0) + (buffer[part] >= 0)
        width = max(width, int((count + (turn[part] >= 0)).max(initial=0)))
    table = np.zeros((n, width), np.int32, order="F")
    column = table.T.reshape(-1)  # a view: column c of position i at c * n + i
    for lo in range(0, n, _PLACE_CHUNK):  # ops lo, lo + 1, ... (by id: their dependencies are one slice)
        ptr = trace.dep_ptr[lo:lo + _PLACE_CHUNK + 1]
        count, at = np.diff(ptr), pos[lo:lo + ptr.size - 1].astype(np.int64)  # at: each op's position
        deps = trace.dep_idx[ptr[0]:ptr[-1]]
        first = np.repeat(ptr[:-1] - ptr[0], count)  # where each dependency's op's first one lies in deps
        column[(np.arange(deps.size) - first) * n + np.repeat(at, count)] = pos[deps] + 1
        for preds in (stream[lo:lo + at.size], buffer[lo:lo + at.size], turn[lo:lo + at.size]):  # after the data
            held = np.flatnonzero(preds >= 0)
            column[count[held] * n + at[held]] = pos[preds[held]] + 1
            count[held] += 1
    return table


def _topological(trace: _Graph, table: np.ndarray, order: np.ndarray, schedule: str) -> np.ndarray:
    """Op ids in topological order, earliest-issued ready op first; a cycle is refused."""
    n = table.shape[0]
    child, col = np.nonzero(table)
    parent = table[child, col] - 1
    by_parent = np.argsort(parent, kind="stable")
    children = child[by_parent].tolist()
    ptr = np.searchsorted(parent[by_parent], np.arange(n + 1)).tolist()
    waiting = np.count_nonzero(table, axis=1).tolist()
    ready = [p for p in range(n) if waiting[p] == 0]
    visited: list[int] = []
    while ready:
        p = heapq.heappop(ready)
        visited.append(p)
        for c in children[ptr[p]:ptr[p + 1]]:
            waiting[c] -= 1
            if waiting[c] == 0:
                heapq.heappush(ready, c)
    if len(visited) < n:
        stuck = [int(order[p]) for p in range(n) if waiting[p] > 0]
        raise VfasimError(f"schedule {schedule!r} deadlocks: {len(stuck)} ops never start, from op {stuck[0]} "
                          f"({KIND_NAMES[trace.kind[stuck[0]]]}) on: they wait on a cycle of dependencies, "
                          f"streams and buffers")
    return order[np.array(visited, np.int64)]


def _tile_starts(trace: _Graph, order: np.ndarray, limit: int = 1 << 20) -> np.ndarray:
    """The issue position of each tile's first op (in trace order) among the first ``limit`` ops issued: enough to
    find the period, at a fraction of a pass over every op."""
    ops = order[:limit].astype(np.int64)
    prev = np.maximum(ops - 1, 0)
    first = (ops == 0) | (trace.row[ops] != trace.row[prev]) | (trace.step[ops] != trace.step[prev])
    return np.flatnonzero(first & (trace.kblock[ops] >= 0) & (ops < trace.real))  # an arrival begins no tile


def _relax(table: np.ndarray, cycles: np.ndarray, order: np.ndarray, period: int) -> np.ndarray:
    """End of every op in issue order (``order``): the latest end among its predecessors (``table``: positions + 1,
    0 for none) plus its ``cycles`` (by op id: read a chunk at a time in issue order); steady runs shifted."""
    ends = array("q", [0])  # slot 0 stands for "no predecessor": it ends at cycle 0
    done = 0
    for lo, hi in steady_runs(table, cycles, order, period):
        p = lo + SETTLE * period
        for _ in range(TRIES):
            _relax_span(ends, table, cycles, order, done, p)
            done = p
            if p + period >= hi or try_extend(ends, table, p, hi, period):
                done = max(done, len(ends) - 1)
                break
            p += period
    _relax_span(ends, table, cycles, order, done, order.size)
    return np.frombuffer(ends, np.int64)[1:]


def _relax_span(ends: array, table: np.ndarray, cycles: np.ndarray, order: np.ndarray, lo: int, hi: int) -> None:
    """Relax the ops issued at [lo, hi) one by one."""
    for start in range(lo, hi, _CHUNK):
        stop = min(start + _CHUNK, hi)
        cols, issued = table[start:stop].T.tolist(), cycles[order[start:stop]].tolist()
        if len(cols) <= 4:  # the usual width: padded with slot 0 (cycle 0, never the latest)
            _relax_four(ends, issued, *cols, *[[0] * (stop - start)] * (4 - len(cols)))
        else:
            get, append = ends.__getitem__, ends.append
            for x, preds in zip(issued, zip(*cols)):
                append(max(map(get, preds)) + x)


def _relax_four(ends: array, cycles: list[int], a: list[int], b: list[int], c: list[int], d: list[int]) -> None:
    append = ends.append
    for x, i, j, k, m in zip(cycles, a, b, c, d):
        u, v = ends[i], ends[j]
        if v > u:  # conditionals cost less than a call to max()
            u = v
        v = ends[k]
        if v > u:
            u = v
        v = ends[m]
        append((u if u > v else v) + x)
