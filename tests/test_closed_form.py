"""The closed-form schedule against a plain SimPy reference on random traces and cores; the wait
record; what is refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vfasim.errors import VfasimError
from vfasim.hw import HardwareConfig
from vfasim.sim import simulate
from vfasim.sim.critical import critical_path
from vfasim.sim.schedule import DATA, TURN, schedule_edges
from vfasim.trace import BUFFERS, DTYPES, KIND_CODE, KIND_NAMES, Trace

from conftest import TWO_TILES, hand_trace, tiny_hw
from reference_sim import reference_simulate

BUFFER_PAIRS = (("load_k", "qk_matmul"), ("load_v", "pv_matmul"))
OTHER_KINDS = [k for k in KIND_NAMES if all(k not in pair for pair in BUFFER_PAIRS)]


@st.composite
def traces(draw) -> Trace:
    """Rows of prelude, 1-4 tiles and epilogue; random kinds, stages, dtypes, work and
    dependencies (earlier ops of no later stage); K/V loads paired with their users."""
    ops: list[tuple[str, int, int, int]] = []  # kind, row, step, key block
    for row in range(draw(st.integers(1, 3))):
        ops += [(k, row, 0, -1) for k in draw(st.lists(st.sampled_from(OTHER_KINDS), max_size=2, unique=True))]
        tiles = draw(st.integers(1, 4))
        for t in range(tiles):
            kinds = set(draw(st.lists(st.sampled_from(OTHER_KINDS), min_size=1, max_size=4)))
            for pair in BUFFER_PAIRS:
                kinds |= set(pair) if draw(st.booleans()) else set()
            ops += [(k, row, t + 1, t) for k in sorted(kinds, key=KIND_CODE.__getitem__)]
        ops += [(k, row, tiles + 1, -1) for k in draw(st.lists(st.sampled_from(OTHER_KINDS), max_size=2, unique=True))]
    stage = [draw(st.integers(0, 3)) for _ in ops]
    deps = [draw(st.lists(st.sampled_from([j for j in range(i) if stage[j] <= stage[i]] or [-1]),
                          max_size=3, unique=True)) for i in range(len(ops))]
    deps = [[d for d in ds if d >= 0] for ds in deps]
    takes = {load: BUFFERS.index(b) for (load, _), b in zip(BUFFER_PAIRS, "kv", strict=True)}
    frees = {use: BUFFERS.index(b) for (_, use), b in zip(BUFFER_PAIRS, "kv", strict=True)}
    kind = np.array([KIND_CODE[k] for k, *_ in ops], np.uint8)
    return Trace(
        kind=kind, dtype=np.array(draw(st.lists(st.integers(0, len(DTYPES) - 1), min_size=len(ops),
                                                max_size=len(ops))), np.uint8),
        work=np.array(draw(st.lists(st.integers(0, 200), min_size=len(ops), max_size=len(ops))), np.int64),
        row=np.array([r for _, r, _, _ in ops], np.int32), step=np.array([s for _, _, s, _ in ops], np.int32),
        kblock=np.array([b for *_, b in ops], np.int32), stage=np.array(stage, np.uint8),
        take_buffer=np.array([takes.get(k, -1) for k, *_ in ops], np.int8),
        free_buffer=np.array([frees.get(k, -1) for k, *_ in ops], np.int8),
        dep_ptr=np.concatenate([[0], np.cumsum([len(d) for d in deps])]).astype(np.int64),
        dep_idx=np.array([d for ds in deps for d in ds], np.int32))


@st.composite
def cores(draw) -> HardwareConfig:
    """Four pipelines with rates for every dtype, 1-3 units each dealt by issue order or by row, any op kind
    on any of them or fused; half the time the exp pipeline shares the vector pipeline's stream, holding it for all
    or half of its cycles; some cores make their matmuls and exps (and vector ops) take turns, on the core or per row;
    some op kinds have a result latency."""
    roles = {"cube": "tensor", "vector": "vector", "exp": "exp", "mover": "memory"}
    pipelines = {name: {"role": role, "units": draw(st.integers(1, 3)), "units_by": draw(st.sampled_from(["issue", "row"])),
                        "startup_cycles": draw(st.integers(0, 3)), "issue_overhead_cycles": draw(st.integers(0, 2)),
                        "throughput": {d: draw(st.sampled_from([1, 3, 10, 40])) for d in (*DTYPES, "bytes")}}
                 for name, role in roles.items()}
    factors = draw(st.lists(st.sampled_from(KIND_NAMES), max_size=3, unique=True))
    if draw(st.booleans()):  # exp ops join the vector pipeline's stream
        pipelines["exp"].update(units=pipelines["vector"]["units"], units_by=pipelines["vector"]["units_by"],
                                shares_issue_with="vector", issue_share=draw(st.sampled_from([1.0, 0.5])))
    turns = draw(st.sampled_from([(), ("tensor", "exp"), ("exp", "tensor", "vector"),
                                  ("memory", "tensor", "vector", "exp")]))
    within = draw(st.sampled_from(["core", "row"])) if turns else "core"
    return HardwareConfig.model_validate({
        "name": "random", "clock_ghz": 1.0, "score_buffers": draw(st.integers(1, 4)),
        "precision": {"matmul": "float16", "vector": "float32"}, "pipelines": pipelines,
        "op_map": {k: draw(st.sampled_from([*roles, *roles, "fused"])) for k in KIND_NAMES},
        "work_factor": {k: draw(st.sampled_from([0.5, 2.5])) for k in factors},
        "result_latency": {k: draw(st.sampled_from([0, 1, 7])) for k in
                           draw(st.lists(st.sampled_from(KIND_NAMES), max_size=4, unique=True))},
        "take_turns": turns, "turns_within": within})


SCHEDULE = st.sampled_from(["pipelined", "serial"])


@given(traces(), cores(), SCHEDULE)
def test_closed_form_equals_the_simpy_reference(trace, hw, schedule):
    timeline = simulate(trace, hw, schedule)
    start, end = reference_simulate(trace, hw, schedule)
    assert timeline.start_cycles.tolist() == start
    assert timeline.end_cycles.tolist() == end
    assert timeline.total_cycles == max(end, default=0)


@given(traces(), cores(), SCHEDULE)
def test_each_op_records_the_edge_its_start_waited_for(trace, hw, schedule):
    timeline = simulate(trace, hw, schedule)
    parent, child, kind = schedule_edges(trace, hw, timeline.pipeline, schedule)
    for op in range(len(trace)):
        into = [(int(k), int(p)) for p, c, k in zip(parent, child, kind) if c == op]
        ready = timeline.end_cycles if timeline.ready_cycles is None else timeline.ready_cycles
        at = [(k, p, ready[p] if k in (DATA, TURN) else timeline.end_cycles[p]) for k, p in into]  # results: ready
        binding = [(k, p) for k, p, t in at if t == timeline.start_cycles[op]]
        expected = min(binding, default=(-1, -1))  # data before stream before buffer, then the lower id
        assert (timeline.wait_kind[op], timeline.waited_on[op]) == expected
        assert timeline.start_cycles[op] == max((t for *_, t in at), default=0)


@given(traces(), cores(), SCHEDULE)
def test_a_timeline_without_its_wait_record_has_the_same_spans(trace, hw, schedule):
    full, spans = simulate(trace, hw, schedule), simulate(trace, hw, schedule, waits=False)
    for name in ("start_cycles", "end_cycles", "pipeline"):
        assert getattr(spans, name).tolist() == getattr(full, name).tolist()
    assert spans.total_cycles == full.total_cycles and spans.waited_on is None and spans.wait_kind is None
    with pytest.raises(VfasimError, match="no record of what its ops waited on"):
        critical_path(trace, spans, hw, schedule)


def test_ops_are_priced_by_their_own_dtype():
    trace = hand_trace(TWO_TILES[:3])
    doc = tiny_hw().model_dump()
    doc["pipelines"]["exp"]["throughput"]["float16"] = 30  # exp in float16 three times as fast
    hw = HardwareConfig.model_validate(doc)
    as_fp16 = Trace(**{**trace.__dict__, "dtype": np.where(trace.kind == KIND_CODE["exp"], DTYPES.index("float16"),
                                                           trace.dtype).astype(np.uint8)})
    assert simulate(trace, hw).end_cycles[2] - simulate(trace, hw).start_cycles[2] == 4  # 1 + 30 / 10
    assert simulate(as_fp16, hw).end_cycles[2] - simulate(as_fp16, hw).start_cycles[2] == 2  # 1 + 30 / 30


def test_a_dtype_the_pipeline_has_no_rate_for_is_refused():
    trace = hand_trace(TWO_TILES[:3])
    fp8 = Trace(**{**trace.__dict__, "dtype": np.full(3, DTYPES.index("float8_e4m3"), np.uint8)})
    with pytest.raises(VfasimError, match=r"^qk_matmul ops in float8_e4m3 have no rate on pipeline 'cube' of tiny"):
        simulate(fp8, tiny_hw())


def test_a_load_waiting_on_a_later_op_runs_in_topological_order():
    # One K buffer, two K loads in one tile: the second load waits for the first QK, which the
    # issue order puts after it. No cycle: the mover idles until QK 1 (3..8) frees the buffer.
    ops = [("load_k", 1, 0, 20, []), ("load_k", 1, 0, 20, []), ("qk_matmul", 1, 0, 40, [0]),
           ("qk_matmul", 1, 0, 40, [1])]
    trace, hw = hand_trace(ops), tiny_hw(score_buffers=1)
    timeline = simulate(trace, hw)
    assert list(zip(timeline.start_cycles, timeline.end_cycles)) == [(0, 3), (8, 11), (3, 8), (11, 16)]
    assert reference_simulate(trace, hw, "pipelined") == ([0, 8, 3, 11], [3, 11, 8, 16])


def test_a_cycle_is_refused():
    # The first QK (which frees the one K buffer) consumes the second load, which needs that buffer.
    ops = [("load_k", 1, 0, 20, []), ("load_k", 1, 0, 20, []), ("qk_matmul", 1, 0, 40, [1]),
           ("qk_matmul", 1, 0, 40, [0])]
    with pytest.raises(VfasimError, match=r"schedule 'pipelined' deadlocks: 3 ops never start, from op 1 \(load_k\)"):
        simulate(hand_trace(ops), tiny_hw(score_buffers=1))
    assert simulate(hand_trace(ops), tiny_hw(score_buffers=2)).total_cycles == 16


@pytest.mark.parametrize("schedule", ["pipelined", "serial"])
def test_units_run_side_by_side(schedule):
    # Four exp ops of 4 cycles after one load, on two exp units: pairs overlap under pipelined only.
    ops = [("load_q", 1, 0, 20, []), *[("exp", 1, 0, 30, [0])] * 4]
    doc = tiny_hw().model_dump()
    doc["pipelines"]["exp"]["units"] = 2
    timeline = simulate(hand_trace(ops), HardwareConfig.model_validate(doc), schedule)
    expected = {"pipelined": [3, 3, 7, 7], "serial": [3, 7, 11, 15]}[schedule]
    assert timeline.start_cycles[1:].tolist() == expected


def test_units_by_row_keep_each_rows_queue():
    # Three exp ops of row 0 and one of row 1 on two exp units: by issue order they pair up; by row,
    # row 0's run one after another on unit 0 while row 1's runs beside the first on unit 1.
    ops = [("load_q", 1, 0, 20, []), *[("exp", 1, 0, 30, [0])] * 4]
    trace = hand_trace(ops)
    trace = Trace(**{**trace.__dict__, "row": np.array([0, 0, 0, 1, 0], np.int32)})
    doc = tiny_hw().model_dump()
    doc["pipelines"]["exp"]["units"] = 2
    by_issue = simulate(trace, HardwareConfig.model_validate(doc))
    doc["pipelines"]["exp"]["units_by"] = "row"
    by_row = simulate(trace, HardwareConfig.model_validate(doc))
    assert by_issue.start_cycles[1:].tolist() == [3, 3, 7, 7]
    assert by_row.start_cycles[1:].tolist() == [3, 7, 3, 11]
    assert reference_simulate(trace, HardwareConfig.model_validate(doc), "pipelined")[0][1:] == [3, 7, 3, 11]


def test_a_shared_stream_needs_the_same_units_by():
    doc = tiny_hw().model_dump()
    doc["pipelines"]["exp"].update(shares_issue_with="vector", units_by="row")
    with pytest.raises(ValueError, match="need the same units and units_by to share one stream"):
        HardwareConfig.model_validate(doc)


@pytest.mark.parametrize("algo", ["fa2", "vfa", "vsa"])
@pytest.mark.parametrize("units", [1, 2])
def test_engine_traces_match_the_reference(algo, units):
    from vfasim.functional import Tiling, run_engine
    from vfasim.hw import load_hw

    from conftest import rng_qkv

    trace = run_engine(*rng_qkv(96, 8), Tiling(96, 96, 8, 32, 16, True), algo, lam=0.05).trace
    doc = load_hw("C16V32").model_dump()
    doc["pipelines"] = {name: {**p, "units": units} for name, p in doc["pipelines"].items()}
    doc["precision"] = {"matmul": "float16", "vector": "float32"}
    hw = HardwareConfig.model_validate(doc)
    for schedule in ("pipelined", "serial"):
        timeline = simulate(trace, hw, schedule)
        assert (timeline.start_cycles.tolist(), timeline.end_cycles.tolist()) == reference_simulate(trace, hw, schedule)


def test_a_result_latency_delays_the_readers_and_leaves_the_pipeline_free():
    # Two K loads of 3 cycles each (1 start-up + 20 bytes at 10/cycle) whose results arrive 13 cycles after they start:
    # the second load follows the first at cycle 3 (the mover is free), each QK starts 13 cycles after its load starts.
    ops = [("load_k", 1, 0, 20, []), ("load_k", 2, 1, 20, []), ("qk_matmul", 1, 0, 40, [0]),
           ("qk_matmul", 2, 1, 40, [1])]
    trace, hw = hand_trace(ops), tiny_hw(score_buffers=2, result_latency={"load_k": 13})
    timeline = simulate(trace, hw)
    assert list(zip(timeline.start_cycles, timeline.end_cycles)) == [(0, 3), (3, 6), (13, 18), (18, 23)]
    assert timeline.ready_cycles.tolist() == [13, 16, 18, 23]
    assert reference_simulate(trace, hw, "pipelined") == ([0, 3, 13, 18], [3, 6, 18, 23])
    path = critical_path(trace, timeline, hw)
    assert path.by_pipeline["idle"] == 10 and sum(path.by_pipeline.values()) == 23  # the wait is not the mover's
    short = simulate(trace, tiny_hw(score_buffers=2, result_latency={"load_k": 2}))  # shorter than the op: no effect
    assert short.ready_cycles is None or short.ready_cycles.tolist() == short.end_cycles.tolist()
    assert short.end_cycles.tolist() == simulate(trace, tiny_hw(score_buffers=2)).end_cycles.tolist()


@given(traces(), cores(), SCHEDULE)
def test_the_critical_path_sums_to_the_latency(trace, hw, schedule):
    timeline = simulate(trace, hw, schedule)
    path = critical_path(trace, timeline, hw, schedule)
    assert sum(path.by_pipeline.values()) == timeline.total_cycles
    assert all(v >= 0 for v in path.by_pipeline.values())
