"""The closed-form pass's steady state: runs of repeating ops shifted give the same ends as relaxing every op."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vfasim.sim.closed_form as closed_form
from vfasim.functional import Tiling, policy_for
from vfasim.functional.trace_only import trace_only
from vfasim.hw import load_hw
from vfasim.runner.api import engine_precision
from vfasim.sim import simulate
from vfasim.sim.steady import MIN_PERIODS


@st.composite
def repeating_ops(draw) -> tuple[np.ndarray, np.ndarray, int]:
    """A random prefix, then a template of L ops repeated, each with 1-6 predecessors (a table row of slots, 0: none):
    each predecessor a fixed earlier op or one a fixed distance back; cycles from a small set, so the prefix's slow
    ops can hold the run for a while."""
    prefix, period, width = draw(st.integers(1, 6)), draw(st.integers(1, 4)), draw(st.integers(1, 6))
    table = [[draw(st.integers(0, r)) for _ in range(width)] for r in range(prefix)]
    cycles = [draw(st.sampled_from([0, 1, 5, 40, 300])) for _ in range(prefix)]
    template = [[draw(st.one_of(st.tuples(st.just("back"), st.integers(1, 2 * period + 1)),
                                st.tuples(st.just("fixed"), st.integers(0, prefix))))
                 for _ in range(width)] for _ in range(period)]
    costs = [draw(st.sampled_from([0, 1, 2, 7])) for _ in range(period)]
    for i in range(period * draw(st.integers(MIN_PERIODS, 3 * MIN_PERIODS))):
        r = len(table)
        table.append([max(r + 1 - v, 0) if how == "back" else v for how, v in template[i % period]])
        cycles.append(costs[i % period])
    return np.asfortranarray(table, np.int32), np.array(cycles, np.int64), period


@settings(max_examples=200)
@given(repeating_ops())
def test_shifted_runs_end_as_relaxed_ops(case):
    table, cycles, period = case
    order = np.random.default_rng(period).permutation(cycles.size)  # the op id issued at each position
    by_id = np.empty_like(cycles)
    by_id[order] = cycles
    relaxed = closed_form._relax(table, by_id, order, 0).tolist()
    assert closed_form._relax(table, by_id, order, period).tolist() == relaxed
    ends = [0]  # slot 0: no predecessor
    for preds, x in zip(table.tolist(), cycles.tolist()):
        ends.append(max(ends[p] for p in preds) + x)
    assert relaxed == ends[1:]


@pytest.mark.parametrize("algo,causal,schedule,latency", [
    ("fa2", True, "pipelined", {}), ("vfa", True, "pipelined", {}), ("fa2", False, "pipelined", {}),
    ("vfa", True, "serial", {}), ("fa2", True, "pipelined", {"rowmax": 90, "load_k": 300, "exp": 20})])
def test_engine_traces_end_as_relaxed_ops(monkeypatch, algo, causal, schedule, latency):
    hw = load_hw("C4V16").model_copy(update={"result_latency": latency})
    trace = trace_only(Tiling(4096, 4096, 64, 64, 64, causal), policy_for(algo), engine_precision(hw))
    monkeypatch.setattr(closed_form, "_STEADY_OPS", 0)  # so short a trace is otherwise relaxed row by row
    shifted = []
    extend = closed_form.try_extend
    monkeypatch.setattr(closed_form, "try_extend", lambda *a: shifted.append(extend(*a)) or shifted[-1])
    fast = simulate(trace, hw, schedule)
    assert any(shifted)  # the steady state was used
    monkeypatch.setattr(closed_form, "steady_runs", lambda *a: [])
    slow = simulate(trace, hw, schedule)
    assert np.array_equal(fast.end_cycles, slow.end_cycles)
    assert (fast.ready_cycles is None) == (not latency)
    assert latency == {} or np.array_equal(fast.ready_cycles, slow.ready_cycles)
    assert np.array_equal(fast.waited_on, slow.waited_on) and np.array_equal(fast.wait_kind, slow.wait_kind)
