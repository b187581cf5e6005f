"""Workloads: generators (determinism, shapes, llm-like statistics) and the file loader."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from vfasim.errors import VfasimError
from vfasim.io.qkv_files import load_qkv
from vfasim.workloads import (
    WORKLOADS,
    LlmLikeKnobs,
    Workload,
    ar1_process,
    fft_size,
    llm_like_workload,
    make_workload,
    random_qk,
    random_workload,
)

SEQ, DIM, BLOCK = 1024, 64, 128


# ---------------------------------------------------------------- generators


@pytest.mark.parametrize("queries", [1, 4, 37])
def test_random_qk_draws_random_workloads_q_tail_and_k(queries):
    wl = random_workload(37, 5, heads=6, seed=3, kv_heads=3)
    q, k = random_qk(37, 5, 6, 3, 3, queries)
    assert np.array_equal(q, wl.q[:, -queries:]) and np.array_equal(k, wl.k)


def test_registry_names() -> None:
    assert list(WORKLOADS) == ["random", "llm-like", "llm-like-stress"]


@pytest.mark.parametrize("name", ["random", "llm-like", "llm-like-stress"])
def test_shapes_dtypes_and_properties(name: str) -> None:
    w = make_workload(name, 48, 16, heads=3)
    assert w.name == name
    for arr in (w.q, w.k, w.v):
        assert arr.shape == (3, 48, 16) and arr.dtype == np.float32
        assert np.isfinite(arr).all()
    assert (w.heads, w.kv_heads, w.seq_len, w.kv_len, w.head_dim) == (3, 3, 48, 48, 16)


@pytest.mark.parametrize("name", ["random", "llm-like", "llm-like-stress"])
def test_same_seed_bit_identical_other_seed_differs(name: str) -> None:
    a, b, c = (make_workload(name, 96, 16, heads=2, seed=s) for s in (5, 5, 6))
    for x, y, z in ((a.q, b.q, c.q), (a.k, b.k, c.k), (a.v, b.v, c.v)):
        assert x.tobytes() == y.tobytes()
        assert not np.array_equal(x, z)


@pytest.mark.parametrize("name", ["random", "llm-like", "llm-like-stress"])
def test_heads_are_different_draws(name: str) -> None:
    w = make_workload(name, 64, 8, heads=2)
    assert not np.array_equal(w.q[0], w.q[1])
    assert not np.array_equal(w.k[0], w.k[1])


def test_random_is_standard_normal() -> None:
    w = random_workload(512, 32, seed=1)
    for arr in (w.q, w.k, w.v):
        assert abs(float(arr.mean())) < 0.02
        assert abs(float(arr.std()) - 1.0) < 0.02


@pytest.mark.parametrize("seq_len, head_dim", [(1, 1), (3, 2), (700, 3)])
def test_llm_like_tiny_and_odd_sizes(seq_len: int, head_dim: int) -> None:
    w = llm_like_workload(seq_len, head_dim)
    assert w.q.shape == (1, seq_len, head_dim)
    assert np.isfinite(w.q).all() and np.isfinite(w.k).all()


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"seq_len": 0}, "seq_len"),
        ({"head_dim": -1}, "head_dim"),
        ({"heads": 0}, "heads"),
        ({"seed": -1}, "seed"),
        ({"seq_len": 2.5}, "seq_len"),
        ({"seq_len": True}, "seq_len"),
    ],
)
@pytest.mark.parametrize("name", ["random", "llm-like", "llm-like-stress"])
def test_make_workload_rejects_bad_sizes(name: str, kwargs: dict[str, object], word: str) -> None:
    args: dict[str, object] = {"seq_len": 8, "head_dim": 4, "heads": 1, "seed": 0, **kwargs}
    pattern = rf"{word} must be an integer >= \d, got {kwargs[word]!r}"
    with pytest.raises(VfasimError, match=pattern):
        make_workload(name, **args)  # type: ignore[arg-type]


def test_make_workload_unknown_name_lists_valid() -> None:
    with pytest.raises(VfasimError, match="unknown workload 'gpt'; valid: random, llm-like"):
        make_workload("gpt", 8, 4)


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"norm_sigma": -0.1}, "norm_sigma"),
        ({"content_std": 0.0}, "content_std"),
        ({"match_fraction": 1.5}, "match_fraction"),
        ({"local_corr_tokens": float("nan")}, "local_corr"),
    ],
)
def test_knobs_reject_out_of_range(kwargs: dict[str, float], word: str) -> None:
    with pytest.raises(VfasimError, match=word):
        LlmLikeKnobs(**kwargs)  # type: ignore[arg-type]


def test_workload_validates_shapes_and_dtype() -> None:
    q = np.zeros((2, 4, 8), np.float32)
    with pytest.raises(VfasimError, match="k and v shapes differ"):
        Workload("x", q, q, q[:, :3])
    with pytest.raises(VfasimError, match="float32"):
        Workload("x", q, q.astype(np.float64), q)


def test_fft_size_is_smallest_5_smooth() -> None:
    smooth = sorted(2**a * 3**b * 5**c for a in range(14) for b in range(9) for c in range(7))
    for m in list(range(1, 2000)) + [17154]:
        assert fft_size(m) == next(x for x in smooth if x >= m)


def test_ar1_process_variance_and_correlation() -> None:
    x = ar1_process(np.random.default_rng(0), 20000, 32, 32.0)
    assert x.shape == (20000, 32)
    assert abs(float(x.var()) - 1.0) < 0.05
    for lag in (1, 32):
        rho = float((x[lag:] * x[:-lag]).mean())
        assert abs(rho - np.exp(-lag / 32.0)) < 0.05


# ---------------------------------------------------------------- llm-like statistics


def scores(w: Workload) -> np.ndarray:
    """Scaled scores of head 0 in float64 (no mask)."""
    q, k = w.q[0].astype(np.float64), w.k[0].astype(np.float64)
    return q @ k.T / np.sqrt(w.head_dim)


def causal_argmax(s: np.ndarray) -> np.ndarray:
    n = s.shape[0]
    return np.where(np.tril(np.ones((n, n), bool)), s, -np.inf).argmax(axis=1)


def middle_rows(argmax: np.ndarray) -> np.ndarray:
    """Rows whose max lies neither in key block 0 nor in the query's own block."""
    key_block, query_block = argmax // BLOCK, np.arange(argmax.size) // BLOCK
    return (key_block != 0) & (key_block != query_block)


@pytest.fixture(scope="module")
def llm() -> tuple[Workload, np.ndarray]:
    w = llm_like_workload(SEQ, DIM, seed=0)
    return w, scores(w)


def test_sink_keys_take_far_more_than_uniform_weight(llm: tuple[Workload, np.ndarray]) -> None:
    _, s = llm
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    per_sink_key = p[:, :4].mean()
    assert per_sink_key > 20 / SEQ  # uniform would be 1/SEQ
    assert p[:, :4].mean() > 20 * p[:, 4:].mean()


def test_scores_near_diagonal_exceed_far_off(llm: tuple[Workload, np.ndarray]) -> None:
    _, s = llm
    distance = np.abs(np.subtract.outer(np.arange(SEQ), np.arange(SEQ)))
    near = s[(distance < 8) & (distance > 0)].mean()
    far = s[(distance > 256)].mean()
    assert near > far + 2.0


def test_row_max_mostly_sink_or_diagonal_some_middle(llm: tuple[Workload, np.ndarray]) -> None:
    _, s = llm
    argmax = causal_argmax(s)
    middle = middle_rows(argmax)
    assert 0.0 < middle.mean() < 0.15
    far_from_query = np.arange(SEQ) - argmax > 256
    assert (middle & far_from_query).sum() >= 1  # the planted distant matches
    assert (argmax // BLOCK == 0).mean() > 0.2  # sinks win many rows


def distant_middle_rows(w: Workload) -> int:
    """How many rows have their max in a middle block over 256 tokens back."""
    argmax = causal_argmax(scores(w))
    return int((middle_rows(argmax) & (np.arange(w.seq_len) - argmax > 256)).sum())


def test_knobs_change_only_their_part() -> None:
    base = llm_like_workload(SEQ, 16, seed=3)
    other = llm_like_workload(SEQ, 16, seed=3, knobs=LlmLikeKnobs(match_fraction=0.0))
    assert np.array_equal(base.k, other.k) and np.array_equal(base.v, other.v)
    changed_rows = int((base.q[0] != other.q[0]).any(axis=1).sum())
    assert 0 < changed_rows < 0.05 * SEQ


def test_key_offset_is_one_vector_shared_by_every_key() -> None:
    base = llm_like_workload(SEQ, 16, seed=3)
    plain = llm_like_workload(SEQ, 16, seed=3, knobs=LlmLikeKnobs(key_offset_strength=0.0,
                                                                  query_offset_strength=0.0))
    dk, dq = (base.k[0] - plain.k[0]).astype(np.float64), (base.q[0] - plain.q[0]).astype(np.float64)
    np.testing.assert_allclose(dk, np.broadcast_to(dk[0], dk.shape), atol=1e-5)
    np.testing.assert_allclose(dq, np.broadcast_to(dq[0], dq.shape), atol=1e-5)
    w = dk[0] / np.linalg.norm(dk[0])
    assert np.linalg.norm(dk[0]) == pytest.approx(0.6 * 4.0, rel=1e-5)  # strength * sqrt(dim)
    assert dq[0] @ w == pytest.approx(-0.45 * 4.0, rel=1e-5)  # queries pulled against it


def test_planted_matches_cause_the_distant_middle_maxima() -> None:
    n = 2048
    with_matches = distant_middle_rows(llm_like_workload(n, 128))
    without = distant_middle_rows(llm_like_workload(n, 128, knobs=LlmLikeKnobs(match_fraction=0.0)))
    assert with_matches >= without + 5


def test_scaled_scores_in_realistic_range(llm: tuple[Workload, np.ndarray]) -> None:
    _, s = llm
    row_max = s.max(axis=1)
    low, high = np.percentile(row_max, [1, 99])
    assert 0.0 < low and high < 40.0  # captured MiniLM heads: 1st percentile 0.9-2.6, 99th 6-66
    assert np.abs(s).max() < 100.0  # fp16 overflows at 65504


def test_outlier_channels_and_norm_spread(llm: tuple[Workload, np.ndarray]) -> None:
    w, _ = llm
    channel_std = np.sort(w.k[0].std(axis=0))
    plain = np.sort(llm_like_workload(SEQ, DIM, knobs=LlmLikeKnobs(outlier_channels=0)).k[0].std(axis=0))
    # mild, as in captured MiniLM keys (4th largest channel std 1.2-1.3x the median)
    assert 1.2 < channel_std[-4] / np.median(channel_std) < 2.0
    assert channel_std[-4] / np.median(channel_std) > plain[-4] / np.median(plain) + 0.1
    norms = np.linalg.norm(w.q[0], axis=1)
    assert 0.2 < norms.std() / norms.mean() < 0.45
    flat = llm_like_workload(SEQ, DIM, knobs=LlmLikeKnobs(norm_sigma=0.0)).q[0]
    flat_norms = np.linalg.norm(flat, axis=1)
    assert flat_norms.std() / flat_norms.mean() < 0.5 * norms.std() / norms.mean()


def test_intra_block_directions_only_partly_aligned(llm: tuple[Workload, np.ndarray]) -> None:
    w, _ = llm
    blocks = w.k[0].astype(np.float64).reshape(-1, 32, DIM)
    blocks /= np.linalg.norm(blocks, axis=2, keepdims=True)
    gram = blocks @ blocks.transpose(0, 2, 1)
    mean_cos = float(((gram.sum(axis=(1, 2)) - 32) / (32 * 31)).mean())
    assert 0.3 < mean_cos < 0.8


# ---------------------------------------------------------------- loader: good files


def qkv(heads: int = 2, kv_heads: int = 2, seq: int = 5, kv_seq: int = 5, dim: int = 4):
    rng = np.random.default_rng(3)
    return (rng.standard_normal((heads, seq, dim)), rng.standard_normal((kv_heads, kv_seq, dim)),
            rng.standard_normal((kv_heads, kv_seq, dim)))


def test_npz_round_trip(tmp_path: Path) -> None:
    q, k, v = qkv()
    np.savez(tmp_path / "layer3.npz", q=q, k=k, v=v, extra=np.zeros(2))
    w = load_qkv(str(tmp_path / "layer3.npz"))
    assert w.name == "file:layer3.npz"
    for got, want in ((w.q, q), (w.k, k), (w.v, v)):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want.astype(np.float32))


def test_npy_stacked_round_trip(tmp_path: Path) -> None:
    q, k, v = qkv()
    np.save(tmp_path / "x.npy", np.stack([q, k, v]).astype(np.float16))
    w = load_qkv(tmp_path / "x.npy")
    assert w.name == "file:x.npy" and w.q.dtype == np.float32
    np.testing.assert_array_equal(w.v, v.astype(np.float16).astype(np.float32))


def test_two_d_arrays_get_one_head(tmp_path: Path) -> None:
    q, k, v = qkv()
    np.save(tmp_path / "x.npy", np.stack([q[0], k[0], v[0]]))
    np.savez(tmp_path / "y.npz", q=q, k=k[0], v=v[0])
    assert load_qkv(tmp_path / "x.npy").q.shape == (1, 5, 4)
    y = load_qkv(tmp_path / "y.npz")
    assert (y.heads, y.kv_heads, y.k.shape) == (2, 1, (1, 5, 4))


def test_grouped_query_and_prefill_lengths(tmp_path: Path) -> None:
    q, k, v = qkv(heads=4, kv_heads=2, seq=3, kv_seq=7)
    np.savez(tmp_path / "gqa.npz", q=q, k=k, v=v)
    w = load_qkv(tmp_path / "gqa.npz")
    assert (w.heads, w.kv_heads, w.seq_len, w.kv_len, w.head_dim) == (4, 2, 3, 7, 4)


def test_integer_arrays_are_converted(tmp_path: Path) -> None:
    a = np.arange(40, dtype=np.int64).reshape(2, 5, 4)
    np.savez(tmp_path / "i.npz", q=a, k=a, v=a)
    w = load_qkv(tmp_path / "i.npz")
    assert w.k.dtype == np.float32 and float(w.k.max()) == 39.0


# ---------------------------------------------------------------- loader: bad files


def save_npz(**arrays: np.ndarray) -> Callable[[Path], Path]:
    def write(tmp: Path) -> Path:
        np.savez(tmp / "bad.npz", **arrays)
        return tmp / "bad.npz"
    return write


def save_npy(array: np.ndarray) -> Callable[[Path], Path]:
    def write(tmp: Path) -> Path:
        np.save(tmp / "bad.npy", array, allow_pickle=True)
        return tmp / "bad.npy"
    return write


def raw_file(name: str, data: bytes) -> Callable[[Path], Path]:
    def write(tmp: Path) -> Path:
        (tmp / name).write_bytes(data)
        return tmp / name
    return write


def truncated_npz(tmp: Path) -> Path:
    q, k, v = qkv()
    np.savez(tmp / "t.npz", q=q, k=k, v=v)
    (tmp / "bad.npz").write_bytes((tmp / "t.npz").read_bytes()[:150])
    return tmp / "bad.npz"


def npz_named_npy(tmp: Path) -> Path:
    q, k, v = qkv()
    np.savez(tmp / "bad.npz", q=q, k=k, v=v)
    return (tmp / "bad.npz").rename(tmp / "bad.npy")


def npy_named_npz(tmp: Path) -> Path:
    np.save(tmp / "bad.npy", np.stack(qkv()))
    return (tmp / "bad.npy").rename(tmp / "bad.npz")


Q, K, V = qkv()
NAN_Q = Q.copy()
NAN_Q[0, 0, :3] = np.nan
HUGE_K = K.copy()
HUGE_K[1, 2, 0] = 1e39

BAD_FILES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "missing": (lambda tmp: tmp / "nope.npz", "file not found"),
    "extension": (raw_file("qkv.txt", b"1 2 3"), r"unknown extension '\.txt'"),
    "garbage npz": (raw_file("bad.npz", b"not numpy at all"), "does not parse"),
    "garbage npy": (raw_file("bad.npy", b"\x93NUMPY garbage"), "does not parse"),
    "truncated npz": (truncated_npz, "does not parse"),
    "empty npy": (raw_file("bad.npy", b""), "does not parse"),
    "npz as npy": (npz_named_npy, "is an .npz archive"),
    "npy as npz": (npy_named_npz, "single .npy array"),
    "missing names": (save_npz(q=Q, kk=K, v=V), r"missing array\(s\) k \(found: q, kk, v\)"),
    "ndim 4": (save_npz(q=Q[None], k=K, v=V), "q must be 2-D.*got shape"),
    "ndim 1": (save_npz(q=Q, k=K, v=V.ravel()), "v must be 2-D.*got shape"),
    "not stacked": (save_npy(Q), r"stacked as \[3, \.\.\.\]"),
    "k v shapes": (
        save_npz(q=Q, k=K, v=V[:, :4]), r"k and v shapes differ: k \(2, 5, 4\), v \(2, 4, 4\)",
    ),
    "head dim": (
        save_npz(q=Q[..., :3], k=K, v=V), r"head_dim differ: q \(2, 5, 3\), k \(2, 5, 4\)",
    ),
    "gqa heads": (save_npz(q=np.concatenate([Q, Q[:1]]), k=K, v=V), "multiple of k heads"),
    "nan": (save_npz(q=NAN_Q, k=K, v=V), r"q has 3 non-finite.*3 NaN/Inf in the file"),
    "overflow": (save_npz(q=Q, k=HUGE_K, v=V), "k has 1 non-finite.*1 beyond float32 range"),
    "object npy": (save_npy(np.array([1, "a", None], dtype=object)), "object"),
    "object npz": (save_npz(q=np.array([None, 1], dtype=object), k=K, v=V), "object"),
    "strings": (save_npz(q=Q, k=K.astype(str), v=V), "k has non-numeric dtype <U"),
    "complex": (save_npz(q=Q.astype(complex), k=K, v=V), "q has non-numeric dtype complex"),
    "empty": (save_npz(q=Q[:, :0], k=K, v=V), r"q is empty \(shape \(2, 0, 4\)\)"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_file_raises_one_line_error_naming_it(tmp_path: Path, case: str) -> None:
    write, pattern = BAD_FILES[case]
    path = write(tmp_path)
    with pytest.raises(VfasimError, match=pattern) as info:
        load_qkv(path)
    message = str(info.value)
    assert message.startswith(f"workload file {path}: ")
    assert "\n" not in message


def test_truncated_member_is_a_parse_error(tmp_path: Path) -> None:
    q, k, v = qkv()
    with zipfile.ZipFile(tmp_path / "z.npz", "w") as archive:
        for name, arr in (("q", q), ("k", k)):
            np.save(tmp_path / f"{name}.npy", arr)
            archive.write(tmp_path / f"{name}.npy", f"{name}.npy")
        archive.writestr("v.npy", (tmp_path / "k.npy").read_bytes()[:90])
    with pytest.raises(VfasimError, match="does not parse"):
        load_qkv(tmp_path / "z.npz")
