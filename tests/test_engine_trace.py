"""``engine_trace``: the engine's trace without its numbers, bit for bit the trace ``run_engine`` emits."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vfasim.errors import VfasimError
from vfasim.functional import Precision, Tiling, engine_trace, policy_for, run_engine
from vfasim.hw import load_hw
from vfasim.runner.api import engine_precision
from vfasim.workloads import make_workload

from conftest import rng_qkv

PRECISIONS = {
    "fp16": Precision(matmul="float16", vector="float16"),
    "bf16": Precision(matmul="bfloat16", vector="float16"),
    "fp8": Precision(matmul="float8_e4m3", vector="float16"),
    "fp4": engine_precision(load_hw("C4V16")),  # the paper's core: scaled FP4 matmuls
    "fp32": Precision(matmul="float16", vector="float32"),
}
CASES = [  # algo, options, precision, workload, causal, heads, kv_heads, decode
    ("fa4", {}, "fp16", "llm-like", True, 4, 2, False),
    ("fa4", {"rescale_threshold": 0.5}, "bf16", "llm-like-stress", False, 2, 2, False),
    ("fa2", {"rescale_threshold": 2.0}, "fp8", "llm-like", True, 2, 1, False),
    ("blasst", {}, "fp16", "llm-like", True, 2, 2, False),
    ("blasst_fa4", {"protect_special": True}, "fp4", "llm-like", True, 2, 2, False),
    ("blasst_rowskip", {}, "fp32", "random", True, 2, 2, False),
    ("blasst_swa", {}, "fp16", "llm-like-stress", True, 2, 2, False),
    ("vsa", {"minit_clamp": True}, "fp16", "llm-like", True, 4, 2, False),
    ("vfa", {}, "fp8", "llm-like", False, 2, 2, False),
    ("fa4", {}, "fp16", "llm-like", False, 4, 2, True),
]


@pytest.mark.parametrize("algo,options,precision,workload,causal,heads,kv_heads,decode", CASES)
def test_the_trace_is_the_engines(algo, options, precision, workload, causal, heads, kv_heads, decode):
    wl = make_workload(workload, 200, 32, heads, 3, kv_heads)
    q = wl.q[:, -3:] if decode else wl.q
    tiling = Tiling(q.shape[1], 200, 32, 32 if not decode else 3, 32, causal and not decode, heads, kv_heads)
    policy, prec = dataclasses.replace(policy_for(algo), **options), PRECISIONS[precision]  # as a kernel sets them
    for in_place in (False, True):  # PV accumulating into O in place (a GPU's MMA) or not
        full = run_engine(q, wl.k, wl.v, tiling, policy, prec, 0.05, decode=decode, o_in_place=in_place).traced()
        trace = engine_trace(q, wl.k, wl.v, tiling, policy, prec, 0.05, decode=decode, o_in_place=in_place)
        assert trace.digest() == full.digest()


def test_scores_holding_nan_or_inf_take_the_long_way():
    q, k, v = rng_qkv(96, 16, heads=2, kv_heads=2)
    q[0, 5, 3], q[1, 40, :] = np.nan, 1e4  # a NaN product, and scores past the fp16 range
    tiling, prec = Tiling(96, 96, 16, 32, 32, True, 2, 2), PRECISIONS["fp16"]
    for algo in ("fa4", "blasst_fa4"):
        full = run_engine(q, k, v, tiling, algo, prec, 0.05).traced()
        assert engine_trace(q, k, v, tiling, algo, prec, 0.05).digest() == full.digest()


def test_top_k_skipping_needs_its_thresholds():
    with pytest.raises(VfasimError, match="bsfa needs one calibrated threshold"):
        engine_trace(*rng_qkv(64, 16), Tiling(64, 64, 16, 32, 32, True), "bsfa")


@pytest.mark.parametrize("precision", list(PRECISIONS))
@pytest.mark.parametrize("causal", [True, False])
def test_tile_maxima_from_the_raw_products_are_the_scores_maxima(precision, causal):
    from vfasim.functional.arrays import rowmax
    from vfasim.functional.engine import _Loop

    q, k, v = rng_qkv(160, 32, heads=2, kv_heads=1, seed=7)
    q *= np.geomspace(1e-3, 3e2, 160, dtype=np.float32)[None, :, None]  # scores from subnormal to past fp16's range
    tiling = Tiling(160, 160, 32, 32, 32, causal, 2, 1)
    loop = _Loop(q, k, v, tiling, policy_for("fa4"), PRECISIONS[precision], 0.05, None, False, False)
    for s in range(tiling.n_kblocks):
        act = np.flatnonzero(loop.order[:, s] >= 0)
        kb = loop.order[act, s]
        assert np.array_equal(loop._tile_max(act, kb), rowmax(loop._scores(act, kb)), equal_nan=True)
