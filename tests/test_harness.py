"""The GPU harness's table writer and schemas (standard library only: no torch, no GPU), and the
committed measurement campaigns in validation/gpu_*/ (every row complete, sidecars with provenance)."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness import rows as R  # noqa: E402

CAMPAIGNS = sorted(p for p in (ROOT / "validation").glob("gpu_*") if p.is_dir())


def _row(**changes):
    row = {"chip": "H100-SXM5-80GB", "kernel": "triton_fa2", "dtype": "fp16", "head_dim": 128, "causal": True,
           "seq_len": 1024, "batch": 2, "heads": 16, "kv_heads": 4, "seq_len_q": 1024, "mode": "prefill",
           "metric": "latency", "value": 123.5, "unit": "us", "spread_pct": 1.2, "reps": 30}
    row.update(changes)
    return row


def _prov(table="attention.csv"):
    return {k: "x" for k in R.PROVENANCE_KEYS} | {"table": table, "clocks_locked": False, "finished": True}


def test_rows_module_needs_no_torch():
    code = ("import sys; import harness.rows, harness.inputs; "
            "assert 'torch' not in sys.modules and 'triton' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_written_table_has_the_schema_columns_in_order(tmp_path):
    path = tmp_path / "attention.csv"
    R.write_csv(path, R.ATTENTION, [_row(), _row(kernel="sdpa_cudnn", causal=False, value=99.0)])
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        body = list(reader)
    assert tuple(header) == R.ATTENTION.columns
    assert header[:8] == ["chip", "kernel", "dtype", "head_dim", "causal", "seq_len", "batch", "heads"]
    assert body[0][header.index("causal")] == "true" and body[1][header.index("causal")] == "false"
    assert body[1][header.index("kernel")] == "sdpa_cudnn"


def test_a_pairs_table_keeps_both_kernels_and_their_per_rep_ratio(tmp_path):
    pair = {"chip": "H100-SXM5-80GB", "kernel_a": "triton_fa2", "kernel_b": "triton_vfa_attn", "dtype": "fp8_e4m3",
            "head_dim": 64, "causal": False, "seq_len": 4096, "batch": 4, "heads": 32, "kv_heads": 32,
            "seq_len_q": 4096, "mode": "prefill", "a_us": 1230.5, "b_us": 1110.25, "ratio": 1.10812,
            "ratio_spread_pct": 0.8, "reps": 20}
    path = tmp_path / "pairs.csv"
    R.write_csv(path, R.PAIRS, [pair])
    R.write_sidecar(path, _prov("pairs.csv"))
    assert R.check_table_file(path, R.PAIRS) == 1
    with path.open(newline="") as f:
        [got] = list(csv.DictReader(f))
    assert (got["ratio"], got["causal"]) == ("1.10812", "false")
    assert float(got["a_us"]) == 1230.5 and float(got["b_us"]) == 1110.25
    for bad in ({"ratio": 0.0}, {"ratio": float("nan")}, {"ratio_spread_pct": -1.0}, {"kernel_b": None}):
        with pytest.raises(R.SchemaError):
            R.write_csv(tmp_path / "bad.csv", R.PAIRS, [{**pair, **bad}])
    assert not (tmp_path / "bad.csv").exists()  # nothing half-written


@pytest.mark.parametrize("bad, words", [
    ({"dtype": None}, "empty value in column 'dtype'"),
    ({"dtype": ""}, "empty value in column 'dtype'"),
    ({"dtype": "fp32"}, "column 'dtype' = 'fp32'"),
    ({"value": float("nan")}, "column 'value'"),
    ({"value": -3.0}, "column 'value'"),
    ({"head_dim": 0}, "column 'head_dim'"),
    ({"causal": "yes"}, "column 'causal'"),
    ({"unit": "ms"}, "column 'unit'"),
    ({"extra": 1}, "unknown column 'extra'"),
])
def test_bad_rows_are_refused_with_a_one_line_error(tmp_path, bad, words):
    row = _row(**bad)
    path = tmp_path / "attention.csv"
    with pytest.raises(R.SchemaError) as err:
        R.write_csv(path, R.ATTENTION, [_row(), row])
    msg = str(err.value)
    assert words in msg and "\n" not in msg and "row 2" in msg
    assert not path.exists()  # nothing written when any row is bad


def test_missing_column_is_refused(tmp_path):
    row = _row()
    del row["seq_len_q"]
    with pytest.raises(R.SchemaError, match="missing column 'seq_len_q'"):
        R.write_csv(tmp_path / "a.csv", R.ATTENTION, [row])


def test_table_checks_each_row_when_added(tmp_path):
    t = R.Table(tmp_path / "micro.csv", R.MICRO)
    t.add({"name": "hbm_copy_gbps", "value": 3000.0, "unit": "GB/s", "notes": "copy"})
    with pytest.raises(R.SchemaError, match="micro row 2: empty value in column 'notes'"):
        t.add({"name": "x", "value": 1.0, "unit": "u", "notes": ""})
    t.flush()
    assert len(list(csv.DictReader((tmp_path / "micro.csv").open()))) == 1


def test_writes_are_atomic(tmp_path, monkeypatch):
    path = tmp_path / "attention.csv"
    R.write_csv(path, R.ATTENTION, [_row()])
    before = path.read_text()
    calls = []
    real_replace = os.replace

    def failing_replace(src, dst):
        calls.append((Path(src), Path(dst)))
        raise OSError("disk full")

    monkeypatch.setattr(R.os, "replace", failing_replace)
    with pytest.raises(OSError):
        R.write_csv(path, R.ATTENTION, [_row(), _row(value=7.0)])
    assert path.read_text() == before  # the old complete file is still there
    assert calls and calls[0][1] == path and calls[0][0].parent == path.parent  # temp file beside the target
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attention.csv"]  # no temp file left behind
    monkeypatch.setattr(R.os, "replace", real_replace)
    R.write_csv(path, R.ATTENTION, [_row(), _row(value=7.0)])
    assert len(path.read_text().splitlines()) == 3


def test_sidecar_needs_the_provenance_keys(tmp_path):
    csv_path = tmp_path / "attention.csv"
    prov = _prov()
    del prov["clocks_locked"]
    with pytest.raises(R.SchemaError, match="missing provenance key 'clocks_locked'"):
        R.write_sidecar(csv_path, prov)
    side = R.write_sidecar(csv_path, _prov() | {"timing": {"method": "events", "reps": 30}})
    assert side.name == "attention.yaml"
    assert set(R.PROVENANCE_KEYS) <= R.read_sidecar_keys(side)


def test_sidecar_is_valid_yaml():
    yaml = pytest.importorskip("yaml")
    data = {"gpu": "NVIDIA H100 80GB HBM3", "clocks": {"clocks.sm": "1980 MHz", "list": [1, 2.5, "a: b"]},
            "clocks_locked": False, "empty": {}, "none": None, "quote": 'say "hi"\\'}
    assert yaml.safe_load(R.yaml_text(data)) == data


def test_check_table_file_finds_a_bad_row(tmp_path):
    path = tmp_path / "attention.csv"
    R.write_csv(path, R.ATTENTION, [_row()])
    R.write_sidecar(path, _prov())
    assert R.check_table_file(path) == 1
    text = path.read_text().replace(",123.5,", ",nan,")
    path.write_text(text)
    with pytest.raises(R.SchemaError, match="column 'value'"):
        R.check_table_file(path)


def test_chip_names_and_percentiles():
    assert R.chip_name("NVIDIA H100 80GB HBM3") == "H100-SXM5-80GB"
    assert R.chip_name("NVIDIA H200") == "H200"
    med, spread = R.summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert med == 3.0 and math.isclose(spread, (4.2 - 1.8) / 3 * 100)


def test_there_is_a_committed_campaign():
    assert CAMPAIGNS, "no validation/gpu_* campaign folder"


@pytest.mark.parametrize("campaign", CAMPAIGNS, ids=lambda p: p.name)
def test_campaign_tables_pass_their_schema(campaign):
    tables = sorted(campaign.glob("*.csv"))
    assert "micro.csv" in {p.name for p in tables}  # every other phase is one a run may leave out
    for path in tables:
        n = R.check_table_file(path)  # header, every row, sidecar with the provenance keys
        assert n > 0, f"{path.name} has no rows"
        side = (path.with_suffix(".yaml")).read_text()
        assert "clocks_locked: false" in side and "finished: true" in side
    assert (campaign / "README.md").is_file()
    if not (campaign / "attention.csv").is_file():
        return
    with (campaign / "attention.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert all(float(r["value"]) > 0 and math.isfinite(float(r["value"])) for r in rows)
    assert all(r["chip"] == rows[0]["chip"] for r in rows)
    assert (campaign / "README.md").is_file()
    npz = campaign / "numerics.npz"
    if npz.exists():
        assert npz.stat().st_size < 5 * 2 ** 20


@pytest.mark.parametrize("table", ["pairs_h100_2026_11/pairs.csv", "pairs_h100_2026_11/repeat/pairs.csv",
                                   "pairs_h200_2026_11/pairs.csv"])
def test_the_paired_tables_cover_the_fa3_regime_grid_with_both_kernels(table):
    path = ROOT / "validation" / table
    assert R.check_table_file(path, R.PAIRS) == 108
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert {(r["kernel_a"], r["kernel_b"]) for r in rows} == {("triton_fa2", "triton_vfa_attn")}
    assert len({(r["dtype"], r["head_dim"], r["causal"], r["seq_len"]) for r in rows}) == 108
    assert all(int(r["batch"]) * int(r["seq_len"]) == 16384 and int(r["heads"]) * int(r["head_dim"]) == 2048
               for r in rows)
    assert "finished: true" in path.with_suffix(".yaml").read_text()


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_the_chain_table_has_every_cta_count_and_length(gpu):
    path = ROOT / "validation" / f"chain_{gpu}_2026_11" / "chain.csv"
    assert R.check_table_file(path, R.CHAIN) == 72
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert {(r["heads"], r["seq_len"], r["seq_len_q"], r["kv_heads"], r["kernel_b"]) for r in rows} == {
        (h, n, "128", "1", k) for h in ("1", "132", "264") for n in ("2048", "16384")
        for k in ("triton_vfa_attn", "triton_dots")}


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_the_floor_table_passes_the_attention_schema_and_covers_its_grid(gpu):
    """validation/floor_<gpu>_2026_11: FA2, VFA's kernel and the no-softmax loop for every shape and format."""
    folder = ROOT / "validation" / f"floor_{gpu}_2026_11"
    assert R.check_table_file(folder / "floor.csv", R.ATTENTION) == 324
    with (folder / "floor.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    shapes = {(r["dtype"], r["head_dim"], r["causal"], r["seq_len"]) for r in rows}
    assert len(shapes) == 3 * 3 * 2 * 6
    for shape in shapes:
        kernels = sorted(r["kernel"] for r in rows if (r["dtype"], r["head_dim"], r["causal"], r["seq_len"]) == shape)
        assert kernels == ["triton_dots", "triton_fa2", "triton_vfa_attn"]


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_the_units_table_keeps_the_cta_count_at_every_length(gpu):
    """validation/units_<gpu>_2026_11: 1,056 query blocks of 128 rows at each K/V length, per head dim and format."""
    path = ROOT / "validation" / f"units_{gpu}_2026_11" / "units.csv"
    assert R.check_table_file(path, R.ATTENTION) == 36
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["kernel"] for r in rows} == {"triton_fa2"}
    assert {int(r["heads"]) * int(r["seq_len"]) // 128 for r in rows} == {1056}


@pytest.mark.parametrize("campaign", ["dispatch_h100_2026_11", "dispatch_fp8_h100_2026_11"])
def test_the_dispatch_table_has_one_stamped_row_per_program_of_every_case(campaign):
    """validation/dispatch_*: each case's programs, each once, on an SM, ending after it starts."""
    folder = ROOT / "validation" / campaign
    with (folder / "programs.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    with (folder / "calls.csv").open(newline="") as f:
        calls = {r["case"]: int(r["programs"]) for r in csv.DictReader(f)}
    by_case: dict[str, set] = {}
    for r in rows:
        assert 0 <= int(r["sm"]) < 132 and 0 <= int(r["start_ns"]) < int(r["end_ns"]) and int(r["sm_cycles"]) > 0
        by_case.setdefault(r["case"], set()).add((int(r["pid_m"]), int(r["pid_bh"])))
    assert {c: len(p) for c, p in by_case.items()} == calls
    for case, programs in by_case.items():
        first = next(r for r in rows if r["case"] == case)
        n_m = -(-int(first["seq_len"]) // 128)
        assert programs == {(m, bh) for m in range(n_m) for bh in range(int(first["batch"]) * int(first["heads"]))}
    for name in ("programs.yaml", "calls.yaml"):
        assert "finished: true" in (folder / name).read_text()


def test_ncu_table_joins_the_raw_page_with_the_probe_manifest(tmp_path):
    from harness import ncu_table
    folder = ROOT / "validation" / "ncu_vsa_h100_2026_11"
    got = ncu_table.rows(str(folder / "ncu_raw.txt"), str(folder / "manifest.csv"), "attn_fwd")
    assert len(got) == 16 and [r["launch"] for r in got[:2]] == ["compile", "profiled"]
    prof = {(r["mode"], r["dtype"], int(r["head_dim"])): r for r in got if r["launch"] == "profiled"}
    vfa, vsa = prof[("vfa", "fp16", 128)], prof[("vsa", "fp16", 128)]
    assert float(vsa["duration_ns"]) > float(vfa["duration_ns"])
    assert int(vsa["shared_mem_per_block"]) < int(vfa["shared_mem_per_block"])  # no multi-stage K/V buffers
    with pytest.raises(SystemExit, match="launches"):
        ncu_table.rows(str(folder / "ncu_raw.txt"), str(folder / "manifest.csv"), "krepr_kernel")


def test_the_gpu_side_tools_answer_help_without_torch():
    for module in ("harness.sustained", "harness.ncu_table", "harness.asm_dump", "harness.probe", "harness.dispatch",
                   "harness.mma", "harness.launches", "harness.prepass", "harness.gqa"):
        code = (f"import sys, runpy; sys.argv = ['{module}', '--help']\n"
                f"try:\n    runpy.run_module('{module}', run_name='__main__')\nexcept SystemExit as e:\n"
                f"    assert e.code == 0, e.code\nassert 'torch' not in sys.modules and 'triton' not in sys.modules")
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True)


def test_a_probe_case_with_an_unknown_fourth_field_is_refused_in_one_line_without_torch():
    code = ("import sys, runpy; sys.argv = ['harness.probe', '--cases', 'fa2:fp16:256:bogus']\n"
            "try:\n    runpy.run_module('harness.probe', run_name='__main__')\nexcept SystemExit as e:\n"
            "    assert e.code == 2, e.code\nassert 'torch' not in sys.modules")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "a fourth field is a query count, full or causal" in done.stderr.strip().splitlines()[-1]


def test_the_sustained_table_says_the_clock_falls_under_continuous_load():
    import csv
    with (ROOT / "validation" / "sustained_h100_2026_11" / "sustained.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 10 and all(int(r["samples"]) > 10 for r in rows)
    assert all(float(r["sm_clock_mhz_median"]) < 1830 for r in rows)  # below the config's 1.83 GHz, every case


def test_ncu_table_keeps_the_query_rows_a_newer_manifest_records():
    from harness import ncu_table
    folder = ROOT / "validation" / "ncu_decode_h100_2026_11"
    got = ncu_table.rows(str(folder / "ncu_raw.txt"), str(folder / "manifest.csv"), "attn_fwd")
    assert {r["seq_len_q"] for r in got} == {"16", "128"}
    older = ROOT / "validation" / "ncu_vsa_h100_2026_11"  # its manifest has no seq_len_q column
    assert "seq_len_q" not in ncu_table.rows(str(older / "ncu_raw.txt"), str(older / "manifest.csv"), "attn_fwd")[0]


def test_a_campaign_log_writes_the_command_and_stamped_lines(tmp_path, capsys):
    out = tmp_path / "campaign"
    log = R.CampaignLog(out, "harness.tileload", ["tileload.py", "--out", str(out), "--quick"])
    log("first")
    log("second")
    log.close()
    assert (out / "command.txt").read_text() == f"python -m harness.tileload --out {out} --quick\n"
    lines = (out / "log.txt").read_text().splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == ["first", "second"]
    assert all(re.match(r"^\[ *\d+\.\ds\] ", line) for line in lines)
    assert capsys.readouterr().out.splitlines() == lines and 0 <= log.elapsed() < 60


def test_write_rows_writes_a_schemaless_table_whole_or_not_at_all(tmp_path):
    path = tmp_path / "summary.csv"
    R.write_rows(path, [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}])
    assert path.read_text().splitlines() == ["a,b", "1,x", "2,y"]
    with pytest.raises(ValueError, match="no rows"):
        R.write_rows(path, [])
    assert path.read_text().splitlines()[0] == "a,b"  # the old table stands
    assert [p.name for p in tmp_path.iterdir()] == ["summary.csv"]  # no temporary file left behind


@pytest.mark.parametrize("table, per_length", [("units.csv", 1056 * 128), ("units_decode.csv", 528)])
def test_the_efficient_units_tables_keep_the_work_at_every_length(table, per_length):
    """validation/units_efficient_h100_2026_11: SDPA's efficient backend, the same query rows at each K/V length
    (prefill: 1,056 blocks of 128; decode: 528 one-query heads), fp16, three head dims."""
    path = ROOT / "validation" / "units_efficient_h100_2026_11" / table
    assert R.check_table_file(path, R.ATTENTION) == 18
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["kernel"] for r in rows} == {"sdpa_efficient"} and {r["dtype"] for r in rows} == {"fp16"}
    assert {int(r["heads"]) * int(r["seq_len_q"]) for r in rows} == {per_length}


def test_the_flex_grid_takes_every_group_in_turn_and_imports_no_torch():
    # harness/flex.py's grid is plain Python: each group (the FA3 regime per head dim, mask and GQA; odd lengths;
    # head dims 256 and 96; decode) has a case among the first ones, so a run cut by its budget keeps some of each
    code = ("import json, sys\nfrom harness.flex import grid\ng = grid()\nassert 'torch' not in sys.modules\n"
            "print(json.dumps([len(g), len(grid(quick=True)), sorted({c[5] for c in g[:12]}), "
            "sum(c[3] == 1 for c in g[:12])]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    n, quick, dims, decode = json.loads(done.stdout)
    assert (n, quick, dims, decode) == (83, 16, [64, 96, 128, 256], 1)


@pytest.mark.parametrize("campaign", ["flex_h100_2026_11", "flex_h200_2026_11", "flex_bf16_h100_2026_11"])
def test_the_flex_campaign_passes_its_schemas_and_every_output_matched_sdpa(campaign):
    folder = ROOT / "validation" / campaign
    assert R.check_table_file(folder / "attention.csv", R.ATTENTION) == 83
    assert R.check_table_file(folder / "checks.csv", R.CHECKS) == 83
    assert R.check_table_file(folder / "profile.csv", R.PROFILE) > 83  # a row per CUDA kernel of each case
    with (folder / "attention.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["kernel"] for r in rows} == {"flex_attention"}
    assert sum(r["mode"] == "decode" for r in rows) == 15 and max(float(r["spread_pct"]) for r in rows) < 10
    with (folder / "checks.csv").open(newline="") as f:
        assert all(r["passed"] == "true" and float(r["rel_l2"]) <= float(r["tol"]) for r in csv.DictReader(f))


@pytest.mark.parametrize("campaign, table, rows, per_length", [
    ("flex_units_h100_2026_11", "units.csv", 18, 1056 * 128), ("flex_units_h100_2026_11", "units_decode.csv", 17, 528),
    ("flex_units_h200_2026_11", "units.csv", 18, 1056 * 128), ("flex_units_h200_2026_11", "units_decode.csv", 17, 528)])
def test_the_flex_units_tables_keep_the_work_at_every_length(campaign, table, rows, per_length):
    """validation/flex_units_h100_2026_11 and _h200_: FlexAttention, the same query rows at each K/V length, fp16."""
    path = ROOT / "validation" / campaign / table
    assert R.check_table_file(path, R.ATTENTION) == rows
    with path.open(newline="") as f:
        got = list(csv.DictReader(f))
    assert {r["kernel"] for r in got} == {"flex_attention"}
    assert {int(r["heads"]) * int(r["seq_len_q"]) for r in got} == {per_length}


def test_flex_off_a_multiple_of_128_its_sweep_and_edge_pairs_are_what_the_grids_say():
    """harness/flex.py units_grid(off_multiple=True) and edges_grid (plain Python, no torch), and the tables they made
    (validation/flex_units_off_h200_2026_11, flex_edges_h200_2026_11): every length off a multiple of 128 but each
    pair's first, the same 1,056 query blocks of 128 rows at every length of the sweep."""
    code = ("import json, sys\nfrom harness.flex import edges_grid, units_grid\nassert 'torch' not in sys.modules\n"
            "print(json.dumps([units_grid(off_multiple=True), edges_grid()]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    sweep, edges = json.loads(done.stdout)
    assert all(n % 128 and h * -(-n // 128) == 1056 for _, h, _, _, n, _, _ in sweep) and len(sweep) == 21
    assert [c[4] % 128 == 0 for c in edges[:8]] == [True, False] * 4
    for folder, cases in (("flex_units_off_h200_2026_11", sweep), ("flex_edges_h200_2026_11", edges)):
        table = "units.csv" if "units" in folder else "attention.csv"
        assert R.check_table_file(ROOT / "validation" / folder / table, R.ATTENTION) == len(cases)
        with (ROOT / "validation" / folder / table).open(newline="") as f:
            got = [(int(r["batch"]), int(r["heads"]), int(r["kv_heads"]), int(r["seq_len_q"]), int(r["seq_len"]),
                    int(r["head_dim"]), r["causal"] == "true") for r in csv.DictReader(f)]
        assert got == [tuple(c) for c in cases]
        with (ROOT / "validation" / folder / "checks.csv").open(newline="") as f:
            assert all(r["passed"] == "true" for r in csv.DictReader(f))
    with pytest.raises(SystemExit):
        __import__("harness.flex", fromlist=["main"]).main(["--out", "unused", "--off-multiple"])


def test_the_triton_cache_summary_reads_every_kernel_or_one_by_name(tmp_path):
    """harness/asm_dump.cache_kernels, which harness.asm_dump and harness.flex share: one row per compiled kernel of a
    Triton cache (its metadata and PTX counts), group files and non-kernel JSON left out. Standard library only."""
    from harness.asm_dump import cache_kernels

    for tag, name, warps in (("aaaa", "attn_fwd", 8), ("bbbb", "triton_tem_fused_flex_attention_0", 4)):
        folder = tmp_path / tag
        folder.mkdir()
        (folder / f"{name}.json").write_text(json.dumps({"name": name, "num_warps": warps, "num_stages": 3,
                                                         "shared": 131072}))
        (folder / f"{name}.ptx").write_text("wgmma.mma_async.sync\nwgmma.mma_async.sync\nbar.sync 0;\n")
        (folder / f"__grp__{name}.json").write_text("{}")
    (tmp_path / "cccc").mkdir()
    (tmp_path / "cccc" / "other.json").write_text(json.dumps({"child_paths": {}}))
    every = cache_kernels(str(tmp_path))
    assert [(r["name"], r["num_warps"], r["wgmma"], r["bar_sync"]) for r in every] == \
        [("attn_fwd", 8, 2, 1), ("triton_tem_fused_flex_attention_0", 4, 2, 1)]
    assert [r["variant"] for r in cache_kernels(str(tmp_path), "attn_fwd")] == ["aaaa"]


def test_the_mma_benchmark_output_becomes_rows_with_flops_without_torch(tmp_path):
    code = "import sys, harness.mma; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
    from harness.mma import rows_from_output

    out = ("inst,ilp,warps,blocks_per_sm,iters,sms_seen,mma_per_sm_per_clk,min_sm,max_sm,kernel_us\n"
           "m16n8k16.f32.f16.f16.f32,8,4,1,4096,132,0.58105,0.58,0.582,120.5\n"
           "m16n8k32.f32.e4m3.e4m3.f32,8,4,1,4096,132,0.6268,0.62,0.63,70.25\n")
    rows = rows_from_output(out)
    assert [r["flops_per_mma"] for r in rows] == [4096, 8192]
    assert rows[0]["flops_per_sm_per_clk"] == pytest.approx(0.58105 * 4096)
    table = R.Table(tmp_path / "mma.csv", R.MMA)
    for r in rows:
        table.add(r)
    table.flush()
    R.write_sidecar(table.path, _prov("mma.csv"))
    assert R.check_table_file(tmp_path / "mma.csv") == 2
    with pytest.raises(ValueError, match="unknown instruction 'm8n8k4'"):
        rows_from_output(out.replace("m16n8k16.f32.f16.f16.f32", "m8n8k4"))


@pytest.mark.parametrize("campaign", ["mma_h100_2026_11", "mma_h200_2026_11"])
def test_the_mma_campaign_reaches_about_two_thirds_of_the_datasheet_rate(campaign):
    with open(ROOT / "validation" / campaign / "mma.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert R.check_table_file(ROOT / "validation" / campaign / "mma.csv", R.MMA) == len(rows) == 224
    best = max(float(r["flops_per_sm_per_clk"]) for r in rows if r["inst"] == "m16n8k16.f32.f16.f16.f32")
    assert 0.6 < best / 4096 < 0.7  # what hw_configs/h100-sxm.yaml's mma_efficiency.per_stream cites
    assert all(int(r["sms_seen"]) == 132 for r in rows)


@pytest.mark.parametrize("campaign, count", [("blind_h100_2026_11", 282), ("blind_h200_2026_11", 282),
                                             ("blind_flex_h100_2026_11", 66), ("blind_grid2_h200_2026_11", 248),
                                             ("blind_grid3_h200_2026_11", 252), ("blind_grid4_h200_2026_11", 261),
                                             ("blind_grid5_h200_2026_11", 150), ("blind_grid6_h200_2026_11", 242),
                                             ("blind_grid7_h200_2026_11", 244), ("blind_flex_h200_2026_11", 66),
                                             ("blind_grid8_h200_2026_11", 248)])
def test_the_blind_campaigns_hold_only_shapes_no_other_campaign_measured(campaign, count):
    folder = ROOT / "validation" / campaign
    for name in ("attention", "checks"):
        assert R.check_table_file(folder / f"{name}.csv") > 0
    with (folder / "checks.csv").open(newline="") as f:
        assert all(r["passed"] == "true" for r in csv.DictReader(f))  # every variant matched its reference

    def shapes(path):
        with path.open(newline="") as f:
            return {(r["head_dim"], r["causal"], r["seq_len"], r["seq_len_q"], r["batch"], r["heads"], r["kv_heads"])
                    for r in csv.DictReader(f)}

    blind = shapes(folder / "attention.csv")
    others = set().union(*(shapes(p) for p in (ROOT / "validation").glob("*/attention.csv")
                           if not p.parent.name.startswith("blind_")))
    assert len(blind) == count and not blind & others


@pytest.mark.parametrize("campaign, hbm", [("l2share_h100_2026_11", 3007), ("l2share_h200_2026_11", 4253)])
def test_the_l2share_campaigns_say_what_their_readmes_say(campaign, hbm):
    path = ROOT / "validation" / campaign / "micro.csv"
    assert R.check_table_file(path, R.MICRO) == 54
    with path.open(newline="") as f:
        rate = {r["name"]: float(r["value"]) for r in csv.DictReader(f)}
    for programs in (264, 528, 1056):
        lone = rate[f"l2share_{programs}cta_g1_distinct_gbps"]
        assert lone == rate[f"l2share_{programs}cta_g1_delivered_gbps"]
        assert 1.0 < lone / hbm < 1.1  # a read-only stream, a little above the copy's read + write rate
        assert rate[f"l2share_{programs}cta_warm_spread_gbps"] < rate[f"l2share_{programs}cta_warm_lockstep_gbps"]
    # a fill does not take the L2's port from the reads: a group of 8 reads and fills more than the all-hit run reads
    assert rate["l2share_528cta_g8_delivered_gbps"] + rate["l2share_528cta_g8_distinct_gbps"] > \
        rate["l2share_528cta_g528_delivered_gbps"]


def test_the_flex_decode_sweep_launches_the_main_template_where_the_group_is_not_a_power_of_two():
    folder = ROOT / "validation" / "flex_decode_h100_2026_11"
    code = "import json, sys\nfrom harness.flex import decode_grid\nassert 'torch' not in sys.modules\n" \
           "print(json.dumps(decode_grid()))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    cases = [tuple(c) for c in json.loads(done.stdout)]
    assert R.check_table_file(folder / "attention.csv", R.ATTENTION) == len(cases) == 23
    with (folder / "checks.csv").open(newline="") as f:
        assert all(r["passed"] == "true" for r in csv.DictReader(f))
    with (folder / "profile.csv").open(newline="") as f:
        kernels: dict[tuple[int, int], int] = {}
        for r in csv.DictReader(f):
            key = (int(r["batch"]), int(r["heads"]) // int(r["kv_heads"]))
            kernels[key] = kernels.get(key, 0) + 1
    # the decoding path: two set-up kernels, the template and two reductions; the fallback: no reductions
    assert {g: n for (b, g), n in kernels.items() if b == 1} == {1: 5, 2: 5, 3: 3, 4: 5, 5: 3, 6: 3, 8: 5}


def test_the_edges_campaign_pairs_each_length_on_a_tile_edge_with_the_next_and_names_fa2s_instantiation():
    folder = ROOT / "validation" / "edges_h100_2026_11"
    code = "import json, sys\nfrom harness.edges import grid\nassert 'torch' not in sys.modules\n" \
           "print(json.dumps([grid(), grid(quick=True)]))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    full, quick = ([tuple(c) for c in g] for g in json.loads(done.stdout))
    assert len(quick) < len(full) and set(quick) <= set(full)
    lengths = {c[4] for c in full}
    assert {256, 257, 1024, 1025} <= lengths  # a whole number of 128-row tiles and one token more
    assert R.check_table_file(folder / "attention.csv", R.ATTENTION) == len(full) == 260
    assert R.check_table_file(ROOT / "validation" / "edges_h200_2026_11" / "attention.csv", R.ATTENTION) == 260
    with (folder / "profile.csv").open(newline="") as f:
        flash = [r for r in csv.DictReader(f) if r["kernel"] == "sdpa_flash" and "flash_fwd_kernel" in r["cuda_kernel"]]
    # the fifth flag of flash_fwd_kernel<traits, Is_dropout, Is_causal, Is_local, Has_alibi, Is_even_MN, ...>
    even = {int(r["seq_len"]): r["cuda_kernel"].split("> >, ")[1].split(", ")[4] == "true" for r in flash}
    assert {n: even[n] for n in (256, 257, 1024, 1025, 3000, 3072)} == \
        {256: True, 257: False, 1024: True, 1025: False, 3000: False, 3072: True}
    ncu = list(csv.DictReader((folder / "ncu" / "ncu.csv").open(newline="")))
    stalls = {(r["causal"], r["seq_len"]): float(r["stall_no_instruction"]) for r in ncu if r["launch"] == "profiled"}
    assert stalls[("True", "257")] > 1.5 * stalls[("True", "384")] > 10 * stalls[("False", "257")]


def test_ncu_table_takes_several_kernels_a_launch_and_only_the_metrics_a_run_profiled(tmp_path):
    folder = ROOT / "validation" / "ncu_splitkv_h100_2026_11"
    from harness import ncu_table

    raw, manifest = str(folder / "ncu_raw.txt"), str(folder / "manifest.csv")
    with pytest.raises(SystemExit, match="inst_executed.sum missing"):  # profiled without the instruction sections
        ncu_table.rows(raw, manifest, "sdpa", per_launch=2)
    with pytest.raises(SystemExit, match="lists 22 sdpa launches of 1 kernels but .* has 44 rows"):
        ncu_table.rows(raw, manifest, "sdpa", present_only=True)
    got = ncu_table.rows(raw, manifest, "sdpa", ("launch__grid_size",), per_launch=2, present_only=True)
    assert len(got) == 44 and "inst_executed" not in got[0]
    # an SDPA decode call: FA2's split kernel, then its combine kernel, on the same case
    assert [("combine" in r["cuda_kernel"], r["case"]) for r in got[:4]] == \
        [(False, "0"), (True, "0"), (False, "0"), (True, "0")]
    assert {r["launch__grid_size"] for r in got if r["case"] == "3" and "combine" not in r["cuda_kernel"]} == {"256"}
    out = tmp_path / "ncu.csv"
    assert ncu_table.main(["--raw", raw, "--manifest", manifest, "--kernel", "sdpa", "--per-launch", "2",
                           "--present-only", "--out", str(out)]) == 0
    with out.open(newline="") as f:
        assert [r["case"] for r in csv.DictReader(f)] == [r["case"] for r in got]


def test_the_occupancy_campaign_sweeps_cta_counts_and_shows_a_lone_flash_cta_is_not_held_to_half_an_sm():
    code = "import json, sys\nfrom harness.occupancy import grid\nassert 'torch' not in sys.modules\n" \
           "print(json.dumps([grid(), grid(quick=True)]))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    full, quick = ([tuple(c) for c in g] for g in json.loads(done.stdout))
    assert len(quick) < len(full) and set(quick) <= set(full)
    for chip in ("h100", "h200"):
        folder = ROOT / "validation" / f"occupancy_{chip}_2026_11"
        assert R.check_table_file(folder / "attention.csv", R.ATTENTION) == len(full) == 192
        with (folder / "attention.csv").open(newline="") as f:
            us = {(int(r["head_dim"]), int(r["heads"])): float(r["value"]) for r in csv.DictReader(f)
                  if r["kernel"] == "sdpa_flash" and r["seq_len"] == "8192"}
        # 2 heads: 128 CTAs, one an SM; 4 heads: 256, two an SM. Alone, a CTA takes well under the two's time
        for d in (64, 128):
            assert 0.5 < us[(d, 2)] / us[(d, 4)] < 0.7


def test_the_occupancy_profile_shows_a_lone_efficient_cta_issuing_on_under_a_third_of_the_cycles():
    with (ROOT / "validation" / "ncu_occupancy_h100_2026_11" / "ncu.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["launch"] == "profiled"]
    assert len(rows) == 9
    issue = {(r["mode"], int(r["head_dim"]), int(r["heads"])):
             float(r["smsp__issue_active.avg.pct_of_peak_sustained_active"]) for r in rows}
    warps = {(r["mode"], int(r["head_dim"]), int(r["heads"])): float(r["warps_active_per_cycle"]) for r in rows}
    assert warps[("sdpa_efficient", 64, 1)] == 4.0  # one 4-warp CTA an SM: a warp a scheduler
    assert issue[("sdpa_efficient", 64, 1)] < 30 < issue[("sdpa_flash", 64, 2)]  # alone: latency-bound issue
    assert issue[("sdpa_efficient", 64, 4)] > 2 * issue[("sdpa_efficient", 64, 1)]  # four CTAs hide it


def test_a_causal_cta_of_fa2s_triton_kernel_costs_thousands_of_cycles_more_in_fp8():
    """validation/dispatch_fp8_h100_2026_11: beyond its key blocks, a causal CTA costs FA2's kernel far more than a
    full one in fp8 (its masked blocks' loop of their own), and little more in fp16 or in VFA's one-loop kernel."""
    import numpy as np

    with (ROOT / "validation" / "dispatch_fp8_h100_2026_11" / "programs.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    cycles: dict[tuple[str, int], list[int]] = {}
    for r in rows:
        cycles.setdefault((r["case"], int(r["pid_m"])), []).append(int(r["sm_cycles"]))

    def extra(stem: str) -> float:  # d128, 512 tokens: query block p walks p + 1 key blocks of 128, a full CTA 4
        causal = [float(np.median(cycles[(f"{stem}_causal", p)])) for p in range(4)]
        rate, intercept = np.polyfit(np.arange(1, 5), causal, 1)
        return intercept - (float(np.median(cycles[(f"{stem}_full", 0)])) - 4 * rate)

    fp8, fp16 = extra("fa2_fp8_e4m3_d128_s512_b32"), extra("fa2_d128_s512_b32")
    vfa8 = extra("vfa_fp8_e4m3_d128_s512_b32")
    assert fp8 > 2000 and fp8 > 1.8 * fp16 and fp8 > 2.5 * vfa8 and 0 < vfa8 < 1500


def test_the_launches_campaign_prices_a_further_kernel_below_a_calls_first_and_sees_cudnns_memset():
    """validation/launches_h200_2026_11: 1-4 empty kernels a call rise by about the back-to-back figure a kernel,
    well under a call of one; every cuDNN call of its sm90 kernel launches a Memset, its one-query decode none."""
    folder = ROOT / "validation" / "launches_h200_2026_11"
    for name in ("calls.csv", "profile.csv"):
        assert R.read_sidecar_keys(folder / name.replace(".csv", ".yaml")) >= {"gpu", "command", "torch"}
    with (folder / "calls.csv").open(newline="") as f:
        us = {r["case"]: float(r["median_us"]) for r in csv.DictReader(f)}
    k = [1, 2, 3, 4]
    t = [us[f"empty_x{n}"] for n in k]
    slope = (sum((a - 2.5) * (b - sum(t) / 4) for a, b in zip(k, t))) / sum((a - 2.5) ** 2 for a in k)
    assert 1.0 < slope < 2.0 < t[0]  # a further kernel costs about the queued figure (1.356 us), not a call's first
    with (folder / "profile.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["kernel"] == "sdpa_cudnn"]
    calls: dict[tuple, set] = {}
    for r in rows:
        calls.setdefault((r["dtype"], r["batch"], r["heads"], r["seq_len_q"], r["seq_len"]), set()).add(
            r["cuda_kernel"][:40])
    memset = {c for c, names in calls.items() if "Memset (Device)" in names}
    sm90 = {c for c, names in calls.items() if any("sm90" in n for n in names)}
    assert memset == sm90 and len(sm90) >= 8 and len(calls) > len(sm90)


@pytest.mark.parametrize("chip", ["h100", "h200"])
def test_the_efficient_tiles_block_cycles_are_what_nsight_compute_measured_on_each_gpu(chip):
    """kernels/efficient.yaml's block_cycles come from the H100's lone- and shared-CTA launches; the H200 (the same SM)
    measures them within 1%: duration x SM clock / key blocks a CTA walks, at 8,192 tokens."""
    import yaml

    doc = yaml.safe_load((ROOT / "kernels" / "efficient.yaml").read_text())
    given = {t["head_dim_max"]: t["block_cycles"] for t in doc["tiles"] if "block_cycles" in t}
    with (ROOT / "validation" / f"ncu_occupancy_{chip}_2026_11" / "ncu.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["launch"] == "profiled" and r["mode"] == "sdpa_efficient"]
    seen = set()
    for r in rows:
        d, ctas = int(r["head_dim"]), int(r["heads"])  # 128 CTAs a head at 8,192 tokens: heads = CTAs an SM
        cycles = float(r["duration_ns"]) * 1e-9 * float(r["gpc_clock_hz"]) / (8192 // (64 if d == 64 else 128))
        assert cycles == pytest.approx(given[d][ctas], rel=0.01)
        seen.add((d, ctas))
    assert seen == {(d, k) for d, by in given.items() for k in by}


def _sweep(module: str, campaign: str, table: str) -> tuple[set, list[dict]]:
    """A GPU sweep's grid as ``module`` makes it without torch (checked), and its committed table's rows (its sidecar
    holding the provenance)."""
    code = f"import json, sys\nfrom {module} import grid\nassert 'torch' not in sys.modules\nprint(json.dumps(grid()))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    folder = ROOT / "validation" / campaign
    assert R.read_sidecar_keys(folder / f"{table}.yaml") >= {"gpu", "command", "torch"}
    with (folder / f"{table}.csv").open(newline="") as f:
        return {tuple(c) for c in json.loads(done.stdout)}, list(csv.DictReader(f))


def test_the_gqa_sweep_covers_its_grid_and_two_decode_ctas_an_sm_slow_each_other():
    """validation/gqa_decode_h200_2026_11: every (kernel, K/V length, query heads) of harness.gqa's grid, made without
    torch; Triton FA2's decode takes the same time for 1 to 4 query heads a K/V head (one CTA an SM) and a third more
    at 8 (two an SM), what kernels/triton.yaml's FA2 and VFA decode tiles cite as block_cycles."""
    cases, rows = _sweep("harness.gqa", "gqa_decode_h200_2026_11", "gqa")
    us = {(r["kernel"], int(r["seq_len"]), int(r["heads"])): float(r["call_us"]) for r in rows}
    assert set(us) == cases
    for n in (10000, 48000):
        alone = us[("triton_fa2", n, 8)]
        assert all(abs(us[("triton_fa2", n, h)] / alone - 1) < 0.02 for h in (16, 32))
        assert 1.25 < us[("triton_fa2", n, 64)] / alone < 1.4
    from vfasim import run  # the decode tiles' block_cycles come from these rows: the model gives them back
    for algo, heads in (("fa2", 8), ("fa2", 64), ("vfa", 8), ("vfa", 64)):
        res = run("H200", algo, kernel="triton", decode=True, queries=1, seq_len=10000, batch=4, heads=heads,
                  kv_heads=8, head_dim=128, causal=False, matmul_format="fp16", numerics_heads=0)
        attention_us = res.chip["attention_call_us"]  # the attention kernel timed alone: the key summaries untimed
        assert abs(attention_us / us[(f"triton_{algo}" + ("_attn" if algo == "vfa" else ""), 10000, heads)] - 1) < 0.03


def test_the_prepass_sweep_covers_its_grid_and_a_lone_program_costs_most_of_a_wave_of_one_an_sm():
    """validation/prepass_h200_2026_11: every (head dim, format, key-block size, programs) of harness.prepass's grid,
    made without torch; a wave of 132 programs (one an SM) takes under 1.3x one program's GPU time."""
    cases, rows = _sweep("harness.prepass", "prepass_h200_2026_11", "prepass")
    assert {(int(r["head_dim"]), r["dtype"], int(r["block_n"]), int(r["programs"])) for r in rows} == cases
    us = {(int(r["head_dim"]), r["dtype"], int(r["block_n"]), int(r["programs"])): float(r["kernel_us"]) for r in rows}
    for (d, dtype, bn, p), t in us.items():
        if p == 132:
            assert us[(d, dtype, bn, 1)] < t < 1.3 * us[(d, dtype, bn, 1)]


def test_a_calls_kernels_are_read_after_its_flush_and_sleep_and_refused_when_the_calls_differ():
    from harness.launches import split_calls

    pre = ["fill", "spin"]

    def call(t0: float, combine_us: float) -> list[tuple[str, float, float]]:
        return [("fill", t0, t0 + 10), ("spin", t0 + 10, t0 + 500), ("split", t0 + 502, t0 + 530),
                ("combine", t0 + 531.5, t0 + 531.5 + combine_us)]

    evs = call(0, 4.0) + call(1000, 6.0) + call(2000, 5.0)
    parts = split_calls(evs, pre, 3)
    assert [(p["order"], p["cuda_kernel"]) for p in parts] == [(0, "split"), (1, "combine")]
    assert parts[0]["start_us"] == pytest.approx(2.0) and parts[0]["us"] == pytest.approx(28.0)
    assert parts[1]["start_us"] == pytest.approx(31.5) and parts[1]["us"] == pytest.approx(5.0)  # the median
    assert split_calls(evs[:-1], pre, 3) is None  # one call launched a kernel fewer
    assert split_calls(call(0, 4.0) + [("fill", 1000, 1010), ("spin", 1010, 1500), ("other", 1502, 1530),
                                       ("combine", 1531, 1535)], pre, 2) is None  # another kernel
    assert split_calls(call(0, 4.0)[:2], pre, 1) is None  # no kernel after the sleep
    row = {"kernel": "sdpa_flash", "dtype": "fp16", "batch": 1, "heads": 32, "kv_heads": 8, "head_dim": 128,
           "seq_len_q": 1, "seq_len": 8192, "causal": False, **parts[0], "call_us": 31.4, "call_spread_pct": 2.0,
           "calls": 3}
    R.CALLS.check_row({k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in row.items()}, "row 1")
    with pytest.raises(ValueError, match="start_us"):
        R.CALLS.check_row({**{k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in row.items()},
                           "start_us": "-1"}, "row 1")


def test_the_fifth_blind_grid_holds_regimes_and_shapes_no_campaign_measured():
    """rows.BLIND5 as attention.blind5_grid lays it out (torch and triton stubbed: the grid needs neither):
    chunked prefill causal and not, 8- and 16-query decode, head dims 80 and 96, 32K and 64K, none of it measured."""
    code = ("import json, sys\nfrom unittest.mock import MagicMock\n"
            "for m in ('torch', 'triton', 'triton.language'):\n    sys.modules[m] = MagicMock()\n"
            "from harness.attention import blind5_grid\nfrom harness.rows import BLIND5\n"
            "print(json.dumps([[c.head_dim, c.causal, c.seq_k, c.seq_q, c.batch, c.heads, c.kv_heads, c.mode]"
            " for c in blind5_grid(BLIND5)]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    cases = json.loads(done.stdout)
    shapes = {tuple(str(v).lower() for v in c[:7]) for c in cases}
    assert len(shapes) == len(cases) == 150
    chunks = [c for c in cases if c[7] == "prefill" and c[3] < c[2]]
    assert {c[1] for c in chunks} == {True, False} and len(chunks) == 78
    assert {c[3] for c in cases if c[7] == "decode"} == {8, 16}
    assert {80, 96} <= {c[0] for c in cases} and {32768, 65536} <= {c[2] for c in cases}
    measured = set()
    for path in (ROOT / "validation").glob("*/attention.csv"):
        if path.parent.name.startswith("blind_grid5_"):
            continue
        with path.open(newline="") as f:
            measured |= {(r["head_dim"], r["causal"], r["seq_len"], r["seq_len_q"], r["batch"], r["heads"],
                          r["kv_heads"]) for r in csv.DictReader(f)}
    assert not shapes & measured


def test_the_three_ctas_an_sm_sweep_gives_the_decode_tiles_third_block_cycles():
    """validation/gqa_decode3_h200_2026_11: harness.gqa at 33 sequences over 4 K/V heads and 1-3 query heads a K/V
    head (132, 264 and 396 CTAs: one, two and three an SM); the slope over the key blocks at three an SM, at the
    config's 1.83 GHz, is what kernels/triton.yaml's FA2 and VFA decode tiles give as block_cycles[3]."""
    from vfasim.kernel import load_kernel

    folder = ROOT / "validation" / "gqa_decode3_h200_2026_11"
    assert R.read_sidecar_keys(folder / "gqa.yaml") >= {"gpu", "command", "torch"}
    with (folder / "gqa.csv").open(newline="") as f:
        us = {(r["kernel"], int(r["seq_len"]), int(r["heads"])): float(r["call_us"]) for r in csv.DictReader(f)
              if r["batch"] == "33" and r["kv_heads"] == "4"}
    assert len(us) == 12
    blocks = math.ceil(48000 / 64) - math.ceil(10000 / 64)
    triton = load_kernel("triton")
    for kernel, algo in (("triton_fa2", "fa2"), ("triton_vfa_attn", "vfa")):
        slope = [(us[(kernel, 48000, h)] - us[(kernel, 10000, h)]) / blocks for h in (4, 8, 12)]
        assert slope[0] < slope[1] < slope[2]  # each CTA's key block takes longer the more share its SM
        rule = triton.tile(128, "16bit", False, True, algo)
        assert rule.block_cycles[3] == round(slope[2] * 1830)
        assert abs(rule.block_cycles[2] / (slope[1] * 1830) - 1) < 0.03  # the first sweep's two-an-SM figure
