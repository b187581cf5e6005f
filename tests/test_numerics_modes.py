"""--numerics full|sample|off, the engine's row subset, and one functional run timed on several configs."""

from __future__ import annotations

import numpy as np
import pytest

import vfasim
from vfasim.runner.api import run_configs
from vfasim.cli import main
from vfasim.errors import VfasimError
from vfasim.functional import Tiling, reference_attention, run_engine, sampling
from vfasim.functional.checks import bits_vs_baseline, error_vs_reference
from vfasim.workloads import make_workload

SMALL = dict(seq_len=640, head_dim=32, block_q=32, block_k=32, heads=2, seed=4)


def test_sampled_blocks_are_stated_and_deterministic():
    wl = make_workload("llm-like", 1024, 32, 2, 0, None)
    blocks = sampling.sample_blocks(wl.q, 32, seed=0)
    assert blocks[0] == 0 and blocks[-1] == 31 and np.all(np.diff(blocks) > 0)
    norms = np.linalg.norm(wl.q, axis=2).max(axis=0).reshape(32, 32)
    assert {int(norms.max(axis=1).argmax()), int(norms.min(axis=1).argmin())} <= set(blocks.tolist())
    assert len(blocks) <= 4 + sampling.SAMPLE_RANDOM
    assert np.array_equal(blocks, sampling.sample_blocks(wl.q, 32, seed=0))
    assert not np.array_equal(blocks, sampling.sample_blocks(wl.q, 32, seed=1))


def test_default_mode_switches_to_sample_above_the_limit():
    assert sampling.resolve_mode(None, 1, 16384, 16384) == "full"
    assert sampling.resolve_mode(None, 1, 16384, 32768) == "sample"
    assert sampling.resolve_mode("off", 8, 10**6, 10**6) == "off"
    with pytest.raises(VfasimError, match="numerics mode 'some'"):
        sampling.resolve_mode("some", 1, 1, 1)


@pytest.mark.parametrize("hw", ["C16V32", "C4V16"])
def test_engine_rows_subset_is_the_full_run_on_those_rows(hw):
    from vfasim.runner.api import engine_precision
    from vfasim.hw import load_hw

    wl = make_workload("llm-like", 320, 32, 2, 1, None)
    tiling = Tiling(320, 320, 32, 32, 32, True, 2, 2)
    prec = engine_precision(load_hw(hw))
    full = run_engine(wl.q, wl.k, wl.v, tiling, "fa2", prec)
    rows = np.array([0, 4, 9, 10, 17])  # engine rows: head 0 blocks 0, 4, 9 and head 1 blocks 0, 7
    part = run_engine(wl.q, wl.k, wl.v, tiling, "fa2", prec, rows=rows)
    for r in rows:
        h, b = divmod(r, tiling.n_qblocks)
        np.testing.assert_array_equal(part.out[h, b * 32:(b + 1) * 32].view(np.uint16),
                                      full.out[h, b * 32:(b + 1) * 32].view(np.uint16))
    assert np.isnan(part.out[0, 32:64]).all()  # a row left out


def test_sample_mode_checks_exactly_the_sampled_rows():
    full = vfasim.run("C4V16", "vfa", numerics="full", **SMALL)
    sample = vfasim.run("C4V16", "vfa", numerics="sample", **SMALL)
    assert sample.manifest == full.manifest and sample.latency_cycles == full.latency_cycles
    num = sample.numerics
    assert num["numerics_mode"] == "sample" and full.numerics["numerics_mode"] == "full"
    blocks = np.array(num["sampled_query_blocks"])
    rows = sampling.block_rows(blocks, 32, 640)
    assert num["sampled_rows"] == rows.size * 2
    wl = make_workload("llm-like", 640, 32, 2, 4, None)
    tiling = Tiling(640, 640, 32, 32, 32, True, 2, 2)
    from vfasim.runner.api import engine_precision
    from vfasim.hw import load_hw

    prec = engine_precision(load_hw("C4V16"))
    out = run_engine(wl.q, wl.k, wl.v, tiling, "vfa", prec).out[:, rows]
    base = run_engine(wl.q, wl.k, wl.v, tiling, "fa2", prec).out[:, rows]
    want = error_vs_reference(out, reference_attention(wl.q, wl.k, wl.v, True)[:, rows])
    assert num["rel_err_vs_fp64"] == pytest.approx(want["rel_err_vs_fp64"], rel=1e-12)
    assert {k: num[k] for k in ("bit_identical_vs_fa2", "max_ulp_vs_fa2")} == bits_vs_baseline(out, base)
    assert num["nan_count"] == full.numerics["nan_count"]  # NaN/Inf count every row


def test_off_mode_compares_nothing_and_says_so(capsys):
    off = vfasim.run("C4V16", "vfa", numerics="off", **{**SMALL, "seed": 0})  # no data: a seed would be refused
    full = vfasim.run("C4V16", "vfa", **SMALL)
    assert off.numerics["numerics_mode"] == "off"
    assert all(off.numerics[k] is None for k in ("rel_err_vs_fp64", "max_abs_err_vs_fp64",
                                                  "bit_identical_vs_fa2", "max_ulp_vs_fa2"))
    timing_only = {"workload_digest": None, "output_digest": None}  # vfa's trace needs no Q/K/V: none are made
    assert off.manifest == {**full.manifest, **timing_only, "seed": 0}
    assert main(["run", "--seq-len", "256", "--head-dim", "32", "--numerics", "off", "--quiet"]) == 0
    assert "not compared with the float64 oracle" in capsys.readouterr().out


def test_cli_notes_an_automatic_switch_to_sample(capsys, monkeypatch):
    monkeypatch.setattr(sampling, "FULL_LIMIT", 1000)
    assert main(["run", "--seq-len", "256", "--head-dim", "32", "--block-q", "32", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert "sampled: query blocks 0," in out and "note: numerics checked on" in err


def test_run_configs_is_run_on_each_config():
    hws = ["C4V16", "C4V16-2xexp"]
    together = run_configs(hws, "vfa", schedules=["pipelined", "serial"], **SMALL)
    apart = [vfasim.run(hw, "vfa", schedule=s, **SMALL) for hw, s in zip(hws, ["pipelined", "serial"])]
    assert [r.to_dict() for r in together] == [r.to_dict() for r in apart]
    with pytest.raises(VfasimError, match="one precision"):
        run_configs(["C4V16", "C16V32"], "vfa", **SMALL)
