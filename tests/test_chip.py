"""The chip model: exact timelines on a toy chip, independent cores, decode and prefill on H100-SXM."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import vfasim
from vfasim.chip.fluid import BOUNDS
from vfasim.chip.run import Geometry, OperandReads, representative_heads, simulate_chip, stream_mma
from vfasim.chip.occupancy import TileShape
from vfasim.chip.units import _split_ops
from vfasim.kernel import load_kernel
from vfasim.cli import main
from vfasim.errors import VfasimError
from vfasim.functional import Precision, Tiling, policy_for
from vfasim.functional.trace_only import trace_only
from vfasim.hw import HardwareConfig, load_hw
from vfasim.hw.chip import L2Spec
from vfasim.sim import op_cycles, simulate
from vfasim.trace import KIND_CODE

# the fa2 kernel as the single-core engine prices it (every op of the trace; the shipped description folds the score
# scale into its FFMA, fused_ops), so that a chip's units can be held to the single core's cycles
FA2_KERNEL = load_kernel("fa2").model_copy(update={"fused_ops": []})
FA2 = (FA2_KERNEL, FA2_KERNEL.tiles[1])  # the kernel and its head-dim-64 tile rule

TOY = """base: C16V32
name: toy-chip
clock_ghz: 1.0  # assumed, because a test wants one byte per cycle per GB/s
chip:
  cores: 2  # assumed, because a test
  {memory}
  core_limits:
    buffer_bytes: 1000000  # assumed, because a test
    max_streams: 1  # assumed, because a test
  kernel_tuning:  # the toy's units pay their ops only, not the fa2 tiles' measured per-CTA cycles
    fa2:
      unit_overhead_cycles: 0  # assumed, because a test
"""
HBM = "hbm: {{bandwidth_gb_per_s: {bw}, latency_cycles: 100}}"
# one unit of the toy launch: a 64-row query block of a 192-key non-causal head at d 64 (fp16 in, fp32 out)
UNIT_BYTES = 64 * 64 * 2 + 2 * 3 * 64 * 64 * 2 + 64 * 64 * 4  # Q + 3 K and 3 V tiles + O = 73,728
LATENCY = 100


def toy(tmp_path: Path, memory: str) -> Path:
    path = tmp_path / "toy.yaml"
    path.write_text(TOY.format(memory=memory))
    return path


def toy_run(hw_path: Path, tiles: int = 3, heads: int = 1):
    hw = load_hw(hw_path)
    tiling = Tiling(64 * tiles, 64 * tiles, 64, 64, 64, False, heads, heads)
    geo = Geometry(1, heads, heads, tiling.n_qblocks, tiling.n_kblocks, False, False, 1.0, True)
    shape = TileShape(64, 64, 64, 2, 2, 2)
    trace = trace_only(Tiling(64 * tiles, 64 * tiles, 64, 64, 64, False, 1, 1), "fa2")
    return simulate_chip(trace, hw, *FA2, geo, shape), hw


def unit_cycles(hw) -> int:
    """Compute time of one toy unit alone on its core: the core timing engine on its ops."""
    single = trace_only(Tiling(64, 192, 64, 64, 64, False, 1, 1), "fa2")
    return simulate(single, hw.model_copy(update={"score_buffers": 1})).total_cycles


def test_two_cores_sharing_one_memory_port_exact_timeline(tmp_path):
    res, hw = toy_run(toy(tmp_path, HBM.format(bw=16)))  # 16 bytes per cycle, shared
    assert unit_cycles(hw) < UNIT_BYTES / 16  # every unit is memory-bound, alone or not
    both = LATENCY + UNIT_BYTES / 8  # units 0 and 1 split the port: 9,316
    third = both + LATENCY + UNIT_BYTES / 16  # unit 2 follows unit 0 on core 0, alone: 14,024
    assert res.times.start.tolist() == [0, 0, both]
    assert res.times.end.tolist() == [both, both, third]
    assert res.times.core.tolist() == [0, 1, 0]
    assert [BOUNDS[b] for b in res.times.bound] == ["hbm"] * 3
    assert res.latency_cycles == 14024 and res.hbm_bytes == 3 * UNIT_BYTES


def test_shared_port_stretches_units_that_alone_are_compute_bound(tmp_path):
    res, hw = toy_run(toy(tmp_path, HBM.format(bw=24)))
    t = unit_cycles(hw)
    assert UNIT_BYTES / 24 < t < UNIT_BYTES / 12  # compute-bound alone, memory-bound when shared
    both = LATENCY + UNIT_BYTES / 12
    assert res.times.end.tolist() == pytest.approx([both, both, both + LATENCY + t], abs=1e-9)
    assert [BOUNDS[b] for b in res.times.bound] == ["hbm", "hbm", "compute"]


def test_independent_cores_reproduce_single_core_cycles(tmp_path):
    path = toy(tmp_path, "")
    single = vfasim.run("C16V32", "vfa", seq_len=256, head_dim=64, block_q=64, block_k=64, causal=True)
    chip = vfasim.run(path, "vfa", seq_len=256, head_dim=64, block_q=256, block_k=64, causal=True, heads=2,
                      kernel=FA2_KERNEL)
    one = vfasim.run(load_hw("C16V32").model_copy(update={"score_buffers": 1}), "vfa", seq_len=256,
                     head_dim=64, block_q=256, block_k=64, causal=True)
    assert chip.chip["units"] == 2 and chip.chip["hbm_bytes"] == 0
    assert chip.latency_cycles == one.latency_cycles  # each core runs one head exactly as one core would
    assert single.latency_cycles > 0


@pytest.mark.parametrize("group", [1, 2, 4])
def test_representative_heads_equal_every_head_traced(group):
    """One head (a group's first, which owns the key summaries; the others run its units without them) stands for
    all."""
    hw = load_hw("H100-SXM")
    tiling = Tiling(512, 512, 64, 64, 64, True, 2 * 2 * group, 2 * 2)
    full = trace_only(tiling, "vfa")
    rep = trace_only(Tiling(512, 512, 64, 64, 64, True, 1, 1), "vfa")
    shape = TileShape(64, 64, 64, 2, 2, 2)
    args = dict(batch=2, heads=2 * group, kv_heads=2, n_qblocks=8, n_kblocks=8, decode=False, causal=True, flops=1.0)
    a = simulate_chip(rep, hw, *FA2, Geometry(**args, representative=True), shape)
    b = simulate_chip(full, hw, *FA2, Geometry(**args, representative=False), shape)
    assert a.latency_cycles == b.latency_cycles
    assert (a.hbm_bytes, a.l2_bytes, a.busy_cycles, a.kind_cycles) == (b.hbm_bytes, b.l2_bytes, b.busy_cycles,
                                                                       b.kind_cycles)
    np.testing.assert_array_equal(a.times.end, b.times.end)


DECODE = dict(seq_len=8192, head_dim=128, heads=8, kv_heads=2, batch=4, decode=True, queries=1)


def test_decode_is_memory_bound_and_scales_with_hbm_bandwidth(tmp_path):
    # fa3: its warp groups read shared memory once per tile (fa2's four warps each read K and V, which at
    # twice the HBM bandwidth would take more than the shared-memory port gives; see the next test)
    untuned = ("  launch_overhead_us: 0  # assumed, because the test checks the bandwidth term alone\n"
               "  l2:\n    dirty_bytes: null  # a clean L2 (the test checks the bandwidth term alone)\n"
               "    dirty_writeback_per_byte: null  # a clean L2\n"
               "  kernel_tuning:\n    fa3:\n      tensor_efficiency: 1.0\n      unit_overhead_cycles: 0\n")
    hbm = 2 * load_hw("H100-SXM").chip.hbm.bandwidth_gb_per_s
    plain, fast = tmp_path / "plain.yaml", tmp_path / "fast.yaml"  # without the fitted per-unit overhead
    plain.write_text("base: H100-SXM\nname: plain\nchip:\n" + untuned)
    fast.write_text("base: H100-SXM\nname: fast-hbm\nchip:\n  hbm:\n"
                    f"    bandwidth_gb_per_s: {hbm}  # assumed, because a test doubles HBM\n" + untuned)
    base = vfasim.run(plain, "fa2", kernel="fa3", dispatch="waves", **DECODE)
    double = vfasim.run(fast, "fa2", kernel="fa3", dispatch="waves", **DECODE)
    assert base.chip["bound"] == "memory" and base.chip["unit_bounds"]["hbm"] >= 0.95 * base.chip["units"]
    kv = 4 * 2 * 8192 * 128 * 2 * 2  # every K/V byte read once from HBM (GQA groups packed)
    q, partial_o = 4 * 128 * 2, 4 * 128 * 4  # per split: the group's 4 query rows in, fp32 partial O out
    combined = 4 * 2 * 4 * 128 * 4  # per (batch, K/V head): the combined O of its 4 query heads
    assert base.chip["hbm_bytes"] == kv + base.chip["units"] * (q + partial_o) + combined
    # fixed latencies keep it above 1/2 (FA3 runs one decode unit per SM: its second warp group idles; the
    # combine launch is a chain of one L2 round trip per split, which HBM bandwidth does not shorten)
    assert 0.5 <= double.latency_cycles / base.latency_cycles < 0.8


def test_prefill_throughput_rises_with_sequence_length_as_waves_fill():
    tflops = [vfasim.run("H100-SXM", "fa2", seq_len=n, heads=8, block_k=64).chip["tflops"]
              for n in (256, 512, 1024, 2048)]
    assert all(a < b for a, b in zip(tflops, tflops[1:])), tflops


def test_kernels_fit_their_streams_and_set_their_policy():
    fa3 = vfasim.run("H100-SXM", "fa2", seq_len=1024, heads=4, kernel="fa3")
    fa4 = vfasim.run("B200", "fa2", seq_len=1024, heads=4, kernel="fa4")
    assert fa3.chip["streams_per_core"] == 2 and "exp_emul" not in fa3.ops  # 2 consumer warp groups at hd 128
    assert (fa3.shape["block_q"], fa3.shape["block_k"]) == (64, 128)  # causal: FA3's 128 x 128, 64 rows a stream
    assert fa4.ops["exp_emul"] > 0 and fa4.options["policy"]["exp_emulation"] == 0.15
    assert fa4.options["policy"]["rescale_threshold"] == pytest.approx(8 * np.log(2))


def test_fa2_streams_get_their_own_tensor_share_and_pay_operand_reads():
    hw = load_hw("H100-SXM")
    shape = TileShape(128, 64, 128, 2, 2, 2)
    mma = stream_mma(hw, 4, OperandReads(4, 1), shape, hw.chip.core_limits)
    two = mma.dealt(hw, 2)  # two CTAs timed together: each its own unit at half the pipe
    tensor = two.pipelines["tensor"]
    assert (tensor.units, tensor.units_by, tensor.throughput["float16"]) == (2, "row", 1024)
    # per MAC: QK reads Q once (2 B / 64 keys) and K per warp (4 x 2 B / 128 rows); PV reads V per warp
    assert two.work_factor["qk_matmul"] == pytest.approx(1 + (2 / 64 + 8 / 128) * 1024 / 128)
    assert two.work_factor["pv_matmul"] == pytest.approx(1 + (8 / 128) * 1024 / 128)
    # alone, a CTA's four warps (one a partition) issue on the whole pipe, and read their operands at that rate
    one = mma.dealt(hw, 1)
    assert (one.pipelines["tensor"].units, one.pipelines["tensor"].throughput["float16"]) == (1, 2048)
    assert one.work_factor["pv_matmul"] == pytest.approx(1 + (8 / 128) * 2048 / 128)
    # two warps alone reach two of the four partitions' tensor units
    assert stream_mma(hw, 2, None, shape, hw.chip.core_limits).dealt(hw, 1).pipelines["tensor"].throughput[
        "float16"] == 1024
    unpartitioned = hw.chip.core_limits.model_copy(update={"tensor_partitions": None})
    assert stream_mma(hw, 2, None, shape, unpartitioned).dealt(hw, 1).pipelines["tensor"].throughput[
        "float16"] == 2048


def test_a_lone_fa2_cta_is_not_held_to_its_slot_share_of_the_tensor_pipes():
    # one wave of 132 CTAs (one an SM, two fit) against two CTAs an SM: alone, each runs nearer the pipe's rate
    kw = dict(seq_len=2048, head_dim=128, block_q=128, block_k=64, causal=False, decode=True, queries=128)
    one_an_sm = vfasim.run("H100-SXM", "fa2", heads=132, **kw)
    two_an_sm = vfasim.run("H100-SXM", "fa2", heads=264, **kw)
    assert one_an_sm.chip["waves"] == two_an_sm.chip["waves"] == 1
    assert one_an_sm.latency_cycles < 0.75 * two_an_sm.latency_cycles


def test_a_unit_never_walks_its_key_blocks_faster_than_its_tile_alone(efficient_unfloored):
    # efficient's head dim 64 tile: a CTA alone on its SM takes 4,366 cycles a key block, each of two sharing one 5,076
    # (measured); 32 lone CTAs of 128 key blocks each take at least that, and without the figures the model's pipes
    # make them faster
    eff = load_kernel("efficient")
    rule = eff.decode.tiles[0]
    assert rule.head_dim_max == 64 and rule.block_cycles[1] == 4366
    bare = efficient_unfloored
    kw = dict(seq_len=8192, head_dim=64, heads=32, decode=True, queries=4, causal=False, numerics_heads=0)
    floored, free = (vfasim.run("H100-SXM", "fa2", kernel=k, **kw) for k in (eff, bare))
    assert free.latency_cycles < 128 * 4366 <= floored.latency_cycles
    assert floored.latency_cycles < 128 * 4366 * 1.1  # the floor binds: launch and first loads beside it
    # 264 such CTAs, two an SM: each no faster than the figure measured with two sharing; three take two's figure
    assert [rule.block_floor(k) for k in (1, 2, 3, 4, 5)] == [4366, 5076, 5076, 7727, 7727]
    two = vfasim.run("H100-SXM", "fa2", kernel=eff, **{**kw, "heads": 264})
    assert 128 * 5076 <= two.latency_cycles < 128 * 5076 * 1.1


def test_a_warp_grid_reads_each_operand_once_per_warp_row_or_column():
    # efficient's 64 x 128 tile: 2 x 4 warps of 32 x 32; each warp reads 32 rows of Q (or P) and 32 columns of K
    # (or V) per step of the reduction: 2 B / 32 + 2 B / 32 per MAC; FA2's 4 x 1 layout gives what the test above does
    shape = TileShape(64, 128, 128, 2, 2, 2)
    assert OperandReads(2, 4, p_shared=True).bytes_per_mac(shape) == {"qk_matmul": 2 / 32 + 2 / 32,
                                                                       "pv_matmul": 2 / 32 + 2 / 32}
    assert OperandReads(2, 4).bytes_per_mac(shape)["pv_matmul"] == 2 / 32  # P in registers: V alone
    fa2 = OperandReads(4, 1).bytes_per_mac(TileShape(128, 64, 128, 2, 2, 2))
    assert fa2 == {"qk_matmul": 2 / 64 + 8 / 128, "pv_matmul": 8 / 128}


def test_fa2_operand_reads_cost_time_only_where_the_core_has_a_shared_memory_rate(tmp_path):
    path = tmp_path / "no-smem.yaml"
    path.write_text("base: H100-SXM\nname: no-smem\nchip:\n  core_limits:\n    shared_read_bytes_per_cycle: null\n")
    kw = dict(seq_len=2048, heads=16, head_dim=128, block_q=128, block_k=64)
    with_reads, without = vfasim.run("H100-SXM", "fa2", **kw), vfasim.run(path, "fa2", **kw)
    assert with_reads.latency_cycles > without.latency_cycles
    assert with_reads.pipelines["tensor"]["busy_cycles"] == without.pipelines["tensor"]["busy_cycles"]  # ops only


def test_fa2_softmax_is_partly_exposed():
    # fa2's per-stream tensor shares leave part of each tile's softmax exposed, so head dim 64 (twice the
    # scores per MAC of head dim 128) runs slower than 128; the measured H100 ratio is 0.87-0.89 at 2K-16K
    def tflops(d: int) -> float:
        bq, bk = (128, 128) if d == 64 else (128, 64)
        return vfasim.run("H100-SXM", "fa2", seq_len=4096, heads=16, batch=4, head_dim=d, block_q=bq,
                          block_k=bk).chip["tflops"]
    assert 0.8 < tflops(64) / tflops(128) < 0.93


def test_a_per_stream_tensor_pipe_cannot_share_an_issue_stream():
    doc = load_hw("H100-SXM").model_dump()
    doc["pipelines"]["vector"].update(shares_issue_with="tensor")
    doc["pipelines"]["exp"].update(shares_issue_with="tensor")
    hw = HardwareConfig.model_validate(doc)
    with pytest.raises(VfasimError, match="gives each stream its own queue on H100-SXM's tensor pipe 'tensor'"):
        stream_mma(hw, 4, OperandReads(4, 1), TileShape(128, 64, 128, 2, 2, 2), hw.chip.core_limits)


def test_chip_runs_are_deterministic_and_json_serialisable():
    a = vfasim.run("H100-SXM", "vfa", seq_len=1024, heads=4, kv_heads=2, batch=2, dispatch="persistent")
    b = vfasim.run("H100-SXM", "vfa", seq_len=1024, heads=4, kv_heads=2, batch=2, dispatch="persistent")
    assert json.dumps(a.to_dict(), sort_keys=True) == json.dumps(b.to_dict(), sort_keys=True)
    for key in ("cores", "latency_cycles", "latency_us", "tflops", "waves", "hbm_bytes", "l2_bytes",
                "achieved_hbm_tbps", "bound"):
        assert key in a.chip


@pytest.mark.parametrize("policy", ["waves", "persistent"])
def test_dispatch_policies_on_a_causal_launch(policy, tmp_path):
    hw = load_hw(toy(tmp_path, ""))  # 2 cores, one stream each, no shared memory
    trace = trace_only(Tiling(512, 512, 64, 64, 64, True, 1, 1), "fa2")
    geo = Geometry(1, 1, 1, 8, 8, False, True, 1.0, True)
    res = simulate_chip(trace, hw, *FA2, geo, TileShape(64, 64, 64, 2, 2, 2), policy=policy)
    first = sorted(np.argsort(res.times.start, kind="stable")[:2].tolist())
    if policy == "waves":  # units dealt in order: query blocks 0, 2, 4, 6 on core 0
        assert first == [0, 1] and res.times.core.tolist() == [0, 1] * 4
    else:  # longest first: the last query blocks visit the most key blocks
        assert first == [6, 7]
        assert res.times.end.max() <= simulate_chip(trace, hw, *FA2, geo,
                                                    TileShape(64, 64, 64, 2, 2, 2)).times.end.max()


def test_batch_on_one_core_is_more_heads():
    a = vfasim.run("C16V32", "fa2", seq_len=256, head_dim=64, block_q=64, block_k=64, batch=2)
    b = vfasim.run("C16V32", "fa2", seq_len=256, head_dim=64, block_q=64, block_k=64, heads=2)
    assert a.latency_cycles == b.latency_cycles and a.manifest["trace_digest"] == b.manifest["trace_digest"]


def test_numerics_on_a_subset_of_heads_name_the_heads():
    r = vfasim.run("H100-SXM", "vfa", seq_len=512, head_dim=64, heads=8, kv_heads=2, numerics_heads=3)
    assert list(r.chip["numerics_heads"]) == [0, 1, 2, 3]  # whole GQA groups of 4
    assert r.numerics["rel_err_vs_fp64"] < 0.05


@pytest.mark.parametrize("algo", ["vfa", "vsa"])
def test_numerics_spread_over_processes_by_kv_heads_are_one_pass_bit_for_bit(algo, monkeypatch):
    from vfasim.runner import chip_run

    calls = []

    def spread(*args):
        calls.append(args[-1])
        return chip_run_spread(*args)

    chip_run_spread = chip_run.spread_numerics
    monkeypatch.setattr(chip_run, "spread_numerics", spread)
    kw = dict(seq_len=512, head_dim=64, heads=6, kv_heads=3, numerics_heads=6, cache=False)
    one = vfasim.run("H100-SXM", algo, jobs=1, **kw).to_dict()
    spread_doc = vfasim.run("H100-SXM", algo, jobs=3, **kw).to_dict()  # three processes, a K/V head each
    assert calls == [3] and one["numerics"]["verdict"]
    assert json.dumps(one, sort_keys=True) == json.dumps(spread_doc, sort_keys=True)


def test_numerics_spread_as_dask_tasks_are_one_pass_bit_for_bit():
    distributed = pytest.importorskip("dask.distributed")
    kw = dict(seq_len=256, head_dim=64, heads=4, kv_heads=2, numerics_heads=4, cache=False)
    one = vfasim.run("H100-SXM", "vfa", jobs=1, **kw).to_dict()
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as c, \
            distributed.Client(c) as client:
        on_dask = vfasim.run("H100-SXM", "vfa", executor="dask", scheduler=client, **kw).to_dict()
    assert json.dumps(one, sort_keys=True) == json.dumps(on_dask, sort_keys=True)
    with pytest.raises(VfasimError, match="executor dask needs a scheduler"):
        vfasim.run("H100-SXM", "vfa", executor="dask", **kw)
    with pytest.raises(VfasimError, match="scheduler applies to executor dask"):
        vfasim.run("H100-SXM", "vfa", scheduler="tcp://127.0.0.1:1", **kw)
    with pytest.raises(VfasimError, match="executor must be one of local, dask"):
        vfasim.run("H100-SXM", "vfa", executor="ray", **kw)


def test_numerics_heads_all_checks_every_head(capsys):
    from vfasim.cli import main

    code = main(["run", "--hw", "H100-SXM", "--algo", "fa2", "--seq-len", "256", "--head-dim", "64", "--heads", "4",
                 "--kv-heads", "2", "--numerics-heads", "all", "--jobs", "1", "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["chip"]["numerics_heads"] == [0, 1, 2, 3]


def test_data_dependent_algorithms_run_the_engine_on_every_head():
    r = vfasim.run("H100-SXM", "vsa", seq_len=512, head_dim=64, heads=4, kv_heads=2, batch=2, lam=0.01)
    assert r.workload == "llm-like" and r.manifest["trace_scope"] == "all batch x heads"


def test_a_data_dependent_launch_too_large_to_trace_whole_traces_a_sample_of_its_kv_heads(monkeypatch):
    from vfasim.runner import chip_run

    kw = dict(seq_len=512, head_dim=64, heads=4, kv_heads=2, batch=4, causal=False, kernel="triton", workload="random")
    whole = vfasim.run("H100-SXM", "vsa", **kw)
    monkeypatch.setattr(chip_run, "TRACED_TILES", 128)  # 2 heads x 4 x 8 tiles a K/V head: 2 of the 8 K/V heads
    sampled = vfasim.run("H100-SXM", "vsa", **kw)
    assert whole.manifest["trace_scope"] == "all batch x heads"
    assert sampled.manifest["trace_scope"].startswith("representative heads of 2 of the 8 K/V heads")
    assert sampled.chip["units"] == whole.chip["units"] and sampled.chip["hbm_bytes"] == whole.chip["hbm_bytes"]
    assert abs(sampled.latency_cycles / whole.latency_cycles - 1) < 0.05  # heads are independent draws alike


def test_a_data_dependent_decode_trace_computes_whole_tiles_and_moves_the_valid_rows():
    from vfasim.runner.chip_run import _trace

    args = (4, 1024, 64, 4, 64, False)  # 4 queries against 1024 keys, a tile of 16 rows
    trace, _ = _trace(policy_for("vsa"), Precision(), args, 1, 2, 2, 0, "random", True, 4, 1, 1e-3, pad_to=16,
                      v_before_skip_test=True)
    work = {kind: trace.work[trace.kind == KIND_CODE[kind]] for kind in ("qk_matmul", "load_q", "load_v", "load_k")}
    assert set(work["qk_matmul"]) == {16 * 64 * 64} and set(work["load_q"]) == {4 * 64 * Precision().bytes_per("q")}
    assert work["load_v"].size == work["load_k"].size == 2 * 16  # V read for every block, skipped or kept


def test_trace_dtype_the_config_cannot_price_is_refused():
    hw = load_hw("H100-SXM")  # no float4 tensor rate
    trace = trace_only(Tiling(128, 128, 64, 64, 64, True, 1, 1), "fa2",
                       Precision(matmul="float4_e2m1", scaling={"q": "per_block", "k": "per_block",
                                                                 "v": "per_block", "p": "per_block"},
                                 block_scale="mxfp4"))
    geo = Geometry(1, 1, 1, 2, 2, False, True, 1.0, True)
    with pytest.raises(VfasimError, match="matmul ops in float4_e2m1 have no rate on pipeline 'tensor' of H100-SXM"):
        simulate_chip(trace, hw, *FA2, geo, TileShape(64, 64, 64, 0.5, 0.5, 0.5))


@pytest.mark.parametrize("args, message", [
    (["--hw", "H100-SXM", "--algo", "fa2", "--seq-len", "1024", "--kernel", "fa3", "--block-q", "128",
      "--block-k", "256"], "kernel fa3 needs 2 tile stream(s) per core but 0 fit (short of shared memory)"),
    (["--hw", "H100-SXM", "--algo", "fa2", "--seq-len", "1024", "--kernel", "fa4"],
     "kernel fa4 targets B200, B300, not H100-SXM"),
    (["--hw", "H100-SXM", "--algo", "fa2", "--seq-len", "1024", "--kernel", "fa2", "--head-dim", "512"],
     "kernel fa2 has no tile for head dim 512 with 16bit inputs (it supports head dims up to 256)"),
    (["--hw", "H100-SXM", "--algo", "fa2", "--seq-len", "1024", "--kernel", "fa3", "--kernel-style", "fa3"],
     "give kernel or its alias kernel_style, not both"),
    (["--hw", "H100-SXM", "--algo", "fa2", "--seq-len", "1024", "--numerics", "full"],
     "numerics applies to one-core runs"),
    (["--hw", "C16V32", "--algo", "fa2", "--seq-len", "256", "--dispatch", "greedy"],
     "dispatch applies to chip runs; C16V32 has no chip section"),
    (["--hw", "H100-SXM", "--algo", "fa2", "--seq-len", "1024", "--heads", "6", "--kv-heads", "4"],
     "heads (6) must be a multiple of kv_heads (4)"),
    (["--hw", "H100-SXM", "--algo", "fa2", "--seq-len", "1024", "--batch", "0"],
     "batch must be an integer >= 1"),
    (["--hw", "C16V32", "--algo", "fa2", "--seq-len", "256", "--kernel-style", "fa2"],
     "kernel applies to chip runs; C16V32 has no chip section"),
    (["--hw", "H100-SXM", "--algo", "fa2", "--seq-len", "1024", "--kernel-style", "fa9"],
     "unknown kernel 'fa9'"),
    (["--hw", "H100-SXM", "--algo", "fa2", "--seq-len", "1024", "--dispatch", "fifo"],
     "unknown dispatch policy 'fifo'"),
])
def test_bad_chip_input_is_one_line_and_writes_nothing(args, message, tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(["run", *args, "--trace-out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not out.exists()


def test_decode_on_a_chip_without_memory_figures_is_refused(tmp_path, capsys):
    path = toy(tmp_path, "")
    assert main(["run", "--hw", str(path), "--algo", "fa2", "--seq-len", "1024", "--decode"]) == 2
    assert "decode on a chip needs memory figures" in capsys.readouterr().err


def test_perfetto_shows_a_sample_of_cores_and_memory_tracks(tmp_path):
    out = tmp_path / "chip.json"
    vfasim.run("H100-SXM", "fa2", seq_len=1024, heads=4, trace_out=out)
    events = json.loads(out.read_text())["traceEvents"]
    procs = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert "memory" in procs and "core 0 (cores 0-7 of 132 shown)" in procs
    assert any(e["ph"] == "C" for e in events) and any(e["ph"] == "X" for e in events)


def test_long_units_extrapolated_from_two_short_runs_match_the_full_simulation(monkeypatch):
    import vfasim.chip.units as units

    shape = dict(seq_len=2048, batch=1, heads=2, head_dim=64, causal=True)
    fast = [vfasim.run("H100-SXM", "fa2", kernel_style=s, block_q=bq, block_k=bk, **shape).latency_cycles
            for s, bq, bk in (("fa2", 128, 64), ("fa3", 64, 128))]
    monkeypatch.setattr(units, "LONG_TILES", 10**9)
    full = [vfasim.run("H100-SXM", "fa2", kernel_style=s, block_q=bq, block_k=bk, **shape).latency_cycles
            for s, bq, bk in (("fa2", 128, 64), ("fa3", 64, 128))]
    assert fast == full


def test_greedy_dispatch_takes_units_in_launch_order_as_slots_free(tmp_path):
    hw = load_hw(toy(tmp_path, ""))  # 2 cores, one stream each, no shared memory
    trace = trace_only(Tiling(512, 512, 64, 64, 64, True, 1, 1), "fa2")
    geo = Geometry(1, 1, 1, 8, 8, False, True, 1.0, True)
    res = simulate_chip(trace, hw, *FA2, geo, TileShape(64, 64, 64, 2, 2, 2), policy="greedy")
    t = res.times
    assert np.all(np.diff(t.start) >= 0)  # launch order
    for slot in np.unique(t.slot):  # a slot never idles while units wait: each unit starts as the last ends
        mine = np.flatnonzero(t.slot == slot)
        assert t.start[mine[0]] == 0 and np.allclose(t.start[mine[1:]], t.end[mine[:-1]])
    waves = simulate_chip(trace, hw, *FA2, geo, TileShape(64, 64, 64, 2, 2, 2), policy="waves")
    assert t.end.max() <= waves.times.end.max()  # causal units of growing length: no slot idles early


def test_skip_threshold_reaches_the_chip_timing():
    shape = dict(seq_len=512, heads=2, head_dim=64, block_q=64, block_k=64, causal=True)
    few, many = (vfasim.run("H100-SXM", "vsa", lam=lam, **shape) for lam in (1e-6, 0.5))
    assert few.manifest["trace_digest"] != many.manifest["trace_digest"]
    assert many.pipelines["tensor"]["busy_cycles"] < few.pipelines["tensor"]["busy_cycles"]


def test_a_shared_exp_and_vector_stream_bounds_head_dim_64_on_h100():
    # H100-SXM's exp joins the vector stream. Charged all its cycles there, it makes the softmax, not the matmuls,
    # bound FA3 at head dim 64, and the chip's utilisation names the stream with the two pipelines' shares summed;
    # holding the stream for half of them (issue_share 0.5) or running on a stream of its own is faster.
    kw = dict(seq_len=2048, head_dim=64, heads=32, batch=8, block_q=64, block_k=128, kernel_style="fa3",
              numerics_heads=0)
    doc = load_hw("H100-SXM").model_dump()
    assert doc["pipelines"]["exp"]["issue_share"] == 1.0
    whole = vfasim.run("H100-SXM", "fa2", **kw).chip
    util = whole["utilization"]
    assert whole["bound"] == "vector+exp"
    assert util["vector+exp"] == pytest.approx(util["vector"] + util["exp"])
    assert util["vector+exp"] > util["tensor"]
    doc["pipelines"]["exp"]["issue_share"] = 0.5
    half = vfasim.run(HardwareConfig.model_validate(doc), "fa2", **kw).chip
    doc["pipelines"]["exp"].update(shares_issue_with=None, issue_share=1.0)
    separate = vfasim.run(HardwareConfig.model_validate(doc), "fa2", **kw).chip
    assert separate["latency_cycles"] <= half["latency_cycles"] < whole["latency_cycles"]
    assert "vector+exp" not in separate["utilization"]


def test_an_exp_holding_part_of_the_shared_stream_still_takes_its_full_time():
    # issue_share s: an exp op holds the vector stream for s of its cycles, but never less than its full cycles
    # less its tile's other work on the stream (the MUFU still needs its whole time)
    from vfasim.sim.schedule import op_cycles

    hw = load_hw("H100-SXM")
    trace = trace_only(Tiling(256, 256, 64, 64, 64, False, 1, 1), "fa2")
    _, full = op_cycles(trace, hw)
    doc = hw.model_dump()
    doc["pipelines"]["exp"]["issue_share"] = 0.5
    _, held = op_cycles(trace, HardwareConfig.model_validate(doc))
    exp = trace.kind == KIND_CODE["exp"]
    assert np.all(held[exp] < full[exp]) and np.all(held[~exp & (trace.kind != KIND_CODE["rescale_factor"])]
                                                      == full[~exp & (trace.kind != KIND_CODE["rescale_factor"])])
    p = hw.pipelines["exp"]
    body = full[exp] - p.startup_cycles - p.issue_overhead_cycles
    assert np.all(held[exp] == p.startup_cycles + p.issue_overhead_cycles + np.ceil(body * 0.5))
    doc["pipelines"]["exp"]["issue_share"] = 0.01  # so little held that the floor binds
    doc["pipelines"]["vector"]["throughput"] = {"float32": 1e6, "float16": 1e6}
    _, floor = op_cycles(trace, HardwareConfig.model_validate(doc))
    pipe, fast = op_cycles(trace, HardwareConfig.model_validate(doc))
    on_stream = pipe == list(hw.pipelines).index("vector")  # the stream's ops that hold it whole
    tile = trace.tile_ids()
    others = np.bincount(tile[on_stream], weights=fast[on_stream], minlength=tile.max() + 1)
    assert np.all(floor[exp] == np.maximum(held_at(0.01, full[exp], p), full[exp] - others[tile[exp]]))
    assert np.all(floor[exp] > held_at(0.01, full[exp], p))  # the floor binds: the MUFU's full time shows


def held_at(share, full, p):
    body = full - p.startup_cycles - p.issue_overhead_cycles
    return p.startup_cycles + p.issue_overhead_cycles + np.ceil(body * share)


def test_a_units_own_hbm_stream_caps_its_speed_before_the_shared_port():
    from vfasim.chip.fluid import Ports, waterfill

    d_hbm, d_l2 = np.array([10.0, 1.0]), np.zeros(2)
    x, state = waterfill(d_hbm, d_l2, Ports(l2=None, hbm=100.0, unit_hbm=2.0))
    assert x.tolist() == [0.2, 1.0] and state.tolist() == [3, 0]  # 3: held by its own loads in flight
    x, state = waterfill(np.array([10.0, 10.0]), d_l2, Ports(l2=None, hbm=2.5, unit_hbm=2.0))
    assert x.tolist() == [0.125, 0.125] and state.tolist() == [2, 2]  # the shared port binds first
    plain = waterfill(d_hbm, d_l2, Ports(l2=None, hbm=100.0))
    assert plain[0].tolist() == [1.0, 1.0]


def test_a_lone_cta_streams_kv_at_the_measured_per_cta_rate():
    # cuDNN's 4-query decode runs unsplit: one CTA per query head, each streaming its K/V at H100's measured
    # 45.9 GB/s per CTA (validation/gpu_h100_2026_11_latency), far below the HBM port. Without its padded
    # second warp group (pad_streams), the CTA's matmuls take less than that stream
    lean = load_kernel("cudnn").model_copy(update={"pad_streams": False})
    r = vfasim.run("H100-SXM", "fa2", kernel=lean, seq_len=65536, heads=2, kv_heads=2, batch=1, decode=True,
                   queries=4, causal=False)
    kv_bytes = 65536 * 128 * 2 * 2  # one head's K and V
    assert r.chip["splits"] == 1 and r.chip["unit_bounds"]["latency"] == 2
    assert kv_bytes / 45.9e3 < r.chip["latency_us"] < kv_bytes / 45.9e3 * 1.1


def test_a_padded_stream_computes_as_its_partner_and_moves_no_bytes():
    # cuDNN's 128-row tile on 4 queries: both 64-row warp groups compute (pad_streams), so a CTA costs two streams'
    # matmuls, one unit a core; its Q and O bytes stay those of the 4 real rows
    runs = {pad: vfasim.run("H100-SXM", "fa2", kernel=load_kernel("cudnn").model_copy(update={"pad_streams": pad}),
                            seq_len=8192, heads=32, kv_heads=8, batch=8, decode=True, queries=4, causal=False)
            for pad in (False, True)}
    lean, padded = runs[False].chip, runs[True].chip
    assert padded["units"] == lean["units"] == 8 * 32
    assert (padded["streams_per_unit"], lean["streams_per_unit"]) == (2, 1)

    def tensor_busy(chip):
        return chip["utilization"]["tensor"] * chip["latency_cycles"]

    assert tensor_busy(padded) == pytest.approx(2 * tensor_busy(lean), rel=1e-3)
    assert padded["hbm_bytes"] == pytest.approx(lean["hbm_bytes"], rel=0.02)
    assert padded["latency_us"] > 1.2 * lean["latency_us"]


def test_a_per_unit_stream_cap_is_an_hbm_figure_only():
    from vfasim.hw.chip import HbmSpec, L2Spec

    assert HbmSpec(bandwidth_gb_per_s=3000.0, latency_cycles=700, per_unit_gb_per_s=45.9).per_unit_gb_per_s == 45.9
    with pytest.raises(ValueError, match="per_unit_gb_per_s"):  # the L2 would ignore it: refused, not dropped
        L2Spec(bandwidth_gb_per_s=7000.0, latency_cycles=287, capacity_bytes=1 << 20, per_unit_gb_per_s=45.9)


@pytest.mark.parametrize("policy", ["waves", "greedy"])
def test_units_as_long_computing_as_waiting_get_the_eager_loops_bound(policy):
    # Compute times at, just under and just over the exposed latency: the lazy loop must tell which is longer
    # as the eager one does, step by step (a tie goes to compute, the first of the longest).
    from vfasim.chip.fluid import Ports, run_launch

    latency = 700.0
    periods = [700.0, 700.0 * (1 - 1e-15), 700.0 * (1 + 1e-15), 699.9, 5000.0, 3.0]
    kind = np.arange(60) % len(periods)
    made = [run_launch(kind, 3, 2, policy, np.arange(kind.size), lambda k, n: periods[k],
                       lambda u: (latency, 0.0, 0.0, 0.0), Ports(l2=None, hbm=None), samples=samples)
            for samples in (True, False)]
    for name in ("start", "end", "core", "slot", "bound"):
        assert np.array_equal(getattr(made[0], name), getattr(made[1], name)), name
    assert {0, 3} <= set(made[1].bound.tolist())


@pytest.mark.parametrize("hw, kwargs", [
    ("H100-SXM", dict(seq_len=4096, kernel="fa3", dispatch="waves")),
    ("H100-SXM", dict(seq_len=2048, dispatch="persistent", batch=2)),
    ("Ascend-910B", dict(seq_len=2048, kernel="ascend-pto")),
    ("H100-SXM", dict(seq_len=16384, decode=True, queries=1, batch=8, kernel="splitkv-decode")),
])
def test_the_lazy_event_loop_makes_every_unit_as_the_eager_one(hw, kwargs, monkeypatch):
    """Without samples the loop replays units lazily; with them it makes every event eagerly: same units."""
    import vfasim.chip.run as chip_run
    from vfasim.chip import fluid

    made = []
    for samples in (True, False):
        monkeypatch.setattr(chip_run, "run_launch", lambda *a, **k: made.append(
            fluid.run_launch(*a, **{**k, "samples": samples})) or made[-1])
        vfasim.run(hw, "fa2", heads=16, kv_heads=4, **kwargs)
    eager, lazy = made[:len(made) // 2], made[len(made) // 2:]
    for e, la in zip(eager, lazy):
        for name in ("start", "end", "core", "slot", "bound", "hbm_bytes", "l2_hit_bytes"):
            assert np.array_equal(getattr(e, name), getattr(la, name)), name
    assert eager[0].samples and not lazy[0].samples


def test_a_kernel_in_phase_makes_its_matmuls_and_exps_take_turns_at_its_own_exp_share():
    # the triton kernel runs its softmax in phase (exp_beside_mma false) with its exps holding the FP32 stream for half
    # their cycles; its core carries both, and a chip run of two CTAs per SM is slower in phase than with exps beside
    # the other CTA's matmuls, while a core whose exp has its own stream ignores the share
    from vfasim.chip.run import tuned_core
    from vfasim.hw.chip import KernelTuning

    triton = load_kernel("triton")
    assert not triton.exp_beside_mma and triton.exp_issue_share == 0.5
    h100 = load_hw("H100-SXM")
    core = tuned_core(h100, KernelTuning(), triton)
    assert core.take_turns == ("tensor", "exp") and core.pipelines["exp"].issue_share == 0.5
    assert h100.pipelines["exp"].issue_share == 1.0 and h100.take_turns == ()  # the chip itself is unchanged
    b200 = load_hw("B200")
    assert tuned_core(b200, KernelTuning(), triton).pipelines["exp"].issue_share == 1.0  # its exp streams alone
    kw = dict(seq_len=4096, head_dim=64, heads=66, batch=1, numerics_heads=0)
    beside = triton.model_copy(update={"exp_beside_mma": True})
    in_phase = vfasim.run("H100-SXM", "fa2", kernel=triton, **kw)
    overlapped = vfasim.run("H100-SXM", "fa2", kernel=beside, **kw)
    assert in_phase.chip["streams_per_core"] == 2  # two CTAs share each SM
    assert in_phase.latency_cycles > overlapped.latency_cycles
    util = in_phase.chip["utilization"]  # the roles taking turns are reported, and can bound the run, as one
    assert util["tensor+exp"] == pytest.approx(util["tensor"] + util["exp"])
    assert "tensor+exp" not in overlapped.chip["utilization"]


def test_take_turns_names_roles_the_core_has():
    doc = load_hw("H100-SXM").model_dump()
    for turns, why in ((["tensor"], "two or more distinct roles"), (["tensor", "tensor"], "two or more distinct"),
                       (["tensor", "memory", "exp"], None)):
        doc["take_turns"] = turns
        if why is None:
            assert HardwareConfig.model_validate(doc).take_turns == ("tensor", "memory", "exp")
        else:
            with pytest.raises(ValueError, match=why):
                HardwareConfig.model_validate(doc)
    del doc["pipelines"]["mover"]
    doc["op_map"] = {k: ("fused" if v == "mover" else v) for k, v in doc["op_map"].items()}
    doc["take_turns"] = ["tensor", "memory"]
    with pytest.raises(ValueError, match="role 'memory', which no pipeline has"):
        HardwareConfig.model_validate(doc)
    doc["take_turns"], doc["turns_within"] = [], "row"  # a scope for turns no role takes would do nothing
    with pytest.raises(ValueError, match="take_turns is empty"):
        HardwareConfig.model_validate(doc)


def test_a_loop_that_is_not_pipelined_runs_each_stream_in_program_order_paying_the_l2_latency_per_load():
    # the triton kernel's VSA loop is compiled without software pipelining: its timing core makes every role take
    # turns within a stream (beside the other streams), and its loads go through the core's load port in issue order
    # at what one core's loads get from the L2 in such a loop (measured on the H100: l2.unpipelined_bytes_per_cycle; a
    # chip without that figure: the core's share of the L2 bandwidth), each load's data arriving the L2 latency after
    # its bytes crossed; VSA runs slower than on a pipelined loop, FA2 and VFA (no block test) exactly as fast
    from vfasim.chip.run import in_order_core

    triton = load_kernel("triton")
    assert not triton.skip_loop_pipelined
    h100 = load_hw("H100-SXM")
    core = in_order_core(h100, h100.chip, h100.clock_ghz)
    mover = core.pipelines["mover"]
    measured = h100.chip.l2.unpipelined_bytes_per_cycle
    assert measured is not None
    assert (mover.units, mover.units_by) == (1, "issue") and mover.throughput["bytes"] == pytest.approx(measured)
    unmeasured = h100.chip.model_copy(update={"l2": h100.chip.l2.model_copy(update={
        "unpipelined_bytes_per_cycle": None})})
    share = h100.chip.l2.bandwidth_gb_per_s / (h100.chip.cores * h100.clock_ghz)
    assert in_order_core(h100, unmeasured, h100.clock_ghz).pipelines["mover"].throughput["bytes"] == \
        pytest.approx(share)
    assert mover.startup_cycles == h100.pipelines["mover"].startup_cycles
    assert core.load_latency_cycles == h100.chip.l2.latency_cycles
    assert set(core.take_turns) == {"tensor", "vector", "exp", "memory"} and core.turns_within == "row"
    from vfasim.chip.units import UnitTiming
    trace = trace_only(Tiling(512, 512, 128, 128, 64, False, 1, 1), policy_for("fa2"), Precision())
    rows = (np.arange(len(trace)),)
    one = UnitTiming(core, 1).timeline(trace, rows)[1].total_cycles
    two = UnitTiming(core, 1).timeline(trace, rows, copies=2)[1].total_cycles
    no_wait = UnitTiming(core.model_copy(update={"load_latency_cycles": 0}), 1).timeline(trace, rows)[1].total_cycles
    assert no_wait < one < two < 2 * one  # each load waits its latency; a second stream's loads move meanwhile
    no_l2 = h100.chip.model_copy(update={"l2": None})
    with pytest.raises(VfasimError, match="gives no l2"):
        in_order_core(h100, no_l2, h100.clock_ghz)
    pipelined = triton.model_copy(update={"skip_loop_pipelined": True})
    kw = dict(seq_len=2048, head_dim=128, heads=8, batch=1, numerics_heads=0)
    for algo in ("fa2", "vfa"):
        assert vfasim.run("H100-SXM", algo, kernel=triton, **kw).latency_cycles == \
            vfasim.run("H100-SXM", algo, kernel=pipelined, **kw).latency_cycles
    serial = vfasim.run("H100-SXM", "vsa", kernel=triton, workload="random", **kw)
    overlapped = vfasim.run("H100-SXM", "vsa", kernel=pipelined, workload="random", **kw)
    assert serial.latency_cycles > 1.2 * overlapped.latency_cycles


def test_a_loop_that_is_not_pipelined_waits_for_hbm_where_one_unit_alone_reads_a_kv_head(efficient_unfloored):
    # in decode with one unit per K/V head (no query blocks or GQA heads of its own to read the tiles first), each
    # load of a loop that is not pipelined waits out the HBM latency; with GQA heads unpacked (4 units per K/V head)
    # the L2's, as in prefill
    from vfasim.chip.run import in_order_core

    h100 = load_hw("H100-SXM")
    base = h100.pipelines["mover"].startup_cycles
    assert in_order_core(h100, h100.chip, h100.clock_ghz, from_hbm=True).load_latency_cycles == \
        h100.chip.hbm.latency_cycles > h100.chip.l2.latency_cycles
    assert in_order_core(h100, h100.chip, h100.clock_ghz, from_hbm=True).pipelines["mover"].startup_cycles == base
    efficient = efficient_unfloored  # loop_pipelined: false, no GQA packing; the tile's measured block cycles
    # (block_cycles) would bind both launches here
    kw = dict(seq_len=8192, head_dim=64, batch=1, decode=True, kernel=efficient, numerics_heads=0)
    alone = vfasim.run("H100-SXM", "fa2", heads=8, kv_heads=8, **kw)
    shared = vfasim.run("H100-SXM", "fa2", heads=8, kv_heads=2, **kw)  # the same 8 units, 4 reading each K/V head
    blocks = 8192 // 64
    lat = h100.chip.hbm.latency_cycles - h100.chip.l2.latency_cycles
    assert alone.latency_cycles - shared.latency_cycles == pytest.approx(2 * blocks * lat, rel=0.05)


def test_the_triton_decode_tile_runs_in_program_order_with_its_measured_latencies():
    # the 16-row decode tile spreads each row over 4 warps: its ops, copies included, run in program order per stream
    # (each waits for the previous one's result) with the latencies measured on an H100, so a decode step's time per key
    # block is a dependent chain; VFA, which drops the row max and the rescale from it, is faster at head dim 64
    from vfasim.chip.run import tile_core

    triton, h100 = load_kernel("triton"), load_hw("H100-SXM")
    rule = triton.decode.tiles[0]
    core = tile_core(h100, rule)
    assert rule.program_order and core.take_turns == ("tensor", "vector", "exp", "memory")
    assert core.turns_within == "row"
    assert core.result_latency == rule.result_latency and rule.result_latency["rowmax"] > 200
    assert tile_core(h100, triton.tiles[0]) is h100  # a prefill tile adds nothing
    kw = dict(head_dim=64, causal=False, kernel=triton, heads=132, kv_heads=1, decode=True, queries=16,
              numerics_heads=0)

    def per_block(algo: str) -> float:
        a, b = (vfasim.run("H100-SXM", algo, seq_len=n, **kw).latency_cycles for n in (2048, 4096))
        return (b - a) / 32  # 32 more key blocks of 64
    fa2, vfa = per_block("fa2"), per_block("vfa")
    chain = sum(rule.result_latency[k] for k in ("qk_matmul", "rowmax", "rowsum", "cast_p", "pv_matmul"))
    assert fa2 >= chain and fa2 / vfa > 1.1


def test_a_kernel_that_rereads_q_moves_its_q_tile_with_every_k_load():
    from vfasim.runner.chip_run import _q_with_every_key_block

    trace = trace_only(Tiling(128, 256, 64, 64, 64, False, 1, 1), "fa2")  # 2 query blocks x 4 key blocks
    after = _q_with_every_key_block(trace)
    kind = trace.kind
    q, k = kind == KIND_CODE["load_q"], kind == KIND_CODE["load_k"]
    q_bytes = 64 * 64 * Precision().bytes_per("q")
    assert set(trace.work[q].tolist()) == {q_bytes}
    assert int(after.work[k].sum() - trace.work[k].sum()) == 8 * q_bytes  # every K load of both rows
    assert np.array_equal(after.work[~k], trace.work[~k])
    efficient = load_kernel("efficient")
    assert efficient.q_reread and efficient.p_in == "shared" and not load_kernel("fa2").q_reread


@pytest.mark.parametrize("share", [1.0, 0.5])
def test_a_units_ops_priced_alone_cost_what_they_cost_in_the_whole_trace(share):
    """A chip prices each unit kind's streams alone (``op_cycles`` with ``ops``): every op as in the whole trace, a
    partly issuing pipeline's (``issue_share``) included; a whole row, and a decode split's ops (not one range)."""
    hw = load_hw("H100-SXM")
    vector = hw.pipelines["vector"]  # fast: a tile's other ops on the stream take less than its exp
    hw = hw.model_copy(update={"pipelines": {
        **hw.pipelines, "exp": hw.pipelines["exp"].model_copy(update={"issue_share": share}),
        "vector": vector.model_copy(update={"throughput": {d: 10 * r for d, r in vector.throughput.items()}})}})
    trace = trace_only(Tiling(512, 512, 64, 64, 64, True, 2, 1), policy_for("vfa"), Precision())
    pipe, cycles = op_cycles(trace, hw)
    bounds = np.searchsorted(trace.row, np.arange(int(trace.row.max()) + 2))
    for r in range(bounds.size - 1):
        for ops in (np.arange(bounds[r], bounds[r + 1], dtype=np.int32), _split_ops(trace, bounds[r], bounds[r + 1],
                                                                                     1, 3)):
            alone = op_cycles(trace, hw, ops)
            assert alone[0].tolist() == pipe[ops].tolist() and alone[1].tolist() == cycles[ops].tolist()


def test_a_chip_runs_latency_splits_by_launch_into_its_kernels_and_their_launch_overheads():
    # FA2's split-K/V decode: the split kernel, its combine and two launches; the sum is the latency
    split = vfasim.run("H200", "fa2", kernel="fa2", seq_len=8192, heads=32, kv_heads=8, decode=True, queries=1)
    parts = split.chip["launch_us"]
    assert split.chip["splits"] > 1 and parts["combine_kernel"] > 0 and parts["prepass_kernel"] == 0
    assert sum(parts.values()) == pytest.approx(split.chip["latency_us"], rel=1e-12)
    assert parts["launch_overheads"] == pytest.approx(3.52 + 1.43, rel=1e-3)  # the first launch, then a further one
    from vfasim.report.chip_text import format_chip_run

    assert "by launch attention kernel" in format_chip_run(split.to_dict()) and "combine kernel" in \
        format_chip_run(split.to_dict())
    one = vfasim.run("H200", "fa2", kernel="fa2", seq_len=2048, heads=16, causal=True)
    assert one.chip["launch_us"]["combine_kernel"] == 0 and one.chip["splits"] == 1
    assert one.chip["launch_us"]["launch_overheads"] == pytest.approx(3.52, rel=1e-3)


def test_the_l2s_dirty_lines_cost_a_memory_bound_launch_their_write_back(tmp_path):
    # l2.dirty_bytes (validation/l2dirty_h200_2026_11): the first reads from the HBM evict dirty lines; a launch
    # that keeps the HBM port busy waits their write-back at the port
    clean = tmp_path / "clean.yaml"
    clean.write_text("base: H200\nname: clean-l2\nchip:\n  l2:\n    dirty_bytes: null  # a clean L2 (test)\n"
                     "    dirty_writeback_per_byte: null  # a clean L2 (test)\n")
    shape = dict(seq_len=32768, heads=32, kv_heads=8, batch=8, decode=True, queries=1)
    dirty, plain = vfasim.run("H200", "fa2", kernel="cudnn", **shape), vfasim.run(clean, "fa2", kernel="cudnn", **shape)
    l2 = load_hw("H200").chip.l2
    hw = load_hw("H200")
    port = hw.chip.bytes_per_cycle(hw.chip.hbm, hw.clock_ghz)
    written = min(l2.dirty_writeback_per_byte * dirty.chip["hbm_bytes"], l2.dirty_bytes)
    assert written == l2.dirty_bytes  # 1 GB of K/V read: every dirty line goes
    assert plain.chip["writeback_us"] == 0 and 0 < dirty.chip["writeback_us"] <= written / port / 1830
    assert dirty.chip["writeback_us"] > 0.8 * written / port / 1830  # memory-bound: nearly all of it shows
    assert dirty.latency_cycles - plain.latency_cycles == pytest.approx(dirty.chip["writeback_us"] * 1830, abs=2)
    with pytest.raises(ValueError, match="go together"):
        L2Spec(bandwidth_gb_per_s=1.0, latency_cycles=1, capacity_bytes=1, dirty_bytes=1)


def test_the_attention_kernel_called_alone_pays_a_first_launch_and_every_dirty_line():
    # VFA with its pre-pass: the attention kernel runs second (a further launch, the pre-pass took some dirty lines);
    # timed alone, as the campaigns time VFA's kernel, it is a call's first launch and meets the whole dirty L2
    shape = dict(seq_len=2048, heads=32, kv_heads=8, batch=2, causal=False, numerics_heads=0)
    vfa = vfasim.run("H200", "vfa", kernel="triton", **shape)
    fa2 = vfasim.run("H200", "fa2", kernel="triton", **shape)
    hw = load_hw("H200")
    after = vfa.latency_cycles - vfa.chip["prepass_cycles"]
    launch_gap = (hw.chip.launch_overhead_us - hw.chip.next_launch_us) * hw.clock_ghz * 1e3
    assert vfa.chip["prepass_cycles"] > 0 and fa2.chip["prepass_cycles"] == 0
    assert after + launch_gap - 2 <= vfa.chip["attention_call_cycles"]  # at least the first launch's overhead
    assert vfa.chip["attention_call_cycles"] <= after + launch_gap + hw.chip.l2.dirty_bytes / hw.chip.bytes_per_cycle(
        hw.chip.hbm, hw.clock_ghz) + 2  # and at most every dirty line's write-back more
    assert fa2.chip["attention_call_cycles"] == fa2.latency_cycles  # no pre-pass: the call itself
