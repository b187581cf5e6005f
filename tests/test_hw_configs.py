"""The built-in configs encode the paper's ratios, cite a source for every number, and load safely."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vfasim.errors import VfasimError
from pydantic import ValidationError

from vfasim.hw import HardwareConfig, builtin_names, load_hw

CONFIG_DIR = Path(__file__).resolve().parents[1] / "hw_configs"
PAPER_SIX = ["C16V32", "C8V32", "C4V32", "C8V16", "C4V16", "C4V16-2xexp"]


def test_the_six_paper_configs_and_the_chips_are_built_in():
    assert sorted(builtin_names()) == sorted([*PAPER_SIX, "H100-SXM", "H200", "B200", "B300", "Ascend-910B"])


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_every_number_says_where_it_comes_from(path):
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        value = line.split("#")[0]
        if re.search(r":\s*-?[0-9.]+(e-?\d+)?\s*$", value):
            comment = line.partition("#")[2].lower()
            fitted = "fitted to claims" in comment and "by: vfasim figure latency-ratio" in comment
            assert "source:" in comment or "assumed, because" in comment or fitted, f"{path.name}:{lineno}: {line}"


@pytest.mark.parametrize("path", sorted([*CONFIG_DIR.glob("*.yaml"), *(CONFIG_DIR.parent / "kernels").glob("*.yaml")]),
                         ids=lambda p: p.name)
def test_every_measurement_a_source_names_is_in_the_repository(path):
    # a source that cites validation/<folder>/<file> points at a committed file (a renamed campaign folder would
    # otherwise leave its numbers citing nothing)
    root = CONFIG_DIR.resolve().parent
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        for cited in re.findall(r"validation/[\w.-]+(?:/[\w.-]+\.(?:csv|yaml|md|txt))?", line.partition("#")[2]):
            assert (root / cited).exists(), f"{path.name}:{lineno} cites {cited}, which is not in the repository"


def test_paper_ratios_are_encoded_as_given():
    hw = load_hw("C16V32")
    cube, vec, exp = (hw.pipelines[p].throughput for p in ("cube", "vector", "exp"))
    assert cube["float16"] * 2 == cube["float8_e4m3"]  # FP16 : FP8 = 1 : 2
    assert cube["float16"] * 6 == cube["float4_e2m1"]  # FP16 : FP4 = 1 : 6
    assert exp["float32"] * 250 == cube["float16"]  # exp = 1/250 of FP16 tensor
    assert vec["float32"] == 8 * exp["float32"]  # vector = 8 x exp


def test_configs_differ_only_in_what_the_paper_varies():
    base = load_hw("C16V32").model_dump()
    for name in PAPER_SIX:
        doc = load_hw(name).model_dump()
        doc["pipelines"]["exp"]["throughput"]["float16"] = base["pipelines"]["exp"]["throughput"]["float16"]
        for key in ("name", "description", "precision"):
            doc[key] = base[key]
        for kind in ("cast_p", "quant_p"):  # converting P costs what its format costs
            doc["work_factor"].pop(kind, None)
        assert doc == base, name
    assert (load_hw("C4V16-2xexp").pipelines["exp"].throughput["float16"]
            == 2 * load_hw("C4V16").pipelines["exp"].throughput["float16"])


def test_names_are_case_insensitive_and_paths_load(tmp_path):
    assert load_hw("c4v16").name == "C4V16"
    path = tmp_path / "mine.yaml"
    path.write_text("base: C4V16\nname: mine\nscore_buffers: 2\n")
    hw = load_hw(path)
    assert (hw.name, hw.score_buffers, hw.precision.matmul) == ("mine", 2, "float4_e2m1")


@pytest.mark.parametrize("text,match", [
    ("base: C16V32\nname: x\npipelines:\n  cube:\n    speed: 3\n", r"pipelines\.cube\.speed: unknown field"),
    ("base: C16V32\nname: x\nscore_buffers: 0\n", r"score_buffers: Input should be greater than 0"),
    ("base: C16V32\nname: x\nop_map:\n  exp: sfu\n", r"unknown pipeline 'sfu'"),
    ("base: C16V32\nname: x\npipelines:\n  exp:\n    throughput:\n      float16: -1\n", r"must be a finite rate"),
    ("base: C16V32\nname: x\nprecision:\n  matmul: int3\n", r"unknown data type 'int3'"),
    ("name: [unclosed\n", r"not valid YAML at line"),
    ("- a list\n", r"expected a mapping"),
    ("base: NOPE\n", r"unknown hw config 'NOPE'"),
    ("base: C16V32\nname: x\nprecision:\n  matmul: bfloat16\npipelines:\n  cube:\n    throughput:\n"
     "      float16: 1\n", None),
    ("base: C16V32\nname: x\npipelines:\n  exp:\n    shares_issue_with: sfu\n",
     r"pipelines\.exp\.shares_issue_with must name another pipeline"),
    ("base: C16V32\nname: x\npipelines:\n  exp:\n    issue_share: 0.5\n",
     r"pipelines\.exp\.issue_share applies only with shares_issue_with"),
    ("base: H100-SXM\nname: x\npipelines:\n  exp:\n    issue_share: 0\n", r"issue_share"),
    ("base: H100-SXM\nname: x\nchip:\n  l2:\n    unpipelined_bytes_per_cycle: 0\n",
     r"chip\.l2\.unpipelined_bytes_per_cycle: Input should be greater than 0"),
    ("base: H100-SXM\nname: x\nchip:\n  l2:\n    unpipelined_bytes_per_cycle: .nan\n",
     r"chip\.l2\.unpipelined_bytes_per_cycle"),
    ("base: C16V32\nname: x\npipelines:\n  exp:\n    shares_issue_with: exp\n",
     r"pipelines\.exp\.shares_issue_with must name another pipeline"),
    ("base: C16V32\nname: x\npipelines:\n  exp:\n    shares_issue_with: vector\n  cube:\n"
     "    shares_issue_with: exp\n", r"pipelines\.cube\.shares_issue_with names 'exp', which itself shares"),
    ("base: C16V32\nname: x\npipelines:\n  exp:\n    shares_issue_with: vector\n  vector:\n    units: 2\n",
     r"'exp' and 'vector' need the same units"),
])
def test_bad_configs_fail_loudly_naming_the_field(tmp_path, text, match):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    if match is None:  # deep merge keeps the other rates, so this one is fine
        assert load_hw(path).pipelines["cube"].throughput["bfloat16"] == 4000
        return
    with pytest.raises(VfasimError, match=match):
        load_hw(path)


def test_a_rate_missing_for_the_configured_dtype_is_refused():
    doc = load_hw("C8V16").model_dump()
    doc["pipelines"]["vector"]["throughput"] = {"float32": 128}
    with pytest.raises(ValidationError, match=r"pipelines\.vector\.throughput has no rate for float16"):
        HardwareConfig.model_validate(doc)


@pytest.mark.parametrize("precision,match", [
    ("  matmul: float4_e2m1\n", "float4_e2m1 inputs need a scale rule"),
    ("  scaling:\n    q: per_block\n", "block_scale is required"),
    ("  vector: bfloat16\n", "precision.vector: Input should be 'float32' or 'float16'"),
    ("  scaling:\n    o: none\n", r"precision\.scaling\.o: unknown field"),
])
def test_impossible_precisions_are_refused(tmp_path, precision, match):
    path = tmp_path / "bad.yaml"
    path.write_text("base: C16V32\nname: x\nprecision:\n" + precision)
    with pytest.raises(VfasimError, match=match):
        load_hw(path)


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(VfasimError, match="C16V32.*C4V16"):
        load_hw("C2V8")


def test_the_split_core_example_loads_and_runs():
    import vfasim

    path = CONFIG_DIR / "examples" / "split-cube-vector.yaml"
    hw = load_hw(path)
    assert hw.pipelines["vector"].units == 2 and hw.op_map["exp"] == "vector"
    r = vfasim.run(hw, "vfa", seq_len=256, head_dim=32, block_q=64, block_k=64)
    assert r.pipelines["link"]["busy_cycles"] > 0 and r.pipelines["exp"]["busy_cycles"] == 0


@pytest.mark.parametrize("path", sorted((CONFIG_DIR / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_example_numbers_say_where_they_come_from(path):
    test_every_number_says_where_it_comes_from(path)


def test_real_chips_keep_the_facts_that_set_them_apart():
    h100, h200, b200, b300 = (load_hw(n) for n in ("H100-SXM", "H200", "B200", "B300"))
    assert h200.pipelines == h100.pipelines and h200.chip.cores == h100.chip.cores
    assert h200.chip.hbm.bandwidth_gb_per_s > h100.chip.hbm.bandwidth_gb_per_s
    assert b300.pipelines["exp"].throughput["float32"] == 2 * b200.pipelines["exp"].throughput["float32"]
    assert "float4_e2m1" in b200.pipelines["tensor"].throughput
    assert "float4_e2m1" not in h100.pipelines["tensor"].throughput
    for gpu in (h100, h200):  # FA2/FA3 on Hopper: the softmax's exp and FP32 work take turns on one stream
        assert ("vector", "exp") in gpu.issue_streams()
    for gpu in (b200, b300):  # FA4 on Blackwell overlaps them (see b200.yaml)
        assert ("vector",) in gpu.issue_streams() and ("exp",) in gpu.issue_streams()
    assert all(len(s) == 1 for s in load_hw("C16V32").issue_streams())  # the paper's cores keep their own
    ascend = load_hw("Ascend-910B")
    assert ascend.pipelines["vector"].units == 2  # one cube, two vector cores
    assert ascend.op_map["move_s"] == ascend.op_map["move_p"] == "link"  # S and P through L2


def test_matmul_format_picks_the_kernel_scaling_and_refuses_what_the_chip_lacks(capsys):
    from vfasim.cli import main
    from vfasim.hw.formats import supported_formats, with_matmul_format

    fp8 = with_matmul_format(load_hw("H100-SXM"), "fp8_e4m3").precision
    assert (fp8.matmul, fp8.vector, fp8.scaling.q, fp8.scaling.p) == ("float8_e4m3", "float32", "per_tensor", "none")
    assert with_matmul_format(load_hw("B200"), "fp4").precision.block_scale == "nvfp4"
    assert supported_formats(load_hw("Ascend-910B")) == ["fp16", "bf16"]
    status = main(["run", "--hw", "H100-SXM", "--algo", "fa2", "--matmul-format", "fp4", "--seq-len", "256"])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("error: H100-SXM has no fp4 matmul") and err.count("\n") == 1


def test_a_variant_is_merged_as_a_base_file_is_and_validated():
    """hw.registry.variant: the one way a config is varied (matmul formats, validate's tunings and clocks, the
    figure's parameters); a bad change is a one-line error naming the field."""
    from vfasim.hw.registry import variant

    h100 = load_hw("H100-SXM")
    faster = variant(h100, {"pipelines": {"exp": {"throughput": {"float32": 32}}}})
    assert faster.pipelines["exp"].throughput["float32"] == 32
    assert faster.pipelines["exp"].throughput["float16"] == h100.pipelines["exp"].throughput["float16"]  # merged
    assert variant(h100, {}) == h100
    with pytest.raises(VfasimError, match=r"H100-SXM with a test: clock_ghz") as info:
        variant(h100, {"clock_ghz": -1.0}, "a test")
    assert "\n" not in str(info.value)
