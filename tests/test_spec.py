"""A run is one spec: carried by its result, echoed by --json, repeated bit for bit by --spec."""

from __future__ import annotations

import json

import pytest

import vfasim
from vfasim.cli import main
from vfasim.hw import load_hw


def _json_run(capsys, *args: str) -> dict:
    assert main(["run", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("args", [
    ("--hw", "C4V16", "--algo", "vsa", "--seq-len", "512", "--lam", "0.01", "--block-q", "64"),
    ("--hw", "H100-SXM", "--algo", "vfa", "--kernel", "fa3", "--seq-len", "1024", "--heads", "4",
     "--matmul-format", "fp8_e4m3", "--numerics-heads", "1"),
])
def test_a_run_repeated_from_its_json_is_identical(args, capsys, tmp_path):
    first = _json_run(capsys, *args)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(first))
    again = _json_run(capsys, "--spec", str(path))
    assert again == first and first["spec"]["version"] == 1
    bare = tmp_path / "spec.json"  # the spec alone does as well
    bare.write_text(json.dumps(first["spec"]))
    assert _json_run(capsys, "--spec", str(bare)) == first


def test_the_api_result_carries_the_spec_of_its_inputs():
    r = vfasim.run("C4V16", "vsa", seq_len=256, block_q=64, block_k=64, lam=0.5)
    assert r.spec["hw"] == "C4V16" and r.spec["block_q"] == 64 and r.spec["options"]["lam"] == 0.5
    assert r.spec["hw_digest"] == load_hw("C4V16").digest() and "trace_out" not in r.spec


def test_run_inputs_hold_every_keyword_of_run_once():
    """``RunInputs`` is what the one-core and the chip path read: each of run()'s inputs is a field of it (the
    ``kernel_style`` alias and the option keywords arrive as ``kernel`` and ``options``), in a spec or not."""
    import dataclasses
    import inspect

    from vfasim.runner.spec import FIELDS, NOT_IN_SPEC, RunInputs

    names = [f.name for f in dataclasses.fields(RunInputs)]
    params = inspect.signature(vfasim.run).parameters
    assert sorted(names) == sorted(n for n, p in params.items()
                                   if n != "kernel_style" and p.kind is not inspect.Parameter.VAR_KEYWORD)
    assert sorted(names) == sorted(("hw", "algo", "kernel", "options", *FIELDS, *NOT_IN_SPEC))


def test_a_changed_config_is_not_repeated(capsys, tmp_path):
    cfg = tmp_path / "mine.yaml"
    cfg.write_text("base: C4V16\nname: mine\n")
    first = _json_run(capsys, "--hw", str(cfg), "--algo", "fa2", "--seq-len", "256")
    spec = tmp_path / "run.json"
    spec.write_text(json.dumps(first))
    cfg.write_text("base: C4V16\nname: mine\nclock_ghz: 2.0  # assumed, because a test changes it\n")
    assert main(["run", "--spec", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "hw config" in err and "has changed since the run" in err


@pytest.mark.parametrize("text, message", [
    ("not json", "not a JSON document"),
    ('{"version": 7}', "no run spec of version 1"),
    ('{"version": 1, "hw": "C4V16"}', "missing field(s)"),
])
def test_a_bad_spec_file_is_one_line(text, message, tmp_path, capsys):
    path = tmp_path / "s.json"
    path.write_text(text)
    assert main(["run", "--spec", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_spec_refuses_other_run_options(tmp_path, capsys):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(vfasim.run("C4V16", "fa2", seq_len=256).spec))
    assert main(["run", "--spec", str(path), "--heads", "2"]) == 2
    assert "give no other run options (got --heads)" in capsys.readouterr().err


def test_run_inputs_defaults_are_runs():
    """``RunInputs`` holds ``vfasim.run``'s defaults, so every entry point that plans a run leaves out the same."""
    import inspect

    from vfasim.runner.spec import DEFAULTS

    params = inspect.signature(vfasim.run).parameters
    assert DEFAULTS == {k: params[k].default for k in DEFAULTS}


def test_the_typed_spec_is_the_spec_of_the_inputs():
    """``results.RunSpec`` (for type checkers) declares the keys ``run_spec`` writes, in its order, and each run
    field with its ``RunInputs`` type as JSON holds it (a path as its text)."""
    from vfasim.runner.results import RunSpec
    from vfasim.runner.spec import FIELDS, SPEC_KEYS, RunInputs

    assert tuple(RunSpec.__annotations__) == SPEC_KEYS
    assert tuple(vfasim.run("C4V16", "fa2", seq_len=256).spec) == SPEC_KEYS
    as_json = {k: RunInputs.__annotations__[k].replace(" | Path", "") for k in FIELDS}  # annotations as written
    assert {k: RunSpec.__annotations__[k].__forward_arg__ for k in FIELDS} == as_json
