"""Exact timelines for hand-built traces: the fill/drain and buffering conventions, pinned."""

from __future__ import annotations

import numpy as np
import pytest

from vfasim.errors import VfasimError
from vfasim.functional.stages import SOFTWARE_PIPELINE
from vfasim.sim import simulate, spans_frame, timing_stats
from vfasim.trace import KIND_CODE, KIND_NAMES, Trace

from conftest import TWO_TILES, hand_trace, tiny_hw


def spans(trace, hw, schedule="pipelined"):
    frame = spans_frame(trace, simulate(trace, hw, schedule))
    return list(frame[["op", "pipeline", "start_cycles", "end_cycles"]].itertuples(index=False, name=None))


def test_one_buffer_serialises_tiles():
    # cycles = startup 1 + work/10: load 3, matmul 5, exp 4. With one buffer, tile 2 loads K
    # once tile 1's QK has freed the K buffer (8), and the in-order cube runs QK 2 after PV 1.
    assert spans(hand_trace(TWO_TILES), tiny_hw(score_buffers=1)) == [
        ("load_k", "mover", 0, 3), ("qk_matmul", "cube", 3, 8), ("exp", "exp", 8, 12),
        ("pv_matmul", "cube", 12, 17), ("load_k", "mover", 8, 11), ("qk_matmul", "cube", 17, 22),
        ("exp", "exp", 22, 26), ("pv_matmul", "cube", 26, 31)]


def test_two_buffers_let_the_cube_run_ahead():
    # Two buffers: the cube's stream is QK 1, QK 2, PV 1, PV 2. Tile 2 loads as soon as the
    # mover is free (3..6); tile 1's PV, ready at 12, waits for QK 2 (8..13) and runs 13..18.
    assert spans(hand_trace(TWO_TILES), tiny_hw(score_buffers=2)) == [
        ("load_k", "mover", 0, 3), ("qk_matmul", "cube", 3, 8), ("exp", "exp", 8, 12),
        ("pv_matmul", "cube", 13, 18), ("load_k", "mover", 3, 6), ("qk_matmul", "cube", 8, 13),
        ("exp", "exp", 13, 17), ("pv_matmul", "cube", 18, 23)]


def test_each_op_says_what_it_waited_for():
    # Two buffers (spans above): PV 1 waits for QK 2 ahead of it on the cube (stream); PV 2's data
    # dependency PV 1 and its stream predecessor are the same op, and the data edge wins the tie.
    frame = spans_frame(hand_trace(TWO_TILES), simulate(hand_trace(TWO_TILES), tiny_hw(score_buffers=2)))
    assert list(zip(frame["waited_on"], frame["wait"])) == [
        (-1, ""), (0, "data"), (1, "data"), (5, "stream"), (0, "stream"), (1, "stream"), (5, "data"), (3, "data")]


def test_serial_schedule_is_the_sum_of_op_cycles():
    frame = spans(hand_trace(TWO_TILES), tiny_hw(score_buffers=4), "serial")
    assert [(s, e) for *_, s, e in frame] == [(0, 3), (3, 8), (8, 12), (12, 17), (17, 20), (20, 25),
                                                (25, 29), (29, 34)]


def test_fill_and_drain_count_in_latency_and_stats_add_up():
    trace, hw = hand_trace(TWO_TILES), tiny_hw(score_buffers=2)
    stats = timing_stats(trace, simulate(trace, hw), hw)
    assert stats.latency_cycles == 23  # first op starts at 0, latency = end of the last op
    assert stats.pipelines["cube"]["busy_cycles"] == 20
    assert stats.pipelines["cube"]["utilization"] == pytest.approx(20 / 23)
    assert stats.ops == {"load_k": 6, "qk_matmul": 10, "exp": 8, "pv_matmul": 10}
    assert stats.shares == pytest.approx({"tensor": 20 / 28, "vector": 0.0, "exp": 8 / 28})
    assert stats.bottleneck == "cube"


# Two tiles whose softmax is an exp and a row sum: (kind, step, key block, work, deps)
SOFTMAX_TILES = [
    ("load_k", 1, 0, 20, []), ("qk_matmul", 1, 0, 40, [0]), ("exp", 1, 0, 30, [1]), ("rowsum", 1, 0, 50, [2]),
    ("load_k", 2, 1, 20, []), ("qk_matmul", 2, 1, 40, [4]), ("exp", 2, 1, 30, [5]), ("rowsum", 2, 1, 50, [6, 3]),
]


def shared_issue_hw(**overrides):
    doc = tiny_hw(**overrides).model_dump()
    doc["pipelines"]["exp"]["shares_issue_with"] = "vector"
    return type(tiny_hw()).model_validate(doc)


def test_without_a_shared_stream_exp_and_vector_overlap():
    # cycles: load 3, QK 5, exp 4, rowsum 6. Tile 2's exp (13..17) runs beside tile 1's row sum (12..18).
    assert spans(hand_trace(SOFTMAX_TILES), tiny_hw(score_buffers=2)) == [
        ("load_k", "mover", 0, 3), ("qk_matmul", "cube", 3, 8), ("exp", "exp", 8, 12),
        ("rowsum", "vector", 12, 18), ("load_k", "mover", 3, 6), ("qk_matmul", "cube", 8, 13),
        ("exp", "exp", 13, 17), ("rowsum", "vector", 18, 24)]


def test_exp_and_vector_ops_sharing_a_stream_take_turns():
    # One in-order stream: exp 1, rowsum 1, exp 2, rowsum 2. Tile 2's exp, ready at 13, waits for
    # tile 1's row sum (stream, 12..18), runs 18..22, and its row sum 22..28; the cube is not held.
    trace, hw = hand_trace(SOFTMAX_TILES), shared_issue_hw(score_buffers=2)
    assert spans(trace, hw) == [
        ("load_k", "mover", 0, 3), ("qk_matmul", "cube", 3, 8), ("exp", "exp", 8, 12),
        ("rowsum", "vector", 12, 18), ("load_k", "mover", 3, 6), ("qk_matmul", "cube", 8, 13),
        ("exp", "exp", 18, 22), ("rowsum", "vector", 22, 28)]
    frame = spans_frame(trace, simulate(trace, hw))
    assert (frame["waited_on"][6], frame["wait"][6]) == (3, "stream")
    stats = timing_stats(trace, simulate(trace, hw), hw)
    assert (stats.pipelines["exp"]["busy_cycles"], stats.pipelines["vector"]["busy_cycles"]) == (8, 12)
    assert stats.bottleneck == "vector+exp"  # (8 + 12) / 28 of the shared stream, above any one pipeline


def test_fused_ops_take_no_time_but_keep_order():
    op_map = dict(tiny_hw().op_map, exp="fused")
    assert spans(hand_trace(TWO_TILES[:4]), tiny_hw(op_map=op_map)) == [
        ("load_k", "mover", 0, 3), ("qk_matmul", "cube", 3, 8), ("exp", "fused", 8, 8),
        ("pv_matmul", "cube", 8, 13)]


def test_unknown_schedule_is_refused():
    with pytest.raises(VfasimError, match="unknown schedule 'eager'.*pipelined, serial"):
        simulate(hand_trace(TWO_TILES), tiny_hw(), "eager")


def test_malformed_trace_is_refused():
    with pytest.raises(VfasimError, match="dependency does not point to an earlier op"):
        hand_trace([("load_k", 1, 0, 20, [1]), ("qk_matmul", 1, 0, 40, [])])


def test_trace_schedule_columns_are_validated():
    trace = hand_trace(TWO_TILES)
    cols = trace.__dict__
    with pytest.raises(VfasimError, match="a dependency lies in a later stage than its op"):
        Trace(**{**cols, "stage": np.array([1, 0, 1, 2, 0, 0, 1, 2], np.uint8)})  # load K 1 (1) feeds QK 1 (0)
    with pytest.raises(VfasimError, match="1 ops take buffer 'k' but 2 free it"):
        Trace(**{**cols, "take_buffer": np.array([0, -1, -1, -1, -1, -1, -1, -1], np.int8)})
    with pytest.raises(VfasimError, match="buffer 'k' is freed before it is taken"):
        Trace(**{**cols, "take_buffer": np.array([-1, 0, -1, -1, -1, 0, -1, -1], np.int8),
                 "free_buffer": np.array([0, -1, -1, -1, 0, -1, -1, -1], np.int8)})
    with pytest.raises(VfasimError, match="buffer code out of range"):
        Trace(**{**cols, "free_buffer": np.full(8, 5, np.int8)})


def test_engine_traces_carry_the_software_pipeline_table():
    from vfasim.functional import Tiling, run_engine

    from conftest import rng_qkv

    trace = run_engine(*rng_qkv(128, 16), Tiling(128, 128, 16, 32, 32, True), "vfa").trace
    for name, code in KIND_CODE.items():
        ops = trace.kind == code
        assert np.all(trace.stage[ops] == SOFTWARE_PIPELINE.stage[name])
    assert sorted(KIND_NAMES[k] for k in np.unique(trace.kind[trace.take_buffer >= 0])) == ["load_k", "load_v"]
    assert sorted(KIND_NAMES[k] for k in np.unique(trace.kind[trace.free_buffer >= 0])) == ["pv_matmul", "qk_matmul"]
    assert trace.version == 2
