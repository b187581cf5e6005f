"""Properties that hold for every shape and every core (hypothesis, derandomized)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from vfasim.functional import Precision, Tiling, run_engine
from vfasim.sim import simulate, timing_stats

from conftest import rng_qkv, tiny_hw

FP32 = Precision("float32", "float32")
BLOCKS = st.sampled_from([8, 16, 32, 64])
shapes = st.fixed_dictionaries({"seq": st.integers(1, 150), "dim": st.sampled_from([4, 8, 16]),
                                "bq": BLOCKS, "bk": BLOCKS, "causal": st.booleans()})


@given(shapes, BLOCKS, BLOCKS)
def test_fa2_output_does_not_depend_on_block_size(s, bq2, bk2):
    q, k, v = rng_qkv(s["seq"], s["dim"])
    a = run_engine(q, k, v, Tiling(s["seq"], s["seq"], s["dim"], s["bq"], s["bk"], s["causal"]), "fa2", FP32)
    b = run_engine(q, k, v, Tiling(s["seq"], s["seq"], s["dim"], bq2, bk2, s["causal"]), "fa2", FP32)
    np.testing.assert_allclose(a.out, b.out, rtol=1e-5, atol=1e-6)


def brute_tiles(seq: int, bq: int, bk: int, causal: bool) -> tuple[int, int, int]:
    """(visited tiles, tiles needing a mask, sink-or-local tiles), counted entry by entry."""
    tiles = masked = special = 0
    for i in range(-(-seq // bq)):
        rows = range(i * bq, min((i + 1) * bq, seq))
        local = (rows[-1]) // bk
        for j in range(-(-seq // bk)):
            keys = range(j * bk, (j + 1) * bk)
            seen = [(not causal or key <= r) and key < seq for r in rows for key in keys]
            if not any(seen) and causal:
                continue
            tiles += 1
            masked += not all((not causal or key <= i * bq) and key < seq for key in keys)
            special += j in (0, local)
    return tiles, masked, special


@given(shapes)
def test_trace_op_count_matches_the_closed_form(s):
    q, k, v = rng_qkv(s["seq"], s["dim"])
    t = Tiling(s["seq"], s["seq"], s["dim"], s["bq"], s["bk"], s["causal"])
    tiles, masked, special = brute_tiles(s["seq"], s["bq"], s["bk"], s["causal"])
    rows = t.n_qblocks
    # fa2: 18 ops per tile (+ mask), load_q / normalize / store_o per query block
    assert len(run_engine(q, k, v, t, "fa2").trace) == 18 * tiles + masked + 3 * rows
    # vfa: 14 ops on frozen tiles (no rowmax, running max, rescale factor, rescale of O);
    # + m-init (2 per query block) and one key summary
    frozen = tiles - special
    assert len(run_engine(q, k, v, t, "vfa").trace) == 18 * special + 14 * frozen + masked + 5 * rows + 1


hw_params = st.fixed_dictionaries({
    "rates": st.tuples(*[st.sampled_from([1, 3, 10, 40]) for _ in range(4)]),
    "buffers": st.integers(1, 5),
    "startup": st.integers(0, 5),
    "units": st.integers(1, 3),
})


def hw_from(p, scale_pipe: str | None = None, factor: float = 1.0):
    hw = tiny_hw(score_buffers=p["buffers"])
    pipes = {}
    for (name, pipe), rate in zip(hw.pipelines.items(), p["rates"]):
        rate = rate * (factor if name == scale_pipe else 1.0)
        pipes[name] = pipe.model_copy(update={"throughput": {key: rate for key in pipe.throughput},
                                              "startup_cycles": p["startup"], "units": p["units"]})
    return hw.model_copy(update={"pipelines": pipes})


small_trace = st.sampled_from(["fa2", "vfa", "vsa"]).map(
    lambda algo: run_engine(*rng_qkv(96, 8), Tiling(96, 96, 8, 32, 16, True), algo, lam=0.05).trace)


@given(small_trace, hw_params, st.sampled_from(["pipelined", "serial"]))
def test_latency_lies_between_busiest_pipeline_and_total_work(trace, p, schedule):
    hw = hw_from(p)
    stats = timing_stats(trace, simulate(trace, hw, schedule), hw)
    busy = [v["busy_cycles"] for v in stats.pipelines.values()]
    assert max(busy) / p["units"] <= stats.latency_cycles <= sum(busy)
    if schedule == "serial":
        assert stats.latency_cycles == sum(busy)


@given(small_trace, hw_params, st.sampled_from(["cube", "vector", "exp", "mover"]),
       st.sampled_from([1.5, 2.0, 4.0]))
def test_more_throughput_never_costs_cycles(trace, p, pipe, factor):
    slow, fast = hw_from(p), hw_from(p, pipe, factor)
    assert simulate(trace, fast).total_cycles <= simulate(trace, slow).total_cycles
