"""A chip run against the chip's rooflines: the numbers in the run's JSON agree with the chip model's own
utilisation and bound, and ``vfasim run --roofline-out`` draws them."""

from __future__ import annotations

import json

import pytest

import vfasim
from vfasim.cli import main
from vfasim.hw import load_hw

PREFILL = dict(seq_len=4096, heads=32, batch=4)  # tensor-bound
DECODE = dict(seq_len=8192, batch=8, heads=32, kv_heads=8, decode=True)  # HBM-bound


@pytest.mark.parametrize(("shape", "bound", "chip_bound"), [(PREFILL, "tensor", "tensor"), (DECODE, "hbm", "memory")])
def test_the_roofline_names_the_chip_models_bound(shape, bound, chip_bound):
    r = vfasim.run("H100-SXM", "fa2", **shape)
    line, chip = r.chip["roofline"], r.chip
    assert chip["bound"] == chip_bound and line["bound"] == bound
    assert line["achieved_fraction"] == pytest.approx(max(chip["utilization"].values()))
    assert line["tflops"] == pytest.approx(chip["tflops"])
    hbm = load_hw("H100-SXM").chip.hbm.bandwidth_gb_per_s / 1e3
    assert line["ceilings_tflops"]["hbm"] == pytest.approx(hbm * line["intensity_flop_per_hbm_byte"])
    assert min(line["ceilings_tflops"].values()) == pytest.approx(line["ceilings_tflops"][bound])


def test_run_draws_the_roofline_and_prints_it(tmp_path, capsys):
    out = tmp_path / "roofline.svg"
    assert main(["run", "--hw", "H100-SXM", "--algo", "fa2", "--seq-len", "1024", "--heads", "8",
                 "--roofline-out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    svg = out.read_text()
    assert f"{doc['chip']['roofline']['bound']}-bound" in svg and "TFLOP/s" in svg
    assert main(["run", "--hw", "H100-SXM", "--algo", "fa2", "--seq-len", "1024", "--heads", "8"]) == 0
    assert "roofline  " in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [(["--seq-len", "256", "--roofline-out", "r.png"], "applies to chip runs"),
                                               (["--hw", "H100-SXM", "--roofline-out", "r.pdf"], "a .png or .svg")])
def test_a_roofline_that_cannot_be_drawn_is_refused_in_one_line(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and list(tmp_path.iterdir()) == []
