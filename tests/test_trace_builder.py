"""The trace builder against a plain reference: every column, its dtype and the digest, op for op.

The reference takes the ops the engine emitted (recorded at ``emit``), orders them by key
in a Python dict and resolves each dependency by lookup: what the builder must produce,
written the obvious way.
"""

from __future__ import annotations

import numpy as np
import pytest

from vfasim import trace as trace_module
from vfasim.errors import VfasimError
from vfasim.functional import Precision, Tiling, run_engine
from vfasim.functional.stages import SOFTWARE_PIPELINE
from vfasim.trace import COLUMNS, DTYPE_CODE, KIND_CODE, KIND_NAMES, Trace, TraceBuilder
from vfasim.workloads import make_workload

SCHEMA = {"kind": np.uint8, "dtype": np.uint8, "work": np.int64, "row": np.int32, "step": np.int32,
          "kblock": np.int32, "stage": np.uint8, "take_buffer": np.int8, "free_buffer": np.int8}


def recorded_run(monkeypatch, algo: str, tiling: Tiling, precision: Precision, **kwargs):
    """Run the engine; return its result, the builder's slot count and every emit's arguments."""
    log, slots = [], []
    emit = TraceBuilder.emit

    def recording(self, kind, rows, step, work, dtype, deps=(), kblock=None, buffered=True):
        rows = np.array(rows, np.int64)
        log.append((kind, rows, step, np.broadcast_to(work, rows.shape).copy(), dtype,
                    [np.broadcast_to(d, rows.shape).copy() for d in deps],
                    np.full(rows.size, -1) if kblock is None else np.array(kblock), buffered))
        slots.append(self.n_slots)
        return emit(self, kind, rows, step, work, dtype, deps, kblock, buffered)

    monkeypatch.setattr(TraceBuilder, "emit", recording)
    wl = make_workload("llm-like", tiling.kv_len, tiling.head_dim, tiling.heads, 0, tiling.kv_heads)
    q = wl.q[:, -tiling.seq_len:]
    result = run_engine(q, wl.k, wl.v, tiling, algo, precision, lam=0.05, **kwargs)
    return result, slots[0], log


def reference_trace(log: list, n_slots: int, meta: dict) -> Trace:
    ops = {}
    for kind, rows, step, work, dtype, deps, kblock, buffered in log:
        for i, row in enumerate(rows.tolist()):
            key = (row * n_slots + step) * len(KIND_NAMES) + KIND_CODE[kind]
            assert key not in ops
            ops[key] = (int(work[i]), DTYPE_CODE[dtype], int(kblock[i]), [int(d[i]) for d in deps if d[i] >= 0],
                        buffered)
    keys = sorted(ops)
    id_of = {key: i for i, key in enumerate(keys)}
    deps = [sorted(id_of[d] for d in ops[key][3]) for key in keys]
    kind = np.array([key % len(KIND_NAMES) for key in keys], np.uint8)
    schedule = SOFTWARE_PIPELINE.columns(kind)
    unbuffered = np.array([not ops[k][4] for k in keys], bool)
    for name in ("take_buffer", "free_buffer"):
        schedule[name][unbuffered] = -1
    return Trace(kind=kind, dtype=np.array([ops[k][1] for k in keys], np.uint8),
                 work=np.array([ops[k][0] for k in keys], np.int64),
                 row=np.array([k // len(KIND_NAMES) // n_slots for k in keys], np.int32),
                 step=np.array([k // len(KIND_NAMES) % n_slots for k in keys], np.int32),
                 kblock=np.array([ops[k][2] for k in keys], np.int32),
                 **schedule,
                 dep_ptr=np.concatenate([[0], np.cumsum([len(d) for d in deps])]).astype(np.int64),
                 dep_idx=np.array([i for d in deps for i in d], np.int32), meta=meta)


def assert_same_trace(built: Trace, ref: Trace) -> None:
    for name in (*COLUMNS, "dep_ptr", "dep_idx"):
        got, want = getattr(built, name), getattr(ref, name)
        assert got.dtype == want.dtype == SCHEMA.get(name, want.dtype), name
        np.testing.assert_array_equal(got, want, err_msg=name)
    assert built.digest() == ref.digest()


CASES = {
    "fa2 causal": ("fa2", Tiling(320, 320, 32, 64, 64, True), {}),
    "vfa gqa": ("vfa", Tiling(256, 256, 32, 64, 32, True, 4, 2), {}),
    "vfa decode": ("vfa", Tiling(3, 300, 32, 3, 64, True), {"decode": True}),
    "row skip": ("blasst_rowskip", Tiling(256, 256, 32, 32, 64, False, 2), {}),
    "vsa, V before the test": ("vsa", Tiling(300, 300, 32, 64, 32, False, 2), {"v_before_skip_test": True}),
}


@pytest.mark.parametrize("case", CASES)
def test_builder_matches_the_reference(case, monkeypatch):
    algo, tiling, kwargs = CASES[case]
    result, n_slots, log = recorded_run(monkeypatch, algo, tiling, Precision(), **kwargs)
    assert_same_trace(result.trace, reference_trace(log, n_slots, result.trace.meta))


def test_chunk_boundaries_and_threads_change_nothing(monkeypatch):
    from vfasim.functional import engine

    tiling = Tiling(384, 384, 32, 32, 32, True, 2, 1)
    result, n_slots, log = recorded_run(monkeypatch, "vfa", tiling, Precision())
    monkeypatch.undo()  # stop recording
    monkeypatch.setattr(trace_module._Column, "MAX_CHUNK", 5)  # every append crosses chunks
    monkeypatch.setattr(engine, "STEP_BYTES", 3 * 32 * 32 * 4)  # three rows a batch, on two threads
    wl = make_workload("llm-like", 384, 32, 2, 0, 1)
    small = run_engine(wl.q, wl.k, wl.v, tiling, "vfa")
    assert_same_trace(small.trace, reference_trace(log, n_slots, result.trace.meta))


def test_values_given_once_per_emit_or_per_op_land_on_their_ops():
    """A kind's work, dtype and buffer flag given as one value for all its emits, as different values from emit to
    emit, or per op (the builder keeps one value a kind where it can, else each emit's): each op gets its own."""
    tb, log = TraceBuilder(3, 2, schedule=SOFTWARE_PIPELINE), []

    def emit(kind, rows, step, work, dtype, deps=(), buffered=True):
        rows = np.array(rows, np.int64)
        kblock = np.full(rows.size, step - 1)
        log.append((kind, rows, step, np.broadcast_to(work, rows.shape).copy(), dtype,
                    [np.broadcast_to(d, rows.shape).copy() for d in deps], kblock, buffered))
        return tb.emit(kind, rows, step, work, dtype, deps, kblock, buffered)

    q = emit("load_q", [2, 0, 1], 0, 10, "float16")  # one value for every op of the kind
    k = np.concatenate([emit("load_k", [1, 0], 1, 100, "float16"),  # values that differ between emits
                        emit("load_k", [2], 1, 200, "float8_e4m3", buffered=False)])
    s = emit("qk_matmul", [1, 0], 1, np.array([7, 8]), "float16", deps=(k[:2], q[[2, 1]]))  # per op
    emit("qk_matmul", [2], 1, 9, "float16", deps=(k[2:], q[:1]), buffered=False)
    emit("scale", [1, 0], 1, 5, "float32", deps=(s,))
    emit("load_k", [0], 2, 100, "float16")
    emit("qk_matmul", [0], 2, np.array([11]), "float16", deps=(np.array([-1]),))
    built = tb.build()
    assert_same_trace(built, reference_trace(log, tb.n_slots, built.meta))
    assert built.work.tolist() == [10, 100, 8, 5, 100, 11, 10, 100, 7, 5, 10, 200, 9]


def test_wide_key_space_uses_64_bit_keys():
    rows = 2**26  # rows * slots * kinds > 2^31
    tb = TraceBuilder(rows, 2, schedule=SOFTWARE_PIPELINE)
    last = np.array([rows - 1])
    load = tb.emit("load_k", last, 1, 100, "float16", kblock=np.array([0]))
    tb.emit("qk_matmul", last, 1, 7, "float16", deps=(load,), kblock=np.array([0]))
    t = tb.build()
    assert t.row.tolist() == [rows - 1] * 2 and t.dep_idx.tolist() == [0] and t.work.tolist() == [100, 7]


def test_bad_emits_are_refused():
    tb = TraceBuilder(2, 1, schedule=SOFTWARE_PIPELINE)
    tb.emit("load_q", np.array([0, 1]), 0, 10, "float16")
    tb.emit("load_q", np.array([1]), 0, 10, "float16")
    with pytest.raises(VfasimError, match="emitted twice"):
        tb.build()
    tb = TraceBuilder(2, 1, schedule=SOFTWARE_PIPELINE)
    tb.emit("load_q", np.array([0, 1]), 0, 10, "float16", deps=(tb.key("key_summary", np.array([0, 1]), 0),))
    with pytest.raises(VfasimError, match="never emitted"):
        tb.build()
