"""One path from inputs to a run: ``runner.plan`` builds one ``RunInputs`` for every entry point, checked once.

``vfasim.run``, ``run_configs``, a sweep's points and ``sensitivity_table`` refuse the same inputs with the same
line; a sweep's points carry their plans, and running them checks nothing again. Tiny sizes throughout.
"""

from __future__ import annotations

import json

import pytest

import vfasim
import vfasim.runner.plan as planning
from vfasim.cli import main
from vfasim.errors import VfasimError
from vfasim.runner.api import run_configs
from vfasim.sensitivity import sensitivity_table
from vfasim.sweep import Axis, make_points, parse_set, run_sweep

SMALL = {"seq_len": 256, "head_dim": 32, "block_q": 64, "block_k": 64}


def _sweep(hw: str, algo: str, **kw: object) -> object:
    """A sweep's points, the input given to all of them (an axis of an option no algorithm takes is refused as
    such, before its points are planned)."""
    return make_points([hw], [algo], [], {**SMALL, **kw})


ENTRY_POINTS = {
    "run": lambda hw, algo, **kw: vfasim.run(hw, algo, **SMALL, **kw),
    "run_configs": lambda hw, algo, **kw: run_configs([hw], algo, **SMALL, **kw),
    "sensitivity": lambda hw, algo, **kw: sensitivity_table(hw, algo, **SMALL, **kw),
    "sweep": _sweep,
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("given, message", [
    ({"lam": 0.5}, "lam applies to vsa, blasst, blasst_swa, blasst_fa4, blasst_rowskip, not fa2: leave it out"),
    ({"kernel_style": "fa3"}, "kernel applies to chip runs; C4V16 has no chip section"),
    ({"dispatch": "greedy"}, "dispatch applies to chip runs; C4V16 has no chip section"),
    ({"queries": 4}, "queries (4) applies only with decode (--decode)"),
    ({"schedule": "nope"}, "unknown schedule 'nope' (valid: pipelined, serial)"),
])
def test_every_entry_point_refuses_an_input_the_same_way(entry, given, message):
    if entry == "run_configs" and "schedule" in given:
        given = {"schedules": ["nope"]}
    with pytest.raises(VfasimError) as err:
        ENTRY_POINTS[entry]("C4V16", "fa2", **given)
    assert str(err.value) == message


def test_a_sweep_runs_its_points_plans_without_checking_them_again(monkeypatch):
    points = make_points(["C4V16"], ["fa2", "vfa"], [Axis("exp_scale", (1, 2))], SMALL)
    assert all(p.plan.inputs.seq_len == 256 and p.plan.inputs.algo == p.algo for p in points)
    monkeypatch.setattr(planning, "run_inputs", lambda keywords: pytest.fail("a planned point was planned again"))
    result = run_sweep(points, jobs=1)
    assert result.complete and result.functional_runs == 2


def test_a_sweep_point_is_the_run_of_its_plan():
    """A matmul format on one core (the sweep once refused it when its points ran) and a batch on one core."""
    for axis in (parse_set("matmul_format=fp8_e4m3"), parse_set("batch=2")):
        (point,) = make_points(["C4V16"], ["vfa"], [axis], SMALL)
        (record,) = run_sweep([point], jobs=1).records
        assert record is not None
        alone = vfasim.run("C4V16", "vfa", **SMALL, **{axis.name: axis.values[0]}).to_dict()
        assert record["result"] == json.loads(json.dumps(alone))


def test_a_bad_sweep_point_is_refused_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["sweep", "--hw", "H100-SXM", "--algo", "fa2", "--set", "kernel=nope", "--seq-len", "256", "--quiet",
            "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown kernel 'nope'") and err.count("\n") == 1 and not out.exists()


def test_sensitivity_takes_runs_keywords_with_their_defaults(capsys):
    """The API needs no more keywords than ``run`` (it once failed without ``block_q``), and gives the command's
    table."""
    frame = sensitivity_table("C4V16", "vfa", seq_len=256, head_dim=32)
    assert main(["sensitivity", "--hw", "C4V16", "--algo", "vfa", "--seq-len", "256", "--head-dim", "32",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(frame.to_json(orient="records"))


@pytest.mark.parametrize("given, name", [({"numerics": "off"}, "numerics"), ({"cache": False}, "cache"),
                                         ({"trace_out": "-"}, "trace_out")])
def test_sensitivity_refuses_what_it_would_not_read(given, name):
    with pytest.raises(VfasimError, match=f"^{name} does not apply: sensitivity re-times one trace"):
        sensitivity_table("C4V16", "vfa", **SMALL, **given)


def test_run_configs_is_run_with_a_batch_and_refuses_chips_and_traces():
    (together,) = run_configs(["C4V16"], "fa2", batch=2, **SMALL)
    assert together.to_dict() == vfasim.run("C4V16", "fa2", batch=2, **SMALL).to_dict()
    with pytest.raises(VfasimError, match="H100-SXM has a chip section"):
        run_configs(["H100-SXM"], "fa2", seq_len=256)
    with pytest.raises(VfasimError, match="run_configs takes no trace_out"):
        run_configs(["C4V16"], "fa2", trace_out="-", **SMALL)


def test_a_trace_window_without_a_trace_is_refused(capsys):
    with pytest.raises(VfasimError, match=r"^trace_window applies with trace_out \(--trace-out FILE\)"):
        vfasim.run("C4V16", "fa2", trace_window=(0, 100), **SMALL)
    assert main(["run", "--hw", "C4V16", "--algo", "fa2", "--seq-len", "256", "--trace-window", "0:100"]) == 2
    assert capsys.readouterr().err.startswith("error: trace_window applies with trace_out")


def test_sweep_points_share_a_functional_run_only_where_o_accumulates_alike():
    """``op_map.accumulate_o`` fused changes the trace (O's rescale precedes PV): its points get their own run."""
    from vfasim.hw import HardwareConfig

    points = make_points(["C4V16"], ["fa2"], [parse_set("op_map.accumulate_o=vector,fused")], SMALL)
    result = run_sweep(points, jobs=1)
    assert result.functional_runs == 2 and [p.plan.timed.o_in_place for p in points] == [False, True]
    for point, record in zip(points, result.records):
        alone = vfasim.run(HardwareConfig.model_validate(point.hw_doc), "fa2", **point.run_kwargs).to_dict()
        assert record is not None and record["result"] == json.loads(json.dumps(alone))
