"""A repeated trace timed from two short versions gives the full simulation's timeline, op for op, or None."""

from __future__ import annotations

import numpy as np
import pytest

import vfasim.sim.repeated as repeated_module
from vfasim.functional import Tiling
from vfasim.functional.trace_only import trace_repeated
from vfasim.hw import load_hw
from vfasim.runner.api import engine_precision
from vfasim.sim import simulate, timing_stats
from vfasim.sim.critical import critical_path
from vfasim.sim.repeated import timeline_repeated, timing_repeated


def _pipes(hw, **changes):
    """``hw`` with pipeline fields changed: {pipeline: {field: value}}."""
    pipes = {n: p.model_copy(update=changes.get(n, {})) for n, p in hw.pipelines.items()}
    return hw.model_copy(update={"pipelines": pipes})


C4V16 = load_hw("C4V16")
VARIANTS = {
    "c4v16": C4V16,
    "one buffer": C4V16.model_copy(update={"score_buffers": 1}),
    "three buffers": C4V16.model_copy(update={"score_buffers": 3}),
    "two vector units": _pipes(C4V16, vector={"units": 2}),
    "vector units by row": _pipes(C4V16, vector={"units": 3, "units_by": "row"}),
    "turns": C4V16.model_copy(update={"take_turns": ("cube", "exp")}),
    "turns within rows": C4V16.model_copy(update={"take_turns": ("cube", "exp"), "turns_within": "row"}),
    "exp shares the vector stream": _pipes(C4V16, exp={"shares_issue_with": "vector", "issue_share": 0.5}),
    "h100 core": load_hw("H100-SXM"),
    "ascend core": load_hw("Ascend-910B"),
}


def _same(a, b) -> bool:
    return a.total_cycles == b.total_cycles and all(
        np.array_equal(x, y) and x.dtype == y.dtype for x, y in
        ((a.start_cycles, b.start_cycles), (a.end_cycles, b.end_cycles), (a.pipeline, b.pipeline),
         (a.waited_on, b.waited_on), (a.wait_kind, b.wait_kind)))


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("algo", ["fa2", "vfa"])
@pytest.mark.parametrize("causal", [True, False])
def test_the_timeline_from_short_versions_is_the_full_simulations(variant, algo, causal):
    hw = VARIANTS[variant]
    rep = trace_repeated(Tiling(3000, 3000, 64, 64, 32, causal, 2, 1), algo, engine_precision(hw),
                         o_in_place=hw.o_in_place)
    fast, figures = timeline_repeated(rep, hw), timing_repeated(rep, hw)
    trace = rep.with_copies()
    full = simulate(trace, hw)
    if variant == "two vector units" and algo == "vfa":  # units taking vfa's tiles' vector ops in turn repeat
        assert fast is None and figures is None  # every two tiles, not every tile: timed whole
        return
    assert fast is not None and _same(fast, full)
    assert figures is not None
    stats, crit = figures
    whole = critical_path(trace, full, hw)
    assert stats == timing_stats(trace, full, hw)
    assert crit.to_dict() == whole.to_dict() and np.array_equal(crit.ops, whole.ops)


@pytest.mark.parametrize("hw,schedule", [(C4V16, "serial"), (C4V16.model_copy(update={"result_latency": {"exp": 20}}),
                                                              "pipelined")])
def test_schedules_it_does_not_cover_are_left_to_the_full_simulation(hw, schedule):
    rep = trace_repeated(Tiling(2048, 2048, 64, 64, 64, True), "fa2", engine_precision(hw))
    assert timeline_repeated(rep, hw, schedule) is None and timing_repeated(rep, hw, schedule) is None


def test_short_rows_are_left_to_the_full_simulation():
    rep = trace_repeated(Tiling(512, 512, 64, 64, 64, True), "fa2", engine_precision(C4V16))  # 8 key blocks a row
    assert timeline_repeated(rep, C4V16) is None and timing_repeated(rep, C4V16) is None


def test_a_check_that_fails_leaves_it_to_the_full_simulation(monkeypatch):
    rep = trace_repeated(Tiling(2048, 2048, 64, 64, 64, True), "vfa", engine_precision(C4V16))
    assert timing_repeated(rep, C4V16) is not None
    monkeypatch.setattr(repeated_module, "_same", lambda a, b: False)  # the k + 1 copies disagree
    assert timing_repeated(rep, C4V16) is None
