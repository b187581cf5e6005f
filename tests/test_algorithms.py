"""The algorithm family: each variant reduces to fa2 where it should, and departs where it should."""

from __future__ import annotations

import numpy as np
import pytest

from vfasim.errors import VfasimError
from vfasim.functional import Precision, Tiling, policy_for, reference_attention, run_engine
from vfasim.functional.checks import error_vs_reference
from vfasim.functional.policy import append_key_summary, calibrate_bsfa, signed_absmax, summarize_keys
from vfasim.workloads import make_workload

FP32 = Precision("float32", "float32")
SEQ, DIM, BLOCK = 512, 32, 64


@pytest.fixture(scope="module")
def llm():
    wl = make_workload("llm-like", SEQ, DIM, 1, 0)
    tiling = Tiling(SEQ, SEQ, DIM, BLOCK, BLOCK, True)
    return wl, tiling, run_engine(wl.q, wl.k, wl.v, tiling, "fa2")


def bits(a: np.ndarray) -> bytes:
    return a.tobytes()


@pytest.mark.parametrize("algo,kw", [
    ("fa4", {"rescale_threshold": 0.0}),  # rescale whenever the max grows: exactly fa2
    ("blasst", {}), ("blasst_rowskip", {}), ("blasst_fa4", {"rescale_threshold": 0.0}),
])
def test_variants_with_nothing_to_skip_are_fa2_bit_for_bit(llm, algo, kw):
    wl, tiling, fa2 = llm
    res = run_engine(wl.q, wl.k, wl.v, tiling, policy_for(algo, **kw), lam=1e-30)
    assert bits(res.out) == bits(fa2.out)
    assert res.counts["skipped_tiles"] == res.counts["skipped_row_tiles"] == 0


def test_fa4_skips_rescales_and_stays_exact_in_fp32(llm):
    wl, tiling, _ = llm
    res = run_engine(wl.q, wl.k, wl.v, tiling, "fa4", FP32)
    kept = res.counts["visited_tiles"]
    assert 0 < res.counts["rescaled_tiles"] < kept  # some rescales skipped, not all
    assert error_vs_reference(res.out, reference_attention(wl.q, wl.k, wl.v, True))["rel_err_vs_fp64"] < 1e-5
    gap = res.true_max - res.used_max
    assert gap.max() <= 8 * np.log(2) + 1e-5  # the used max lags the true one by at most the threshold


def test_row_skip_is_finer_than_block_skip(llm):
    wl, tiling, _ = llm
    ref = reference_attention(wl.q, wl.k, wl.v, True)
    block = run_engine(wl.q, wl.k, wl.v, tiling, "blasst", lam=1e-2)
    rows = run_engine(wl.q, wl.k, wl.v, tiling, "blasst_rowskip", lam=1e-2)
    assert rows.counts["skipped_row_tiles"] > 0
    err = [error_vs_reference(r.out, ref)["rel_err_vs_fp64"] for r in (block, rows)]
    assert err[1] < err[0]  # a per-row test never drops mass a row needs just because another row is big


def test_sink_local_order_lets_blasst_skip_more(llm):
    wl, tiling, _ = llm
    plain = run_engine(wl.q, wl.k, wl.v, tiling, "blasst", lam=1e-3).counts["skipped_tiles"]
    swa = run_engine(wl.q, wl.k, wl.v, tiling, "blasst_swa", lam=1e-3).counts["skipped_tiles"]
    assert swa >= plain


def test_bsfa_keeps_top_k_and_the_diagonal(llm):
    wl, tiling, fa2 = llm
    local = tiling.local_block
    everything = calibrate_bsfa([fa2.block_max], local, topk=tiling.n_kblocks)
    assert bits(run_engine(wl.q, wl.k, wl.v, tiling, "bsfa", thresholds=everything).out) == bits(fa2.out)
    diagonal_only = calibrate_bsfa([fa2.block_max], local, topk=0)
    res = run_engine(wl.q, wl.k, wl.v, tiling, "bsfa", thresholds=diagonal_only)
    assert res.counts["visited_tiles"] - res.counts["skipped_tiles"] == tiling.n_qblocks
    two = calibrate_bsfa([fa2.block_max], local, topk=2)
    kept = run_engine(wl.q, wl.k, wl.v, tiling, "bsfa", thresholds=two).counts
    assert kept["visited_tiles"] - kept["skipped_tiles"] == sum(min(n - 1, 2) + 1 for n in tiling.n_visible)


def test_calibration_averages_the_kth_largest_off_diagonal_max():
    bm = np.array([[5.0, 1.0, 3.0, 9.0], [2.0, 8.0, -np.inf, -np.inf]])
    np.testing.assert_array_equal(calibrate_bsfa([bm], np.array([3, 1]), topk=2), [3.0, -np.inf])
    np.testing.assert_array_equal(calibrate_bsfa([bm, bm + 1], np.array([3, 1]), topk=1), [5.5, -np.inf])
    np.testing.assert_array_equal(calibrate_bsfa([bm], np.array([3, 1]), topk=9), [-np.inf, -np.inf])


@pytest.mark.parametrize("options", [{"minit": False}, {"reorder": False}, {"key_summary": "mean"},
                                     {"key_summary": "max"}, {"key_summary": "absmax"},
                                     {"q_summary": "absmax"}, {"q_summary": "mean"}])
def test_vfa_ablations_stay_exact_in_fp32(options):
    wl = make_workload("random", 300, 16, 1, 0)
    tiling = Tiling(300, 300, 16, 64, 64, True)
    res = run_engine(wl.q, wl.k, wl.v, tiling, policy_for("vfa", **options), FP32)
    # In exact arithmetic the frozen max cancels out; fp32 keeps that unless exp overflows.
    assert error_vs_reference(res.out, reference_attention(wl.q, wl.k, wl.v, True))["rel_err_vs_fp64"] < 1e-4


def test_block_wise_q_summary_costs_one_row_of_m_init():
    wl = make_workload("random", 256, 16, 1, 0)
    tiling = Tiling(256, 256, 16, 64, 64, True)
    for options, rows in (({}, 64), ({"q_summary": "sabsmax"}, 1)):
        trace = run_engine(wl.q, wl.k, wl.v, tiling, policy_for("vfa", **options)).trace
        minit = trace.work[trace.kind == trace.kind_code("minit_max")]
        np.testing.assert_array_equal(minit, rows * tiling.n_visible)


def test_ablation_options_are_refused_where_they_mean_nothing():
    with pytest.raises(VfasimError, match="option key_summary applies to vfa, vsa, not fa2"):
        policy_for("fa2", key_summary="mean")
    with pytest.raises(VfasimError, match="key_summary 'median' is not one of"):
        policy_for("vfa", key_summary="median")


def test_decode_matches_the_oracle_and_summarises_one_block():
    wl = make_workload("llm-like", 700, 32, 2, 0, kv_heads=1)
    q = np.ascontiguousarray(wl.q[:, -3:])
    tiling = Tiling(3, 700, 32, 3, 64, True, heads=2, kv_heads=1)
    res = run_engine(q, wl.k, wl.v, tiling, "vfa", FP32, decode=True)
    ref = reference_attention(q, wl.k, wl.v, True)
    assert error_vs_reference(res.out, ref)["rel_err_vs_fp64"] < 1e-4
    summary_work = res.trace.work[res.trace.kind == res.trace.kind_code("key_summary")]
    np.testing.assert_array_equal(summary_work, [64 * 32])  # one KV head, newest block only


def test_incremental_key_summary_equals_the_batch_one():
    rng = np.random.default_rng(1)
    keys = rng.standard_normal((50, 8))
    summary, count = np.zeros(8), 0
    for start in range(0, 50, 7):
        summary, count = append_key_summary(summary, count, keys[start:start + 7])
    np.testing.assert_array_equal(summary, signed_absmax(keys, axis=0))
    blocked = summarize_keys(np.pad(keys, ((0, 14), (0, 0))).reshape(1, 1, 64, 8), 50, "sabsmax")
    np.testing.assert_array_equal(blocked[0, 0], summary)
