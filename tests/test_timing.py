"""Exact timelines for hand-built traces: the fill/drain and buffering conventions, pinned."""

from __future__ import annotations

import pytest

from vfasim.errors import VfasimError
from vfasim.sim import simulate, spans_frame, timing_stats

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
