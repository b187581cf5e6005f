"""The operation trace: the one contract between the functional engine and the timing model.

A trace is a columnar list of per-tile operations in *issue order* (head, query
block, step of the key-block loop, then program order inside a tile). Each op
carries work counts — MACs, elements or bytes, with the data type — never
cycles, so one trace runs on every hardware config. Dependencies are explicit
(CSR arrays) and always point to earlier ops. The engine also writes how its
kernel is scheduled: each op's software-pipeline ``stage`` and the tile buffer
it takes or frees (``take_buffer``/``free_buffer``, codes into ``BUFFERS``).
The i-th op in issue order that takes a buffer of one kind holds one of the
core's buffers of that kind until the i-th op that frees that kind has ended.

Assumptions:
- One op is one tile-level instruction (e.g. "rowmax over a Br×Bc tile"); the
  timing model charges the per-instruction overhead once per op.
- Work is counted on the padded tile shape, as hardware executes full tiles;
  masking is an extra vector op on tiles that need it.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import TypedDict

import numpy as np

from vfasim.errors import VfasimError
from vfasim.formats import TRACE_DTYPES

TRACE_VERSION = 2

#: op kind -> (class, unit). Order is program order inside one tile.
OP_KINDS: dict[str, tuple[str, str]] = {
    "key_summary": ("vector", "elements"),  # sabsmax of each key block (VFA prelude)
    "load_q": ("memory", "bytes"),
    "minit_matmul": ("tensor", "macs"),  # Q_i · k_reprᵀ over visible key blocks
    "minit_max": ("vector", "elements"),  # elementwise max over those proxy scores
    "load_k": ("memory", "bytes"),
    "qk_matmul": ("tensor", "macs"),
    "move_s": ("memory", "bytes"),  # score tile cube -> vector side (split cores; free when shared)
    "scale": ("vector", "elements"),
    "mask": ("vector", "elements"),  # causal / padding mask on the tiles that need it
    "rowmax": ("vector", "elements"),
    "running_max": ("vector", "elements"),
    "skip_test": ("vector", "elements"),  # BLASST threshold test (VSA)
    "rescale_factor": ("exp", "elements"),  # exp(m_old - m_new), one per row
    "sub": ("vector", "elements"),
    "exp": ("exp", "elements"),
    "exp_emul": ("vector", "elements"),  # FA4-style polynomial exp on the vector ALUs
    "rowsum": ("vector", "elements"),
    "accumulate_l": ("vector", "elements"),  # l = alpha*l + rowsum (MAD) or l + rowsum
    "quant_p": ("vector", "elements"),  # block absmax and scale of P, for scaled P formats
    "cast_p": ("vector", "elements"),
    "move_p": ("memory", "bytes"),  # P tile vector -> cube (split cores; free when shared)
    "rescale_o": ("vector", "elements"),  # O *= exp(m_old - m_new); before PV, which may accumulate into O in place
    "load_v": ("memory", "bytes"),
    "pv_matmul": ("tensor", "macs"),
    "move_o": ("memory", "bytes"),  # partial O cube -> vector before a rescaling update (split cores)
    "move_pv": ("memory", "bytes"),  # the same hand-off on a frozen block; gone when O stays in the cube
    "accumulate_o": ("vector", "elements"),  # O = rescaled O + PV, after a rescale
    "accumulate_pv": ("vector", "elements"),  # O += PV with the max frozen: vector, or the cube's accumulator
    "normalize": ("vector", "elements"),
    "store_o": ("memory", "bytes"),
}
KIND_NAMES: tuple[str, ...] = tuple(OP_KINDS)
KIND_CODE: dict[str, int] = {name: i for i, name in enumerate(KIND_NAMES)}

#: data types an op's work can be in (matmul inputs, vector side, moved data): vfasim.formats' table
DTYPES: tuple[str, ...] = TRACE_DTYPES
DTYPE_CODE: dict[str, int] = {name: i for i, name in enumerate(DTYPES)}

#: tile buffers an op may take or free; -1 in a buffer column means none
BUFFERS: tuple[str, ...] = ("k", "v")
NO_BUFFER = -1

_CHUNK = 1 << 16  # ops worked on at a time where whole-trace temporaries would cost more than the loop
COLUMNS = ("kind", "dtype", "work", "row", "step", "kblock", "stage", "take_buffer", "free_buffer")


class ScheduleColumns(TypedDict):
    """The columns a ``KindSchedule`` gives a trace, by ``Trace`` field name."""

    stage: np.ndarray
    take_buffer: np.ndarray
    free_buffer: np.ndarray


class _KeyColumns(TypedDict):
    """The columns ``TraceBuilder`` makes from the op keys and the key blocks emitted, by ``Trace`` field name."""

    kind: np.ndarray
    row: np.ndarray
    step: np.ndarray
    kblock: np.ndarray


@dataclass(frozen=True)
class KindSchedule:
    """Per op kind: software-pipeline stage, buffer taken, buffer freed (written by the engine)."""

    stage: dict[str, int]
    takes: dict[str, str] = field(default_factory=dict)
    frees: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        missing = [k for k in KIND_NAMES if k not in self.stage]
        if missing or not all(0 <= s < 256 for s in self.stage.values()):
            raise VfasimError(f"invalid stage table: no stage in 0..255 for {', '.join(missing) or 'some kind'}")
        for name, table in (("takes", self.takes), ("frees", self.frees)):
            for kind, buf in table.items():
                if kind not in KIND_CODE or buf not in BUFFERS:
                    raise VfasimError(f"invalid stage table: {name}[{kind!r}] = {buf!r}")

    def columns(self, kind: np.ndarray) -> ScheduleColumns:
        """The ``stage``, ``take_buffer`` and ``free_buffer`` columns for ops of the given kinds."""
        stage = np.array([self.stage[k] for k in KIND_NAMES], np.uint8)
        take, free = (np.array([BUFFERS.index(t[k]) if k in t else NO_BUFFER for k in KIND_NAMES], np.int8)
                      for t in (self.takes, self.frees))
        return {"stage": stage[kind], "take_buffer": take[kind], "free_buffer": free[kind]}


@dataclass(frozen=True, eq=False)
class Trace:
    """Columnar, validated op list. ``row`` = head * n_qblocks + query block."""

    kind: np.ndarray  # uint8 code into KIND_NAMES
    dtype: np.ndarray  # uint8 code into DTYPES
    work: np.ndarray  # int64 MACs / elements / bytes (see OP_KINDS unit)
    row: np.ndarray  # int32 (head, query block) in issue order
    step: np.ndarray  # int32 slot in the row: 0 prelude, 1..T visit steps, T+1 epilogue
    kblock: np.ndarray  # int32 key block of the tile, -1 outside tiles
    stage: np.ndarray  # uint8 software-pipeline stage inside the tile's slot
    take_buffer: np.ndarray  # int8 code into BUFFERS the op takes, -1 none
    free_buffer: np.ndarray  # int8 code into BUFFERS the op frees, -1 none
    dep_ptr: np.ndarray  # int64, len n+1: deps of op i are dep_idx[dep_ptr[i]:dep_ptr[i+1]]
    dep_idx: np.ndarray  # int32, all < i
    meta: dict = field(default_factory=dict)
    version: int = TRACE_VERSION

    def __post_init__(self) -> None:
        validate(self)

    def __len__(self) -> int:
        return int(self.kind.size)

    @staticmethod
    def kind_code(name: str) -> int:
        return KIND_CODE[name]

    def deps_of(self, i: int) -> np.ndarray:
        return self.dep_idx[self.dep_ptr[i] : self.dep_ptr[i + 1]]

    def tile_ids(self) -> np.ndarray:
        """Consecutive id per (row, step) group, in issue order."""
        return tile_ids(self.row, self.step)

    def digest(self) -> str:
        """SHA-256 over every column: equal digests mean identical traces."""
        return digest_of(([getattr(self, c)] for c in (*COLUMNS, "dep_ptr", "dep_idx")), self.version)


def digest_of(columns: Iterable[Iterable[np.ndarray]], version: int = TRACE_VERSION) -> str:
    """``Trace.digest`` of a trace's columns (``COLUMNS``, then ``dep_ptr`` and ``dep_idx``), each given in pieces."""
    h = hashlib.sha256(f"vfasim-trace-v{version}".encode())
    for pieces in columns:
        for piece in pieces:
            h.update(np.ascontiguousarray(piece).data)  # the bytes themselves: no copy
    return h.hexdigest()


def tile_ids(row: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Consecutive id per run of ops of one (row, step), given in issue order."""
    new = np.ones(row.size, dtype=bool)
    new[1:] = (row[1:] != row[:-1]) | (step[1:] != step[:-1])
    return np.cumsum(new) - 1


def validate(t: Trace) -> None:
    """Raise VfasimError unless the trace is well formed."""
    if t.version != TRACE_VERSION:
        raise VfasimError(f"trace version {t.version} is not supported (expected {TRACE_VERSION})")
    n = t.kind.size
    for name in COLUMNS:
        if getattr(t, name).shape != (n,):
            raise VfasimError(f"trace column {name!r} has shape {getattr(t, name).shape}, expected ({n},)")
    _check(t.kind.max(initial=0) < len(KIND_NAMES), "op kind code out of range")
    _check(t.dtype.max(initial=0) < len(DTYPES), "dtype code out of range")
    _check(t.work.min(initial=0) >= 0, "negative work count")
    _check(t.dep_ptr.shape == (n + 1,) and t.dep_ptr[0] == 0, "dep_ptr must have n+1 entries starting at 0")
    chunks = range(0, n, _CHUNK)  # the dependencies of a chunk of ops at a time: small temporaries
    _check(all(bool(np.all(np.diff(t.dep_ptr[lo:lo + _CHUNK + 1]) >= 0)) for lo in chunks)
           and t.dep_ptr[-1] == t.dep_idx.size, "dep_ptr not monotonic")
    _check(all(bool(np.all((deps >= 0) & (deps < owner))) for owner, deps in map(partial(_deps, t), chunks)),
           "a dependency does not point to an earlier op")
    _check(all(bool(np.all(t.stage[deps] <= t.stage[owner])) for owner, deps in map(partial(_deps, t), chunks)),
           "a dependency lies in a later stage than its op")
    _check_buffers(t)


def _deps(t: Trace, lo: int) -> tuple[np.ndarray, np.ndarray]:
    """(owner, dependency) of each dependency of ops [lo, lo + _CHUNK)."""
    ptr = t.dep_ptr[lo:lo + _CHUNK + 1]
    owner = np.repeat(np.arange(lo, lo + ptr.size - 1, dtype=np.int64), np.diff(ptr))
    return owner, t.dep_idx[ptr[0]:ptr[-1]]


def _check_buffers(t: Trace) -> None:
    for col in (t.take_buffer, t.free_buffer):
        _check(bool(np.all((col >= NO_BUFFER) & (col < len(BUFFERS)))), "buffer code out of range")
    for b, name in enumerate(BUFFERS):
        takes, frees = np.flatnonzero(t.take_buffer == b), np.flatnonzero(t.free_buffer == b)
        _check(takes.size == frees.size, f"{takes.size} ops take buffer {name!r} but {frees.size} free it")
        _check(bool(np.all(frees > takes)), f"buffer {name!r} is freed before it is taken")


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise VfasimError(f"invalid trace: {message}")


class TraceBuilder:
    """Collects ops emitted a step at a time for many rows, then orders them.

    Ops are addressed by a *key* ``(row * n_slots + step) * n_kinds + kind`` so the
    engine can name dependencies before global op ids exist; ``build`` sorts by
    key (= issue order) and resolves keys to ids. Emitted ops go straight into
    compact growing columns (keys in int32 where the key space allows, dependencies
    as (op, key) pairs without the -1 placeholders; a dtype, work or buffer flag given
    as one value for an emit's ops is kept once, ``_ByKind``), so a long run holds a few
    tens of bytes per op until ``build``. ``emit`` may be called from several threads.
    """

    def __init__(self, n_rows: int, n_steps: int, meta: dict | None = None, *,
                 schedule: KindSchedule) -> None:
        self.n_slots = n_steps + 2
        self.n_rows = n_rows
        self.meta = dict(meta or {})
        self.schedule = schedule
        key_dtype = np.int32 if n_rows * self.n_slots * len(KIND_NAMES) < 2**31 else np.int64
        self._ops = {"key": _Column(key_dtype), "kblock": _Column(np.int32)}
        self._by_kind = {"dtype": _ByKind(np.uint8), "work": _ByKind(np.int64), "buffered": _ByKind(np.bool_)}
        self._deps = {"op": _Column(np.int32), "key": _Column(key_dtype)}  # op: position in emission order
        self._lock = threading.Lock()

    def key(self, kind: str, rows: np.ndarray, step: int | np.ndarray) -> np.ndarray:
        return (rows.astype(np.int64) * self.n_slots + step) * len(KIND_NAMES) + KIND_CODE[kind]

    def emit(self, kind: str, rows: np.ndarray, step: int | np.ndarray, work: int | np.ndarray,
             dtype: str, deps: tuple[np.ndarray, ...] = (), kblock: np.ndarray | None = None,
             buffered: bool = True) -> np.ndarray:
        """Add one op of ``kind`` for each row; ``deps`` are key arrays (-1 = none). ``buffered`` False: the ops
        take and free no tile buffer, whatever their kind's schedule says (a load whose tile is then dropped)."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size == 0:
            return np.empty(0, dtype=np.int64)
        keys = self.key(kind, rows, step)
        with self._lock:
            first = self._ops["key"].size
            if first + keys.size >= 2**31:
                raise VfasimError("trace too large: op ids must fit in 32 bits")
            self._ops["key"].append(keys)
            self._ops["kblock"].append(np.broadcast_to(-1 if kblock is None else kblock, keys.shape))
            for name, values in (("dtype", DTYPE_CODE[dtype]), ("work", work), ("buffered", buffered)):
                self._by_kind[name].append(KIND_CODE[kind], first, keys.size, values)
            for d in deps:
                d = np.broadcast_to(d, keys.shape)
                named = d >= 0
                if named.all():  # the usual case: no -1 to leave out
                    self._deps["op"].append(np.arange(first, first + keys.size))
                    self._deps["key"].append(d)
                else:
                    ok = np.flatnonzero(named)
                    self._deps["op"].append(first + ok)
                    self._deps["key"].append(d[ok])
        return keys

    def build(self) -> Trace:
        keys = self._ops["key"].take()
        order = np.argsort(keys, kind="stable").astype(np.int32)  # ids fit int32 (see emit)
        keys = keys[order]
        if np.any(keys[1:] == keys[:-1]):
            raise VfasimError("invalid trace: the same op was emitted twice")
        cols = self._columns(keys, order)
        new_pos = np.empty(order.size, np.int32)  # emission position -> op id (ids fit int32, see emit)
        new_pos[order] = np.arange(order.size, dtype=np.int32)
        del order
        positions = _KeyPositions(keys, self.n_rows * self.n_slots)
        del keys  # the positions hold what is still needed of them
        pairs = self._dependency_pairs(positions, new_pos)
        del positions
        dep_ptr, dep_idx = _csr(pairs, new_pos.size)
        del pairs
        kind = cols["kind"]  # the columns a kind gives, made once the dependencies' temporaries are gone
        dtype, work, buffered = (self._by_kind[name].take(kind, new_pos) for name in ("dtype", "work", "buffered"))
        del new_pos
        schedule = self.schedule.columns(kind)
        if not buffered.all():
            for name in ("take_buffer", "free_buffer"):
                schedule[name] = np.where(buffered, schedule[name], np.int8(NO_BUFFER))
        return Trace(**cols, dtype=dtype, work=work, **schedule, dep_ptr=dep_ptr, dep_idx=dep_idx, meta=self.meta)

    def _columns(self, keys: np.ndarray, order: np.ndarray) -> _KeyColumns:
        """The op columns held per op in issue order (``keys`` sorted, ``order`` the emission position of each)."""
        n = keys.size
        kind, row, step = np.empty(n, np.uint8), np.empty(n, np.int32), np.empty(n, np.int32)
        for lo in range(0, n, _CHUNK):  # a chunk at a time: small temporaries
            at = slice(lo, lo + _CHUNK)
            group, kind[at] = np.divmod(keys[at], len(KIND_NAMES))  # group: row * n_slots + step
            row[at], step[at] = np.divmod(group, self.n_slots)
        return {"kind": kind, "row": row, "step": step, "kblock": self._ops["kblock"].take()[order]}

    def _dependency_pairs(self, positions: _KeyPositions, new_pos: np.ndarray) -> np.ndarray:
        """Each emitted dependency as owner id * 2^32 + target id (ids < 2^31), in emission order."""
        pairs = np.empty(self._deps["op"].size, np.int64)
        done = 0
        ops, wanted = self._deps["op"].take_chunks(), self._deps["key"].take_chunks()
        ops.reverse()
        wanted.reverse()
        while ops:  # each chunk let go once resolved
            owner, key = ops.pop(), wanted.pop()
            for lo in range(0, owner.size, _CHUNK):  # a chunk at a time: small temporaries
                pair = new_pos[owner[lo:lo + _CHUNK]].astype(np.int64)
                pair <<= 32
                pair |= positions.of(key[lo:lo + _CHUNK])
                pairs[done:done + pair.size] = pair
                done += pair.size
        return pairs


def _csr(pairs: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR dependency arrays of ``n`` ops from their (owner, target) ``pairs`` (sorted here, in place), each op's
    dependencies sorted by id."""
    pairs.sort(kind="stable")  # the same values in order: the stable sort merges the emitters' sorted runs
    dep_ptr = np.zeros(n + 1, np.int64)
    for lo in range(0, pairs.size, _CHUNK):  # each owner's count, from its sorted run of pairs
        owner = pairs[lo:lo + _CHUNK] >> 32
        count = np.bincount(owner - owner[0])
        dep_ptr[int(owner[0]) + 1:int(owner[0]) + 1 + count.size] += count
    np.cumsum(dep_ptr, out=dep_ptr)
    return dep_ptr, pairs.astype(np.int32)  # the low 32 bits: the target


class _KeyPositions:
    """Position of a key in the sorted, distinct ``keys``; a key never emitted is refused.

    A key is group (row, slot) × kinds + kind, and a group holds at most one op of each kind. Where
    the key space is not much larger than the trace, each group's first position and each key's rank
    in its group (-1: none) are tabled, so a key is found with two look-ups, not a binary search.
    """

    def __init__(self, keys: np.ndarray, n_groups: int) -> None:
        self.keys, self.space = keys, n_groups * len(KIND_NAMES)
        self.first: np.ndarray | None = None
        if self.space > 8 * keys.size + (1 << 22):
            return
        self.keys = keys[:0].copy()  # the table below is all a look-up reads: the keys may go
        n_kinds = len(KIND_NAMES)
        self.first = np.zeros(n_groups, np.int32)  # each group's first position
        self.rank = np.full(self.space, -1, np.int8)  # each key's place in its group (fewer than 128 kinds), -1: none
        for lo in range(0, keys.size, _CHUNK):  # a chunk at a time: small temporaries
            group = keys[lo:lo + _CHUNK] // n_kinds
            heads = np.flatnonzero(np.diff(group, prepend=keys[lo - 1] // n_kinds if lo else -1))  # groups begun here
            self.first[group[heads]] = lo + heads
            self.rank[keys[lo:lo + _CHUNK]] = lo + np.arange(group.size, dtype=np.int32) - self.first[group]

    def of(self, wanted: np.ndarray) -> np.ndarray:
        """The positions of the ``wanted`` keys."""
        if self.first is None:
            found = np.searchsorted(self.keys, wanted)
            emitted = found.size == 0 or np.array_equal(self.keys[np.minimum(found, self.keys.size - 1)], wanted)
        else:
            emitted = wanted.size == 0 or (wanted.min() >= 0 and wanted.max() < self.space)
            at = self.rank[wanted] if emitted else wanted
            emitted = emitted and not np.any(at < 0)
            found = self.first[wanted // len(KIND_NAMES)] + at if emitted else wanted
        if not emitted:
            raise VfasimError("invalid trace: a dependency names an op that was never emitted")
        return found


class _Column:
    """A 1-D array that grows by appending, held in chunks so that growing never copies what it holds."""

    MAX_CHUNK = 1 << 23  # elements: 32 MiB of int32, glibc's largest mmap threshold, so a chunk let go is given back

    def __init__(self, dtype: type) -> None:
        self.dtype, self.size = dtype, 0
        self._chunks: list[np.ndarray] = []
        self._used = 0  # elements filled in the last chunk

    def append(self, values: np.ndarray) -> None:
        done = 0
        while done < values.size:
            if not self._chunks or self._used == self._chunks[-1].size:
                self._chunks.append(np.empty(min(self.MAX_CHUNK, max(4096, self.size)), self.dtype))
                self._used = 0
            last = self._chunks[-1]
            take = min(values.size - done, last.size - self._used)
            last[self._used:self._used + take] = values[done:done + take]
            self._used, done = self._used + take, done + take
        self.size += values.size

    def take(self) -> np.ndarray:
        """Everything appended, as one array; the column is empty afterwards."""
        chunks = self.take_chunks()
        return np.concatenate(chunks) if chunks else np.empty(0, self.dtype)

    def take_chunks(self) -> list[np.ndarray]:
        """Everything appended, as the arrays it is held in (columns appended alike are held alike); the column is
        empty afterwards."""
        if self._chunks:
            self._chunks[-1] = self._chunks[-1][:self._used]
        chunks, self._chunks, self._used, self.size = self._chunks, [], 0, 0
        return chunks


class _ByKind:
    """A column whose values an emit usually gives as one value for all its ops, the same for every emit of a kind
    (a dtype, a work count): such values are kept once per emit and, in issue order, looked up by kind. Values given
    as arrays, and those of a kind given different values, are written to their ops' issue positions instead."""

    def __init__(self, dtype: type) -> None:
        self.dtype = dtype
        self._runs: list[tuple[int, int, int, int | None]] = []  # (kind, first position, ops, value or None)
        self._arrays = _Column(dtype)  # the values given as arrays, in emission order

    def append(self, kind: int, first: int, size: int, values: int | np.ndarray) -> None:
        if isinstance(values, (int, np.integer, np.bool_)):
            self._runs.append((kind, first, size, int(values)))
        else:
            self._runs.append((kind, first, size, None))
            self._arrays.append(np.broadcast_to(values, (size,)))

    def take(self, kind: np.ndarray, new_pos: np.ndarray) -> np.ndarray:
        """The values in issue order, given each op's ``kind`` in that order and ``new_pos``, the issue position of
        each emission position; the column is empty afterwards."""
        runs, arrays, self._runs = self._runs, self._arrays.take(), []
        value: dict[int, int] = {}
        mixed = np.zeros(len(KIND_NAMES), bool)  # kinds written by emission position
        for k, _, _, v in runs:
            mixed[k] |= v is None or value.setdefault(k, v) != v
        table: np.ndarray = np.zeros(len(KIND_NAMES), self.dtype)
        for k, v in value.items():
            table[k] = v
        out = table[kind]
        used = 0  # values of _arrays used so far
        for k, first, size, v in runs:
            if mixed[k]:
                out[new_pos[first:first + size]] = arrays[used:used + size] if v is None else v
            used += size if v is None else 0
        return out
