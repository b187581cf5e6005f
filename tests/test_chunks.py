"""Whole-trace passes worked a chunk at a time: the chunk sizes (and where the critical path's walk starts to
jump, and how many tiles the trace is emitted for at a time) change nothing, and the counting sorts and sums they
use agree with the plain definitions."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import vfasim.functional.trace_only as trace_only_module
import vfasim.sim.closed_form as closed_form
import vfasim.sim.critical as critical
import vfasim.sim.engine as engine
import vfasim.sim.schedule as schedule
import vfasim.sim.steady as steady
import vfasim.sim.sums as sums
from vfasim import trace as trace_module
from vfasim.functional import Tiling, policy_for
from vfasim.functional.trace_only import trace_only
from vfasim.hw import load_hw
from vfasim.runner.api import engine_precision
from vfasim.sim import simulate, timing_stats
from vfasim.sim.critical import critical_path
from vfasim.sim.schedule import stream_order
from vfasim.sim.sums import sums_by

from reference_sim import issue_order

CHUNKS = [(trace_module, "_CHUNK"), (closed_form, "_CHUNK"), (closed_form, "_PLACE_CHUNK"), (steady, "_CHUNK"),
          (schedule, "_CHUNK"), (sums, "CHUNK"), (critical, "_CHUNK"), (engine, "_CHUNK"),
          (critical, "_STEPS"),  # the critical path's walk jumps after a few ops
          (trace_only_module, "_TILES")]  # the trace emitted a few rows at a time


def timed(algo: str, causal: bool, schedule_name: str, latency: dict) -> tuple:
    """Everything a run reports of a small trace: its digest, spans, wait record, statistics and critical path."""
    hw = load_hw("C4V16").model_copy(update={"result_latency": latency})
    trace = trace_only(Tiling(2048, 2048, 64, 64, 64, causal, 2, 1), policy_for(algo), engine_precision(hw))
    timeline = simulate(trace, hw, schedule_name)
    return (trace.digest(), timeline.start_cycles.tolist(), timeline.end_cycles.tolist(),
            timeline.waited_on.tolist(), timeline.wait_kind.tolist(), timing_stats(trace, timeline, hw),
            critical_path(trace, timeline, hw, schedule_name).to_dict())


@pytest.mark.parametrize("algo,causal,schedule_name,latency", [
    ("fa2", True, "pipelined", {}), ("vfa", True, "pipelined", {}), ("vfa", False, "pipelined", {}),
    ("fa2", False, "serial", {}), ("vfa", True, "pipelined", {"rowmax": 90, "load_k": 300, "exp": 20})])
def test_chunk_sizes_change_nothing(monkeypatch, algo, causal, schedule_name, latency):
    monkeypatch.setattr(closed_form, "_STEADY_OPS", 0)  # the steady runs too
    whole = timed(algo, causal, schedule_name, latency)
    for size, (module, name) in zip((5, 7, 3, 11, 13, 6, 9, 17, 4, 40), CHUNKS, strict=True):
        monkeypatch.setattr(module, name, size)
    monkeypatch.setattr(trace_module._Column, "MAX_CHUNK", 5)
    assert timed(algo, causal, schedule_name, latency) == whole


@pytest.mark.parametrize("algo", ["fa2", "vfa"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("buffers", [1, 2, 3, 300])
def test_the_issue_order_sorts_by_slot_then_stage(monkeypatch, algo, causal, buffers):
    monkeypatch.setattr(schedule, "_CHUNK", 7)
    trace = trace_only(Tiling(512, 512, 32, 32, 64, causal, 2, 1), policy_for(algo), engine_precision(load_hw("C4V16")))
    order = stream_order(trace, buffers)
    assert order.dtype == np.int32 and order.tolist() == issue_order(trace, buffers)


@given(st.lists(st.tuples(st.integers(-1, 5), st.integers(0, 2**40)), max_size=60), st.booleans())
def test_sums_by_code_are_exact(ops, huge):
    codes = np.array([c for c, _ in ops], np.int16)
    values = np.array([v + (2**53 if huge else 0) for _, v in ops], np.int64)
    want = [sum(v for c, v in zip(codes.tolist(), values.tolist()) if c == k) for k in range(6)]
    counts = [int(np.count_nonzero(codes == k)) for k in range(6)]
    for chunk in (4, sums.CHUNK):
        with patch.object(sums, "CHUNK", chunk):
            assert sums_by(codes, values, 6).tolist() == want and sums_by(codes, None, 6).tolist() == counts
