"""vfasim validate: the model against the shipped measurements, at a reduced table size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vfasim.validate.calibrate import _golden, at_bound
from vfasim.cli import main
from vfasim.hw import load_hw
from vfasim.kernel import load_kernel
from vfasim.validate import (
    FIT_SEQ_LENS,
    HELD_OUT_CAMPAIGNS,
    HELD_OUT_KERNELS,
    UNVERIFIED_TABLES,
    kernel_for,
    load_rows,
    mape,
    modelled,
    predict_all,
    run_key,
    subset,
    why_not,
)

ROOT = Path(__file__).resolve().parents[1]
GROUP_KEYS = {"chip", "kernel", "style", "regime", "rows_fit", "rows_heldout", "mape_fit", "mape_heldout",
              "bias_heldout", "mape_spec", "bias_spec", "worst"}


@pytest.fixture(scope="module")
def scatter_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("validate")


@pytest.fixture(scope="module")
def doc(scatter_folder: Path):
    """One validation for the module: its JSON, and its scatter in ``scatter_folder``."""
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        status = main(["validate", "--rows", "1", "--json", "--jobs", "2", "--out", str(scatter_folder), "--no-cache"])
    assert status == 0
    return json.loads(buf.getvalue())


def test_json_has_the_documented_keys_and_errors_are_fractions(doc):
    assert doc["groups"]
    for g in doc["groups"]:
        assert GROUP_KEYS <= set(g)
        rows = g["rows_fit"] + g["rows_heldout"]
        assert rows == 1 and len(g["worst"]) == 1  # one row per (chip, kernel, format, mode) at --rows 1
        w = g["worst"][0]
        expect = (w["predicted"] - w["row"]["value"]) / w["row"]["value"]
        assert w["error"] == pytest.approx(expect)
        shown = g["mape_fit"] if g["rows_fit"] else g["mape_heldout"]
        assert shown == pytest.approx(abs(expect))  # a fraction, not percent


def test_rows_without_a_kernel_description_are_counted_not_dropped(doc):
    counted = {(n["chip"], n["kernel"], n["reason"]): n["rows"] for n in doc["not_modelled"]}
    rows = subset(load_rows(), 1)
    expect: dict = {}
    for r in rows:
        if not modelled(r):
            expect[(r.chip, r.kernel, why_not(r))] = expect.get((r.chip, r.kernel, why_not(r)), 0) + 1
    assert counted == expect and ("Ascend-910B2", "torch_npu", "no kernel description") in counted
    assert any(k[1] == "cudnn" and "has no tile for head dim" in k[2] for k in counted)  # the paper's fp8 cuDNN rows
    assert sum(g["rows_fit"] + g["rows_heldout"] for g in doc["groups"]) + sum(counted.values()) == len(rows)


def test_the_report_says_how_many_of_each_groups_rows_it_compared(doc):
    from vfasim.validate import row_group
    from vfasim.validate.report import _compared_line

    totals: dict = {}
    for r in load_rows():
        if modelled(r):
            totals[row_group(r)] = totals.get(row_group(r), 0) + 1
    kept = [row_group(r) for r in subset(load_rows(), 1) if modelled(r)]  # --rows 1: one row of every group
    got = {(c["chip"], c["kernel"], c["dtype"], c["mode"]): (c["rows"], c["of"]) for c in doc["compared"]}
    assert got == {g: (kept.count(g), n) for g, n in totals.items()}
    assert sum(n for n, _ in got.values()) == sum(g["rows_fit"] + g["rows_heldout"] for g in doc["groups"])
    line = _compared_line(doc["compared"])
    assert f"{len(kept)} of {sum(totals.values())} modelled rows" in line


def test_unverified_transcriptions_and_predicted_only_kernels_are_never_fit_rows():
    from vfasim.kernel import kernels_predicted_only

    rows = load_rows()
    fp8 = [r for r in rows if r.table in UNVERIFIED_TABLES]
    assert fp8 and not any(r.fit for r in fp8)
    other = [r for r in rows if r.kernel in kernels_predicted_only()]  # the paper's Triton and cuDNN rows
    assert {"triton", "cudnn"} <= {r.kernel for r in other} and not any(r.fit for r in other)
    assert any(r.seq_len in FIT_SEQ_LENS and r.table not in UNVERIFIED_TABLES for r in other)  # held out by kernel
    late = [r for r in rows if r.kernel in HELD_OUT_KERNELS]  # measured after the tuning was fitted
    assert any(r.seq_len in FIT_SEQ_LENS for r in late) and not any(r.fit for r in late)
    later = [r for r in rows if r.table.startswith(HELD_OUT_CAMPAIGNS)]  # campaigns measured after the fit
    assert any(r.seq_len in FIT_SEQ_LENS for r in later) and not any(r.fit for r in later)
    assert {"edges_h100_2026_11", "occupancy_h100_2026_11", "occupancy_h200_2026_11"} <= \
        {r.table.split("/")[0] for r in later}
    blind = [r for r in rows if r.blind]  # measured after the fit too
    assert any(r.seq_len in FIT_SEQ_LENS for r in blind) and not any(r.fit for r in blind)
    assert all(r.fit == (r.seq_len in FIT_SEQ_LENS) for r in rows if r.table not in UNVERIFIED_TABLES
               and r.kernel not in kernels_predicted_only() and r.kernel not in HELD_OUT_KERNELS
               and not r.table.startswith(HELD_OUT_CAMPAIGNS) and not r.blind)


def test_a_triton_vsa_row_runs_vsa_on_the_triton_kernel_on_the_harness_inputs(monkeypatch):
    import vfasim.runner.api as api

    rows = [r for r in load_rows() if r.kernel in ("triton_vsa", "triton_vsa_attn") and r.decode]
    small = min(rows, key=lambda r: (r.batch * r.heads * r.seq_len, r.kernel))
    pair = [r for r in rows if r.kernel == "triton_vsa_attn" and run_key(r) == run_key(small)]
    assert why_not(small) == "" and kernel_for(small.kernel).name == "triton" and pair
    runs, real = [], api.run
    monkeypatch.setattr(api, "run", lambda *a, **kw: runs.append((real(*a, **kw), kw["kernel"].name)) or runs[-1][0])
    whole, alone = predict_all([small, pair[0]])
    assert [(r.algo, r.workload, kernel) for r, kernel in runs] == [("vsa", "random", "triton")]  # one run for both
    assert runs[0][0].ops["skip_test"] > 0 and alone.predicted < whole.predicted  # the latter without the pre-pass


def test_a_data_dependent_trace_is_made_once_for_both_tiers_and_chips(monkeypatch):
    """A VSA row's engine trace (the data's) is one per scope: tier 2 reuses tier 1's, and the same launch on another
    chip reuses it too (one task holds both), with the same predictions as each alone outside a scope."""
    import vfasim.runner.chip_run as chip_run
    from vfasim.validate import _shared_trace, chip_name, predict, predict_tiers, spec_only

    rows = [r for r in load_rows() if r.kernel == "triton_vsa" and r.decode and modelled(r)]
    same = [(a, b) for a in rows for b in rows if chip_name(a) < chip_name(b) and run_key(a)[1:] == run_key(b)[1:]]
    pair = list(min(same, key=lambda ab: (ab[0].batch * ab[0].heads * ab[0].seq_len, ab[0].table)))
    assert _shared_trace(pair[0], ()) == _shared_trace(pair[1], ())
    tiers = [{}, {chip_name(r): spec_only(load_hw(chip_name(r))) for r in pair}]
    calls, real = [], chip_run._engine_trace
    monkeypatch.setattr(chip_run, "_engine_trace", lambda *a: calls.append(a) or real(*a))
    scoped = predict_tiers(pair, tiers)
    assert len(calls) == 1
    assert scoped == [[predict(r, tier.get(chip_name(r))) for r in pair] for tier in tiers] and len(calls) == 5


def test_a_planted_wrong_config_makes_the_error_grow():
    rows = [r for r in load_rows() if modelled(r) and r.chip == "H100-SXM5-80GB" and r.kernel == "fa3"
            and r.dtype == "fp16" and r.head_dim == 128 and r.seq_len in (1024, 2048)]
    good = load_hw("H100-SXM")
    pipes = {n: p.model_copy(update={"throughput": {d: 4 * v for d, v in p.throughput.items()}})
             for n, p in good.pipelines.items()}
    chip = good.chip.model_copy(update={
        "l2": good.chip.l2.model_copy(update={"bandwidth_gb_per_s": 4 * good.chip.l2.bandwidth_gb_per_s}),
        "hbm": good.chip.hbm.model_copy(update={"bandwidth_gb_per_s": 4 * good.chip.hbm.bandwidth_gb_per_s})})
    planted = good.model_copy(update={"pipelines": pipes, "chip": chip})
    right, wrong = mape(predict_all(rows)), mape(predict_all(rows, {"H100-SXM": planted}))
    assert right is not None and wrong is not None and wrong > right + 0.5


def test_golden_search_and_the_at_bound_flag():
    assert _golden(lambda x: (x - 0.6) ** 2, 0.3, 1.0) == pytest.approx(0.6, abs=0.03)
    assert at_bound({"tensor_efficiency": 1.0, "unit_overhead_cycles": 5000.0}) == ["tensor_efficiency"]
    assert at_bound({"tensor_efficiency": 0.6, "unit_overhead_cycles": 0.0}) == ["unit_overhead_cycles"]
    assert at_bound({"tensor_efficiency": 0.6, "cta_cycles_scale": 2.99}) == ["cta_cycles_scale"]
    assert at_bound({"tensor_efficiency": 0.6, "cta_cycles_scale": None}) == []  # not set: nothing to flag


def test_the_fit_scales_measured_cta_cycles_where_every_tile_has_them():
    from vfasim.validate.calibrate import _tuned, scales_cta_cycles

    triton = load_kernel("triton")
    assert scales_cta_cycles(triton) and not scales_cta_cycles(load_kernel("fa3"))  # fa3's tiles give none
    unmeasured = triton.model_copy(update={"decode": triton.decode.model_copy(update={"tiles": [  # type: ignore
        t.model_copy(update={"cta_cycles": None}) for t in triton.decode.tiles]})})  # type: ignore[union-attr]
    assert not scales_cta_cycles(unmeasured)  # one tile without a measured figure: a flat overhead is fitted
    h100 = load_hw("H100-SXM")
    scaled = _tuned(h100, "fa2", {"tensor_efficiency": 0.7, "cta_cycles_scale": 0.5}).chip.kernel_tuning["fa2"]
    flat = _tuned(h100, "triton", {"tensor_efficiency": 0.7, "unit_overhead_cycles": 99.6}).chip.kernel_tuning["triton"]
    # the cost not fitted is dropped: the shipped fa2 figure is flat, triton's a scale; both at once is refused
    assert (scaled.cta_cycles_scale, scaled.unit_overhead_cycles) == (0.5, None)
    assert (flat.cta_cycles_scale, flat.unit_overhead_cycles) == (None, 100)


def test_the_text_report_and_the_scatter(doc, scatter_folder):
    from vfasim.validate.report import format_report  # what validate prints without --json

    out = format_report(doc)
    assert "tier 1: spec only" in out and "tier 2: calibrated" in out and "held-out" in out
    assert "not modelled" in out and "worst rows and why" in out
    assert (scatter_folder / "validate_scatter.png").stat().st_size > 0
    assert (scatter_folder / "validate_scatter.svg").read_text().lstrip().startswith("<?xml")


def test_bad_rows_option_is_one_line_error(capsys):
    assert main(["validate", "--rows", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: --rows must be >= 1")


def test_subset_is_deterministic_and_keeps_each_groups_ends():
    rows = load_rows()
    a, b = subset(rows, 2), subset(rows, 2)
    assert a == b and len(a) < len(rows)
    fa2 = [r for r in rows if r.chip == "H100-SXM5-80GB" and r.kernel == "fa2"]  # one group: fp16 prefill
    assert [r for r in a if r.chip == "H100-SXM5-80GB" and r.kernel == "fa2"] == [fa2[0], fa2[-1]]


def test_tier_one_uses_no_fitted_parameter_and_is_reported_beside_tier_two(doc):
    from vfasim.validate import spec_only

    h100 = load_hw("H100-SXM")
    assert h100.chip is not None and h100.chip.kernel_tuning  # fitted tuning ships ...
    tier1 = spec_only(h100).chip.kernel_tuning  # ... and tier 1 drops all of it but the microbenchmarked values
    shipped = h100.chip.kernel_tuning["triton"]
    assert set(tier1) == {"triton"} and tier1["triton"].tensor_efficiency == shipped.tensor_efficiency
    # tier 2 scales the tiles' measured per-CTA cycles (a microbenchmark); tier 1 takes them as they are
    assert shipped.cta_cycles_scale is not None and shipped.unit_overhead_cycles is None
    assert tier1["triton"].cta_cycles_scale is None and tier1["triton"].unit_overhead_cycles is None
    assert load_kernel("triton").tile(128, "16bit", False).cta_cycles
    tuned = [g for g in doc["groups"] if g["chip"] == "H100-SXM" and g["style"] == "fa2"]
    assert tuned and all(g["mape_spec"] is not None for g in tuned)
    # a tuned family's two tiers are different predictions of the same rows
    assert any(g["mape_spec"] != (g["mape_fit"] if g["rows_fit"] else g["mape_heldout"]) for g in tuned)


def test_regimes_are_declared_by_geometry_not_by_error():
    from vfasim.validate import Prediction, regime

    rows = [r for r in load_rows() if modelled(r)]
    decode = next(r for r in rows if r.decode)
    prefill = next(r for r in rows if not r.decode)
    assert regime(Prediction(decode, 1.0, "memory", {}, 1)) in ("short KV", "long KV")
    assert regime(Prediction(prefill, 1.0, "tensor", {}, 1)) == "one wave"
    assert regime(Prediction(prefill, 1e9, "tensor", {}, 3)) == "many waves"  # the error plays no part


def test_a_run_says_whether_measurements_cover_it(capsys):
    from vfasim.validate import CHIPS, coverage, load_rows

    assert load_rows("H200") == [r for r in load_rows() if CHIPS.get(r.chip) == "H200"]  # what coverage reads
    from vfasim.validate import run_mode

    assert coverage("H100-SXM", "fa2", "prefill", 4096, 128, "fp16")[0]
    assert not coverage("H200", "fa3", "decode", 16384, 128, "bf16")[0]  # H200's decode rows are fp8 only
    assert [run_mode(True, 16), run_mode(True, 17), run_mode(False, 1)] == ["decode", "chunked", "prefill"]
    assert coverage("H200", "triton", "chunked", 8192, 128, "fp16")[0]  # validation/blind_grid5_h200_2026_11
    assert not coverage("H100-SXM", "triton", "chunked", 8192, 128, "fp16")[0]  # no H100 chunk was measured
    inside, note = coverage("H100-SXM", "triton", "prefill", 100_000, 64, "fp16")
    assert not inside and note.startswith("outside the measured range") and "seq 256-16384" in note
    assert coverage("B200", "fa4", "prefill", 1024, 128, "fp16") == (
        False, "outside the measured range: no shipped measurement of kernel fa4 fp16 prefill on B200")
    assert main(["run", "--hw", "B200", "--algo", "fa2", "--kernel", "fa4", "--seq-len", "512", "--heads", "2"]) == 0
    assert "note: outside the measured range" in capsys.readouterr().err


def test_a_kernel_of_ones_own_is_validated_on_the_rows_it_claims(tmp_path, capsys, monkeypatch):
    import yaml

    import vfasim.validate

    doc = yaml.safe_load((ROOT / "kernels" / "fa3.yaml").read_text())
    doc["name"], doc["measured_as"] = "fa3-mine", ["fa3"]
    path = tmp_path / "fa3-mine.yaml"
    path.write_text(yaml.safe_dump(doc))
    everything = load_rows()
    rows = [r for r in everything if r.kernel == "fa3" and not r.decode][:2]
    # the report over the FA2 and FA3 tables only (the whole one is the other tests'): FA3's groups by one's own
    monkeypatch.setattr(vfasim.validate, "load_rows", lambda: [r for r in everything if r.kernel in ("fa2", "fa3")])
    preds = predict_all(rows, kernels=(load_kernel(path),))
    assert [p.kernel for p in preds] == ["fa3-mine", "fa3-mine"]
    assert main(["validate", "--rows", "1", "--jobs", "2", "--kernel", str(path), "--json"]) == 0
    groups = json.loads(capsys.readouterr().out)["groups"]
    assert {g["style"] for g in groups if g["kernel"] == "fa3"} == {"fa3-mine"}
    assert {g["style"] for g in groups if g["kernel"] == "fa2"} == {"fa2"}  # the rows it does not claim keep theirs
    doc["measured_as"] = []
    path.write_text(yaml.safe_dump(doc))
    assert main(["validate", "--kernel", str(path)]) == 2
    assert "claims no table kernel" in capsys.readouterr().err


def test_reused_work_changes_no_prediction():
    """Rows sharing a trace (batch and heads apart), a run (VFA's whole, attention-only and pre-pass rows), a decode
    row and a row at its table's clock, on both tiers (whose timing cores differ for fa3, not for the H100's triton):
    predicted in one ``reuse`` scope (``predict_tiers``) exactly as each alone outside one."""
    from vfasim.validate import _shared_trace, chip_name, kernel_for, predict, predict_tiers, spec_only

    rows = [r for r in load_rows() if modelled(r)]
    shared = [r for r in rows if r.chip == "H100-SXM5-80GB" and r.dtype == "bf16" and r.head_dim == 64 and r.causal
              and r.seq_len == 256 and r.kernel.startswith("triton") and (r.batch, r.heads) in ((16, 28), (64, 8))]
    short = [next(r for r in rows if r.decode and r.chip == "H100"), next(r for r in rows if r.clock_mhz)]
    picked = shared + short
    assert len({_shared_trace(r, ()) for r in shared}) == 3 < len(shared)  # fa2, vfa and vsa tasks, each shared
    assert {r.kernel for r in shared} >= {"triton_vfa", "triton_vfa_attn", "triton_vfa_minit"}
    chips = {chip_name(r) for r in picked}
    tiers = [{}, {c: spec_only(load_hw(c)) for c in chips}]
    alone = [[predict(r, tier.get(chip_name(r)), kernel_for(r.kernel)) for r in picked] for tier in tiers]
    assert predict_tiers(picked, tiers) == alone  # every field: predicted value, bound, utilisation, waves


def test_the_efficient_backends_rows_are_predicted_by_its_description_and_held_out():
    from vfasim.validate import kernel_for

    rows = [r for r in load_rows() if r.kernel == "sdpa_efficient" and modelled(r)]
    assert len(rows) > 800 and all(r.heldout_always and not r.fit for r in rows)  # never fitted on
    k = kernel_for("sdpa_efficient")
    assert k is not None and k.name == "efficient" and "sdpa_efficient" in k.predicts
    assert "efficient" not in load_hw("H100-SXM").chip.kernel_tuning  # type: ignore[union-attr]  # spec only


def test_the_blind_rows_are_reported_apart_in_both_tiers(doc):
    from types import SimpleNamespace as NS

    from vfasim.validate.report import _blind_doc, format_report

    def pred(table: str, error: float):
        return NS(row=NS(blind=table.startswith("blind_"), fit=False, table=table), error=error)

    blind, seen = "blind_h100_2026_11/attention.csv", "gpu_h100_2026_11/attention.csv"
    group = NS(fit=[], heldout=[pred(blind, 0.1), pred(seen, 0.5)], spec=[pred(blind, -0.2), pred(seen, 0.9)])
    got = _blind_doc([group])
    assert got["rows"] == 1 and got["mape_heldout"] == pytest.approx(0.1) and got["mape_spec"] == pytest.approx(0.2)
    assert got["bias_spec"] == pytest.approx(-0.2)
    assert not any(r.fit for r in load_rows() if r.blind)  # measured after the fit: held out, at fit lengths too
    assert "blind rows (validation/blind_*" in format_report(doc) and set(doc["blind"]) == set(got)
    assert all(r.blind == r.table.startswith("blind_") for r in load_rows()) and any(r.blind for r in load_rows())


def test_the_run_store_gives_back_the_runs_it_kept_and_reads_no_broken_entry(monkeypatch):
    import vfasim.runner.api as api
    from vfasim.io.refcache import run_store
    from vfasim.validate import predict_tiers

    rows = [r for r in load_rows() if modelled(r) and r.chip == "H100-SXM5-80GB" and r.seq_len <= 512
            and not r.decode][:3]
    assert len(rows) == 3
    made = predict_tiers(rows, [{}], cache=True)[0]
    assert made == predict_tiers(rows, [{}])[0]  # the store changes no figure
    kept = sorted(run_store().folder.glob("*.npy"))
    assert kept

    def no_run(*args, **kwargs):
        raise AssertionError("a run was made, not read from the store")

    monkeypatch.setattr(api, "run", no_run)
    assert predict_tiers(rows, [{}], cache=True)[0] == made  # every run read back
    with pytest.raises(AssertionError, match="not read from the store"):
        predict_tiers(rows, [{}], cache=False)
    kept[0].write_bytes(b"not an entry")  # a broken entry counts as absent: its run is made again
    with pytest.raises(AssertionError, match="not read from the store"):
        predict_tiers(rows, [{}], cache=True)


def test_validate_without_the_cache_keeps_no_run():
    from vfasim.cli import build_parser
    from vfasim.io.refcache import run_store
    from vfasim.validate import predict_tiers

    assert build_parser().parse_args(["validate", "--no-cache"]).cache is False
    assert build_parser().parse_args(["validate"]).cache is True
    rows = [r for r in load_rows() if modelled(r) and r.chip == "H100-SXM5-80GB" and r.seq_len <= 512][:2]
    predict_tiers(rows, [{}], cache=False)
    assert not run_store().folder.exists()


def test_a_chunk_of_queries_against_a_longer_kv_runs_as_the_last_queries_of_the_keys():
    """Chunked prefill (fewer queries than keys): the model's decode convention with that many queries, on the tiles
    the kernel's decode path names for them (Triton's decode tile up to 16 queries, its prefill tile beyond)."""
    import dataclasses

    import vfasim
    from vfasim.validate import Row, row_group, table_row

    base = table_row("x/attention.csv", {"chip": "H200", "kernel": "triton_fa2", "dtype": "fp16", "head_dim": "128",
                                         "causal": "true", "seq_len": "1000", "seq_len_q": "300", "batch": "1",
                                         "heads": "4", "kv_heads": "2", "mode": "prefill", "metric": "latency",
                                         "value": "50", "unit": "us"})
    assert isinstance(base, Row) and base.chunk and why_not(base) == "" and row_group(base)[3] == "chunked"
    (p,) = predict_all([base])
    run = vfasim.run("H200", "fa2", kernel="triton", seq_len=1000, queries=300, decode=True, causal=True, heads=4,
                     kv_heads=2, matmul_format="fp16")
    assert p.predicted == pytest.approx(run.latency_us, rel=1e-9)
    assert run.shape["block_q"] == 128  # more than max_queries (16): the prefill tile, not the 16-row decode tile
    few = vfasim.run("H200", "fa2", kernel="triton", seq_len=1000, queries=16, decode=True, causal=False, heads=4,
                     kv_heads=2, matmul_format="fp16")
    assert few.shape["block_q"] == 16
    sdpa = dataclasses.replace(base, kernel="sdpa_flash")
    assert "SDPA aligns is_causal top left" in why_not(sdpa)  # its mask would differ from the model's
    assert why_not(dataclasses.replace(sdpa, causal=False)) == ""
    assert why_not(dataclasses.replace(base, seq_len_q=2000)) == "prefill with more queries than keys"
