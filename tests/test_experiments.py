"""Experiments run end to end at a tiny size and write what their READMEs promise."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / name / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_accuracy_study_writes_every_variant(tmp_path):
    study = load("accuracy")
    study.main(["--seq-len", "192", "--head-dim", "16", "--block", "16", "--heads", "1", "--out", str(tmp_path)])
    with open(tmp_path / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {(r["workload"], r["variant"]) for r in rows} == {
        (w, v) for w in ("llm-like", "random") for v in study.VARIANTS}
    by = {(r["workload"], r["variant"]): r for r in rows}
    assert float(by["llm-like", "fa2"]["rel_err_vs_fp64"]) < 1e-2
    assert float(by["llm-like", "blasst lam=0.9"]["skipped_block_fraction"]) >= float(
        by["llm-like", "blasst lam=0.1"]["skipped_block_fraction"])
    assert by["llm-like", "vsa lam=0.001"]["paper_sparsity"] == "0.161"  # the paper's number sits beside ours
    assert (tmp_path / "results.md").read_text().startswith("| workload | variant |")


def test_mitigation_study_shows_what_each_removes_and_costs(tmp_path):
    spec = importlib.util.spec_from_file_location("mitigations", ROOT / "experiments" / "accuracy" / "mitigations.py")
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    case = {"vsa": ("C4V16", "vsa", {"lam": 1e-3, "workload": "llm-like-stress"})}
    rows = study.run_study(512, case, {k: study.MITIGATIONS[k] for k in ("none", "protect_special", "minit_clamp")})
    by = {r["mitigation"]: r for r in rows}
    assert "no_block_visited" in by["none"]["causes"] and "no_block_visited" not in by["protect_special"]["causes"]
    assert by["protect_special"]["latency_vs_unmitigated"] > 1.0  # visiting the protected tiles costs cycles
    study.write(rows, tmp_path)
    assert (tmp_path / "mitigations.md").read_text().startswith("| case | mitigation | verdict |")


def test_real_chips_predicts_each_variant_beside_its_numerics(tmp_path):
    study = load("real_chips")
    rows = study.main(["--seq-len", "256", "--decode-kv", "512", "--heads", "2", "--decode-batch", "1",
                       "--prefill-batch", "1",
                       "--head-dim", "32", "--chips", "B300", "--out", str(tmp_path)])
    assert {r["format"] for r in rows} == {"bf16", "fp8_e4m3", "fp4"}  # B300 has all three
    assert {(r["mode"], r["variant"]) for r in rows} == {(m, v) for m in ("prefill", "decode") for v in study.VARIANTS}
    for r in rows:
        if r["note"]:  # FA2 has no fp8/fp4 tiles, FA4 no decode path: said in the row
            assert r["note"].startswith("not run: kernel ") and r["latency_us"] == ""
            continue
        assert r["verdict"] in ("ok", "degraded", "broken") and r["latency_us"] > 0
        if r["variant"] == "base":
            assert r["speedup_vs_base"] == 1.0
    ran = {(r["format"], r["mode"], r["variant"]) for r in rows if not r["note"]}
    assert ("bf16", "prefill", "FA2") in ran and ("fp8_e4m3", "prefill", "VFA") in ran
    assert ("fp8_e4m3", "prefill", "FA2") not in ran  # the FA2 kernel has no fp8 path
    assert (tmp_path / "results.md").read_text().startswith("| chip | format | mode |")


def _script(folder: str, name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_measured_vfa_speedups_pair_the_campaign_rows_with_the_model(tmp_path):
    study = _script("real_chips", "measured")
    rows, unstable = study.pairs(ROOT / "validation" / "gpu_h100_2026_11" / "attention.csv")
    assert len(rows) + unstable >= 100 and all(r["fa2_us"] > 0 and r["vfa_attn_us"] > 0 for r in rows)
    got = study.main(["--max-shapes", "1", "--out", str(tmp_path)])
    [r] = got
    assert r["measured_speedup"] == r["fa2_us"] / r["vfa_us"]  # the ratio of two measured rows, not a model figure
    assert r["speedup_error"] == r["predicted_speedup"] - r["measured_speedup"]
    assert (tmp_path / "measured_gpu_h100_2026_11.md").read_text().startswith("| chip | dtype | causal |")
    pairs = study.paired(ROOT / "validation" / "pairs_h100_2026_11" / "pairs.csv")
    assert len(pairs) == 108 and all(0.5 < v < 2 for v in pairs.values())  # every FA3-regime shape, timed in alternation
    if r["paired_attn_speedup"] != "":
        assert r["paired_error"] == r["predicted_attn_speedup"] - r["paired_attn_speedup"]


def test_vsa_skips_match_the_campaigns_count_and_its_speedup_pairs_the_measured_kernels(tmp_path, monkeypatch):
    from vfasim.runner import chip_run

    monkeypatch.setattr(chip_run, "TRACED_TILES", 256)  # VSA's trace of a sample of K/V heads: the test's size
    study = _script("real_chips", "vsa")
    skipped, [r] = study.main(["--max-shapes", "1", "--max-skip-cases", "3", "--out", str(tmp_path)])
    assert [s["campaign_skipped"] for s in skipped] == [0.0, 0.0, 0.88]  # the log's first cases (d128, 1024)
    assert all(abs(s["difference"]) < 0.01 for s in skipped)  # the engine skips what the kernel's emulation skips
    assert r["measured_attn_speedup"] == r["vfa_attn_us"] / r["vsa_attn_us"]  # two measured rows
    assert r["attn_speedup_error"] == r["predicted_attn_speedup"] - r["measured_attn_speedup"]
    assert (tmp_path / "vsa_speedup_gpu_h100_2026_11.md").read_text().startswith("| chip | dtype | causal |")


def test_softmax_share_pairs_the_three_measured_loops_with_the_model(tmp_path):
    study = _script("real_chips", "softmax_share")
    assert len(study.shapes()) == 108  # 36 shapes x 3 formats, each with FA2, VFA's kernel and the no-softmax loop
    [r] = study.main(["--max-shapes", "1", "--out", str(tmp_path)])
    assert r["softmax_share"] == (r["fa2_us"] - r["dots_us"]) / r["fa2_us"]  # measured rows only
    assert r["model_dots_us"] < r["model_fa2_us"]  # the model's loop without its softmax is faster
    assert (tmp_path / "softmax_share.md").read_text().startswith("| chip | dtype |")
    from vfasim.kernel import load_kernel

    loop = study.no_softmax_loop(load_kernel("triton"))  # the floors were measured with the softmax in the loop
    assert not any(t.block_cycles for t in loop.tiles) and any(t.block_cycles for t in load_kernel("triton").tiles)


def test_chain_compares_the_tile_with_one_and_two_ctas_per_sm(tmp_path):
    study = _script("real_chips", "chain")
    groups = study.measured()
    assert {c for _, _, c in groups} == {132, 264} and len(groups) == 12  # 3 head dims x 2 formats x 2 CTA counts
    rows = groups[(64, "fp16", 132)]
    r = study.compare(64, "fp16", 132, rows, 132)
    assert r["fa2_ns"] == study.per_block_ns({n: float(x["a_us"]) for n, x in rows["triton_vfa_attn"].items()}, 64)
    assert r["softmax_ns"] > 0 and r["vfa_removes_ns"] == r["fa2_ns"] - r["vfa_ns"]  # measured rows only
    assert r["fa2_error"] == (r["model_fa2_ns"] - r["fa2_ns"]) / r["fa2_ns"] and r["model_fa2_ns"] > 0
    bm64 = ROOT / "validation" / "chain_bm64_h100_2026_11"
    groups = study.measured(bm64 / "chain.csv")
    assert (64, "fp8_e4m3", 132) not in groups and len(groups) == 11  # the group with an unstable pair is left out
    r = study.compare(64, "fp16", 132, groups[(64, "fp16", 132)], 132, str(bm64 / "kernel.yaml"))
    assert r["ctas"] == 264  # a head's 128 query rows are two 64-row CTAs


def test_unpipelined_prices_the_one_stage_loops_in_program_order_and_sets_vsa_beside_them(tmp_path):
    study = _script("real_chips", "unpipelined")
    rows = study.compare(max_rows=4)  # head dim 64, full, 512 tokens: FA2 and VFA in fp16 and fp8
    assert [(r["kernel"], r["dtype"]) for r in rows] == [
        ("triton_fa2", "fp16"), ("triton_vfa_attn", "fp16"), ("triton_fa2", "fp8_e4m3"), ("triton_vfa_attn", "fp8_e4m3")]
    for r in rows:
        assert r["model_error"] == round(r["model_us"] / r["measured_us"] - 1, 4)
    assert [r["vsa_over_vfa_s1"] == "" for r in rows] == [True, False, True, False]  # VSA beside VFA's rows only
    pipelined = study.predict(study.table_row("floor", {**_first_fa2(study.TABLE), "kernel": "triton_fa2"}))
    assert rows[0]["model_us"] > pipelined.predicted  # the loads wait in program order: slower than the pipelined loop
    assert study.main(["--max-rows", "2", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "unpipelined.md").read_text().startswith("| kernel | dtype | head_dim |")


def _first_fa2(table: Path) -> dict:
    with open(table, newline="") as f:
        return next(r for r in csv.DictReader(f) if r["kernel"] == "triton_fa2")


def test_the_bm64_campaign_describes_the_shipped_triton_kernel_with_other_tiles():
    from vfasim.kernel import load_kernel
    shipped = load_kernel("triton").model_dump()
    bm64 = load_kernel(str(ROOT / "validation" / "chain_bm64_h100_2026_11" / "kernel.yaml")).model_dump()
    tiles = {"name", "description", "measured_as", "predicts", "tiles", "warps"}
    assert {k: v for k, v in bm64.items() if k not in tiles} == {k: v for k, v in shipped.items() if k not in tiles}
    assert {t["block_q"] for t in bm64["tiles"]} == {64} and {t["block_q"] for t in shipped["tiles"]} == {128}


def test_chain_runs_the_decode_tile_on_the_measured_shapes():
    study = _script("real_chips", "chain")
    groups = study.measured(ROOT / "validation" / "chain_decode_h100_2026_11" / "chain.csv")
    assert sorted(groups) == [(d, "fp16", c) for d in (64, 128, 256) for c in (132, 264)]
    r = study.compare(256, "fp16", 132, groups[(256, "fp16", 132)], 132)
    assert r["ctas"] == 132 and r["fa2_ns"] > 0 and r["model_fa2_ns"] > 0  # one decode CTA per head
    assert r["speedup"] == r["fa2_ns"] / r["vfa_ns"]  # measured rows only


def test_chain_models_vsa_where_the_table_measured_it():
    study = _script("real_chips", "chain")
    groups = study.measured(ROOT / "validation" / "chain_vsa_h100_2026_11" / "chain.csv")
    assert len(groups) == 12 and all(set(g) == {"triton_vfa_attn", "triton_vsa_attn", "triton_dots"}
                                     for g in groups.values())
    r = study.compare(64, "fp8_e4m3", 132, groups[(64, "fp8_e4m3", 132)], 132)
    rows = groups[(64, "fp8_e4m3", 132)]["triton_vsa_attn"]
    assert r["vsa_ns"] == study.per_block_ns({n: float(x["b_us"]) for n, x in rows.items()}, 64)
    assert r["vsa_error"] == (r["model_vsa_ns"] - r["vsa_ns"]) / r["vsa_ns"] and r["model_vsa_ns"] > 0
    assert r["vsa_over_vfa"] == r["vsa_ns"] / r["vfa_ns"]  # measured rows only


def test_loop_efficiency_solves_the_matmul_rate_through_the_model_and_is_the_shipped_one(tmp_path):
    study = _script("real_chips", "loop_efficiency")
    [r] = study.main(["--metric", "tl_dot_fa_loop_fp16_d128_tflops", "--out", str(tmp_path)])
    assert r["model_tflops"] == pytest.approx(r["measured_tflops"], rel=1e-3)  # the model's loop runs as measured
    assert r["fraction_of_peak"] < r["matmul_efficiency"] < 1  # the loop's other ops are the model's, not the matmuls'
    from vfasim.hw import load_hw
    shipped = load_hw("H100-SXM").chip.kernel_tuning["triton"].tensor_efficiency
    assert shipped == pytest.approx(r["matmul_efficiency"], abs=5e-4)  # the config holds what the script computes
    assert (tmp_path / "loop_efficiency_h100-sxm.md").is_file()


def test_unit_cost_splits_measured_and_modelled_time_into_tiles_and_ctas():
    study = _script("real_chips", "unit_cost")
    groups = study.measured()
    assert sorted(groups) == [("triton_fa2", d, dt) for d in (64, 128, 256) for dt in ("fp16", "fp8_e4m3")]
    rows = groups[("triton_fa2", 64, "fp8_e4m3")]
    assert [int(r["seq_len"]) for r in rows] == [128, 256, 512, 1024, 2048, 4096]
    assert len({int(r["heads"]) * int(r["seq_len"]) for r in rows}) == 1  # the same CTAs at every length
    r = study.compare(64, "fp8_e4m3", rows)
    assert r["block_k"] == 64 and r["slope_us"] > 0 and r["intercept_us"] > 0
    assert r["model0_intercept_us"] < r["model_intercept_us"]  # the fitted per-CTA overhead is what lifts it
    assert study.line(np.array([1.0, 2, 4, 8]), np.array([3.0, 5, 9, 17]), np.array([512] * 4)) == pytest.approx((2, 1))


def test_gpu_and_model_numerics_on_the_same_inputs(tmp_path):
    study = _script("real_chips", "gpu_numerics")
    rows = study.main(["--cases", "sink_fp16_d128_n1024_causal", "--out", str(tmp_path)])
    by = {r["kernel"]: r for r in rows}
    assert set(by) == {"triton_fa2", "triton_vfa", "triton_vsa"}
    for r in rows:  # the same function in the same formats: outputs agree to an fp16 ulp or two
        assert r["max_ulp_gpu_vs_model"] <= 2 and r["bit_identical_fraction"] > 0.99
        assert r["gpu_rel_err"] < 1e-2 and r["model_fp16_out_rel_err"] < 1e-2


def test_the_blind_study_runs_every_blind_campaigns_rows_on_both_tiers(tmp_path):
    study = _script("real_chips", "blind")
    first = study.blind_rows(1)
    assert {r.table.split("/")[0] for r in first} == {"blind_h100_2026_11", "blind_h200_2026_11",
                                                      "blind_flex_h100_2026_11", "blind_flex_h200_2026_11",
                                                      "blind_grid2_h200_2026_11", "blind_grid3_h200_2026_11",
                                                      "blind_grid4_h200_2026_11", "blind_grid5_h200_2026_11",
                                                      "blind_grid6_h200_2026_11", "blind_grid7_h200_2026_11",
                                                      "blind_grid8_h200_2026_11"}
    out = study.main(["--max-rows", "1", "--out", str(tmp_path)])
    lines = [r for r in out if r["kernel"] not in ("all", "")]
    assert sum(r["rows"] for r in lines) == len(first) == out[-1]["rows"]  # every row once, and in the total
    assert all(r["tier2_mape"] >= abs(r["tier2_mean_error"]) and r["tier1_mape"] > 0 for r in out)
    assert (tmp_path / "blind.md").read_text().startswith("| campaign | kernel | mode | dtype | rows |")
    other = study.main(["--max-rows", "1", "--campaigns", "occupancy_", "--out", str(tmp_path)])
    assert {r["campaign"] for r in other} == {"occupancy_h100_2026_11", "occupancy_h200_2026_11", "all"}
    assert (tmp_path / "occupancy.md").exists()
    with pytest.raises(SystemExit):
        study.main(["--campaigns", "nothing_", "--out", str(tmp_path)])


def test_fa2s_uneven_mask_figure_is_the_least_error_of_its_neighbours_on_its_calibration_campaign():
    study = _script("real_chips", "uneven_mask")
    from vfasim.kernel import load_kernel
    shipped = load_kernel("fa2").tile(64, "16bit", True).uneven_mask_work
    assert len(study.uneven_rows("calibration", 64)) == 15  # edges_h100_2026_11: causal, not whole tiles, head dim 64
    scored = study.scores(64, (1.0, shipped - 6, shipped, shipped + 6), jobs=1)
    assert min(scored, key=lambda s: s[1])[0] == shipped
    assert scored[0][1] > 3 * scored[2][1]  # one operation an element (the even code's) misses those rows by far more


def test_cudnns_bounds_mask_figure_meets_the_measured_ratio_of_its_calibration_pairs():
    study = _script("real_chips", "bounds_mask")
    from vfasim.kernel import load_kernel
    rows = study.calibration_rows(64)
    matched = study.pairs(rows, 128)
    assert [(a.seq_len, b.seq_len) for a, b in matched] == [(1000, 1024), (3000, 3072)]  # as many key blocks
    assert all(a.value > 1.1 * b.value for a, b in matched)  # measured: the off-block length takes longer
    shipped = load_kernel("cudnn").tile(64, "16bit", False).bounds_mask_work
    gap_none, _ = study.score(rows, matched, None, 64, jobs=1)
    gap, _ = study.score(rows, matched, shipped, 64, jobs=1)
    assert gap < 0.01 < 0.1 < gap_none  # the model without the figure runs both alike


def test_flex_off_multiple_figures_come_from_its_two_units_sweeps_and_meet_the_edge_pairs():
    study = _script("real_chips", "flex_bounds")
    from vfasim import run
    from vfasim.kernel import load_kernel
    flex = load_kernel("flex")
    rule = flex.tile(64, "16bit", False)
    assert study.figures(64) == (rule.bounds_cta_cycles, rule.bounds_block_cycles)  # kernels/flex.yaml holds these
    plain = study.with_figures(flex, 64, None, None)
    edges = {(r.causal, r.seq_len): r for r in study.load_rows("H200") if r.table.startswith(study.EDGES)
             and r.head_dim == 64}
    for on, off in ((1024, 1000), (4096, 4000)):  # as many 128-key blocks: the same tiles, the other kernel
        a, b = edges[(False, on)], edges[(False, off)]
        shape = dict(head_dim=64, heads=a.heads, batch=a.batch, causal=False, numerics_heads=0)
        with_, without = ([run("H200", "fa2", kernel=k, seq_len=r.seq_len, **shape).latency_us for r in (a, b)]
                          for k in (flex, plain))
        measured = b.value / a.value
        assert measured > 1.1 and abs(with_[1] / with_[0] - measured) < 0.06 < abs(without[1] / without[0] - measured)


def test_block_cycles_reads_a_key_blocks_cost_from_the_stamps(tmp_path):
    study = _script("real_chips", "block_cycles")
    rows = {(r["mode"], r["format"], r["head_dim"], r["mask"]): r for r in study.block_costs(list(study.TABLES))}
    from vfasim.kernel import load_kernel

    triton = load_kernel("triton")
    for mode in ("fa2", "vfa"):
        for fmt, cls in (("fp8_e4m3", "8bit"), ("fp16", "16bit")):
            full = rows[(mode, fmt, 256, "full")]
            assert full["lengths"] == "512 2048 16384" and full["block_cycles"] > 0
            # the shipped floor is this figure (16-bit: full launches only)
            assert triton.tile(256, cls, False, algo=mode).block_floor(1) == full["block_cycles"]
        causal = rows[(mode, "fp8_e4m3", 256, "causal")]  # fp8's causal launches: their own slope
        assert triton.tile(256, "8bit", True, algo=mode).block_floor(1) == causal["block_cycles"] > 0
    assert rows[("fa2", "fp16", 128, "full")]["shipped_floor"] is None
    for head_dim, cls, fmt in ((64, "8bit", "fp8_e4m3"), (128, "8bit", "fp8_e4m3"),
                               (256, "16bit", "fp16")):  # VFA's CTA: FA2's plus the stamped difference
        vfa, fa2 = (triton.tile(head_dim, cls, False, algo=a).cta_cycles for a in ("vfa", "fa2"))
        stamped = rows[("vfa", fmt, head_dim, "full")]["cta_cycles"] - rows[("fa2", fmt, head_dim, "full")]["cta_cycles"]
        assert vfa - fa2 == stamped
    assert triton.tile(64, "16bit", False, algo="vfa") == triton.tile(64, "16bit", False, algo="fa2")  # not applied
    assert triton.tile(256, "8bit", False, algo="vfa").cta_cycles == triton.tile(256, "8bit", False, algo="fa2").cta_cycles
    assert study.main(["--tables", str(study.TABLES[1]), "--out", str(tmp_path)]) == 0
    text = (tmp_path / "block_cycles.md").read_text()
    assert text.startswith("| mode | format | head_dim |") and "| fa2 | fp8_e4m3 | 256 | full | 16384 |" in text


def test_prepass_compares_the_key_summary_launch_with_the_measured_calls(tmp_path):
    study = _script("real_chips", "prepass")
    rows = study.compare(study.TABLE, max_rows=5)  # head dim 64, fp16: 1 to 132 programs
    assert [r["programs"] for r in rows] == [1, 8, 33, 66, 132]
    one = rows[0]
    assert abs(one["error"]) < 0.01  # one program: the measured figure the model takes (program_us)
    # up to one program a core: one program's time and the other programs' blocks from the HBM behind its own
    hw = study.load_hw(study.CHIPS[study.CHIP])
    per_program = 64 * 64 * 2 / (hw.chip.hbm.bandwidth_gb_per_s * 1e3)  # us
    l2 = hw.chip.l2  # beside them, the dirty L2 lines their reads evict (l2.dirty_bytes): at most their write-back
    for r in rows[1:]:
        burst = (r["programs"] - 1) * per_program
        written = l2.dirty_writeback_per_byte * r["programs"] * 64 * 64 * 2 / (hw.chip.hbm.bandwidth_gb_per_s * 1e3)
        assert burst - 1e-3 <= r["model_us"] - one["model_us"] <= burst + written + 1e-3
    assert study.main(["--max-rows", "2", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "prepass.md").read_text().startswith("| head_dim | dtype | block_k | programs |")


def test_prepass_issue_rates_are_the_counted_launches_less_the_first_program_and_the_burst():
    """Each 16-bit and fp8 rule's issue rate is what --rates derives from its counted launch (bf16 shares fp16's; a
    repeated count, ncu_krepr.csv case 5 of ncu.csv case 1, within 1%)."""
    rows = _script("real_chips", "prepass").issue_rates()
    assert len(rows) == 10
    for r in rows:
        assert r["issue_bound"] > r["whole_duration"]  # the first program and the burst are not issue-bound time
        if r["dtype"] != "bf16":
            assert r["rule"] == pytest.approx(r["issue_bound"], abs=1e-3 if r["case"] != "5" else 0.015)


def test_l2dirty_derives_the_h200s_dirty_lines_from_its_two_runs(tmp_path):
    study = _script("real_chips", "l2dirty")
    rows, fig = study.derive(study.TABLE)
    from vfasim.hw import load_hw

    l2 = load_hw("H200").chip.l2
    assert (fig["dirty_bytes"], round(fig["dirty_writeback_per_byte"], 3)) == (l2.dirty_bytes, l2.dirty_writeback_per_byte)
    assert 4300 < fig["bandwidth_gb_per_s"] < 4700  # the clean stream's slope: the HBM's read rate
    for r in rows:  # an idle L2 keeps its dirty lines: after 10 ms the penalty is the same
        if r["read_mib"] >= 16:
            assert abs(r["dirty_idle_us"] - r["dirty_us"]) < 0.05 * r["dirty_us"]
    _, second = study.derive(study.TABLE.with_name("l2dirty_run2.csv"))
    assert abs(second["dirty_bytes"] / fig["dirty_bytes"] - 1) < 0.1
    assert abs(second["dirty_writeback_per_byte"] / fig["dirty_writeback_per_byte"] - 1) < 0.15
    assert study.main(["--out", str(tmp_path)])["dirty_bytes"] == fig["dirty_bytes"]


def test_calls_sets_each_kernel_of_a_decode_call_beside_the_models_launches(tmp_path):
    study = _script("real_chips", "calls")
    rows = study.compare(study.TABLE, max_calls=12)
    assert len(rows) == 12
    for r in rows:
        assert r["attention_us"] > 0 and r["model_attention_us"] > 0 and r["model_launches_us"] > 0
        assert (r["combine_us"] > 0) == (r["model_combine_us"] > 0)  # the model splits where the GPU did
    lines = study.summary(rows)
    assert sum(line["calls"] for line in lines) == sum(not r["host_held"] for r in rows)
