"""The command line: the JSON contract of ``vfasim run``, ``vfasim hw``, and one-line errors.

Runs ``vfasim.cli.main`` in-process (fast) on tiny sizes, plus one subprocess
test of the installed console script. Bad inputs must end with exit status 2,
exactly one ``error: ...`` line on stderr, nothing on stdout and no file
written in the working directory.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import vfasim
from vfasim.cli import main
from vfasim.hw import load_hw
from vfasim.trace import OP_KINDS

SMALL = ["--seq-len", "256", "--head-dim", "32", "--block-q", "64", "--block-k", "64"]
BUILTINS = ["C16V32", "C8V32", "C4V32", "C8V16", "C4V16", "C4V16-2xexp", "H100-SXM", "H200", "B200", "B300", "Ascend-910B"]
SHARE_KEYS = {"tensor", "vector", "exp"}
TOP_KEYS = {"hw", "algo", "workload", "latency_cycles", "pipelines", "shares", "bottleneck", "ops",
            "manifest", "numerics"}
MANIFEST_KEYS = {"version", "hw_digest", "seed", "trace_digest"}
NUMERICS_KEYS = {"rel_err_vs_fp64", "max_abs_err_vs_fp64", "nan_count", "inf_count",
                 "bit_identical_vs_fa2", "max_ulp_vs_fa2", "frozen_max_below_true_rows",
                 "skipped_block_fraction"}


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of one in-process ``vfasim`` call."""
    capsys.readouterr()
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    """The JSON document of a successful ``vfasim run ... --json`` (tiny size by default)."""
    status, out, err = cli(capsys, "run", *SMALL, *argv, "--json")
    assert (status, err) == (0, ""), err
    doc = json.loads(out)  # json.loads rejects trailing data: exactly one document
    assert isinstance(doc, dict)
    return doc


def is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_fraction(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0.0 <= x <= 1.0


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# ---------------------------------------------------------------- run --json contract


def check_timing(doc: dict) -> None:
    latency, pipes = doc["latency_cycles"], doc["pipelines"]
    assert is_int(latency) and latency > 0
    assert pipes and all(set(p) >= {"busy_cycles", "utilization"} for p in pipes.values())
    busy = [p["busy_cycles"] for p in pipes.values()]
    assert all(is_int(b) and b >= 0 for b in busy)
    for p in pipes.values():
        assert is_fraction(p["utilization"])
        assert p["utilization"] == pytest.approx(p["busy_cycles"] / latency)  # built-ins: 1 unit
    assert max(busy) <= latency <= sum(busy)
    assert doc["bottleneck"] in pipes
    assert set(doc["shares"]) == SHARE_KEYS and all(is_fraction(s) for s in doc["shares"].values())
    assert math.fsum(doc["shares"].values()) == pytest.approx(1.0)
    assert doc["ops"] and set(doc["ops"]) <= set(OP_KINDS)
    assert all(is_int(c) and c >= 0 for c in doc["ops"].values())
    assert sum(doc["ops"].values()) == sum(busy)  # every op's cycles land on one pipeline


def check_manifest(doc: dict, seed: int) -> None:
    man = doc["manifest"]
    assert set(man) >= MANIFEST_KEYS
    assert man["version"] == vfasim.__version__
    assert man["hw_digest"] == load_hw(doc["hw"]).digest()
    assert man["seed"] == seed
    assert isinstance(man["trace_digest"], str) and len(man["trace_digest"]) >= 16
    int(man["trace_digest"], 16)


def check_numerics(num: dict) -> None:
    assert set(num) >= NUMERICS_KEYS
    for key in ("rel_err_vs_fp64", "max_abs_err_vs_fp64"):
        assert isinstance(num[key], float) and num[key] >= 0.0
    for key in ("nan_count", "inf_count", "max_ulp_vs_fa2"):
        assert is_int(num[key]) and num[key] >= 0
    for key in ("bit_identical_vs_fa2", "frozen_max_below_true_rows", "skipped_block_fraction"):
        assert is_fraction(num[key])


@pytest.mark.parametrize("algo", ["fa2", "vfa", "vsa"])
def test_run_json_contract(capsys: pytest.CaptureFixture[str], algo: str) -> None:
    doc = run_json(capsys, "--hw", "C16V32", "--algo", algo, "--seed", "3")
    assert set(doc) >= TOP_KEYS
    assert (doc["hw"], doc["algo"], doc["workload"]) == ("C16V32", algo, "llm-like")
    check_timing(doc)
    check_manifest(doc, seed=3)
    check_numerics(doc["numerics"])


def test_fa2_has_larger_vector_share_than_vfa(capsys: pytest.CaptureFixture[str]) -> None:
    fa2, vfa = (run_json(capsys, "--hw", "C16V32", "--algo", a)["shares"] for a in ("fa2", "vfa"))
    assert fa2["vector"] > vfa["vector"]


def test_fa2_numerics_match_itself(capsys: pytest.CaptureFixture[str]) -> None:
    num = run_json(capsys, "--algo", "fa2", "--hw", "C16V32")["numerics"]
    assert num["bit_identical_vs_fa2"] == 1.0 and num["max_ulp_vs_fa2"] == 0
    assert num["frozen_max_below_true_rows"] == 0
    assert num["skipped_block_fraction"] == 0
    assert (num["nan_count"], num["inf_count"]) == (0, 0)
    assert num["rel_err_vs_fp64"] < 1e-2  # fp16 inputs, fp32 accumulation
    assert (num["matmul_dtype"], num["vector_dtype"]) == ("float16", "float32")


def test_numerics_follow_the_config_formats(capsys: pytest.CaptureFixture[str]) -> None:
    c16 = run_json(capsys, "--algo", "fa2", "--hw", "C16V32")["numerics"]
    c4 = run_json(capsys, "--algo", "fa2", "--hw", "C4V16")["numerics"]
    assert (c4["matmul_dtype"], c4["vector_dtype"]) == ("float4_e2m1", "float16")
    assert c4["rel_err_vs_fp64"] > 10 * c16["rel_err_vs_fp64"]  # MXFP4 inputs lose far more than fp16


def test_vsa_skips_more_with_a_larger_lam(capsys: pytest.CaptureFixture[str]) -> None:
    small = run_json(capsys, "--algo", "vsa", "--lam", "1e-9", "--workload", "llm-like")
    large = run_json(capsys, "--algo", "vsa", "--lam", "0.5", "--workload", "llm-like")
    assert large["options"]["lam"] == 0.5
    skipped = [doc["numerics"]["skipped_block_fraction"] for doc in (small, large)]
    assert 0.0 <= skipped[0] < skipped[1] <= 1.0


def test_table_output_names_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = cli(capsys, "run", *SMALL, "--algo", "fa2", "--hw", "C8V16")
    assert (status, err) == (0, "")
    assert out.startswith("fa2 on C8V16") and "latency" in out and "bottleneck" in out


# ---------------------------------------------------------------- determinism


def test_identical_runs_give_identical_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("run", *SMALL, "--algo", "vsa", "--seed", "7", "--json")
    first, second = cli(capsys, *argv), cli(capsys, *argv)
    assert first == second and first[0] == 0
    doc = json.loads(first[1])
    assert doc["manifest"]["trace_digest"] and doc["latency_cycles"] > 0


def test_other_seed_gives_other_trace_digest(capsys: pytest.CaptureFixture[str]) -> None:
    # vsa: which blocks are skipped depends on the data, so the trace must too.
    # (fa2/vfa traces hold only work counts, which do not depend on the data.)
    a, b = (run_json(capsys, "--algo", "vsa", "--seed", s)["manifest"] for s in ("0", "1"))
    assert a["trace_digest"] != b["trace_digest"]
    assert (a["seed"], b["seed"]) == (0, 1)


def test_other_seed_gives_other_numerics(capsys: pytest.CaptureFixture[str]) -> None:
    a, b = (run_json(capsys, "--algo", "vfa", "--seed", s) for s in ("0", "1"))
    assert a["numerics"]["max_abs_err_vs_fp64"] != b["numerics"]["max_abs_err_vs_fp64"]


# ---------------------------------------------------------------- hw list / show / paths


def write_override(path: Path) -> Path:
    path.write_text("base: C16V32\nname: my-core\npipelines:\n  exp:\n    throughput:\n"
                    "      float32: 32  # assumed, because this is a test\n")
    return path


def test_hw_list_names_the_builtins(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = cli(capsys, "hw", "list")
    assert (status, err) == (0, "")
    assert sorted(out.split()) == sorted(BUILTINS)


def test_hw_show_builtin(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = cli(capsys, "hw", "show", "C4V16-2xexp")
    assert (status, err) == (0, "")
    shown = yaml.safe_load(out)
    assert shown["name"] == "C4V16-2xexp"
    assert shown["pipelines"]["exp"]["throughput"]["float16"] == 32


def test_hw_show_yaml_path_merges_base(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_override(tmp_path / "mine.yaml")
    status, out, err = cli(capsys, "hw", "show", str(path))
    assert (status, err) == (0, "")
    shown = yaml.safe_load(out)
    assert shown["name"] == "my-core"
    assert shown["pipelines"]["exp"]["throughput"]["float32"] == 32
    base = load_hw("C16V32")
    assert shown["pipelines"]["vector"]["throughput"] == base.pipelines["vector"].throughput
    assert shown["clock_ghz"] == base.clock_ghz


def test_run_with_hw_path(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_override(tmp_path / "mine.yaml")
    mine = run_json(capsys, "--hw", str(path), "--algo", "fa2")
    base = run_json(capsys, "--hw", "C16V32", "--algo", "fa2")
    assert mine["hw"] == "my-core"
    assert mine["manifest"]["hw_digest"] == load_hw(path).digest() != base["manifest"]["hw_digest"]
    assert mine["pipelines"]["exp"]["busy_cycles"] < base["pipelines"]["exp"]["busy_cycles"]
    assert mine["latency_cycles"] <= base["latency_cycles"]


# ---------------------------------------------------------------- --qkv files


def test_run_on_saved_qkv(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 96, 16)).astype(np.float32) for _ in range(3))
    path = tmp_path / "saved_qkv.npz"
    np.savez(path, q=q, k=k, v=v)
    status, out, err = cli(capsys, "run", "--qkv", str(path), "--algo", "fa2", "--hw", "C16V32", "--block-q", "64",
                           "--block-k", "64", "--json")
    assert (status, err) == (0, ""), err
    doc = json.loads(out)
    assert "saved_qkv.npz" in doc["workload"]
    assert (doc["shape"]["seq_len"], doc["shape"]["head_dim"], doc["shape"]["heads"]) == (96, 16, 2)
    assert doc["numerics"]["nan_count"] == 0 and doc["numerics"]["rel_err_vs_fp64"] < 1e-2


def test_scale_blocks_that_do_not_tile_head_dim_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = cli(capsys, "run", "--hw", "C4V16", "--seq-len", "64", "--head-dim", "48", "--block-q", "64",
                           "--block-k", "64")
    assert (status, out) == (2, "")
    assert err == "error: block scale size 32 does not divide head_dim 48\n"


# ---------------------------------------------------------------- bad input


def make_inputs(root: Path) -> None:
    """The bad files the error cases below refer to, by relative path."""
    (root / "broken.yaml").write_text("base: C16V32\nname: [unclosed\n")
    (root / "unknown.yaml").write_text("base: C16V32\npipelines:\n  cube:\n    speed: 3\n")
    (root / "negative.yaml").write_text(
        "base: C16V32\npipelines:\n  exp:\n    throughput:\n      float32: -16\n")
    doc = load_hw("C16V32").model_dump(mode="json")
    del doc["clock_ghz"]
    (root / "missing.yaml").write_text(yaml.safe_dump(doc))
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 64, 16)).astype(np.float32) for _ in range(3))
    q_nan, k_inf = q.copy(), k.copy()
    q_nan[0, 3, 5], k_inf[0, 7, 2] = np.nan, np.inf
    np.savez(root / "nan.npz", q=q_nan, k=k, v=v)
    np.savez(root / "inf.npz", q=q, k=k_inf, v=v)
    np.savez(root / "mismatch.npz", q=q, k=k, v=v[:, :32])
    (root / "notnumpy.npz").write_text("this is plain text, not a numpy file\n")


BAD_INPUTS: dict[str, tuple[list[str], list[str]]] = {
    # id: (arguments after `run` + SMALL, fragments the message must contain)
    "hw-name": (["--hw", "nope"], ["nope", *BUILTINS]),
    "algo": (["--algo", "nope"], ["nope", "fa2", "vfa", "vsa"]),
    "workload": (["--workload", "nope"], ["nope", "random", "llm-like"]),
    "schedule": (["--schedule", "nope"], ["nope", "pipelined", "serial"]),
    "yaml-syntax": (["--hw", "broken.yaml"], ["broken.yaml", "yaml"]),
    "yaml-unknown-field": (["--hw", "unknown.yaml"], ["unknown.yaml", "pipelines.cube.speed"]),
    "yaml-negative": (["--hw", "negative.yaml"], ["negative.yaml", "pipelines.exp", "throughput"]),
    "yaml-missing": (["--hw", "missing.yaml"], ["missing.yaml", "clock_ghz"]),
    "seq-len-0": (["--seq-len", "0"], ["seq_len"]),
    "head-dim-neg": (["--head-dim", "-1"], ["head_dim"]),
    "block-q-0": (["--block-q", "0"], ["block_q"]),
    "heads-0": (["--heads", "0"], ["heads"]),
    "lam-0": (["--algo", "vsa", "--lam", "0"], ["lam"]),
    "lam-1": (["--algo", "vsa", "--lam", "1"], ["lam"]),
    "qkv-nan": (["--qkv", "nan.npz"], ["nan.npz", "q has", "non-finite"]),
    "qkv-inf": (["--qkv", "inf.npz"], ["inf.npz", "k has", "non-finite"]),
    "qkv-shapes": (["--qkv", "mismatch.npz"], ["mismatch.npz", "shape"]),
    "qkv-missing": (["--qkv", "absent.npz"], ["absent.npz", "not found"]),
    "qkv-not-numpy": (["--qkv", "notnumpy.npz"], ["notnumpy.npz", "parse"]),
    "seq-len-abc": (["--seq-len", "abc"], ["--seq-len", "abc"]),
}


@pytest.mark.parametrize("args, fragments", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_is_one_error_line(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch, args: list[str],
                                     fragments: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    make_inputs(tmp_path)
    before = listing(tmp_path)
    status, out, err = cli(capsys, "run", *([] if "--qkv" in args else SMALL), *args)
    assert status == 2
    assert out == ""
    assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    missing = [f for f in fragments if f.lower() not in err.lower()]
    assert not missing, f"message {err.strip()!r} does not name {missing}"
    assert listing(tmp_path) == before


# ---------------------------------------------------------------- the installed entry point


def test_console_script(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("vfasim")
    assert script.is_file(), f"console script not installed next to {sys.executable}"
    good = subprocess.run([str(script), "run", *SMALL, "--algo", "fa2", "--json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert (good.returncode, good.stderr) == (0, "")
    assert json.loads(good.stdout)["algo"] == "fa2"
    bad = subprocess.run([str(script), "run", "--algo", "nope"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("error: ") and bad.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_manifest_identifies_inputs_and_outputs(capsys: pytest.CaptureFixture[str]) -> None:
    a = run_json(capsys, "--algo", "vfa", "--seed", "0")["manifest"]
    b = run_json(capsys, "--algo", "vfa", "--seed", "1")["manifest"]
    assert a["trace_digest"] == b["trace_digest"]  # vfa's trace holds work counts only
    assert a["workload_digest"] != b["workload_digest"] and a["output_digest"] != b["output_digest"]
    assert run_json(capsys, "--algo", "vfa", "--seed", "0")["manifest"] == a


def test_bsfa_runs_with_its_default_topk_at_every_length(capsys):
    assert main(["run", "--algo", "bsfa", "--seq-len", "1024", "--head-dim", "64", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["options"]["topk"] == 7  # 8 capped at the blocks beside the diagonal
    assert vfasim.run("C4V16", "bsfa", seq_len=2048, head_dim=64).options["topk"] == 8
    assert main(["run", "--algo", "bsfa", "--seq-len", "1024", "--topk", "8"]) == 2  # a topk given is kept
