"""Critical-path attribution: exact paths for hand-built traces, sums, bottlenecks, tie-breaks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vfasim.errors import VfasimError
from vfasim.hw import HardwareConfig
from vfasim.sim import Timeline, simulate, timing_stats
from vfasim.sim.critical import critical_path
from vfasim.trace import Trace

from conftest import TWO_TILES, hand_trace, tiny_hw

def chain_trace(tiles: int, exp_work: int = 30) -> Trace:
    """``tiles`` tiles of load K, QK, exp, rowsum, PV; exp and PV chain across tiles."""
    ops = []
    for t in range(tiles):
        b = len(ops)
        prev = [b - 3] if t else []  # the previous tile's exp
        ops += [("load_k", t + 1, t, 20, []), ("qk_matmul", t + 1, t, 40, [b]),
                ("exp", t + 1, t, exp_work, [b + 1, *prev]), ("rowsum", t + 1, t, 20, [b + 2]),
                ("pv_matmul", t + 1, t, 40, [b + 2, *([b - 1] if t else [])])]
    return hand_trace(ops)


def hw_with(score_buffers: int = 1, **rates: float) -> HardwareConfig:
    """tiny_hw with the given pipelines' throughput (every dtype) replaced."""
    doc = tiny_hw(score_buffers=score_buffers).model_dump()
    for name, rate in rates.items():
        doc["pipelines"][name]["throughput"] = {k: rate for k in doc["pipelines"][name]["throughput"]}
    return HardwareConfig.model_validate(doc)


def crit(trace, hw, schedule="pipelined"):
    return critical_path(trace, simulate(trace, hw, schedule), hw, schedule)


def test_two_buffers_path_runs_on_the_cube():
    # Spans (test_timing): load_k 0-3, QK1 3-8, QK2 8-13 (stream after QK1), PV1 13-18, PV2 18-23.
    cp = crit(hand_trace(TWO_TILES), tiny_hw(score_buffers=2))
    assert cp.ops.tolist() == [0, 1, 5, 3, 7]
    assert cp.latency_cycles == 23
    assert cp.by_pipeline == {"cube": 20, "vector": 0, "exp": 0, "mover": 3, "idle": 0}
    assert cp.by_kind == {"qk_matmul": 10, "pv_matmul": 10, "load_k": 3}
    assert cp.bound_by == {"data": 2, "stream": 2, "buffer": 0, "port": 0, "turn": 0}
    assert cp.pipelines["cube"] == {"critical_cycles": 20, "busy_cycles": 20, "off_path_cycles": 0,
                                    "critical_share": pytest.approx(20 / 23)}
    assert cp.pipelines["exp"]["off_path_cycles"] == 8
    assert cp.bottleneck == "cube"


def test_one_buffer_path_goes_through_both_exps():
    # Spans: load 0-3, QK1 3-8, exp1 8-12, PV1 12-17, QK2 17-22 (after PV1 on the cube), exp2 22-26, PV2 26-31.
    cp = crit(hand_trace(TWO_TILES), tiny_hw(score_buffers=1))
    assert cp.ops.tolist() == [0, 1, 2, 3, 5, 6, 7]
    assert cp.by_pipeline == {"cube": 20, "vector": 0, "exp": 8, "mover": 3, "idle": 0}
    assert cp.bound_by == {"data": 5, "stream": 1, "buffer": 0, "port": 0, "turn": 0}


def test_buffer_edge_on_the_path():
    # Long loads: K load 2 (21 cycles) waits for QK1 to free the single K buffer (26), not for load 1 (21).
    ops = [(k, s, b, 200 if k == "load_k" else w, d) for k, s, b, w, d in TWO_TILES]
    cp = crit(hand_trace(ops), tiny_hw(score_buffers=1))
    assert cp.ops.tolist() == [0, 1, 4, 5, 6, 7]
    assert cp.by_pipeline == {"cube": 15, "vector": 0, "exp": 4, "mover": 42, "idle": 0}
    assert cp.bound_by == {"data": 4, "stream": 0, "buffer": 1, "port": 0, "turn": 0}


def test_ties_prefer_data_deps_then_lower_ids():
    # QK (op 2) starts at 5: its cube-stream predecessor m-init (op 0) and its data dep load K (op 1)
    # both end at 5 -> the data dep wins although its id is higher.
    ops = [("minit_matmul", 0, -1, 40, []), ("load_k", 1, 0, 40, []), ("qk_matmul", 1, 0, 40, [1])]
    assert crit(hand_trace(ops), tiny_hw()).ops.tolist() == [1, 2]
    # Two data deps ending together (3 cycles each on different pipelines) -> the lower id.
    ops = [("load_q", 0, -1, 20, []), ("key_summary", 0, -1, 20, []), ("qk_matmul", 1, 0, 40, [1, 0])]
    cp = crit(hand_trace(ops), tiny_hw())
    assert cp.ops.tolist() == [0, 2]
    assert cp.by_pipeline["mover"] == 3


def test_fused_ops_lie_on_the_path_with_no_cycles():
    op_map = dict(tiny_hw().op_map, exp="fused")
    cp = crit(hand_trace(TWO_TILES[:4]), tiny_hw(op_map=op_map))
    assert cp.ops.tolist() == [0, 1, 2, 3]
    assert cp.by_pipeline == {"cube": 10, "vector": 0, "exp": 0, "mover": 3, "idle": 0}
    assert "exp" not in cp.by_kind


@pytest.mark.parametrize("buffers", [1, 2, 3])
@pytest.mark.parametrize("units", [1, 2])
def test_attribution_sums_to_latency(buffers, units):
    doc = hw_with(buffers, exp=3).model_dump()
    doc["pipelines"]["vector"]["units"] = units
    hw = HardwareConfig.model_validate(doc)
    trace = chain_trace(6)
    timeline = simulate(trace, hw)
    cp = critical_path(trace, timeline, hw)
    assert sum(cp.by_pipeline.values()) == cp.latency_cycles == timeline.total_cycles
    assert sum(cp.by_kind.values()) == cp.latency_cycles - cp.by_pipeline["idle"]
    assert cp.by_pipeline["idle"] == 0
    starts, ends = timeline.start_cycles[cp.ops], timeline.end_cycles[cp.ops]
    assert starts[0] == 0 and ends[-1] == cp.latency_cycles and np.all(starts[1:] == ends[:-1])


def test_slow_exp_takes_most_of_the_path():
    hw = hw_with(2, exp=1)  # exp: 31 cycles, a matmul 5
    cp = crit(chain_trace(8), hw)
    assert cp.bottleneck == "exp"
    assert cp.by_pipeline["exp"] > 0.8 * cp.latency_cycles
    assert next(iter(cp.by_kind)) == "exp"
    assert cp.pipelines["exp"]["critical_share"] > 0.8


def test_serial_schedule_attributes_every_op():
    trace, hw = chain_trace(4), tiny_hw(score_buffers=2)
    timeline = simulate(trace, hw, "serial")
    cp = critical_path(trace, timeline, hw, "serial")
    busy = {n: p["busy_cycles"] for n, p in timing_stats(trace, timeline, hw).pipelines.items()}
    assert cp.by_pipeline == {**busy, "idle": 0}
    assert cp.ops.tolist() == list(range(len(trace)))
    assert all(p["off_path_cycles"] == 0 for p in cp.pipelines.values())


def test_a_timeline_from_another_schedule_is_refused():
    trace, hw = hand_trace(TWO_TILES), tiny_hw(score_buffers=2)
    with pytest.raises(VfasimError, match="timeline does not match"):
        critical_path(trace, simulate(trace, hw, "serial"), hw, "pipelined")
    with pytest.raises(VfasimError, match="unknown schedule"):
        critical_path(trace, simulate(trace, hw), hw, "eager")


def test_a_timeline_without_a_sound_wait_record_is_refused():
    trace, hw = hand_trace(TWO_TILES), tiny_hw(score_buffers=2)
    timeline = simulate(trace, hw)
    bare = Timeline(timeline.start_cycles, timeline.end_cycles, timeline.pipeline, timeline.pipeline_names,
                    timeline.total_cycles)
    with pytest.raises(VfasimError, match="no record of what its ops waited on"):
        critical_path(trace, bare, hw)
    moved = dataclasses.replace(timeline, start_cycles=timeline.start_cycles + 1)
    with pytest.raises(VfasimError, match="op 1 does not start when op 0, which it waited for, ends"):
        critical_path(trace, moved, hw)


def test_empty_trace_and_json_summary():
    empty = hand_trace([])
    cp = crit(empty, tiny_hw())
    assert cp.latency_cycles == 0 and cp.ops.size == 0 and cp.by_pipeline["idle"] == 0
    doc = crit(hand_trace(TWO_TILES), tiny_hw()).to_dict()
    assert doc["path_ops"] == 7 and doc["by_pipeline"]["cube"] == 20 and "ops" not in doc


@pytest.mark.parametrize("schedule", ["pipelined", "serial"])
def test_engine_trace_on_a_builtin_config(schedule):
    from vfasim.functional import Tiling, run_engine
    from vfasim.hw import load_hw

    from conftest import rng_qkv

    q, k, v = rng_qkv(512, 64)
    trace = run_engine(q, k, v, Tiling(512, 512, 64, 64, 64, True, 1, 1), "vfa").trace
    hw = load_hw("C16V32")
    timeline = simulate(trace, hw, schedule)
    cp = critical_path(trace, timeline, hw, schedule)
    assert sum(cp.by_pipeline.values()) == timeline.total_cycles
    assert cp.by_pipeline["idle"] == 0
    assert all(0 <= p["critical_cycles"] <= p["busy_cycles"] for p in cp.pipelines.values())
