"""The engine loop without arithmetic emits exactly the full engine's trace, and refuses data-dependent policies."""

from __future__ import annotations

import numpy as np
import pytest

import vfasim
from vfasim.errors import VfasimError
from vfasim.functional import Precision, Tiling, policy_for, run_engine
from vfasim.functional.trace_only import data_independent, trace_only
from vfasim.trace import KIND_CODE
from vfasim.workloads import make_workload

PRECISIONS = [Precision(), Precision(matmul="float8_e4m3", vector="float16",
                                     scaling={"q": "per_tensor", "k": "per_tensor", "v": "per_tensor", "p": "none"})]


@pytest.mark.parametrize("algo", ["fa2", "vfa"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("decode", [False, True])
@pytest.mark.parametrize("precision", PRECISIONS, ids=["c16v32", "c8v16"])
@pytest.mark.parametrize("o_in_place", [False, True])
def test_trace_only_digest_equals_the_full_engine(algo, causal, decode, precision, o_in_place):
    wl = make_workload("llm-like", 300, 32, 4, 0, 2)
    q = wl.q[:, -3:] if decode else wl.q
    tiling = Tiling(q.shape[1], 300, 32, 3 if decode else 64, 64, causal, 4, 2)
    full = run_engine(q, wl.k, wl.v, tiling, algo, precision, decode=decode, o_in_place=o_in_place).trace
    assert trace_only(tiling, algo, precision, decode=decode, o_in_place=o_in_place).digest() == full.digest()


def test_options_that_keep_the_trace_data_independent_are_accepted():
    tiling = Tiling(256, 256, 32, 64, 64, True)
    wl = make_workload("random", 256, 32, 1, 1)
    policy = policy_for("vfa", reorder=False, q_summary="mean", exp_emulation=0.25, minit_clamp=True,
                        fp32_state=True, p_bf16=True)
    full = run_engine(wl.q, wl.k, wl.v, tiling, policy).trace
    assert trace_only(tiling, policy).digest() == full.digest()


@pytest.mark.parametrize("algo", ["fa4", "vsa", "blasst", "blasst_rowskip", "bsfa"])
def test_data_dependent_policies_are_refused(algo):
    assert not data_independent(policy_for(algo))
    with pytest.raises(VfasimError, match="depends on the data"):
        trace_only(Tiling(128, 128, 32, 64, 64, True), algo)


TIMING = ("latency_cycles", "pipelines", "shares", "bottleneck", "bound", "ops", "critical_path")


@pytest.mark.parametrize("algo", ["fa2", "vfa", "vsa", "fa4", "blasst", "bsfa"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("hw", ["C16V32", "C8V16"])
def test_numerics_off_times_the_same_trace(algo, causal, hw):
    """--numerics off: the same trace and every timing figure as a run with numerics (fa2 and vfa
    without any arithmetic; data-dependent algorithms still through the engine)."""
    kw = dict(seq_len=640, head_dim=64, block_q=64, block_k=64, heads=4, kv_heads=2, causal=causal,
              **({"topk": 3} if algo == "bsfa" else {}))  # topk is refused where it does not apply
    off, full = vfasim.run(hw, algo, numerics="off", **kw), vfasim.run(hw, algo, **kw)
    assert off.manifest["trace_digest"] == full.manifest["trace_digest"]
    assert {k: getattr(off, k) for k in TIMING} == {k: getattr(full, k) for k in TIMING}
    timing_only = data_independent(policy_for(algo))
    assert (off.manifest["output_digest"] is None) == timing_only
    assert (off.numerics["nan_count"] is None) == timing_only and off.numerics["numerics_mode"] == "off"


@pytest.mark.parametrize("algo", ["fa2", "vfa"])
def test_a_kernels_trailing_mask_steps_mask_more_tiles_and_change_no_output(algo):
    # FA2's uneven causal code masks each query block's last two visible key blocks whether the diagonal crosses
    # them or not: the engine's trace and the trace-only builder agree, a fully visible tile masked changes nothing
    wl = make_workload("llm-like", 300, 32, 4, 0, 2)
    plain, steps = (Tiling(300, 300, 32, 64, 64, True, 4, 2, s) for s in (0, 2))
    last = np.array([4, 4])  # the last query block (rows 256-299) visits key blocks 0-4; the diagonal crosses 4
    assert plain.tile_needs_mask(last, np.array([3, 4])).tolist() == [False, True]
    assert steps.tile_needs_mask(last, np.array([3, 4])).tolist() == [True, True]
    a, b = (run_engine(wl.q, wl.k, wl.v, t, algo, Precision()) for t in (plain, steps))
    assert np.array_equal(a.out, b.out)
    masks = [int((r.trace.kind == KIND_CODE["mask"]).sum()) for r in (a, b)]
    assert masks[1] > masks[0]
    assert trace_only(steps, algo, Precision()).digest() == b.trace.digest()
    with pytest.raises(VfasimError, match="mask_steps must be an integer >= 0"):
        Tiling(300, 300, 32, 64, 64, True, 4, 2, -1)
