"""Kernels as data: the shipped descriptions load, fit every chip they target, and a changed field shows."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

import vfasim
from vfasim.cli import main
from vfasim.errors import VfasimError
from vfasim.hw import builtin_names, load_hw
from vfasim.kernel import GridSplit, Kernel, WaveSplit, builtin_kernel_names, load_kernel

KERNELS = Path(__file__).resolve().parents[1] / "kernels"
SHIPPED = ("ascend-pto", "cudnn", "efficient", "fa2", "fa3", "fa4", "flex", "splitkv-decode", "triton")


def test_the_shipped_kernels_are_listed():
    assert builtin_kernel_names() == sorted(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_number_in_a_kernel_file_says_where_it_comes_from(name):
    for line in (KERNELS / f"{name}.yaml").read_text().splitlines():
        bare, _, comment = line.partition("#")
        value = re.fullmatch(r"\s*([a-z_]+):\s*(-?[0-9.]+)\s*", bare)
        if value:
            assert re.match(r"\s*(source|assumed, because)", comment), f"{name}.yaml, no source: {line.strip()}"
        if "{" in bare:
            assert "source:" in bare, f"{name}.yaml: a tile rule without its source: {line.strip()}"


def targets(name: str) -> list[str]:
    k = load_kernel(name)
    return [c for c in builtin_names() if load_hw(c).chip is not None and k.runs_on(c, builtin_names()) and
            ("*" not in k.targets or c in ("H100-SXM", "B200"))]


@pytest.mark.parametrize("name, chip, head_dim, causal",
                         [(n, c, d, causal) for n in SHIPPED for c in targets(n)
                          for d in (64, 128, 256) if d <= max(r.head_dim_max for r in load_kernel(n).tiles)
                          for causal in (False, True)])
def test_every_kernel_runs_with_its_own_tiles_on_every_chip_it_targets(name, chip, head_dim, causal):
    r = vfasim.run(chip, "fa2", kernel=name, seq_len=512, head_dim=head_dim, heads=2, causal=causal)
    k = load_kernel(name)
    rule = k.tile(head_dim, "16bit", causal, decode=r.chip["splits"] > 1)  # a split launch runs the split tiles
    assert r.shape["block_k"] == rule.block_k and r.shape["block_q"] == rule.block_q // k.streams_per_cta(rule)
    assert r.options["kernel"] == name and r.latency_cycles > 0


@pytest.mark.parametrize("name", [n for n in SHIPPED if load_kernel(n).decode is not None])
def test_kernels_with_a_decode_path_run_decode(name):
    chip = targets(name)[0]
    r = vfasim.run(chip, "fa2", kernel=name, seq_len=4096, heads=8, kv_heads=2, batch=2, decode=True)
    k = load_kernel(name)
    assert k.decode is not None and r.shape["block_k"] == k.tile(128, "16bit", False, True).block_k
    if isinstance(k.decode.split_kv, WaveSplit):
        # 2 x 2 K/V heads of one 64-row block each, 2 slots per SM, 32 key blocks: efficiency 4n/(2 x SMs) is best
        # at n = 32 on every chip of 64 or more SMs, and no eligible n below reaches 85% of it
        assert r.chip["splits"] == 32
    elif isinstance(k.decode.split_kv, GridSplit):
        # 2 x 2 K/V heads of one 16-row block each (a GQA group packed), 32 key blocks: 256 // 4 = 64 splits, at most
        # the key blocks, a power of two
        assert r.chip["splits"] == 32 and r.chip["units"] == 4 * 32
    else:
        assert r.chip["splits"] > 1 if k.decode.split_kv == "fill_slots" else r.chip["splits"] == 1


def test_the_wave_efficiency_rule_reproduces_its_sources_example():
    # flash_api.cpp: "if we have batch * n_heads = 48 and we have 108 SMs, having 2 splits (efficiency = 0.89) is
    # better than having 3 splits (efficiency = 0.67)"
    rule = WaveSplit(rule="wave_efficiency", block_q=64, slots_per_core=1, no_split_fill=0.8, efficiency_ratio=0.85,
                     max_splits=128, prefill=True, source="test")
    assert rule.splits(48, 1, 108, 64) == 2
    assert rule.splits(87, 1, 108, 64) == 1  # 87 >= 0.8 x 108 fills the chip
    assert rule.splits(1, 1, 108, 64) == 64  # one row: as many splits as key blocks (eligible, at most 108)


def test_a_few_query_decode_without_a_split_runs_the_main_kernel_with_whole_tiles():
    # FA2 with 4 queries and 8 x 32 heads fills the chip: one split, so PyTorch runs its main kernel (128 x 64 at
    # head dim 128), whose MMAs compute all 128 rows of the tile although only 4 are valid
    shape = dict(kernel="fa2", seq_len=8192, heads=32, kv_heads=8, batch=8, decode=True, causal=False)
    four = vfasim.run("H100-SXM", "fa2", queries=4, **shape)
    full = vfasim.run("H100-SXM", "fa2", queries=128, **shape)
    assert four.chip["splits"] == 1 and four.shape["block_k"] == 64
    assert four.chip["flops"] * 32 == full.chip["flops"]  # FLOPs count valid rows only
    assert four.ops["qk_matmul"] == full.ops["qk_matmul"]  # the tensor pipe does the whole tile's work
    assert four.chip["hbm_bytes"] < full.chip["hbm_bytes"]  # Q loads and O stores move the valid rows only


def test_a_kernel_without_a_decode_path_refuses_decode(capsys):
    assert main(["run", "--hw", "B200", "--algo", "fa2", "--kernel", "fa4", "--decode", "--seq-len", "1024"]) == 2
    assert "kernel fa4 has no decode path" in capsys.readouterr().err


def test_fa3_at_head_dim_128_runs_with_its_default_blocks():
    r = vfasim.run("H100-SXM", "fa2", kernel="fa3", seq_len=2048, heads=4, causal=False)
    assert (r.shape["block_q"], r.shape["block_k"]) == (64, 176) and r.chip["streams_per_core"] == 2


def test_a_copied_kernel_with_one_field_changed_changes_the_result(tmp_path):
    doc = yaml.safe_load((KERNELS / "fa2.yaml").read_text())
    doc["name"] = "fa2-deep"
    doc["kv_stages"] = 2
    doc["score_buffers"] = 2
    path = tmp_path / "fa2-deep.yaml"
    path.write_text(yaml.safe_dump(doc))
    shape = dict(seq_len=4096, heads=16, batch=2, causal=False)
    base = vfasim.run("H100-SXM", "fa2", kernel="fa2", **shape)
    deep = vfasim.run("H100-SXM", "fa2", kernel=path, **shape)
    assert deep.options["kernel"] == "fa2-deep" and deep.latency_cycles != base.latency_cycles
    assert deep.options["kernel_digest"] != base.options["kernel_digest"]


def test_kernel_style_is_an_alias_of_kernel():
    a = vfasim.run("H100-SXM", "fa2", kernel_style="fa3", seq_len=1024, heads=4)
    b = vfasim.run("H100-SXM", "fa2", kernel="fa3", seq_len=1024, heads=4)
    assert a.latency_cycles == b.latency_cycles and a.options == b.options


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(warps_per_cta=4), "warps_per_cta: unknown field"),
    (lambda d: d["tiles"][0].update(block_q=-1), "tiles.0.block_q: Input should be greater than 0"),
    (lambda d: d.update(stream_rows=96), "is not a multiple of stream_rows 96"),
    (lambda d: d.update(causal_masking="everything"), "causal_masking: Input should be 'diagonal_blocks'"),
    (lambda d: d.pop("source"), "source: Field required"),
    (lambda d: d["tiles"][0].update(result_latency={"rowmaks": 9}), "result_latency names unknown op kind 'rowmaks'"),
])
def test_a_bad_kernel_file_is_one_line_naming_the_field(tmp_path, capsys, edit, message):
    doc = yaml.safe_load((KERNELS / "fa3.yaml").read_text())
    edit(doc)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(VfasimError, match=re.escape(message)):
        load_kernel(path)
    assert main(["run", "--hw", "H100-SXM", "--algo", "fa2", "--kernel", str(path), "--seq-len", "512"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: kernel ") and err.count("\n") == 1


def test_kernel_list_and_show(capsys):
    assert main(["kernel", "list"]) == 0
    assert capsys.readouterr().out.split() == sorted(SHIPPED)
    assert main(["kernel", "show", "fa3"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["name"] == "fa3" and shown["stream_rows"] == 64


def test_chip_tuning_names_only_kernels_that_target_the_chip():
    for chip in builtin_names():
        cfg = load_hw(chip).chip
        for name in (cfg.kernel_tuning if cfg is not None else {}):
            assert load_kernel(name).runs_on(chip, builtin_names()), (chip, name)


@pytest.mark.parametrize("option", ["--hw", "--kernel"])
def test_a_device_or_pipe_given_as_a_config_is_refused_without_reading_it(option, tmp_path, capsys):
    import os

    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)  # reading it would block forever
    args = ["run", "--algo", "fa2", "--seq-len", "512"] + (["--hw", "H100-SXM"] if option == "--kernel" else [])
    for path in (fifo, "/dev/zero"):
        assert main([*args, option, str(path)]) == 2
        assert "not a regular file, not a YAML file" in capsys.readouterr().err


def test_main_tiles_at_one_split_need_a_rule_that_can_leave_one_split():
    doc = yaml.safe_load((KERNELS / "fa3.yaml").read_text())
    doc["decode"]["one_split_tiles"] = "main"  # fa3 fills every slot: the field could never apply
    with pytest.raises(ValueError, match="one_split_tiles: main needs a wave_efficiency"):
        Kernel.model_validate(doc)


def test_a_table_kernel_is_measured_as_or_predicted_never_both():
    doc = yaml.safe_load((KERNELS / "triton.yaml").read_text())
    doc["predicts"] = ["triton_fa2"]
    with pytest.raises(ValueError, match="table kernel 'triton_fa2' is in both measured_as and predicts"):
        Kernel.model_validate(doc)
    from vfasim.validate import kernel_for

    assert kernel_for("triton").name == "triton" and kernel_for("cudnn").name == "cudnn"


def test_the_prepass_is_priced_by_its_counted_instructions_and_issue_rate():
    """VFA's key-summary launch: counted warp instructions per element at the measured issue rate, on the cores its
    programs occupy; twice the instructions cost about twice the compute; a rate needs a prepass to price."""
    doc = yaml.safe_load((KERNELS / "triton.yaml").read_text())
    k = Kernel.model_validate(doc)
    assert k.prepass_rate(128, "16bit", 64).block_k == 64 and k.prepass_rate(128, "16bit", 128).block_k is None
    assert k.prepass_rate(128, "8bit", 128).formats == ["8bit"]
    shape = dict(seq_len=8192, heads=32, kv_heads=8, head_dim=128, batch=4, causal=False, numerics_heads=0)
    base = vfasim.run("H100-SXM", "vfa", kernel=k, **shape).chip["prepass_cycles"]
    for rate in doc["prepass_rates"]:
        rate["warp_instructions_per_element"] *= 2
    double = vfasim.run("H100-SXM", "vfa", kernel=Kernel.model_validate(doc), **shape).chip["prepass_cycles"]
    hw = load_hw("H100-SXM")
    launch = hw.chip.launch_overhead_us * hw.clock_ghz * 1e3
    rule = k.prepass_rate(128, "16bit", 128)
    program = rule.program_us * hw.clock_ghz * 1e3  # a core's first program, measured
    elements = 4 * 8 * 8192 * 128
    compute = elements * 0.324 / (rule.instructions_per_cycle * 132)  # 2,048 programs cover all 132 SMs
    each = -(-4 * 8 * 64 // 132)  # programs a core runs: its first alone, the others at the counted rate
    resident = 132 * rule.programs_per_core  # on every SM at the start, each loading its 128 x 128 block
    port = hw.chip.bytes_per_cycle(hw.chip.hbm, hw.clock_ghz)
    burst = (resident - 1) * 128 * 128 * 2 / port
    read = elements * 2  # K, once

    def writeback(work: float) -> float:  # the call's first launch meets the L2's dirty lines (l2.dirty_bytes)
        l2 = hw.chip.l2
        return min(l2.dirty_writeback_per_byte * read, l2.dirty_bytes) / port * min(1.0, read / (port * work))

    assert compute > read / port  # compute-bound: the write-backs take the port's share the reads leave them
    assert base == int(np.ceil(launch + program + burst + compute * (each - 1) / each + writeback(compute)))
    assert double == int(np.ceil(launch + program + burst + 2 * compute * (each - 1) / each
                                 + writeback(2 * compute)))
    for rate in doc["prepass_rates"]:
        del rate["program_us"]  # no measured program: one memory latency and the whole work
    with pytest.raises(ValueError, match="programs_per_core prices the first wave"):
        Kernel.model_validate(doc)  # a first wave's reads with no program to price them beyond: refused
    for rate in doc["prepass_rates"]:
        del rate["programs_per_core"]
    bare = vfasim.run("H100-SXM", "vfa", kernel=Kernel.model_validate(doc), **shape).chip["prepass_cycles"]
    assert bare == int(np.ceil(launch + hw.chip.hbm.latency_cycles + 2 * compute + writeback(2 * compute)))
    doc["minit"] = "inline"
    with pytest.raises(ValueError, match="prepass_rates needs minit: prepass"):
        Kernel.model_validate(doc)


def test_a_head_dim_computes_at_the_next_compiled_one_with_its_real_columns_moved():
    """FA2 runs head dim 80 in its hdim96 kernel: the MMAs cost what 96's do, the loads move 80 columns, the
    FLOPs counted are 80's; unsorted head_dims are refused."""
    fa2 = load_kernel("fa2")
    assert fa2.compute_head_dim(80) == 96 and fa2.compute_head_dim(96) == 96 and fa2.compute_head_dim(300) == 300
    shape = dict(seq_len=2048, heads=16, kv_heads=4, batch=2, causal=True, numerics_heads=0)
    d80 = vfasim.run("H100-SXM", "fa2", kernel="fa2", head_dim=80, **shape)
    d96 = vfasim.run("H100-SXM", "fa2", kernel="fa2", head_dim=96, **shape)
    assert d80.pipelines["tensor"]["busy_cycles"] == d96.pipelines["tensor"]["busy_cycles"]
    assert d80.chip["hbm_bytes"] < d96.chip["hbm_bytes"] and d80.chip["flops"] < d96.chip["flops"]
    doc = yaml.safe_load((KERNELS / "fa2.yaml").read_text())
    doc["head_dims"] = [64, 32]
    with pytest.raises(ValueError, match="ascending order"):
        Kernel.model_validate(doc)


def test_a_tiles_measured_cta_cost_applies_where_no_fitted_overhead_replaces_it():
    # the triton tiles carry their measured per-CTA cycles; a chip with no fitted unit_overhead_cycles for the kernel
    # (tier 1, or a chip never fitted) adds them to every CTA, and a fitted figure replaces them
    from vfasim.hw.chip import KernelTuning
    from vfasim.validate import spec_only, with_tuning

    triton = load_kernel("triton")
    rule = triton.tile(128, "16bit", False)
    assert rule.cta_cycles is not None and rule.cta_cycles > 0
    assert triton.tile(128, "8bit", False).cta_cycles != rule.cta_cycles  # measured per format class
    assert KernelTuning().overhead(rule.cta_cycles) == rule.cta_cycles
    assert KernelTuning(unit_overhead_cycles=0).overhead(rule.cta_cycles) == 0
    assert KernelTuning(cta_cycles_scale=0.5).overhead(rule.cta_cycles) == round(rule.cta_cycles / 2)
    assert KernelTuning(cta_cycles_scale=0.5).overhead(None) == 0  # nothing measured: nothing to scale
    with pytest.raises(ValueError, match="not both"):
        KernelTuning(unit_overhead_cycles=10, cta_cycles_scale=0.5)
    h100 = load_hw("H100-SXM")
    tier1 = spec_only(h100)
    kw = dict(seq_len=1024, head_dim=128, heads=66, batch=1, causal=False, kernel=triton, numerics_heads=0)
    runs = {name: vfasim.run(cfg, "fa2", **kw) for name, cfg in (
        ("measured", tier1), ("zero", with_tuning(tier1, "triton", unit_overhead_cycles=0)),
        ("tuned", with_tuning(tier1, "triton", unit_overhead_cycles=rule.cta_cycles)),
        ("scaled", with_tuning(tier1, "triton", cta_cycles_scale=0.5)))}
    measured, none, fitted, scaled = (runs[n].latency_cycles for n in ("measured", "zero", "tuned", "scaled"))
    assert measured == fitted > scaled > none  # the same cycles, whichever way they arrive; 4 waves of CTAs pay them
    assert [(runs[n].chip["unit_overhead_cycles"], runs[n].chip["unit_overhead_from"]) for n in runs] == [
        (rule.cta_cycles, "measured"), (0, "tuning"), (rule.cta_cycles, "tuning"),
        (round(rule.cta_cycles / 2), "scaled")]  # each run says what it paid and why
    unmeasured = triton.model_copy(update={"tiles": [t.model_copy(update={"cta_cycles": None}) for t in triton.tiles]})
    flat = with_tuning(h100, "triton", unit_overhead_cycles=7000)  # replaces the shipped scale
    assert vfasim.run(flat, "fa2", **kw).latency_cycles == vfasim.run(
        flat, "fa2", **(kw | {"kernel": unmeasured})).latency_cycles  # a flat figure stands whatever the tile


def test_a_negative_cta_cost_is_refused_in_one_line():
    raw = yaml.safe_load((KERNELS / "triton.yaml").read_text())
    raw["tiles"][0]["cta_cycles"] = -1
    with pytest.raises(Exception, match="cta_cycles"):
        Kernel.model_validate(raw)


def test_a_loop_that_is_not_pipelined_waits_for_each_blocks_loads(efficient_unfloored):
    # efficient's key loop runs each block's matmuls as their own mainloops (loop_pipelined: false): the same kernel
    # with a pipelined loop is faster, as its loads then run ahead of the blocks in hand (its tiles' measured block
    # cycles left out: they would floor both)
    efficient = efficient_unfloored
    assert not efficient.loop_pipelined and load_kernel("fa2").loop_pipelined
    kw = dict(seq_len=2048, head_dim=128, heads=16, batch=4, causal=False, numerics_heads=0)
    serial = vfasim.run("H100-SXM", "fa2", kernel=efficient, **kw).latency_cycles
    piped = vfasim.run("H100-SXM", "fa2", kernel=efficient.model_copy(update={"loop_pipelined": True}),
                       **kw).latency_cycles
    assert serial > 1.1 * piped


def test_flex_takes_inductors_tile_for_the_head_dim_itself_and_computes_at_the_padded_one():
    # Inductor's H100 table names head dims 64, 128 and 256; any other takes FlexConfig(64, 64, 3, 4) while the
    # template computes on the head dim rounded up to a power of two (96 -> 128 columns)
    flex = load_kernel("flex")
    tiles = {d: (r.block_q, r.block_k, r.warps) for d in (32, 64, 96, 128, 192, 256)
             for r in [flex.tile(d, "16bit", False)]}
    assert tiles == {32: (64, 64, 4), 64: (128, 128, 4), 96: (64, 64, 4), 128: (128, 64, 8), 192: (64, 64, 4),
                     256: (64, 32, 4)}
    assert flex.compute_head_dim(96) == 128 and flex.compute_head_dim(64) == 64
    r = vfasim.run("H100-SXM", "fa2", kernel="flex", seq_len=1024, head_dim=96, heads=8, numerics_heads=0)
    assert (r.shape["block_q"], r.shape["block_k"]) == (64, 64)


def test_a_tile_may_say_its_loop_is_not_pipelined():
    # flex's decode tile (Triton num_stages 1) runs a loop that is not software-pipelined, the kernel's prefill loop
    # is: the decode tile's loads wait for the block in hand, so the same tile said pipelined is faster
    flex = load_kernel("flex")
    assert flex.loop_pipelined and flex.decode is not None
    assert all(rule.loop_pipelined is False for rule in flex.decode.tiles)
    kw = dict(seq_len=8192, head_dim=128, heads=32, kv_heads=8, batch=8, decode=True, numerics_heads=0)
    serial = vfasim.run("H100-SXM", "fa2", kernel=flex, **kw).latency_cycles
    tiles = [rule.model_copy(update={"loop_pipelined": None}) for rule in flex.decode.tiles]
    piped = flex.model_copy(update={"decode": flex.decode.model_copy(update={"tiles": tiles})})
    assert serial > 1.2 * vfasim.run("H100-SXM", "fa2", kernel=piped, **kw).latency_cycles


def test_a_tiles_shared_bytes_set_its_occupancy():
    from vfasim.chip.occupancy import TileShape, occupancy

    efficient = load_kernel("efficient")
    rule = efficient.tile(256, "16bit", False)
    assert rule.shared_bytes == 81920 and rule.block_q == 32
    limits = load_hw("H100-SXM").chip.core_limits  # type: ignore[union-attr]
    shape = TileShape(rule.block_q, rule.block_k, 256, 2, 2, 2)
    streamed = occupancy(efficient, rule, shape, limits)
    whole = occupancy(efficient, rule.model_copy(update={"shared_bytes": None}), shape, limits)
    assert (streamed, whole) == (2, 1)  # 2 x 80 KiB fit an SM's 228 KiB; whole K and V tiles of 128 KiB fit once


def test_a_fused_op_costs_nothing_and_an_unknown_one_is_refused():
    # triton folds the score scale into the FFMA of the max subtraction (exp2(qk * scale - m)): the same kernel paying
    # the scale as a pass of its own is slower; a kind no trace has is refused when the description is read
    triton = load_kernel("triton")
    assert triton.fused_ops == ["scale"]
    kw = dict(seq_len=2048, head_dim=128, heads=16, batch=2, causal=False, numerics_heads=0)
    folded = vfasim.run("H100-SXM", "fa2", kernel=triton, **kw).latency_cycles
    paid = vfasim.run("H100-SXM", "fa2", kernel=triton.model_copy(update={"fused_ops": []}), **kw).latency_cycles
    assert paid > folded
    with pytest.raises(ValueError, match="fused_ops names unknown op kind 'scal'"):
        Kernel.model_validate({**triton.model_dump(), "fused_ops": ["scal"]})


def test_a_scale_with_no_measured_cycles_to_scale_is_refused():
    # the shipped H100 triton tuning scales the tiles' measured per-CTA cycles: a description of the same name whose
    # tile gives none would leave the scale unused, so the run is refused rather than paying nothing
    triton = load_kernel("triton")
    bare = triton.model_copy(update={"tiles": [t.model_copy(update={"cta_cycles": None}) for t in triton.tiles]})
    with pytest.raises(VfasimError, match="cta_cycles_scale scales the tile's measured cta_cycles"):
        vfasim.run("H100-SXM", "fa2", kernel=bare, seq_len=1024, head_dim=128, heads=16, causal=False,
                   numerics_heads=0)


def test_a_kernels_side_launches_each_cost_a_launch_where_they_apply():
    # flex launches two set-up kernels without a block mask and two reductions in decode: each costs the chip's
    # next_launch_us (a further kernel of the call); a causal call launches none beside the attention kernel; a bad
    # 'when' is refused
    flex = load_kernel("flex")
    assert [flex.side_launch_count(c, d) for c, d in ((True, False), (False, False), (False, True))] == [0, 2, 4]
    h100 = load_hw("H100-SXM")
    launch = h100.chip.next_launch_us * h100.clock_ghz * 1e3
    kw = dict(seq_len=1024, head_dim=128, heads=8, numerics_heads=0)
    none = flex.model_copy(update={"side_launches": []})
    for causal, extra in ((True, 0), (False, 2)):
        with_side = vfasim.run("H100-SXM", "fa2", kernel=flex, causal=causal, **kw).latency_cycles
        without = vfasim.run("H100-SXM", "fa2", kernel=none, causal=causal, **kw).latency_cycles
        assert with_side - without == pytest.approx(extra * launch, abs=1)
    with pytest.raises(ValueError, match="when"):
        Kernel.model_validate({**flex.model_dump(), "side_launches": [{"when": "sometimes", "count": 1, "source": "x"}]})


def test_a_side_launch_of_the_main_kernel_runs_where_the_split_path_does_not():
    # cuDNN launches a Memset before its sm90 kernel (prefill, multi-query decode), none beside its one-query
    # decode kernels: a decode step of one query pays no extra launch, one of four queries (the main kernel) does
    cudnn = load_kernel("cudnn")
    assert [cudnn.side_launch_count(c, d) for c, d in ((True, False), (False, False), (False, True))] == [1, 1, 0]
    h100 = load_hw("H100-SXM")
    launch = h100.chip.next_launch_us * h100.clock_ghz * 1e3  # a further kernel of the call
    none = cudnn.model_copy(update={"side_launches": []})
    for queries, extra in ((1, 0), (4, 1)):
        kw = dict(seq_len=8192, head_dim=128, heads=32, kv_heads=8, decode=True, queries=queries, causal=False,
                  numerics_heads=0)
        with_side = vfasim.run("H100-SXM", "fa2", kernel=cudnn, **kw).latency_cycles
        without = vfasim.run("H100-SXM", "fa2", kernel=none, **kw).latency_cycles
        assert with_side - without == pytest.approx(extra * launch, abs=1)


def test_a_warp_grid_must_hold_the_tiles_warps_and_needs_operand_reads():
    doc = yaml.safe_load((KERNELS / "efficient.yaml").read_text())
    doc["tiles"][0]["warp_grid"] = [2, 4]
    with pytest.raises(ValueError, match=r"warp_grid \[2, 4\] has 8 warps, the tile 4"):
        Kernel.model_validate(doc)
    doc = yaml.safe_load((KERNELS / "efficient.yaml").read_text())
    doc["operands_from_shared"] = False
    with pytest.raises(ValueError, match="they need operands_from_shared"):
        Kernel.model_validate(doc)


def test_flex_decodes_a_gqa_group_that_is_not_a_power_of_two_on_its_main_kernel():
    # _use_flex_decoding takes the split path only where Hq // Hkv is a power of two: 40/8 heads run the main
    # template, a query head a tile, unsplit and without the decoding path's two reduction launches
    flex = load_kernel("flex")
    assert flex.decode is not None and flex.decode.gqa_groups == "power_of_two"
    assert [flex.decode.runs(1, g) for g in (1, 2, 3, 4, 5, 6, 8)] == [True, True, False, True, False, False, True]
    args = dict(kernel="flex", seq_len=8192, head_dim=128, batch=2, kv_heads=8, decode=True, queries=1,
                causal=False, numerics_heads=0)
    packed, fallback = (vfasim.run("H100-SXM", "fa2", heads=h, **args).chip for h in (32, 40))
    assert packed["units"] == 2 * 8 and fallback["units"] == 2 * 40  # a K/V head's group a tile; a query head a tile
    assert fallback["splits"] == 1
    assert load_kernel("fa2").decode.runs(1, 5)  # any group, where the description says nothing


def test_fa2s_uneven_causal_code_masks_one_more_block_and_prices_its_masks_at_the_tiles_figure():
    # flash_fwd_kernel.h: ceil_div(kBlockM, kBlockN) masked iterations a query block, one more where a length is not
    # a whole number of tiles (Is_even_MN false), always above head dim 128. 257 and 384 tokens run the same tiles;
    # with a causal mask the uneven launch pays its masks at the tile's uneven_mask_work; without one only the last
    # key block's mask (past the keys) at one operation an element
    fa2 = load_kernel("fa2")
    rule = fa2.tile(64, "16bit", True)
    assert rule.uneven_mask_work is not None and rule.uneven_mask_work > 1
    assert [fa2.uneven(rule, 64, n, n) for n in (256, 257, 384)] == [False, True, False]
    assert fa2.uneven(rule, 256, 4096, 4096) and not fa2.uneven(rule, 128, 4096, 4096)
    assert (fa2.mask_steps(rule, False), fa2.mask_steps(rule, True)) == (1, 2)
    assert fa2.mask_steps(fa2.tile(128, "16bit", True), True) == 3  # 128 x 64 tiles: two, and one more
    assert load_kernel("fa3").mask_steps(rule, True) == 0  # diagonal_blocks: the blocks the diagonal crosses
    kw = dict(kernel="fa2", head_dim=64, heads=8, batch=4, numerics_heads=0)
    for causal in (True, False):
        even, uneven = (vfasim.run("H100-SXM", "fa2", seq_len=n, causal=causal, **kw) for n in (384, 257))
        assert even.chip["units"] == uneven.chip["units"]
        assert (uneven.latency_cycles > 1.1 * even.latency_cycles) if causal else \
            (even.latency_cycles < uneven.latency_cycles < 1.01 * even.latency_cycles)
    plain = fa2.model_copy(update={"tiles": [t.model_copy(update={"uneven_mask_work": None}) for t in fa2.tiles]})
    even, uneven = (vfasim.run("H100-SXM", "fa2", seq_len=n, causal=True, **{**kw, "kernel": plain})
                    for n in (384, 257))
    assert even.latency_cycles < uneven.latency_cycles < 1.1 * even.latency_cycles  # the extra masked block alone
    # the rule is for the kernel's own tiles: the same blocks given by hand mask the diagonal's and run the even code
    given = vfasim.run("H100-SXM", "fa2", seq_len=257, causal=True, block_q=128, block_k=128, **kw)
    own = vfasim.run("H100-SXM", "fa2", seq_len=257, causal=True, **kw)
    assert given.chip["units"] == own.chip["units"] and given.latency_cycles < own.latency_cycles


def test_flex_runs_its_bounds_checked_kernel_where_either_length_is_off_a_multiple_of_128():
    # kernels/flex.yaml bounds_multiple, bounds_causal (the lowering's IS_DIVISIBLE) and the tiles' measured
    # bounds_cta_cycles and bounds_block_cycles (validation/flex_units_off_h200_2026_11)
    flex = load_kernel("flex")
    rule = flex.tile(64, "16bit", False)
    cases = ((False, 1000, 1000), (False, 1024, 1024), (True, 1000, 1000), (False, 4096, 1), (True, 1024, 1024))
    assert [flex.bounds_masked(rule, c, kv, q) for c, kv, q in cases] == [True, False, True, True, False]
    assert not flex.bounds_masked(flex.tile(256, "16bit", False), False, 1000, 1000)  # no figures: its own code
    kw = dict(kernel="flex", head_dim=64, heads=16, batch=8, causal=False, numerics_heads=0)
    off, on = (vfasim.run("H200", "fa2", seq_len=n, **kw) for n in (1000, 1024))
    assert on.chip["unit_overhead_cycles"] == rule.cta_cycles
    assert off.chip["unit_overhead_cycles"] == rule.bounds_cta_cycles > rule.cta_cycles
    assert off.chip["units"] == on.chip["units"] and off.latency_cycles > 1.15 * on.latency_cycles
    assert off.ops["mask"] > 0 == on.ops.get("mask", 0)  # the select on every score
    bare = flex.model_copy(update={"tiles": [t.model_copy(update={"bounds_cta_cycles": None, "bounds_block_cycles": None})
                                             for t in flex.tiles]}).model_dump()
    with pytest.raises(ValueError, match="no tile gives bounds_mask_work"):  # the condition would be ignored
        type(flex).model_validate(bare)


def test_cudnns_bounds_check_masks_every_key_block_where_the_kv_length_is_off_them():
    # kernels/cudnn.yaml bounds_mask_work (validation/edges_h100_2026_11): without a causal mask, a K/V length that is
    # not a whole number of 128-key blocks masks every block at the tile's figure; a whole number, a causal mask, or a
    # tile without the figure mask only what the keys' end or the diagonal hides
    cudnn = load_kernel("cudnn")
    rule = cudnn.tile(64, "16bit", False)
    assert rule.bounds_mask_work == 2.0 and cudnn.tile(128, "16bit", False).bounds_mask_work is None
    assert [cudnn.bounds_masked(rule, c, n, n) for c, n in ((False, 3000), (False, 3072), (True, 3000))] == \
        [True, False, False]
    kw = dict(kernel="cudnn", head_dim=64, heads=8, batch=4, causal=False, numerics_heads=0)
    off, on = (vfasim.run("H200", "fa2", seq_len=n, **kw) for n in (3000, 3072))
    # ops: each kind's cycles; the mask on every tile at two operations an element, the scale at one
    assert off.chip["units"] == on.chip["units"] and off.ops["mask"] > 1.8 * off.ops["scale"]
    assert on.ops.get("mask", 0) == 0 and off.latency_cycles > 1.08 * on.latency_cycles
    plain = cudnn.model_copy(update={"tiles": [t.model_copy(update={"bounds_mask_work": None}) for t in cudnn.tiles]})
    last = vfasim.run("H200", "fa2", seq_len=3000, **{**kw, "kernel": plain})
    assert 0 < last.ops["mask"] < 0.1 * off.ops["mask"] and last.latency_cycles < 1.02 * on.latency_cycles
    causal = [vfasim.run("H200", "fa2", seq_len=3000, **{**kw, "causal": True, "kernel": k}).latency_cycles
              for k in (cudnn, plain)]
    assert causal[0] == causal[1]


def test_the_triton_kernels_fa2_walk_pays_its_masked_blocks_loop_in_fp8_causal_launches():
    # harness/kernels.py: fa2 walks its masked blocks in a loop of their own, vfa in one loop with the rest; each CTA
    # of a causal fp8 launch of fa2 pays the tile's masked_loop_cycles (validation/dispatch_fp8_h100_2026_11)
    triton = load_kernel("triton")
    assert triton.masked_loop_apart == ["fa2"] and triton.tile(128, "8bit", True).masked_loop_cycles == 1900
    assert triton.tile(128, "16bit", True).masked_loop_cycles is None
    together = triton.model_copy(update={"masked_loop_apart": []})
    kw = dict(seq_len=1024, head_dim=128, heads=16, batch=4, matmul_format="fp8_e4m3", numerics_heads=0)

    def cycles(algo: str, kernel, **more) -> int:
        return vfasim.run("H100-SXM", algo, kernel=kernel, **{**kw, **more}).latency_cycles

    assert cycles("fa2", triton) > cycles("fa2", together) * 1.02
    assert cycles("vfa", triton) == cycles("vfa", together)  # one loop
    assert cycles("fa2", triton, causal=False) == cycles("fa2", together, causal=False)  # no masked blocks
    given = dict(block_q=128, block_k=128)  # the figure is the kernel's own tiles'
    assert cycles("fa2", triton, **given) == cycles("fa2", together, **given)
    assert cycles("fa2", triton, matmul_format="fp16") == cycles("fa2", together, matmul_format="fp16")


def test_uneven_figures_need_the_trailing_steps_rule():
    fa3 = load_kernel("fa3")
    with pytest.raises(ValueError, match="need causal_masking: trailing_steps"):
        Kernel.model_validate({**fa3.model_dump(), "uneven_above_head_dim": 128})
    doc = fa3.model_dump()
    doc["tiles"][0]["uneven_mask_work"] = 10.0
    with pytest.raises(ValueError, match="need causal_masking: trailing_steps"):
        Kernel.model_validate(doc)
    with pytest.raises(ValueError, match="mask_work"):
        Kernel.model_validate({**fa3.model_dump(), "mask_work": 0.0})


def test_a_tiles_block_cycles_survive_a_json_copy_and_refuse_bad_counts():
    import json

    eff = load_kernel("efficient")
    assert Kernel.model_validate(json.loads(eff.model_dump_json())) == eff  # JSON's keys are strings
    doc = yaml.safe_load((KERNELS / "efficient.yaml").read_text())
    for bad, words in (({0: 100}, "block_cycles"), ({2: 0}, "block_cycles"), ({1.5: 100}, "block_cycles")):
        doc["tiles"][0]["block_cycles"] = bad
        with pytest.raises(ValueError, match=words):
            Kernel.model_validate(doc)


def test_a_tile_rule_may_apply_to_some_algorithms_only():
    triton = load_kernel("triton")
    fa2, vfa, vsa = (triton.tile(256, "8bit", False, algo=a) for a in ("fa2", "vfa", "vsa"))
    assert fa2.block_floor(1) > vfa.block_floor(1) > 0  # each mode's loop measured apart
    assert vsa.block_floor(1) == 0 and (vsa.block_q, vsa.block_k) == (fa2.block_q, fa2.block_k)  # the general rule
    assert triton.tile(256, "16bit", True, algo="fa2").block_floor(1) == 0  # 16-bit causal: no floor given
    doc = yaml.safe_load((KERNELS / "triton.yaml").read_text())
    doc["tiles"][0]["algorithms"] = ["fa3"]
    with pytest.raises(VfasimError, match="kernel triton names unknown algorithm 'fa3'"):
        vfasim.run("H100-SXM", "fa2", kernel=Kernel.model_validate(doc), seq_len=256, numerics_heads=0)


def test_a_block_floor_for_one_algorithm_slows_only_its_runs():
    """The Triton kernel at head dim 256 in fp8: FA2's and VFA's blocks floored at their own measured cost, VSA's not."""
    doc = yaml.safe_load((KERNELS / "triton.yaml").read_text())
    doc["tiles"] = [{k: v for k, v in r.items() if k != "block_cycles"} for r in doc["tiles"]]
    unfloored = Kernel.model_validate(doc)
    shipped = load_kernel("triton")

    def cycles(algo: str, kernel: Kernel) -> int:
        return vfasim.run("H100-SXM", algo, kernel=kernel, seq_len=2048, head_dim=256, heads=8, batch=1,
                          causal=False, matmul_format="fp8_e4m3", numerics_heads=0).latency_cycles

    for algo in ("fa2", "vfa"):
        floor = shipped.tile(256, "8bit", False, algo=algo).block_floor(1)
        assert cycles(algo, shipped) > cycles(algo, unfloored)  # the model's own blocks were faster than measured
        assert cycles(algo, shipped) >= 2048 // 64 * floor  # a CTA walks its 32 blocks at the floor at least
    assert cycles("vsa", shipped) == cycles("vsa", unfloored)
    given = dict(seq_len=2048, head_dim=256, heads=8, batch=1, causal=False, matmul_format="fp8_e4m3", numerics_heads=0,
                 block_q=128, block_k=32)  # blocks the kernel does not run: its measured floor does not apply
    assert vfasim.run("H100-SXM", "fa2", kernel=shipped, **given).latency_cycles == \
        vfasim.run("H100-SXM", "fa2", kernel=unfloored, **given).latency_cycles


def test_the_triton_tiles_fit_as_many_ctas_an_sm_as_nsight_compute_measured():
    """Every compiled variant of the Triton kernel (mode, format, head dim, mask, decode tile): the model's CTAs an SM
    from its tile's registers and shared memory equal the smaller of Nsight Compute's two occupancy limits."""
    table = Path(__file__).resolve().parents[1] / "validation" / "regs_h200_2026_11" / "ncu.csv"
    with table.open() as f:
        rows = [r for r in csv.DictReader(f) if r["launch"] == "profiled"]
    assert len(rows) == 54
    got, want = [], []
    for r in rows:
        decode = dict(decode=True, queries=1) if r["seq_len_q"] == "1" else {}
        got.append(vfasim.run("H200", r["mode"], kernel="triton", seq_len=256, head_dim=int(r["head_dim"]), heads=2,
                              causal=r["causal"] == "True", matmul_format=r["dtype"], numerics_heads=0,
                              **decode).chip["streams_per_core"])
        want.append(min(int(r["launch__occupancy_limit_registers"]), int(r["launch__occupancy_limit_shared_mem"])))
    assert got == want
    assert sorted(set(want)) == [1, 2, 3, 4, 6]  # the table spans one to six CTAs an SM


def test_a_kernel_whose_gaps_other_ctas_fill_runs_its_tensor_pipes_at_full_rate_only_when_ctas_share_a_core():
    """The Triton kernel at head dim 64 (two CTAs an SM): with gaps_filled_by_ctas, a 16-bit launch of two CTAs a core
    is faster than with the chip's tensor_efficiency on every unit; a launch of one CTA a core, or in fp8, is the same."""
    doc = yaml.safe_load((KERNELS / "triton.yaml").read_text())
    assert doc["gaps_filled_by_ctas"] == ["16bit"]
    unfilled = Kernel.model_validate({**doc, "gaps_filled_by_ctas": []})

    def cycles(kernel: Kernel | str, heads: int, fmt: str = "fp16") -> int:
        return vfasim.run("H100-SXM", "fa2", kernel=kernel, seq_len=1024, head_dim=64, heads=heads, batch=1,
                          causal=False, matmul_format=fmt, numerics_heads=0).latency_cycles

    assert cycles("triton", 16) == cycles(unfilled, 16)  # 128 CTAs: one a core
    assert cycles("triton", 33) < cycles(unfilled, 33)  # 264 CTAs of 8 query blocks: two a core
    assert cycles("triton", 33, "fp8_e4m3") == cycles(unfilled, 33, "fp8_e4m3")  # fp8: not filled
    busy = [vfasim.run("H100-SXM", "fa2", kernel=k, seq_len=1024, head_dim=64, heads=33, batch=1, causal=False,
                       numerics_heads=0).chip["utilization"]["tensor"] for k in ("triton", unfilled)]
    assert busy[0] < busy[1]  # the reported tensor busy is priced as the units sharing a core run it


def test_the_grid_target_rule_reproduces_cudnns_measured_decode_grids():
    # validation/ncu_cudnn_decode_h200_2026_11: the sm80 decode kernel's grid.x (splits) at (row tiles, key blocks)
    rule = load_kernel("cudnn").decode.split_kv
    assert isinstance(rule, GridSplit)
    measured = {(32, 16): 8, (8, 16): 16, (1, 16): 16, (256, 16): 1, (64, 16): 4, (512, 16): 1, (1, 64): 64,
                (8, 64): 32, (1, 256): 64, (1, 512): 64, (64, 512): 4, (32, 4): 1, (1, 4): 1, (2048, 4): 1}
    for (tiles, kblocks), splits in measured.items():
        assert rule.splits(tiles, 1, 132, kblocks) == splits, (tiles, kblocks)
    assert rule.splits(96, 1, 132, 64) == 2  # 256 // 96 = 2, a power of two
    bad = rule.model_dump() | {"rule": "grid_target", "target_ctas": 0}
    with pytest.raises(ValueError, match="target_ctas"):
        GridSplit(**bad)


def test_cudnns_decode_runs_the_grid_nsight_compute_measured_at_every_one_query_shape():
    # validation/ncu_cudnn_decode_h200_2026_11/ncu.csv: the decode kernel's grid (splits x row tiles) per shape
    path = Path(__file__).resolve().parents[1] / "validation" / "ncu_cudnn_decode_h200_2026_11" / "ncu.csv"
    with path.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["launch"] == "profiled"]
    assert len(rows) == 66
    for r in rows:
        res = vfasim.run("H200", "fa2", kernel="cudnn", seq_len=int(r["seq_len"]), head_dim=int(r["head_dim"]),
                         heads=int(r["heads"]), kv_heads=int(r["kv_heads"]), batch=int(r["batch"]), decode=True,
                         queries=1, numerics_heads=0)
        assert (res.chip["splits"], res.chip["units"]) == (int(r["launch__grid_dim_x"]), int(r["launch__grid_size"]))
        assert res.chip["streams_per_core"] == (4 if r["head_dim"] == "64" else 2)  # the occupancy limits
