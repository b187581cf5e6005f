"""End cycles of a static schedule in closed form: each op ends at the latest end among its
predecessors plus its own cycles, computed in one pass over the ops in issue order.

Issue order is a topological order of all edges for the engine's traces. Where a trace's
buffer use runs against its issue order (a load that must wait for a buffer only a later
op frees), the pass follows the topological order that issues the earliest-issued ready op
first; a cycle — ops waiting on each other — is refused.

The pass is a tight Python loop over two-input rows ``end = max(end[a], end[b]) + cycles``:
an op with d > 2 predecessors becomes d − 2 zero-cycle rows that fold its predecessors
pairwise, then its own row. Before that, predecessors that can never be the latest alone are
dropped: duplicates, and ops of the op's own chain (see ``stream_chains``) before its stream
predecessor, which end no later than that predecessor does. Ends live in an ``array('q')``
(8 bytes each) and rows are handed to the loop in chunks, so the pass holds no Python object
per op. Runs of rows that repeat a tile earlier are shifted instead once steady (``steady.py``).

An op whose result arrives L > 0 cycles after it ends (``op_latency``) gets an arrival row after its own,
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

_CHUNK = 8192  # rows converted to Python lists at a time
_PLACE_CHUNK = 1 << 17  # ops whose rows are written with one set of array operations
_STEADY_ROWS = 50_000  # fewer rows are all relaxed one by one: looking for steady runs would cost more


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


def end_cycles(trace: Trace, order: np.ndarray, cycles: np.ndarray, stream: np.ndarray, chain: np.ndarray,
               buffer: np.ndarray, turn: np.ndarray, schedule: str,
               latency: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(end, ready) of every op (by op id), visited in ``order`` (the issue order) where it is topological.

    ``stream``, ``buffer`` and ``turn`` give each op's stream, buffer and turn predecessor (-1 if none),
    ``chain`` its chain (-1 if none). ``latency``: the cycles each op's result arrives after it ends (None: none
    is late); ``ready`` is ``end + latency``, when its data dependents and the op taking its turn after it may
    start (``end`` itself without).
    """
    n = len(trace)
    graph = _Graph(trace.dep_ptr, trace.dep_idx, trace.kind, trace.row, trace.step, trace.kblock, n)
    if latency is None or not np.any(latency):
        end = _ends(graph, order, cycles, stream, chain, buffer, turn, schedule)
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
                np.concatenate([chain, none.astype(chain.dtype)]), np.concatenate([buffer, none]),
                np.concatenate([turn, none]), schedule)
    return end[:n], end[arrival]


def _ends(trace: _Graph, order: np.ndarray, cycles: np.ndarray, stream: np.ndarray, chain: np.ndarray,
          buffer: np.ndarray, turn: np.ndarray, schedule: str) -> np.ndarray:
    """End of every op of ``trace`` (see ``end_cycles``)."""
    table, stream_col = _predecessor_table(trace, order, stream, buffer, turn)
    if _ahead(table):
        order = _topological(trace, table, order, schedule)
        table, stream_col = _predecessor_table(trace, order, stream, buffer, turn)
    live = _live(table, stream_col, chain[order])
    del stream_col
    pairs, last = _pairwise(table, live)
    del table, live
    row_cycles = np.zeros(pairs.shape[0], np.int64)
    row_cycles[last] = cycles[order]
    steady = row_cycles.size >= _STEADY_ROWS
    row_ends = _relax(pairs, row_cycles, tile_period(_tile_rows(trace, order, last)) if steady else 0)
    del pairs, row_cycles
    end = np.empty(len(trace), np.int64)
    end[order] = row_ends[last]
    return end


def _ahead(table: np.ndarray) -> bool:
    """Whether some predecessor lies at or after its op's issue position (table rows are positions)."""
    position = np.arange(1, table.shape[0] + 1, dtype=np.int32)  # entries are positions + 1
    return any(bool(np.any(table[:, c] >= position)) for c in range(table.shape[1]))


def _predecessor_table(trace: _Graph, order: np.ndarray, stream: np.ndarray, buffer: np.ndarray,
                       turn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per issue position, predecessor positions + 1 (0 = none), and the stream predecessor's.

    The table is column-major (every pass over it reads one column at a time) and is written in
    issue order, ``_PLACE_CHUNK`` positions at a time (small temporaries)."""
    n = len(trace)
    pos = np.empty(n, np.int32)
    pos[order] = np.arange(n, dtype=np.int32)
    n_data = np.diff(trace.dep_ptr).astype(np.int32)
    width = max(1, int((n_data + (stream >= 0) + (buffer >= 0) + (turn >= 0)).max(initial=0)))
    table = np.zeros((n, width), np.int32, order="F")
    column = table.T.reshape(-1)  # a view: column c of position i at c * n + i
    stream_col = np.empty(n, np.int32)
    for lo in range(0, n, _PLACE_CHUNK):
        ops = order[lo:lo + _PLACE_CHUNK]  # the ops issued at positions lo, lo + 1, ...
        first, col = trace.dep_ptr[ops], n_data[ops]
        for j in range(int(col.max(initial=0))):
            at = np.flatnonzero(col > j)
            column[j * n + lo + at] = pos[trace.dep_idx[first[at] + j]] + 1
        before = stream[ops]
        stream_col[lo:lo + ops.size] = np.where(before >= 0, pos[before] + 1, 0)
        for preds in (before, buffer[ops], turn[ops]):  # stream, buffer, turn, after the data dependencies
            held = preds >= 0
            at = np.flatnonzero(held)
            column[col[at].astype(np.int64) * n + lo + at] = pos[preds[at]] + 1
            col = col + held
    return table, stream_col


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


def _pairwise(table: np.ndarray, live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two-input rows in order (row r's end is slot r + 1; slot 0 ends at cycle 0), and each op's row."""
    degree = np.zeros(live.shape[0], np.int32)
    for c in range(live.shape[1]):  # a column at a time: no reduction along the short axis
        degree += live[:, c]
    last = np.cumsum(np.maximum(degree - 1, 1), dtype=np.int32) - 1
    first = last - np.maximum(degree - 2, 0)
    del degree
    slot = np.concatenate([[0], last + 1]).astype(np.int32)  # position + 1 -> slot of its end
    pairs = np.zeros((int(last[-1]) + 1 if last.size else 0, 2), np.int32)
    for lo in range(0, table.shape[0], _PLACE_CHUNK):
        part = slice(lo, lo + _PLACE_CHUNK)
        _place(pairs, table[part], live[part], first[part], slot)
    return pairs, last


def _live(table: np.ndarray, stream_col: np.ndarray, chain: np.ndarray) -> np.ndarray:
    """Mask of the predecessors the latest end can come from alone."""
    live = np.zeros(table.shape, bool, order="F")
    chained = chain >= 0
    for c in range(table.shape[1]):
        col = table[:, c]
        held = np.count_nonzero(col)
        at = slice(None) if 2 * held > col.size else np.flatnonzero(col)  # a sparse column: its entries only
        pred = col[at]
        keep = (pred > 0) & ~((chain[np.maximum(pred - 1, 0)] == chain[at]) & chained[at] & (pred != stream_col[at]))
        for earlier in range(c):
            keep &= pred != table[at, earlier]
        live[at, c] = keep
    return live


def _place(pairs: np.ndarray, table: np.ndarray, live: np.ndarray, first: np.ndarray, slot: np.ndarray) -> None:
    """Write the rows of some ops: predecessors 0 and 1 in their first row, each later one in a
    row of its own that also takes the previous row's end."""
    flat = pairs.reshape(-1)  # row r's inputs at 2r and 2r + 1
    first = 2 * first.astype(np.int64)  # where each op's first row starts in ``flat``
    rank = np.zeros(table.shape[0], np.int32)  # live predecessors placed so far
    for c in range(table.shape[1]):
        ops = np.flatnonzero(live[:, c])
        pred = slot[table[ops, c]]
        if c < 2:  # ranks 0 and 1: the first row
            flat[first[ops] + rank[ops]] = pred
        else:
            k = rank[ops]
            head = k < 2
            flat[first[ops[head]] + k[head]] = pred[head]
            row = (first[ops[~head]] >> 1) + k[~head] - 1
            flat[2 * row], flat[2 * row + 1] = row, pred[~head]
        rank[ops] += 1


def _tile_rows(trace: _Graph, order: np.ndarray, last: np.ndarray, limit: int = 1 << 20) -> np.ndarray:
    """The row of each tile's first op (in trace order) among the first ``limit`` ops issued: enough to find the
    period, at a fraction of a pass over every op."""
    ops = order[:limit].astype(np.int64)
    prev = np.maximum(ops - 1, 0)
    first = (ops == 0) | (trace.row[ops] != trace.row[prev]) | (trace.step[ops] != trace.step[prev])
    return last[:limit][first & (trace.kblock[ops] >= 0) & (ops < trace.real)]  # an arrival begins no tile


def _relax(pairs: np.ndarray, cycles: np.ndarray, period: int) -> np.ndarray:
    """End of every row: the later of its two inputs' ends plus its cycles; steady runs shifted."""
    ends = array("q", [0])  # slot 0 stands for "no predecessor": it ends at cycle 0
    done = 0
    for lo, hi in steady_runs(pairs, cycles, period):
        p = lo + SETTLE * period
        for _ in range(TRIES):
            _relax_span(ends, pairs, cycles, done, p)
            done = p
            if p + period >= hi or try_extend(ends, pairs, p, hi, period):
                done = max(done, len(ends) - 1)
                break
            p += period
    _relax_span(ends, pairs, cycles, done, cycles.size)
    return np.frombuffer(ends, np.int64)[1:]


def _relax_span(ends: array, pairs: np.ndarray, cycles: np.ndarray, lo: int, hi: int) -> None:
    """Relax rows [lo, hi) one by one."""
    for start in range(lo, hi, _CHUNK):
        stop = min(start + _CHUNK, hi)
        first, second = pairs[start:stop].T.tolist()
        _relax_rows(ends, first, second, cycles[start:stop].tolist())


def _relax_rows(ends: array, first: list[int], second: list[int], cycles: list[int]) -> None:
    append = ends.append
    for a, b, x in zip(first, second, cycles):
        u, v = ends[a], ends[b]
        append((u if u > v else v) + x)  # a conditional costs less than a call to max()
