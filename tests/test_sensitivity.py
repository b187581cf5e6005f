"""Sensitivity report: the bottleneck ranks first, the model is monotone, results are deterministic."""

from __future__ import annotations

import pandas as pd
import pytest

from vfasim.errors import VfasimError
from vfasim.sensitivity import format_sensitivity, sensitivity
from vfasim.sim import simulate

from test_critical import TWO_TILES, chain_trace, hand_trace, hw_with


@pytest.fixture(scope="module")
def exp_bound():
    trace, hw = chain_trace(6), hw_with(2, exp=1)  # exp 31 cycles per tile, everything else <= 5
    return trace, hw, sensitivity(trace, hw)


def row(frame, parameter, direction="improve"):
    return frame[(frame.parameter == parameter) & (frame.direction == direction)].iloc[0]


def test_doubling_the_bottleneck_ranks_first(exp_bound):
    trace, hw, frame = exp_bound
    base = simulate(trace, hw).total_cycles
    assert frame.attrs["baseline_cycles"] == base
    top = frame.iloc[0]
    assert (top.parameter, top.factor, top.direction, top["rank"]) == ("pipelines.exp.throughput", 2.0, "improve", 1)
    assert top.latency_cycles < 0.7 * base
    assert top.change_pct == pytest.approx(100 * (top.latency_cycles - base) / base)


def test_a_non_bottleneck_pipeline_changes_little(exp_bound):
    *_, frame = exp_bound
    for name in ("vector", "cube", "mover"):
        assert abs(row(frame, f"pipelines.{name}.throughput").change_pct) < 5


def test_the_model_is_monotone(exp_bound):
    *_, frame = exp_bound
    base = frame.attrs["baseline_cycles"]
    factors = frame[frame.parameter != "score_buffers"]
    assert (factors[factors.direction == "degrade"].latency_cycles >= base).all()
    assert (factors[factors.direction == "improve"].latency_cycles <= base).all()


def test_rows_and_ranking(exp_bound):
    *_, frame = exp_bound
    params = set(frame.parameter)
    assert {"work_factor.exp", "work_factor.rowsum", "score_buffers",
            "pipelines.vector.issue_overhead_cycles"} <= params
    assert "work_factor.qk_matmul" not in params  # tensor kinds have no default work factor
    assert len(frame) == 2 * len(params)
    assert frame["rank"].is_monotonic_increasing and frame["rank"].max() == len(params)
    gains = [abs(row(frame, p).change_pct) for p in dict.fromkeys(frame.parameter)]
    assert gains == sorted(gains, reverse=True)
    zero = row(frame, "pipelines.exp.issue_overhead_cycles")  # tiny_hw has no issue overhead
    assert (zero.baseline, zero.value, zero.change_pct) == (0.0, 0.0, 0.0)
    buffers = frame[frame.parameter == "score_buffers"]
    assert buffers.factor.tolist() == [1.0, -1.0] and buffers.value.tolist() == [3.0, 1.0]


def test_only_pipelines_the_trace_uses_are_varied():
    frame = sensitivity(hand_trace(TWO_TILES), hw_with(1))
    assert not any(p.startswith("pipelines.vector.") for p in frame.parameter)
    assert list(frame[frame.parameter == "score_buffers"].factor) == [1.0]  # no step below 1 buffer


def test_results_are_deterministic(exp_bound):
    trace, hw, frame = exp_bound
    pd.testing.assert_frame_equal(sensitivity(trace, hw), frame)


def test_serial_schedule_and_custom_factors():
    trace, hw = chain_trace(3), hw_with(2, exp=1)
    frame = sensitivity(trace, hw, "serial", factors=(4.0,))
    assert set(frame.factor[frame.parameter != "score_buffers"]) == {4.0}
    assert frame.attrs["schedule"] == "serial"
    with pytest.raises(VfasimError, match="factors must be positive"):
        sensitivity(trace, hw, factors=(2.0, 0.0))


def test_text_table(exp_bound):
    *_, frame = exp_bound
    text = format_sensitivity(frame)
    lines = text.splitlines()
    assert lines[0] == f"baseline {frame.attrs['baseline_cycles']:,} cycles"
    assert "parameter" in lines[1] and "pipelines.exp.throughput" in lines[2] and "x2" in lines[2]
    assert any("score_buffers" in line and "+1" in line and "2->3" in line for line in lines)
    assert len(lines) == len(frame) + 2
