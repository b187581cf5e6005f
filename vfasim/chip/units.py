"""Work units of a launch, grouped by structure, and their compute time on one core.

A prefill launch has one unit per (batch, head, query block): one row of the
engine's trace — or, for a kernel style whose streams share K/V buffers in
groups of g (FA3's two consumer warp groups in one thread block), one unit per
g consecutive query blocks of a head, whose streams load each K/V tile once.
A decode launch (one query block per head) cuts each row's key
blocks into ``splits`` contiguous chunks (flash-decoding); every chunk is a unit
that also loads Q and stores a partial O (the row's prelude and epilogue ops are
repeated in each), and a combine step merges the partials afterwards.

Units with the same ops (kind, dtype, work, key block, step offset and internal
dependencies) are one *unit kind*, timed once. A unit's compute time when k
streams share its core is the makespan of k interleaved copies of its ops
through the core timing engine (``sim.simulate``): copies take turns tile by tile
in one static order, each copy with its own ``score_buffers`` tiles in flight,
so one stream's softmax overlaps another's matmuls while a stream's own steps
keep their dependencies. Assumptions: the k streams sharing a core run units of
the same kind (neighbours of another kind are not modelled), and dependencies on
ops outside the unit (e.g. a key summary computed by another unit) are dropped.

Long units are timed by extrapolation: a unit whose streams walk more than
``LONG_TILES`` key tiles is simulated with only its last ``SHORT_TILES[0]`` and
``SHORT_TILES[1]`` tiles kept (prelude and epilogue kept too), and its time is
extended linearly by the per-tile period between those two. This is exact once
the software-pipelined schedule has reached its periodic steady state (a fixed
static schedule of identical tiles is periodic after a short transient); the
tests compare it with the full simulation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from vfasim.hw.config import HardwareConfig
from vfasim.reuse import cached
from vfasim.sim import simulate
from vfasim.sim.engine import Timeline
from vfasim.sim.schedule import op_cycles, price_table
from vfasim.sim.sums import sums_by
from vfasim.trace import COLUMNS, KIND_CODE, Trace


@dataclass(frozen=True)
class UnitKind:
    streams: tuple[np.ndarray, ...]  # op ids (int32) in the source trace, one array per tile stream
    kv_blocks: np.ndarray  # [n, 2] key block and 0 (K) / 1 (V) of every K/V load
    kv_bytes: np.ndarray  # [n] bytes of each of those loads
    q_bytes: int
    o_bytes: int


@dataclass(frozen=True)
class Launch:
    """Units in dispatch order; ``kind`` indexes ``kinds``."""

    kind: np.ndarray
    kv_key: np.ndarray  # global K/V head (batch * kv_heads + kv head) whose bytes the unit reads
    label: np.ndarray  # [U, 4] batch, head, query block, split
    kinds: list[UnitKind]


def split_count(decode: bool, units: int, slots: int, kblocks: int) -> int:
    """Flash-decoding splits: enough chunks per row to give every stream slot a unit."""
    return min(kblocks, max(1, -(-slots // units))) if decode else 1


def build_launch(trace: Trace, rows: np.ndarray, kv_key: np.ndarray, label: np.ndarray, splits: int,
                 pad: bool = False, strip_from: int | None = None) -> Launch:
    """Units for ``rows`` [U, g] of ``trace`` (trace rows of each unit's streams, -1 = none), times splits.

    ``pad``: a stream with no rows computes on padding (``Kernel.pad_streams``): it runs its unit's first
    stream's ops, loading and storing nothing of its own. ``strip_from``: a row r at or past it is row
    r - ``strip_from`` less its ops done once per K/V head (``PER_KV_HEAD``: another head of a traced head's group).
    Units with equal ops are deduplicated into kinds.
    """
    bounds = np.searchsorted(trace.row, np.arange(int(trace.row.max()) + 2))

    def ops_of(r: int, j: int) -> np.ndarray:
        if strip_from is None or r < strip_from:
            return _split_ops(trace, bounds[r], bounds[r + 1], j, splits)
        ops = _split_ops(trace, bounds[r - strip_from], bounds[r - strip_from + 1], j, splits)
        return ops[~np.isin(trace.kind[ops], PER_KV_HEAD)]

    kinds: list[UnitKind] = []
    index: dict[tuple, list[int]] = {}  # a cheap digest of a unit's ops -> the kinds that have it
    cache: dict[tuple, int] = {}
    kind = np.empty(rows.shape[0] * splits, np.int64)
    for u, group in enumerate(np.repeat(rows, splits, axis=0).tolist()):
        key = (*group, u % splits)
        if key not in cache:
            parts = tuple(ops_of(r, u % splits) for r in group if r >= 0)
            real = len(parts)
            if pad:
                parts += (parts[0],) * (len(group) - real)
            digest = (real, *((ops.size, int(trace.kblock[ops[-1]])) if ops.size else (0, 0) for ops in parts))
            same = index.setdefault(digest, [])
            found = next((k for k in same if _same_structure(trace, parts, kinds[k].streams)), None)
            if found is None:
                found = len(kinds)
                same.append(found)
                kinds.append(_kind(trace, parts, real))
            cache[key] = found
        kind[u] = cache[key]
    labels = np.repeat(label, splits, axis=0)
    labels[:, 3] = np.tile(np.arange(splits), rows.shape[0])
    return Launch(kind, np.repeat(kv_key, splits), labels, kinds)


def _split_ops(trace: Trace, lo: int, hi: int, j: int, splits: int) -> np.ndarray:
    step = trace.step[lo:hi]
    tile = step[(step > 0) & (step < step.max())] if hi > lo else step
    last = int(tile.max(initial=0))
    edges = np.linspace(0, last, splits + 1).round().astype(int)
    keep = (step == 0) | (step == step.max()) | ((step > edges[j]) & (step <= edges[j + 1]))
    ops = np.flatnonzero(keep).astype(np.int32)  # ids fit int32 (``Trace.dep_idx``): half the bytes of int64
    ops += lo
    return ops


def _same_structure(trace: Trace, parts: tuple[np.ndarray, ...], others: tuple[np.ndarray, ...]) -> bool:
    """Whether two units' streams have the same ops: kinds, dtypes, work, key blocks, steps (from the first) and
    dependencies inside each stream."""
    return len(parts) == len(others) and all(_same_ops(trace, a, b) for a, b in zip(parts, others))


def _same_ops(trace: Trace, a: np.ndarray, b: np.ndarray) -> bool:
    if a.size != b.size:
        return False
    if not all(np.array_equal(_at(column, a), _at(column, b))
               for column in (trace.kind, trace.dtype, trace.work, trace.kblock)):
        return False
    step_a, step_b = _at(trace.step, a), _at(trace.step, b)
    if a.size and not np.array_equal(step_a - step_a.min(), step_b - step_b.min()):
        return False
    return all(np.array_equal(x, y) for x, y in zip(local_deps(trace, a), local_deps(trace, b)))


def _at(column: np.ndarray, ops: np.ndarray) -> np.ndarray:
    """``column[ops]``, a view where ``ops`` is a range."""
    return column[ops[0]:ops[-1] + 1] if _is_range(ops) else column[ops]


def _is_range(ops: np.ndarray) -> bool:
    return ops.size > 0 and int(ops[-1]) - int(ops[0]) + 1 == ops.size


def _timing_key(trace: Trace, ops: np.ndarray, steps: np.ndarray) -> tuple:
    """What a stream's timing depends on: its ops' kinds, types, work, dependencies and step ranks in ``steps``."""
    owner, dep = local_deps(trace, ops)
    rank = np.searchsorted(steps, trace.step[ops])
    h = hashlib.sha256()
    for a in (trace.kind[ops], trace.dtype[ops], trace.work[ops], rank, owner, dep):
        h.update(np.ascontiguousarray(a).tobytes())
    return (ops.size, h.hexdigest())


def _kind(trace: Trace, parts: tuple[np.ndarray, ...], real: int) -> UnitKind:
    """A unit's streams and bytes; a K/V tile loaded by several of its streams is read once. The first ``real``
    streams move Q and O bytes; the rest are padding."""
    ops = np.concatenate(parts)
    k = _at(trace.kind, ops)
    own = np.concatenate(parts[:real])
    own_kind, own_work = _at(trace.kind, own), _at(trace.work, own)
    is_k, is_v = k == KIND_CODE["load_k"], k == KIND_CODE["load_v"]
    loads = is_k | is_v
    code = _at(trace.kblock, ops)[loads].astype(np.int64) * 2 + is_v[loads]  # (key block, K or V) in that order
    code, first = np.unique(code, return_index=True)
    return UnitKind(parts, np.stack([code // 2, code % 2], axis=1), _at(trace.work, ops)[loads][first],
                    int(own_work[own_kind == KIND_CODE["load_q"]].sum()),
                    int(own_work[own_kind == KIND_CODE["store_o"]].sum()))


def local_deps(trace: Trace, ops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner, dependency) pairs inside ``ops`` (sorted op ids), as positions in ``ops``."""
    if _is_range(ops):  # a row's ops: its dependencies inside are those from its first op on
        lo = int(ops[0])
        counts = np.diff(trace.dep_ptr[lo:lo + ops.size + 1])
        deps = trace.dep_idx[trace.dep_ptr[lo]:trace.dep_ptr[lo + ops.size]].astype(np.int64) - lo
        inside = deps >= 0
        return np.repeat(np.arange(ops.size), counts)[inside], deps[inside]
    starts, ends = trace.dep_ptr[ops], trace.dep_ptr[ops + 1]
    counts = ends - starts
    first = np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    deps = trace.dep_idx[first + np.arange(counts.sum())]
    owner = np.repeat(np.arange(ops.size), counts)
    pos = np.minimum(np.searchsorted(ops, deps), ops.size - 1)
    inside = ops[pos] == deps
    return owner[inside], pos[inside]


def interleaved(trace: Trace, streams: tuple[np.ndarray, ...], copies: int) -> Trace:
    """``copies`` copies of a unit's ``streams`` as one trace, all streams taking turns tile by tile.

    Row = stream; each stream keeps its own ops, order and dependencies.
    """
    parts = [ops for _ in range(copies) for ops in streams]
    sizes = np.array([p.size for p in parts])
    offset = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    total = int(sizes.sum())
    ops = np.concatenate(parts)
    cols = {c: getattr(trace, c)[ops] for c in COLUMNS}
    cols["row"] = np.repeat(np.arange(len(parts), dtype=np.int32), sizes)
    order = np.lexsort((np.arange(total), cols["row"], cols["step"]))
    new_id = np.empty(total, np.int64)
    new_id[order] = np.arange(total)
    pairs = [local_deps(trace, p) for p in parts]
    o = new_id[np.concatenate([own + off for (own, _), off in zip(pairs, offset)])]
    d = new_id[np.concatenate([dep + off for (_, dep), off in zip(pairs, offset)])]
    by = np.lexsort((d, o))
    dep_ptr = np.concatenate([[0], np.cumsum(np.bincount(o, minlength=total))]).astype(np.int64)
    return Trace(**{c: v[order] for c, v in cols.items()}, dep_ptr=dep_ptr,
                 dep_idx=d[by].astype(np.int32), meta=trace.meta)


LONG_TILES = 16  # units with more key tiles per stream than this are extrapolated
#: op kinds a K/V-head group's first head does for the whole group (VFA's key summaries): the others do not
PER_KV_HEAD = np.array([KIND_CODE["key_summary"]])
SHORT_TILES = (8, 12)  # tiles kept in the two short simulations that measure the period


def _tile_steps(trace: Trace, ops: np.ndarray) -> np.ndarray:
    """Distinct steps of a stream's key tiles (its steps between prelude and epilogue), sorted."""
    step = _at(trace.step, ops)
    if step.size and np.all(step[1:] >= step[:-1]):  # a row's ops go step by step: its tiles are one slice
        tiles = step[np.searchsorted(step, 0, "right"):np.searchsorted(step, step[-1])]
        return tiles[np.append(tiles[1:] != tiles[:-1], True)] if tiles.size else tiles  # where the steps change
    return np.unique(step[(step > 0) & (step < step.max())])


def last_tiles(trace: Trace, streams: tuple[np.ndarray, ...], keep: int,
               tiles_of: list[np.ndarray] | None = None) -> tuple[np.ndarray, ...]:
    """Each stream with only its last ``keep`` key tiles, prelude and epilogue kept (``tiles_of``: each stream's
    ``_tile_steps``, if known)."""
    out = []
    for ops, tiles in zip(streams, tiles_of or [_tile_steps(trace, ops) for ops in streams], strict=True):
        step = _at(trace.step, ops)
        cut = tiles[-keep - 1] if tiles.size > keep else 0
        out.append(ops[(step == 0) | (step == step.max()) | (step > cut)])
    return tuple(out)


def tile_count(trace: Trace, streams: tuple[np.ndarray, ...]) -> int:
    """Key tiles of the longest stream."""
    return max(int(_tile_steps(trace, ops).size) for ops in streams)


@dataclass(frozen=True)
class StreamMma:
    """The tensor pipes of a kernel whose streams issue their own MMAs (``Kernel.mma`` per_stream: ``mma.sync``
    from each CTA's warps), as the streams timed together on a core share them.

    Each of k such streams gets its own unit of each tensor pipe at 1/k of the pipe's rate, but no more than
    ``cap`` of it: a stream alone is limited by its warps, not by the slots of the launch (a warp issues to its
    partition's tensor unit, ``CoreLimits.tensor_partitions``). Each matmul kind in ``reads`` (its operands'
    shared-memory bytes per multiply-accumulate) also takes the time of those reads at ``read_bytes_per_cycle``,
    as a work factor at the stream's rate.
    """

    cap: float = 1.0
    reads: tuple[tuple[str, float], ...] = ()
    read_bytes_per_cycle: float | None = None

    def dealt(self, core: HardwareConfig, rows: int) -> HardwareConfig:
        """``core`` with each tensor pipe dealt to ``rows`` streams, one unit each, and the operand reads' factors."""
        share = min(1.0 / rows, self.cap)
        pipes = {name: p.model_copy(update={"units": rows, "units_by": "row", "throughput": {
            d: r * p.units * share for d, r in p.throughput.items()}})
            for name, p in core.pipelines.items() if p.role == "tensor"}
        factors = dict(core.work_factor)
        if self.read_bytes_per_cycle is not None:
            for kind, bytes_per_mac in self.reads:
                rate = pipes[core.op_map[kind]].throughput[core.precision.matmul]
                factors[kind] = factors.get(kind, 1.0) + bytes_per_mac * rate / self.read_bytes_per_cycle
        return core.model_copy(update={"pipelines": {**core.pipelines, **pipes}, "work_factor": factors})


@dataclass(frozen=True)
class UnitTiming:
    """How a unit's ops are timed on its core: the core as the kernel runs it, each stream's score buffers, the
    schedule."""

    core: HardwareConfig
    score_buffers: int
    schedule: str = "pipelined"
    mma: StreamMma | None = None  # a per-stream mma kernel: its tensor pipes dealt to the rows timed together
    shared_core: HardwareConfig | None = None  # the core where two or more units share it (``Kernel.gaps_filled_by_ctas``)

    def timeline(self, trace: Trace, streams: tuple[np.ndarray, ...], copies: int = 1) -> tuple[Trace, Timeline]:
        """``copies`` copies of a unit's ``streams`` interleaved (``interleaved``) and their timeline on the core
        (``shared_core``, if given, for two or more copies); with ``mma`` each tensor pipe is dealt to those rows
        (``StreamMma``)."""
        merged = interleaved(trace, streams, copies)
        core = self.shared_core if self.shared_core is not None and copies > 1 else self.core
        hw = replace_buffers(core, self.score_buffers * copies * len(streams))
        if self.mma is not None:
            hw = self.mma.dealt(hw, copies * len(streams))
        return merged, simulate(merged, hw, self.schedule)


class UnitTimer:
    """Compute cycles of a unit kind with k units on its core, each kind and k simulated once; never fewer than
    ``block_floor(k)`` cycles a key tile of its longest stream (``TileRule.block_floor``), then ``block_extra`` cycles
    more a key tile (``TileRule.bounds_block_cycles``, a launch off the kernel's lengths).

    ``digest``: the trace's (``Trace.digest``), given inside a ``reuse`` scope, where each simulation is made once
    per key: the trace, the timing (its core by digest, score buffers, schedule, memory dealing), the streams' op ids
    and the copies, everything ``UnitTiming.timeline`` reads; launches of one trace (other batch or heads, another
    tier or fit trial with the same timing core) share them.
    """

    def __init__(self, trace: Trace, timing: UnitTiming, kinds: list[UnitKind], digest: str = "",
                 block_floor: Callable[[int], int] | None = None, block_extra: int = 0) -> None:
        self.trace, self.timing, self.kinds, self.block_floor = trace, timing, kinds, block_floor
        self.block_extra = block_extra
        self._key = (digest, timing.core.digest(), timing.shared_core and timing.shared_core.digest(),
                     timing.score_buffers, timing.schedule, timing.mma) if digest else ()
        self._cycles: dict[tuple[int, int], int] = {}
        self._short_cycles: dict[tuple, int] = {}
        self._long: dict[int, tuple[int, list[tuple[tuple[np.ndarray, ...], tuple]]] | None] = {}

    def cycles(self, kind: int, streams: int) -> int:
        key = (kind, streams)
        if key not in self._cycles:
            long = self._truncations(kind)
            if long is None:
                self._cycles[key] = self._simulate(self.kinds[kind].streams, streams)
            else:
                n, shorts = long
                a, b = (self._short(parts, timing, streams) for parts, timing in shorts)
                period = (b - a) / (SHORT_TILES[1] - SHORT_TILES[0])
                self._cycles[key] = int(round(b + (n - SHORT_TILES[1]) * period))
            floor = self.block_floor(streams) if self.block_floor is not None else 0
            if floor or self.block_extra:
                n = long[0] if long is not None else tile_count(self.trace, self.kinds[kind].streams)
                # no faster than the tile's measured key blocks with as many sharing (``TileRule.block_cycles``), and
                # each key block of a launch off the kernel's lengths its measured extra (``bounds_block_cycles``)
                self._cycles[key] = max(self._cycles[key], n * floor) + n * self.block_extra
        return self._cycles[key]

    def _truncations(self, kind: int) -> tuple[int, list[tuple[tuple[np.ndarray, ...], tuple]]] | None:
        """(key tiles, each of the ``SHORT_TILES`` truncations and its timing key) of a long unit kind, None for a
        short one; once a kind."""
        if kind not in self._long:
            parts = self.kinds[kind].streams
            tiles = [_tile_steps(self.trace, ops) for ops in parts]  # as tile_count finds them, once for both
            n = max(t.size for t in tiles)
            self._long[kind] = None if n <= LONG_TILES else (n, [self._keyed(last_tiles(self.trace, parts, m, tiles))
                                                                   for m in SHORT_TILES])
        return self._long[kind]

    def _keyed(self, parts: tuple[np.ndarray, ...]) -> tuple[tuple[np.ndarray, ...], tuple]:
        steps = np.unique(np.concatenate([self.trace.step[ops] for ops in parts]))
        return parts, tuple(_timing_key(self.trace, ops, steps) for ops in parts)

    def _short(self, parts: tuple[np.ndarray, ...], timing: tuple, streams: int) -> int:
        """A truncated unit's cycles; truncations of equal structure (e.g. long causal units) share one run."""
        key = (timing, streams)
        if key not in self._short_cycles:
            self._short_cycles[key] = self._simulate(parts, streams)
        return self._short_cycles[key]

    def _simulate(self, parts: tuple[np.ndarray, ...], streams: int) -> int:
        def timed() -> int:
            return self.timing.timeline(self.trace, parts, streams)[1].total_cycles

        if not self._key:
            return timed()
        return cached(("unit cycles", *self._key, tuple((p.dtype.str, p.tobytes()) for p in parts), streams), timed)


def replace_buffers(hw: HardwareConfig, buffers: int) -> HardwareConfig:
    return hw.model_copy(update={"score_buffers": buffers})


def busy_by_pipeline(trace: Trace, core: HardwareConfig, launch: Launch) -> tuple[np.ndarray, np.ndarray]:
    """(busy cycles per pipeline, cycles per op kind) of the launch's units, their ops priced on ``core``
    (``op_cycles``): each kind's streams priced and summed once, times its units (exact integer sums, as float64)."""
    table = price_table(trace, core)  # every op's (kind, dtype), refusing one the core has no rate for
    units = np.bincount(launch.kind, minlength=len(launch.kinds))
    busy, by_kind = np.zeros(len(core.pipelines), np.int64), np.zeros(len(KIND_CODE), np.int64)
    for k, kind in enumerate(launch.kinds):
        for ops in kind.streams if units[k] else ():
            pipe, c = op_cycles(trace, core, slice(int(ops[0]), int(ops[-1]) + 1) if _is_range(ops) else ops, table)
            busy += units[k] * sums_by(pipe, c, len(core.pipelines))
            by_kind += units[k] * sums_by(_at(trace.kind, ops), c, len(KIND_CODE))
    return busy.astype(np.float64), by_kind.astype(np.float64)
