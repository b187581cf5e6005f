"""The latency-ratio figure: its CSV schema, every paper claim present, and a fit that can fail."""

from __future__ import annotations

import csv

from vfasim.cli import main
from vfasim.figure import ModelParams, Study, apply_params, claim_table, latency_ratio, paper_claims
from vfasim.hw import load_hw
from vfasim.report.figure_plot import CSV_COLUMNS, write_latency_ratio

TINY_GRID = {"rescale_factor": (1.0, 8.0), "o_in_cube": (False, True)}


def test_figure_writes_the_promised_files_and_every_claim(tmp_path):
    result = latency_ratio(seq_len=256, grid=TINY_GRID, with_sensitivity=False)
    write_latency_ratio(result, tmp_path)
    with open(tmp_path / "latency_ratio.csv", newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == CSV_COLUMNS
        rows = list(reader)
    assert len(rows) == 12  # six configs x (FA, VFA)
    base = next(r for r in rows if (r["hw"], r["algo"]) == ("C16V32", "fa2"))
    assert float(base["tensor"]) == 1.0 and float(base["speedup_vs_c16v32_fa"]) == 1.0
    with open(tmp_path / "claims.csv", newline="") as f:
        claims = {row["id"]: row for row in csv.DictReader(f)}
    assert set(claims) == {c["id"] for c in paper_claims()}
    assert {c["role"] for c in claims.values()} == {"fit", "held-out"}
    for ext in ("png", "svg"):
        assert (tmp_path / f"latency_ratio.{ext}").stat().st_size > 1000


def test_the_fit_moves_toward_its_claims():
    study = Study(seq_len=256)
    default = claim_table(study.rows(ModelParams()))
    costly = claim_table(study.rows(ModelParams(rescale_factor=8.0, reduction_factor=4.0)))
    share = {c["id"]: c["model"] for c in default}
    assert {c["id"]: c["model"] for c in costly}["P1a"] > share["P1a"]  # dearer vector work, larger FA share


def test_params_change_only_the_unknowns():
    a, b = load_hw("C4V16"), apply_params(load_hw("C4V16"), ModelParams(o_in_cube=True, link_bytes_per_cycle=64))
    assert a.precision == b.precision and a.pipelines["exp"] == b.pipelines["exp"]
    assert b.op_map["accumulate_pv"] == "fused" and b.op_map["move_s"] == "link"


def test_unknown_claim_ids_are_refused(capsys):
    assert main(["figure", "latency-ratio", "--fit", "P9", "--seq-len", "128"]) == 2
    assert "unknown claim id(s) P9" in capsys.readouterr().err
