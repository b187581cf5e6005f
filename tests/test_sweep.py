"""``vfasim sweep``: axes and their product, shorthand scales, one-line errors, resume, Dask, outputs.

Tiny sizes throughout (seq 256, head dim 32, 64×64 blocks); sweeps run in this process
(``jobs=1``) unless the test is about an executor.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import vfasim
import vfasim.sweep as sweep
from vfasim.cli import main
from vfasim.hw import HardwareConfig, load_hw
from vfasim.sweep import Axis, make_points, parse_set, results_frame, run_sweep

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"seq_len": 256, "head_dim": 32, "block_q": 64, "block_k": 64}
SMALL_ARGS = ["--seq-len", "256", "--head-dim", "32", "--block-q", "64", "--block-k", "64", "--quiet"]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_two_set_axes_give_their_cartesian_product(tmp_path, capsys):
    status, out, err = cli(capsys, "sweep", "--hw", "C16V32", "--algo", "fa2", "--set", "score_buffers=2,4",
                           "--set", "pipelines.exp.throughput.float32=16,32", *SMALL_ARGS, "--jobs", "1",
                           "--out", str(tmp_path))
    assert status == 0, err
    frame = pd.read_csv(tmp_path / "results.csv")
    pairs = list(zip(frame["score_buffers"], frame["pipelines.exp.throughput.float32"]))
    assert pairs == [(2, 16), (2, 32), (4, 16), (4, 32)]
    assert {"hw", "algo", "latency_cycles", "bottleneck", "bound", "share_tensor", "share_vector",
            "share_exp", "latency_vs_first_x", "cube_busy_cycles", "exp_utilization", "rel_err_vs_fp64"} <= set(frame)
    assert len(set(frame["hw_digest"])) == 4  # each point ran its own config
    assert "4 computed (numerics computed 1 time, reused for 3 more points), 0 reused" in out


def test_run_option_axes_set_run_keywords():
    points = make_points(["C4V16"], ["vsa"], [parse_set("seq_len=128,256"), parse_set("lam=1e-2,0.1")], SMALL)
    assert [(p.run_kwargs["seq_len"], p.run_kwargs["lam"]) for p in points] == [
        (128, 0.01), (128, 0.1), (256, 0.01), (256, 0.1)]
    assert len({p.key for p in points}) == 4
    assert all(p.hw_doc == points[0].hw_doc for p in points)


@pytest.mark.parametrize("role", ["exp", "vector", "tensor"])
def test_shorthand_scale_multiplies_every_rate_of_the_role(role):
    base = load_hw("C4V16").model_dump(mode="json")
    [point] = make_points(["C4V16"], ["vfa"], [sweep.scale_axis(f"{role}_scale", "2.5")], SMALL)
    for name, pipe in point.hw_doc["pipelines"].items():
        factor = 2.5 if pipe["role"] == role else 1
        assert pipe["throughput"] == {k: v * factor for k, v in base["pipelines"][name]["throughput"].items()}
    assert {k: v for k, v in point.hw_doc.items() if k != "pipelines"} == {
        k: v for k, v in base.items() if k != "pipelines"}


def test_exp_scale_two_is_the_builtin_doubled_exp16_core():
    [scaled] = make_points(["C4V16"], ["vfa"], [Axis("exp_scale", (2,))], SMALL)
    [builtin] = make_points(["C4V16-2xexp"], ["vfa"], [], SMALL)
    a, b = results_frame(run_sweep([scaled, builtin], jobs=1)).to_dict("records")
    assert a["latency_cycles"] == b["latency_cycles"] and a["trace_digest"] == b["trace_digest"]


@pytest.mark.parametrize("argv, named", [
    (["--set", "pipelines.exp.throughputs.float16=32"], "pipelines.exp.throughputs"),
    (["--set", "no_such_field=1"], "no_such_field"),
    (["--set", "score_buffers=2,zero"], "score_buffers"),
    (["--set", "pipelines.exp.throughput.float16=0"], "float16"),
    (["--set", "seq_len=abc"], "seq_len"),
    (["--set", "lam=2"], "lam"),
    (["--exp-scale", "1,-2"], "exp_scale"),
    (["--hw", "H100-SXM", "--kernel", "fa2", "--set", "kernel=triton"], "--kernel"),
])
def test_bad_path_or_value_is_one_line_error_and_writes_nothing(tmp_path, capsys, argv, named):
    out = tmp_path / "out"
    status, stdout, err = cli(capsys, "sweep", *argv, *SMALL_ARGS, "--out", str(out))
    assert status == 2 and stdout == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and named in err
    assert not out.exists()


def test_resume_computes_only_the_missing_points(tmp_path, monkeypatch):
    calls = []
    real = sweep.run_group
    monkeypatch.setattr(sweep, "run_group", lambda plans: calls.extend(plans) or real(plans))
    points = make_points(["C4V16"], ["fa2", "vfa"], [Axis("exp_scale", (0.5, 1, 2))], SMALL)

    first = run_sweep(points, tmp_path / "resumed", jobs=1, max_points=2)  # "killed" after 2 points
    assert (first.computed, first.complete, len(calls)) == (2, False, 2)
    journal = (tmp_path / "resumed" / "points.jsonl").read_text().splitlines()
    assert len(journal) == 2 and all(json.loads(line)["key"] for line in journal)

    calls.clear()
    second = run_sweep(points, tmp_path / "resumed", jobs=1)
    assert (second.computed, second.reused, len(calls), second.complete) == (4, 2, 4, True)
    assert {p.inputs.seq_len for p in calls} == {256}
    fresh = run_sweep(points, tmp_path / "fresh", jobs=1)
    pd.testing.assert_frame_equal(results_frame(second), results_frame(fresh))

    calls.clear()
    assert run_sweep(points, tmp_path / "resumed", jobs=1).computed == 0 and calls == []


def test_a_changed_model_recomputes_every_point(tmp_path, monkeypatch):
    points = make_points(["C4V16"], ["fa2"], [Axis("exp_scale", (1, 2))], SMALL)
    run_sweep(points, tmp_path, jobs=1)
    monkeypatch.setattr(sweep, "model_digest", lambda: "edited-model")
    assert run_sweep(make_points(["C4V16"], ["fa2"], [Axis("exp_scale", (1, 2))], SMALL), tmp_path,
                     jobs=1).computed == 2


def test_a_torn_last_line_is_dropped_and_recomputed(tmp_path):
    points = make_points(["C4V16"], ["fa2"], [Axis("exp_scale", (1, 2))], SMALL)
    run_sweep(points, tmp_path, jobs=1)
    journal = tmp_path / "points.jsonl"
    text = journal.read_text()
    journal.write_text(text[: len(text) - 40])  # a crash in the middle of the second line
    again = run_sweep(points, tmp_path, jobs=1)
    assert (again.computed, again.reused) == (1, 1)
    assert len(journal.read_text().splitlines()) == 2


@pytest.mark.parametrize("algo", ["fa2", "vfa"])
def test_more_exp_throughput_never_increases_latency(algo):
    points = make_points(["C4V16"], [algo], [Axis("exp_scale", (0.25, 0.5, 1, 2, 4, 8))], SMALL)
    latency = list(results_frame(run_sweep(points, jobs=1))["latency_cycles"])
    assert all(b <= a for a, b in zip(latency, latency[1:])), latency


def test_local_processes_and_dask_match_in_process(tmp_path):
    distributed = pytest.importorskip("dask.distributed")
    points = make_points(["C16V32", "C4V16"], ["vfa"], [Axis("exp_scale", (1, 2))], SMALL)
    serial = results_frame(run_sweep(points, jobs=1))
    pooled = results_frame(run_sweep(points, tmp_path / "pool", jobs=2))
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        on_dask = results_frame(run_sweep(points, tmp_path / "dask", executor="dask", scheduler=client))
        status = main(["sweep", "--hw", "C16V32,C4V16", "--exp-scale", "1,2", *SMALL_ARGS, "--executor", "dask",
                       "--scheduler", cluster.scheduler_address, "--out", str(tmp_path / "dask-cli")])
    assert status == 0
    pd.testing.assert_frame_equal(pooled, serial)
    pd.testing.assert_frame_equal(on_dask, serial)
    by_cli = pd.read_csv(tmp_path / "dask-cli" / "results.csv")
    assert list(by_cli["latency_cycles"]) == list(serial["latency_cycles"])


def _second_group_kills_its_worker(journal: str) -> None:
    """On a Dask worker: the second group it runs SIGKILLs the worker's process once the sweep has journaled the
    first (the restarted worker runs the rest as they are)."""
    import os
    import signal
    import time

    groups = []

    def journaled() -> bool:  # the sweep opens its journal before the first point ends: wait for a line
        return Path(journal).is_file() and b"\n" in Path(journal).read_bytes()

    def run_group(*args):
        groups.append(args)
        end = time.monotonic() + 30
        while len(groups) == 2 and not journaled() and time.monotonic() < end:
            time.sleep(0.05)
        if len(groups) == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args)

    real, sweep.run_group = sweep.run_group, run_group


def test_a_lost_dask_worker_is_one_line_and_a_resume_computes_only_the_rest(tmp_path):
    dask, distributed = pytest.importorskip("dask"), pytest.importorskip("dask.distributed")
    argv = ["sweep", "--hw", "C16V32", "--algo", "fa2", "--set", "seed=0,1,2,3", *SMALL_ARGS, "--out", str(tmp_path)]
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), \
            distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                     dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        client.run(_second_group_kills_its_worker, str(tmp_path / "points.jsonl"))
        proc = subprocess.run([sys.executable, "-m", "vfasim", *argv, "--executor", "dask", "--scheduler",
                               cluster.scheduler_address], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})  # a client of its own, as a user's
    assert (proc.returncode, proc.stdout, proc.stderr.count("\n")) == (2, "", 1), proc.stderr
    assert "lost the worker" in proc.stderr and "run the same command to resume" in proc.stderr, proc.stderr
    journaled = [json.loads(line)["key"] for line in (tmp_path / "points.jsonl").read_text().splitlines()]
    assert 1 <= len(journaled) < 4 and len(set(journaled)) == len(journaled)  # whole lines, each point once
    as_cli = {**SMALL, "causal": True, "heads": 1, "seed": 0, "workload": "llm-like", "schedule": "pipelined"}
    points = make_points(["C16V32"], ["fa2"], [parse_set("seed=0,1,2,3")], as_cli)
    assert set(journaled) <= {p.key for p in points}
    resumed = run_sweep(points, tmp_path, jobs=1)
    assert (resumed.reused, resumed.computed, resumed.complete) == (len(journaled), 4 - len(journaled), True)


def test_outputs_exist_and_are_not_empty(tmp_path, capsys):
    status, out, err = cli(capsys, "sweep", "--hw", "C4V16", "--algo", "fa2,vfa", "--exp-scale", "0.5,1,4",
                           *SMALL_ARGS, "--jobs", "1", "--out", str(tmp_path))
    assert status == 0, err
    for name in ("results.csv", "results.parquet", "points.jsonl", *(f"{plot}.{ext}" for plot in
                 ("latency", "latency_vs_first_x", "speedup_vs_baseline", "shares") for ext in ("png", "svg"))):
        assert (tmp_path / name).stat().st_size > 0, name
    frame = pd.read_parquet(tmp_path / "results.parquet")
    assert len(frame) == 6 and list(frame["latency_vs_first_x"][::3]) == [1.0, 1.0]
    assert list(frame["speedup_vs_fa2"][:3]) == [1.0] * 3
    assert "exp_scale" in out.splitlines()[0]


def test_exp_throughput_study_at_tiny_size(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("exp_throughput", ROOT / "experiments/exp_throughput/run.py")
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    frame = study.main(["--seq-len", "256", "--head-dim", "32", "--block", "64", "--jobs", "1", "--quiet",
                        "--out", str(tmp_path)])
    what_if = frame[frame.hw == "C4V16"]
    assert sorted(set(what_if.exp_scale)) == [0.5, 1, 2, 4, 8] and set(what_if.algo) == {"fa2", "vfa"}
    baseline = frame[frame.hw == "C16V32"]
    assert len(baseline) == 1 and baseline[study.SPEEDUP].iloc[0] == 1.0
    assert set(frame.bound) <= {"tensor", "vector", "exp", "memory"}
    assert (tmp_path / "speedup_vs_c16v32.png").stat().st_size > 0
    assert len(pd.read_csv(tmp_path / "results.csv")) == 11
    assert [c["claim_id"] for c in study.paper_claims()] == ["P7"]
    assert "P7" in capsys.readouterr().out


def test_points_sharing_numerics_run_the_engine_once_and_match_single_runs(monkeypatch):
    import vfasim
    from vfasim.runner import prepare as api  # where the engine is called

    engine_runs = []
    real = api.run_engine
    monkeypatch.setattr(api, "run_engine", lambda *a, **k: engine_runs.append(k.get("rows")) or real(*a, **k))
    axes = [Axis("exp_scale", (1, 4)), parse_set("precision.vector=float16,float32")]
    points = make_points(["C4V16"], ["fa2", "vfa"], axes, SMALL)
    result = run_sweep(points, jobs=1)
    assert (result.computed, result.functional_runs) == (8, 4)  # fa2/vfa x two vector formats
    assert len(engine_runs) == 4 + 2  # and the fa2 baseline once for each vfa group
    records = {json.dumps(r["inputs"], sort_keys=True): r["result"] for r in result.records}
    for p in points:
        alone = vfasim.run(HardwareConfig.model_validate(p.hw_doc), p.algo, **p.run_kwargs).to_dict()
        got = records[json.dumps(p.inputs, sort_keys=True)]
        assert {k: got[k] for k in alone} == json.loads(json.dumps(alone))


def test_pareto_plot_marks_broken_points_and_skips_unchecked_runs(tmp_path, capsys):
    status, _, err = cli(capsys, "sweep", "--hw", "C16V32", "--algo", "vsa", "--set", "lam=1e-9,0.5",
                         "--set", "numerics=full,off", *SMALL_ARGS, "--jobs", "1", "--out", str(tmp_path))
    assert status == 0, err
    frame = pd.read_csv(tmp_path / "results.csv")
    assert set(frame["verdict"]) >= {"ok", "unchecked"} and "broken" in set(frame["verdict"])
    svg = (tmp_path / "pareto.svg").read_text()
    assert "NaN/Inf or" in svg and "2 point(s) without checked numerics not shown" in svg  # the broken band
    only_off = tmp_path / "off"
    assert cli(capsys, "sweep", "--hw", "C16V32", "--algo", "fa2", "--set", "numerics=off", *SMALL_ARGS,
               "--jobs", "1", "--out", str(only_off))[0] == 0
    assert not (only_off / "pareto.png").exists()  # no checked run: no error axis to draw


def test_a_chip_point_has_the_same_row_in_a_sweep_as_in_run(tmp_path):
    # one flattening (vfasim.runner.row): the sweep's table carries the chip's figures and names its bound as run does
    kw = dict(seq_len=1024, heads=4, batch=2, numerics_heads=0)
    [point] = make_points(["H100-SXM"], ["fa2"], [], kw)
    result = run_sweep([point], tmp_path / "out", jobs=1)
    row = results_frame(result).iloc[0]
    alone = vfasim.run("H100-SXM", "fa2", **kw)
    assert row["bound"] == alone.bound == alone.chip["bound"]
    for col in ("chip_tflops", "chip_waves", "chip_hbm_bytes", "kernel"):
        assert row[col] == alone.to_row()[col]


def test_the_kernel_flag_is_the_kernel_axis(tmp_path, capsys):
    """--kernel a --kernel b sweeps the kernels as --set kernel=a,b does, point for point."""
    common = ("sweep", "--hw", "H100-SXM", "--algo", "fa2", "--seq-len", "512", "--heads", "2", "--jobs", "1", "--quiet")
    frames = []
    for i, axis in enumerate((["--kernel", "fa2", "--kernel", "triton"], ["--set", "kernel=fa2,triton"])):
        status, _, _ = cli(capsys, *common, *axis, "--out", str(tmp_path / str(i)))
        assert status == 0
        frames.append(pd.read_csv(tmp_path / str(i) / "results.csv"))
    assert list(frames[0]["kernel"]) == ["fa2", "triton"]
    assert frames[0]["latency_cycles"].tolist() == frames[1]["latency_cycles"].tolist()


def test_the_model_digest_covers_the_model_and_not_the_command_line():
    # a sweep's point keys hash the model's source: an edit to the CLI package or a report must not invalidate them
    files = sweep.model_files()
    assert "sim/engine.py" in files and "kernels/triton.yaml" in files and "chip/run.py" in files
    assert not [f for f in files if f.startswith(("cli/", "report/", "sweep/")) or f in ("exec.py", "__main__.py")]
