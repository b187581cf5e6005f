"""Numerics that never flatter: NaN-aware errors, the verdict, and one hand-built input per failure cause."""

from __future__ import annotations

import json

import numpy as np
import pytest

import vfasim
from vfasim.cli import EXIT_BROKEN, main
from vfasim.functional import RowDiagnostics, checks

N, D = 256, 16  # two 128-row blocks, tiny head dim


def _qkv(tmp_path, q, k, v=None, name="qkv.npz"):
    """Write [N, D] arrays as a vfasim .npz and return its path."""
    v = np.ones_like(k) if v is None else v
    path = tmp_path / name
    np.savez(path, q=q.astype(np.float32), k=k.astype(np.float32), v=v.astype(np.float32))
    return str(path)


def _run(path, hw, algo, **kw):
    kw.setdefault("causal", False)
    return vfasim.run(hw, algo, qkv=path, block_q=128, block_k=128, **kw).numerics


def _overshoot_qkv(tmp_path, overshoot: float):
    """Keys alternate between two axes, so sabsmax(K_j) = (a, a) and m-init = 2× every true score.

    Every true score is ``overshoot`` (scale = 1/sqrt(D)); m-init sits that far above it.
    """
    a = 2.0
    b = overshoot * np.sqrt(D) / a
    q = np.zeros((N, D))
    q[:, :2] = b
    k = np.zeros((N, D))
    k[0::2, 0] = a
    k[1::2, 1] = a
    v = np.random.default_rng(0).standard_normal((N, D))
    return _qkv(tmp_path, q, k, v)


def _frozen_peak_qkv(tmp_path, peak: float):
    """Three key blocks; VFA updates its max exactly on the sink (0) and local (2) blocks only, so
    without m-init one key of the frozen middle block scores ``peak`` above the max it uses."""
    n = 384
    q = np.zeros((n, D))
    q[:, 0] = 1.0
    k = np.zeros((n, D))
    k[200, 0] = peak * np.sqrt(D)
    v = np.random.default_rng(1).standard_normal((n, D))
    return _qkv(tmp_path, q, k, v)


# ---- errors and bits see NaN --------------------------------------------------------------------

def test_error_figures_are_nan_when_any_output_is():
    ref = np.ones((1, 4, 2))
    out = ref.astype(np.float32).copy()
    out[0, 1, 0] = np.nan
    err = checks.error_vs_reference(out, ref)
    assert np.isnan(err["rel_err_vs_fp64"]) and np.isnan(err["max_abs_err_vs_fp64"])
    assert err["nonfinite_fraction"] == pytest.approx(1 / 8)
    assert err["rel_err_finite_only"] == 0.0


def test_nan_is_never_bit_identical_and_has_no_ulp_distance():
    a = np.array([1.0, np.nan, np.inf], np.float16)
    bits = checks.bits_vs_baseline(a, a.copy())
    assert bits["bit_identical_vs_fa2"] == pytest.approx(2 / 3)
    assert bits["max_ulp_vs_fa2"] is None
    assert checks.bits_vs_baseline(a[[0, 2]], a[[0, 2]]) == {"bit_identical_vs_fa2": 1.0, "max_ulp_vs_fa2": 0}


@pytest.mark.parametrize("rel, base, bad, expected", [
    (0.001, 0.001, 0.0, "ok"),
    (0.0025, 0.001, 0.0, "degraded"),
    (0.001, 0.001, 0.001, "degraded"),
    (0.001, 0.001, 0.02, "broken"),
    (0.25, 0.2, 0.0, "ok"),
    (0.35, 0.2, 0.0, "broken"),
    (float("nan"), 0.001, 0.0, "broken"),
])
def test_verdict_rule(rel, base, bad, expected):
    assert checks.verdict(rel, base, bad) == expected


def test_a_bad_row_with_no_known_cause_is_reported_as_unattributed():
    zeros = np.zeros((1, 2), np.int32)
    rows = RowDiagnostics(kept_tiles=zeros + 1, skipped_tiles=zeros, flags=zeros.astype(np.uint8),
                          row_sum=np.ones((1, 2), np.float32))
    cause = checks.row_causes(rows, np.array([[True, False]]), np.zeros((1, 2)), np.inf)
    assert checks.cause_counts(cause) == {"unattributed": 1}


# ---- one hand-built input per cause ---------------------------------------------------------------

def test_cause_p_underflow_on_a_16_bit_vector_side(tmp_path):
    num = _run(_overshoot_qkv(tmp_path, 25.0), "C8V16", "vfa")
    assert num["verdict"] == "broken" and num["nan_count"] > 0
    assert num["causes"] == {"p_underflow": N}
    assert num["worst_rows"][0]["max_gap"] == pytest.approx(-25.0, abs=0.1)
    assert np.isnan(num["rel_err_vs_fp64"])


def test_cause_p_cast_underflow_when_p_survives_fp32_but_not_its_fp16_cast(tmp_path):
    num = _run(_overshoot_qkv(tmp_path, 20.0), "C16V32", "vfa")
    assert num["nan_count"] == 0 and num["causes"] == {"p_cast_underflow": N}
    assert num["verdict"] == "broken"


def test_cause_no_block_visited_and_the_protect_special_mitigation(tmp_path):
    path = _overshoot_qkv(tmp_path, 5.0)
    num = _run(path, "C16V32", "vsa", lam=0.5)
    assert num["causes"] == {"no_block_visited": N} and num["verdict"] == "broken"
    protected = _run(path, "C16V32", "vsa", lam=0.5, protect_special=True)
    assert "no_block_visited" not in protected["causes"]


def test_margin_mitigation_removes_p_underflow(tmp_path):
    num = _run(_overshoot_qkv(tmp_path, 25.0), "C8V16", "vfa", minit_margin=12.0)
    assert "p_underflow" not in num["causes"] and num["nan_count"] == 0


def test_cause_exp_overflow_when_a_frozen_block_peaks_above_the_used_max(tmp_path):
    num = _run(_frozen_peak_qkv(tmp_path, 14.0), "C8V16", "vfa", minit=False)
    assert set(num["causes"]) == {"exp_overflow"} and num["verdict"] == "broken"


def test_cause_cast_saturation_when_p_exceeds_the_fp8_range(tmp_path):
    num = _run(_frozen_peak_qkv(tmp_path, 8.0), "C8V16", "vfa", minit=False)
    assert set(num["causes"]) == {"cast_saturation"}


def test_cause_score_overflow_in_fp16(tmp_path):
    q = np.full((N, D), 64.0)
    num = _run(_qkv(tmp_path, q, q.copy()), "C8V16", "fa2")
    assert set(num["causes"]) == {"score_overflow"} and num["verdict"] == "broken"


def test_cause_skipped_mass_when_blasst_drops_a_rows_only_block(tmp_path):
    q = np.zeros((N, D))
    q[0, 0] = 40.0  # row 0 peaks on the sink key: the block max over rows is high
    q[1:, 1] = 4.0
    k = np.zeros((N, D))
    k[0, 0] = 4.0
    k[128:, 1] = 3.0  # rows 1.. have their mass in block 1, far below row 0's peak
    num = _run(_qkv(tmp_path, q, k, np.random.default_rng(2).standard_normal((N, D))), "C16V32", "blasst",
               lam=0.1)
    assert num["causes"].get("skipped_mass", 0) > 100 and num["verdict"] == "broken"


# ---- the command line and the trace -----------------------------------------------------------------

def test_check_exits_nonzero_only_when_broken(tmp_path, capsys):
    path = _overshoot_qkv(tmp_path, 25.0)
    common = ["run", "--qkv", path, "--no-causal", "--block-q", "128", "--block-k", "128", "--json"]
    assert main([*common, "--hw", "C8V16", "--algo", "vfa", "--check"]) == EXIT_BROKEN
    doc = json.loads(capsys.readouterr().out)
    assert doc["numerics"]["verdict"] == "broken" and doc["numerics"]["rel_err_vs_fp64"] is None
    assert main([*common, "--hw", "C8V16", "--algo", "fa2", "--check"]) == 0


def test_failed_rows_are_trace_events(tmp_path):
    out = tmp_path / "t.json"
    vfasim.run("C8V16", "vfa", qkv=_overshoot_qkv(tmp_path, 25.0), causal=False, block_q=128, block_k=128,
               trace_out=out)
    events = [e for e in json.loads(out.read_text())["traceEvents"] if e["name"].startswith("row failed")]
    assert len(events) == N and {e["name"] for e in events} == {"row failed: p_underflow"}
