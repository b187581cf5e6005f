"""The latency-ratio figure: its files and claims schema, one model with `vfasim run`, the fit the
configs hold, and the proofs the claims table relies on."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pytest

import vfasim
from vfasim.cli import main
from vfasim.figure import latency_ratio
from vfasim.figure.claims import Evaluator, Reading, paper_claims, primary_of
from vfasim.figure.fa4 import MAX_EMULATION, choose_emulation
from vfasim.figure.fit import GRID, Evaluations, bounded_fit, fit_and_scan, scan
from vfasim.figure.params import ModelParams, apply_params, at_bound, params_of
from vfasim.figure.study import PAPER_CONFIGS, Study
from vfasim.figure.views import implied_rows
from vfasim.hw import load_hw
from vfasim.report.figure_write import CLAIM_COLUMNS, write_latency_ratio

TINY_GRID = {"op_latency_cycles": (4, 32), "o_in_cube": (False, True)}


@pytest.fixture(scope="module")
def configs():
    return {name: load_hw(name) for name in PAPER_CONFIGS}


@pytest.fixture(scope="module")
def result():
    return latency_ratio(seq_len=256, grid=TINY_GRID)


def test_figure_writes_the_promised_files_and_every_claim(result, tmp_path):
    write_latency_ratio(result, tmp_path)
    with open(tmp_path / "claims.csv", newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == CLAIM_COLUMNS
        rows = list(reader)
    primary = [r for r in rows if r["primary"] == "true"]
    assert sorted(r["claim"] for r in primary) == sorted(c["id"] for c in paper_claims())
    assert {(r["granularity"], r["head_dim"]) for r in primary} == {("block", "64")}
    assert {(r["granularity"], r["head_dim"]) for r in rows} == {(g, d) for g in ("block", "sequence")
                                                                 for d in ("64", "128")}
    for r in rows:
        assert r["met"] in ("true", "false")
        assert (r["miss_class"] == "") == (r["met"] == "true"), r
    assert {r["role"] for r in rows} == {"fit", "held-out"}
    for name in ("latency_ratio.png", "latency_ratio.svg", "claims.md", "params.json", "exp_curve.csv"):
        assert (tmp_path / name).stat().st_size > 100


def test_every_ambiguous_claim_has_all_its_readings(result):
    cell = [c for c in result.claims if (c["granularity"], c["head_dim"]) == ("block", 64)]
    count = {cid: sum(c["claim"] == cid for c in cell) for cid in ("P1a", "P4b", "P5", "P6a", "P7")}
    assert count == {"P1a": 1, "P4b": 1, "P5": 4, "P6a": 18, "P7": 12}


def test_the_primary_rows_alone_are_those_of_every_reading(configs):
    """The fit judges only the primary readings: the same rows, each judged the same, as among every reading."""
    study = Study(configs, seq_len=256, variants=("fa2", "vfa"))
    ev = Evaluations(study)
    for g, d in (("block", 64), ("sequence", 128)):
        for p in (params_of(configs), ModelParams(op_latency_cycles=4, o_in_cube=True)):
            primary = ev.rows(p, g, d, True, primary=True)
            assert primary == primary_of(ev.rows(p, g, d, True), g, d)
            assert len(primary) == len(paper_claims())


def test_the_figure_reads_the_configs_as_they_are(configs):
    """One model: writing the configs' own values back into each config changes nothing."""
    held = params_of(configs)
    for name, hw in configs.items():
        assert apply_params(hw, held) == hw, name


def test_the_configs_hold_the_bounded_fit(configs):
    study = Study(configs, variants=("fa2", "vfa"), granularities=("block",), head_dims=(64,))
    fitted, best_all = bounded_fit(Evaluations(study), {"P1a", "P1b", "P2", "P3a", "P3b", "P4a"}, 64, GRID)
    assert fitted == params_of(configs)
    assert best_all["met"] >= {"P1b", "P2", "P3b"}


def test_vfasim_run_and_the_figure_agree(configs):
    study = Study(configs, seq_len=256, variants=("fa2", "vfa"), granularities=("sequence",), head_dims=(128,))
    meas = study.measurements()
    for name in ("C16V32", "C4V16"):
        for algo in ("fa2", "vfa"):
            run = vfasim.run(name, algo, seq_len=256, head_dim=128)
            m = meas["sequence", 128, name, algo]
            assert m["overlapped"] == run.latency_cycles
            assert m["vector_share"] == pytest.approx(run.shares["vector"], abs=1e-12)


def test_doubling_exp_at_most_doubles_the_speedup(configs):
    """The P7 proof: with a shared baseline, speedup(2xexp) <= 2 x speedup(C4V16)."""
    study = Study(configs, seq_len=256, variants=("fa2", "vfa"))
    meas, curve = study.measurements(), study.exp_curve()
    claims = {c["id"]: c for c in paper_claims()}
    for g, d in {(k[0], k[1]) for k in meas}:
        ev = Evaluator(meas, curve, g, d)
        for lat in ("stacked", "overlapped"):
            for base in ("fa@C16V32", "vfa@C16V32"):
                r = Reading(latency=lat, baseline=base, exp="doubled")
                assert ev.value(claims["P7"], r) <= 2 * ev.value(claims["P6c"], r) + 1e-9


def test_the_fit_and_the_scan_over_processes_equal_them_in_one(configs):
    """Spread over processes (the fit, each parameter's scan), the results and their order are one process's."""
    study = Study(configs, variants=("fa2", "vfa"), granularities=("block",), head_dims=(64,))
    fit, params, cells = frozenset({"P1a", "P1b"}), params_of(configs), [("block", 64, False)]
    expected = (bounded_fit(Evaluations(study), set(fit), 64, TINY_GRID), scan(Evaluations(study), params, cells))
    for jobs in (1, 2):
        assert fit_and_scan(Evaluations(study), fit, 64, TINY_GRID, params, cells, jobs) == expected


def test_dearer_reductions_raise_fa_more_than_vfa(configs):
    """VFA drops the row max on frozen tiles, so a costlier reduction widens the gap between their shares."""
    study = Study(configs, variants=("fa2", "vfa"), granularities=("block",), head_dims=(64,))
    cheap = {n: apply_params(hw, replace(params_of(configs), reduction_factor=1.0)) for n, hw in configs.items()}
    base, low = study.measurements(with_latency=False), study.measurements(cheap, with_latency=False)
    key = ("block", 64, "C16V32")
    gap = base[(*key, "fa2")]["vector_share"] - base[(*key, "vfa")]["vector_share"]
    gap_low = low[(*key, "fa2")]["vector_share"] - low[(*key, "vfa")]["vector_share"]
    assert gap > gap_low > 0


def test_values_at_a_range_edge_are_marked():
    marks = at_bound(ModelParams(reduction_factor=4.0, o_rmw_factor=2.0, op_latency_cycles=4))
    assert marks["reduction_factor"] == "at upper bound" and marks["op_latency_cycles"] == "at lower bound"
    assert "o_rmw_factor" not in marks


@pytest.mark.parametrize("argv, message", [
    (["--fit", "P9"], "unknown claim id(s) P9"),
    (["--granularity", "tile"], "invalid choice"),
    (["--head-dim", "96"], "head dim must be one of 64, 128"),
    (["--jobs", "0"], "--jobs must be >= 1"),
])
def test_bad_figure_options_are_refused(capsys, tmp_path, argv, message):
    assert main(["figure", "latency-ratio", "--out", str(tmp_path / "x"), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_emulation_is_chosen_per_config_and_algorithm_and_capped(configs):
    chosen = choose_emulation({"C4V16": configs["C4V16"]}, 64)
    assert set(chosen) == {("C4V16", "fa4+emul"), ("C4V16", "vfa+emul")}
    assert all(0.0 <= f <= MAX_EMULATION for f in chosen.values())
    assert chosen["C4V16", "vfa+emul"] > 0  # VFA is exp-bound there: moving exps to the vector side pays


def test_the_quoted_shares_agree_with_the_speedups_under_the_primary_reading(configs):
    """The reason for the primary reading: the paper's own shares imply ~2x (C4V16) and ~6x (unbounded exp)."""
    study = Study(configs, variants=("fa2", "vfa"), granularities=("block",), head_dims=(64,))
    implied = {r["claim"]: r for r in implied_rows(study.measurements(), 64)}
    assert implied["P4a"]["stacked_vs_vfa_c16v32"] == pytest.approx(2.0, rel=0.15)
    assert implied["P4a"]["stacked_unbounded_exp"] == pytest.approx(6.0, rel=0.15)
    assert 1 / implied["P1a"]["stacked_vs_vfa_c16v32"] > 2.3  # against FA, VFA on C16V32 alone beats "about 2x"


def test_the_command_runs_at_a_tiny_size(capsys, tmp_path):
    assert main(["figure", "latency-ratio", "--out", str(tmp_path), "--seq-len", "256", "--fit", ""]) == 0
    out = capsys.readouterr().out
    assert "primary (block, head dim 64):" in out and "sequence run (256 tokens, causal)" in out
    verdicts = next(line for line in out.splitlines() if line.startswith("numerics verdicts"))
    assert verdicts.count(" ok") + verdicts.count(" degraded") + verdicts.count(" broken") == 12
    assert (tmp_path / "claims.csv").exists() and (tmp_path / "latency_ratio.png").exists()


def test_the_experiment_quotes_the_claims_the_package_reads():
    root = Path(__file__).resolve().parents[1]
    assert (root / "experiments/latency_ratio/paper_claims.csv").read_text() == \
        (root / "vfasim/data/paper_claims.csv").read_text()


def test_the_figures_panels_share_one_scale_and_draw_what_was_asked(result):
    from vfasim.report.figure_plot import latency_ratio_figure

    bars, implied, curve, _ = latency_ratio_figure(result).axes
    assert bars.get_ylim() == implied.get_ylim() and implied.get_ylabel() == bars.get_ylabel() != ""
    names = [t.get_text() for t in bars.get_xticklabels()]
    assert not any("fa4" in n for n in names)  # the paper's bars only
    with_fa4 = replace(result, emulation={("C16V32", "fa4+emul"): 0.0})  # as --fa4 leaves it
    names = [t.get_text() for t in latency_ratio_figure(with_fa4).axes[0].get_xticklabels()]
    assert any(n.endswith("fa4") for n in names)
    sequence = latency_ratio_figure(replace(result, granularity="sequence")).axes[2]
    assert "the sequence run" in sequence.get_title() and "block granularity" in curve.get_title()
