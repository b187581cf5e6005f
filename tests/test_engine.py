"""Numerics of the functional engine against the float64 oracle and against fa2 at kernel precision."""

from __future__ import annotations

import numpy as np
import pytest

from vfasim.errors import VfasimError
from vfasim.functional import Precision, Tiling, reference_attention, run_engine
from vfasim.functional.checks import error_vs_reference
from vfasim.functional.policy import summarize_keys
from vfasim.trace import KIND_NAMES
from vfasim.workloads import make_workload

from conftest import rng_qkv

FP32 = Precision("float32", "float32")


def rel_err(out, ref) -> float:
    return error_vs_reference(out, ref)["rel_err_vs_fp64"]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("seq,bq,bk", [(200, 64, 32), (256, 64, 64), (97, 32, 64)])
def test_fa2_matches_the_oracle(causal, seq, bq, bk):
    q, k, v = rng_qkv(seq, 32, heads=2)
    ref = reference_attention(q, k, v, causal)
    t = Tiling(seq, seq, 32, bq, bk, causal, heads=2)
    assert rel_err(run_engine(q, k, v, t, "fa2", FP32).out, ref) < 1e-6
    # fp16 matmul inputs: error of fp16 rounding of Q, K, V and P, not more
    assert rel_err(run_engine(q, k, v, t, "fa2").out, ref) < 3e-3


def test_reference_is_softmax_attention():
    q, k, v = rng_qkv(5, 4)
    s = q[0].astype(np.float64) @ k[0].T.astype(np.float64) / 2.0
    s[np.triu_indices(5, 1)] = -np.inf
    p = np.exp(s - s.max(1, keepdims=True))
    np.testing.assert_allclose(reference_attention(q, k, v, True)[0], (p / p.sum(1, keepdims=True)) @ v[0],
                               rtol=1e-12)


@pytest.mark.parametrize("algo", ["vfa", "vsa"])
def test_vfa_and_vsa_match_the_oracle_in_fp32(algo):
    q, k, v = rng_qkv(300, 32)
    t = Tiling(300, 300, 32, 64, 64, True)
    res = run_engine(q, k, v, t, algo, FP32, lam=1e-12)  # λ tiny: nothing is negligible enough to skip
    assert res.counts["skipped_tiles"] == 0
    assert rel_err(res.out, reference_attention(q, k, v, True)) < 1e-5


def test_vfa_with_an_exact_max_equals_fa2_to_rounding():
    # Integer Q and K with every key block made of one repeated key: sabsmax(K_j) is that key,
    # so m-init is exactly the true row max (all products exact in fp32); VFA then never
    # updates m and must agree with fa2 up to rounding.
    rng = np.random.default_rng(7)
    q = rng.integers(-3, 4, (1, 256, 16)).astype(np.float32)
    k = np.repeat(rng.integers(-3, 4, (1, 4, 16)), 64, axis=1).astype(np.float32)
    v = rng.standard_normal((1, 256, 16)).astype(np.float32)
    t = Tiling(256, 256, 16, 64, 64, True)
    ref = reference_attention(q, k, v, True)
    fa2, vfa = run_engine(q, k, v, t, "fa2"), run_engine(q, k, v, t, "vfa")
    np.testing.assert_array_equal(vfa.used_max, vfa.true_max)
    assert rel_err(vfa.out, ref) <= 1.5 * rel_err(fa2.out, ref) + 1e-7
    np.testing.assert_allclose(vfa.out, fa2.out, rtol=2e-3, atol=1e-4)  # fp16 rounding of P


def test_fa2_tracks_the_true_max_exactly():
    q, k, v = rng_qkv(200, 16)
    res = run_engine(q, k, v, Tiling(200, 200, 16, 32, 32, True), "fa2")
    np.testing.assert_array_equal(res.used_max, res.true_max)


def test_the_block_skip_test_leaves_the_padding_of_a_last_query_block_out():
    # three real query rows score -1 on key block 0 and -20 on block 1: BLASST skips block 1 (a gap of -19 < ln lam);
    # the fourth row of the block is padding (a zero query, scoring 0 everywhere), which must not keep it
    q = np.zeros((1, 3, 4), np.float32)
    q[..., 0] = 1.0
    k = np.zeros((1, 8, 4), np.float32)
    k[0, :4, 0], k[0, 4:, 0] = -2.0, -40.0  # scale 1/2: scores -1 and -20
    t = Tiling(3, 8, 4, 4, 4, False)
    res = run_engine(q, k, np.ones_like(k), t, "blasst")
    assert res.counts["skipped_tiles"] == 1 and res.counts["visited_tiles"] == 2


def test_vsa_skips_more_as_lambda_grows():
    q, k, v = rng_qkv(512, 32)
    t = Tiling(512, 512, 32, 64, 64, True)
    skipped = [run_engine(q, k, v, t, "vsa", lam=lam).counts["skipped_tiles"] for lam in (1e-9, 1e-2, 0.5)]
    assert skipped[0] <= skipped[1] <= skipped[2]
    assert skipped[2] > 0


def test_grouped_query_heads_share_kv():
    q, k, v = rng_qkv(128, 16, heads=4, kv_heads=2)
    t = Tiling(128, 128, 16, 32, 32, True, heads=4, kv_heads=2)
    ref = reference_attention(q, k, v, True)
    for algo in ("fa2", "vfa"):
        assert rel_err(run_engine(q, k, v, t, algo, FP32).out, ref) < 1e-5
    np.testing.assert_allclose(ref[1], reference_attention(q[1:2], k[0:1], v[0:1], True)[0])


def test_key_summary_is_signed_absmax_over_real_keys():
    kb = np.array([[[[1.0, -3.0], [-2.0, 2.0], [9.0, 9.0]]]])  # [Hkv=1, Tc=1, Bc=3, d=2]; key 2 is padding
    np.testing.assert_array_equal(summarize_keys(kb, kv_len=2, how="sabsmax"), [[[-2.0, -3.0]]])


def test_the_same_inputs_give_bit_identical_outputs_and_traces():
    q, k, v = rng_qkv(200, 16)
    t = Tiling(200, 200, 16, 32, 32, True)
    a, b = run_engine(q, k, v, t, "vsa", lam=0.1), run_engine(q, k, v, t, "vsa", lam=0.1)
    assert a.out.tobytes() == b.out.tobytes()
    assert a.trace.digest() == b.trace.digest()


@pytest.mark.parametrize("kwargs,match", [
    ({"seq_len": 0}, "seq_len must be a positive integer"),
    ({"block_q": -4}, "block_q must be a positive integer"),
    ({"heads": 3, "kv_heads": 2}, "multiple of kv_heads"),
])
def test_impossible_sizes_are_refused(kwargs, match):
    args = dict(seq_len=64, kv_len=64, head_dim=8, block_q=16, block_k=16, causal=True) | kwargs
    with pytest.raises(VfasimError, match=match):
        Tiling(**args)


def test_bad_lambda_and_unknown_algorithm_are_refused():
    q, k, v = rng_qkv(32, 8)
    t = Tiling(32, 32, 8, 16, 16, True)
    with pytest.raises(VfasimError, match="lam must lie in"):
        run_engine(q, k, v, t, "vsa", lam=1.0)
    with pytest.raises(VfasimError, match="unknown algorithm .fa9..*fa2, fa4, vfa, vsa"):
        run_engine(q, k, v, t, "fa9")


def test_fast_float16_rounding_is_the_numpy_cast_bit_for_bit():
    from vfasim.functional.precision import round_float16

    rng = np.random.default_rng(0)
    values = rng.standard_normal(200_000).astype(np.float32) * np.exp2(rng.integers(-40, 18, 200_000))
    edges = np.array([0.0, -0.0, 2**-25, 3 * 2**-25, 1.5 * 2**-24, 2**-14, 2**-14 * (1 - 2**-11), 65504,
                      65519.99, 65520, 1e-45, -2**-25, np.inf, -np.inf, np.nan], np.float32)
    x = np.concatenate([values.astype(np.float32), edges])
    with np.errstate(over="ignore"):
        expected = x.astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(round_float16(x).view(np.uint32), expected.view(np.uint32))


def plain_fa2(q, k, v, block: int) -> np.ndarray:
    """FlashAttention-2 written the obvious way: fp16 inputs, fp32 accumulation and vector math."""
    q16, k16, v16 = (x.astype(np.float16).astype(np.float32) for x in (q, k, v))
    n, d = q.shape
    scale = np.float32(1 / np.sqrt(d))
    out = np.zeros((n, d), np.float32)
    for i in range(0, n, block):
        qi = q16[i:i + block]
        m = np.full(qi.shape[0], -np.inf, np.float32)
        l = np.zeros(qi.shape[0], np.float32)
        o = np.zeros((qi.shape[0], d), np.float32)
        for j in range(0, i + block, block):
            s = (qi @ k16[j:j + block].T) * scale
            s = np.where(np.arange(j, j + s.shape[1])[None, :] > np.arange(i, i + qi.shape[0])[:, None], -np.inf, s)
            m_new = np.maximum(m, s.max(axis=1))
            alpha = np.exp(m - m_new)
            p = np.exp(s - m_new[:, None])
            l = alpha * l + p.sum(axis=1, dtype=np.float32)
            o = alpha[:, None] * o + p.astype(np.float16).astype(np.float32) @ v16[j:j + block]
            m = m_new
        out[i:i + block] = o / l[:, None]
    return out


def test_c16v32_engine_is_a_plain_numpy_fa2_bit_for_bit():
    q, k, v = rng_qkv(256, 32)
    from vfasim.runner.api import engine_precision
    from vfasim.hw import load_hw

    res = run_engine(q, k, v, Tiling(256, 256, 32, 64, 64, True), "fa2", engine_precision(load_hw("C16V32")))
    np.testing.assert_array_equal(res.out[0].view(np.uint32), plain_fa2(q[0], k[0], v[0], 64).view(np.uint32))


@pytest.mark.parametrize("algo", ["fa2", "vfa", "vsa"])
def test_a_run_without_its_trace_has_the_same_numbers(algo):
    q, k, v = rng_qkv(256, 64, seed=7)
    t = Tiling(256, 256, 64, 64, 64, True, 1, 1)
    prec = Precision(matmul="float16", vector="float16")
    full, bare = (run_engine(q, k, v, t, algo, prec, trace=flag) for flag in (True, False))
    assert bare.trace is None and len(full.trace) > 0
    np.testing.assert_array_equal(bare.out.view(np.uint16), full.out.view(np.uint16))
    np.testing.assert_array_equal(bare.rows.flags, full.rows.flags)
    assert bare.counts == full.counts


@pytest.mark.parametrize("algo", ["fa2", "vfa", "vsa"])
def test_thread_count_changes_no_bit(algo):
    """A step's rows split over threads are independent: one thread and three give the same run."""
    q, k, v = rng_qkv(512, 32, heads=2)
    t = Tiling(512, 512, 32, 32, 64, True, heads=2)
    one, three = (run_engine(q, k, v, t, algo, threads=n) for n in (1, 3))
    assert one.out.tobytes() == three.out.tobytes()
    assert one.traced().digest() == three.traced().digest()
    assert one.counts == three.counts
    for name in ("used_max", "true_max", "block_max", "above_max"):
        assert getattr(one, name).tobytes() == getattr(three, name).tobytes(), name
    assert all(getattr(one.rows, f).tobytes() == getattr(three.rows, f).tobytes()
               for f in ("kept_tiles", "skipped_tiles", "flags", "row_sum"))


@pytest.mark.parametrize("algo", ["fa2", "vfa"])
def test_pv_waits_for_the_o_rescale_only_when_it_accumulates_in_place(algo):
    """A GPU's MMA accumulates into O: the tile's O rescale (stage 2 then) precedes its PV; a split core's does not."""
    wl = make_workload("llm-like", 512, 32, 1, 0)
    tiling = Tiling(512, 512, 32, 64, 64, False)
    for in_place in (False, True):
        t = run_engine(wl.q, wl.k, wl.v, tiling, algo, o_in_place=in_place).trace
        kind = np.array(KIND_NAMES)[t.kind]
        deps = [set(kind[t.dep_idx[t.dep_ptr[i]:t.dep_ptr[i + 1]]]) for i in np.flatnonzero(kind == "pv_matmul")]
        rescaled = sum("rescale_o" in d for d in deps)
        assert rescaled == (np.count_nonzero(kind == "rescale_o") if in_place else 0)
        assert set(t.stage[kind == "rescale_o"]) == {2 if in_place else 3}
        if algo == "vfa" and in_place:  # frozen tiles have no rescale: their PV waits on the previous O only
            assert 0 < rescaled < len(deps)


def _batched(a, blocks, head, kb, transpose=False):
    tiles = blocks[head, kb]
    return np.matmul(a, tiles.transpose(0, 2, 1) if transpose else tiles)


@pytest.mark.parametrize("rows,m,k,n", [(2, 128, 128, 128), (37, 64, 32, 64), (5, 32, 64, 128), (9, 32, 32, 32)])
@pytest.mark.parametrize("transpose", [True, False])
def test_a_step_sharing_one_block_is_one_product_with_the_same_bits(rows, m, k, n, transpose):
    """``tile_matmul`` with every row on one block (broadcast) and on blocks that differ, against the products of
    gathered tiles, bit for bit."""
    from vfasim.functional.arrays import tile_matmul

    rng = np.random.default_rng(rows)
    a = (rng.standard_normal((rows, m, k)) * np.exp2(rng.integers(-8, 8, (rows, m, 1)))).astype(np.float32)
    blocks = rng.standard_normal((2, 3, n, k) if transpose else (2, 3, k, n)).astype(np.float32)
    head, kb = np.full(rows, 1), np.full(rows, 2)
    got = tile_matmul(a, blocks, head, kb, transpose)
    assert got.tobytes() == _batched(a, blocks, head, kb, transpose).tobytes()
    mixed = np.arange(rows) % 3  # blocks differ between rows: one product each
    assert tile_matmul(a, blocks, head, mixed, transpose).tobytes() == _batched(a, blocks, head, mixed,
                                                                                transpose).tobytes()


@pytest.mark.parametrize("algo", ["fa2", "vfa"])
@pytest.mark.parametrize("hw", ["C4V16", "C16V32"])
def test_a_shared_block_changes_no_bit_of_a_run(algo, hw, monkeypatch):
    """A run whose steps share a K/V block (one head, causal) against the same run with the tiles gathered."""
    from vfasim.functional import engine, update
    from vfasim.hw import load_hw
    from vfasim.runner.api import engine_precision

    wl = make_workload("llm-like", 1024, 64, 1, 0)
    t, prec = Tiling(1024, 1024, 64, 128, 128, True), engine_precision(load_hw(hw))
    shared = run_engine(wl.q, wl.k, wl.v, t, algo, prec)
    monkeypatch.setattr(engine, "tile_matmul", _batched)
    monkeypatch.setattr(update, "tile_matmul", _batched)
    gathered = run_engine(wl.q, wl.k, wl.v, t, algo, prec)
    assert shared.out.tobytes() == gathered.out.tobytes()
    assert shared.counts == gathered.counts
    assert shared.traced().digest() == gathered.traced().digest()
