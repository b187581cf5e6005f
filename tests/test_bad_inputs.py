"""Bad inputs and faults: every bad input is one ``error:`` line, exit 2, no traceback, no new file.

The matrix covers the command line (``run``, ``sweep``, ``sensitivity``, ``figure``, ``hw``), the
Python API, hardware YAML, Q/K/V data files and output paths. Then one test per fault class:
atomic replacement refusing what is not a regular file, a failed write leaving the old file,
Ctrl-C ending with status 130, sweep workers ending with their parent, and one sweep per folder.
Sizes are tiny (seq 256, head dim 32, 64×64 blocks); the subprocess tests run a few seconds.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import vfasim
from vfasim.runner.api import Options
from vfasim.sensitivity import sensitivity_table
from vfasim.cli import main
from vfasim.errors import VfasimError
from vfasim.io.outputs import folder_lock, write_text, write_with

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--seq-len", "256", "--head-dim", "32", "--block-q", "64", "--block-k", "64"]
SMALL_KW = {"seq_len": 256, "head_dim": 32, "block_q": 64, "block_k": 64}
HUGE_INT = "1" + "0" * 30


def yaml_over(base: str, body: str) -> str:
    return f"base: {base}\nname: bad\n{body}"


def make_files(root: Path) -> None:
    """Every bad file and path the matrix names, relative to ``root``."""
    files = {
        "tiny_rate.yaml": yaml_over("C16V32", "pipelines:\n  exp:\n    throughput:\n      float32: 1.0e-300\n"),
        "huge_rate.yaml": yaml_over("C16V32", "pipelines:\n  exp:\n    throughput:\n      float32: 1.0e+300\n"),
        "inf_rate.yaml": yaml_over("C16V32", "pipelines:\n  exp:\n    throughput:\n      float32: .inf\n"),
        "nan_rate.yaml": yaml_over("C16V32", "pipelines:\n  exp:\n    throughput:\n      float32: .nan\n"),
        "huge_delay.yaml": yaml_over("C16V32", f"pipelines:\n  exp:\n    startup_cycles: {HUGE_INT}\n"),
        "inf_clock.yaml": yaml_over("C16V32", "clock_ghz: .inf\n"),
        "huge_work.yaml": yaml_over("C16V32", "work_factor:\n  exp: 1.0e+300\n"),
        "bool_delay.yaml": yaml_over("C16V32", "pipelines:\n  exp:\n    startup_cycles: true\n"),
        "cycle_a.yaml": "base: cycle_b.yaml\nname: a\n",
        "cycle_b.yaml": "base: cycle_a.yaml\nname: b\n",
        "self.yaml": "base: self.yaml\nname: s\n",
        "text.npy": "1 2 3\n4 5 6\n",
        "text.npz": "q,k,v\n",
        "empty.npy": "",
        "results_file": "not a folder\n",
    }
    for name, text in files.items():
        (root / name).write_text(text)
    (root / "a_dir.npz").mkdir()
    (root / "a_dir.yaml").mkdir()
    (root / "trace_dir").mkdir()
    (root / "sweep_out").mkdir()
    os.mkfifo(root / "sweep_out" / "results.csv")
    os.mkfifo(root / "fifo.json")
    (root / "target.json").write_text("{}")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind("sock.json")  # relative: the test's folder is the working directory
    (root / "link.json").symlink_to(root / "target.json")
    rng = np.random.default_rng(0)
    np.savez(root / "ok.npz", **{n: rng.standard_normal((64, 32)).astype(np.float32) for n in "qkv"})


#: id -> (argv, fragments the message must contain, case-insensitive)
CLI_CASES: dict[str, tuple[list[str], list[str]]] = {
    # output paths
    "trace-dir": (["run", *SMALL, "--trace-out", "trace_dir"], ["trace_dir", "directory"]),
    "trace-fifo": (["run", *SMALL, "--trace-out", "fifo.json"], ["fifo.json", "fifo"]),
    "trace-symlink": (["run", *SMALL, "--trace-out", "link.json"], ["link.json", "symbolic link"]),
    "trace-no-folder": (["run", *SMALL, "--trace-out", "absent/t.json"], ["absent", "does not exist"]),
    "trace-socket": (["run", *SMALL, "--trace-out", "sock.json"], ["sock.json", "socket"]),  # not a device:
    # a regression must not be able to replace /dev/null when the tests run as root
    "sweep-out-file": (["sweep", *SMALL, "--out", "results_file"], ["results_file", "not a directory"]),
    "sweep-out-fifo": (["sweep", *SMALL, "--out", "sweep_out"], ["results.csv", "fifo"]),
    "sweep-out-empty": (["sweep", *SMALL, "--out", ""], ["--out", "empty"]),
    "figure-out-file": (["figure", "latency-ratio", "--out", "results_file"], ["results_file", "not a directory"]),
    # numbers at the edges
    "yaml-tiny-rate": (["run", *SMALL, "--hw", "tiny_rate.yaml"], ["tiny_rate.yaml", "throughput", "1e-300"]),
    "yaml-huge-rate": (["run", *SMALL, "--hw", "huge_rate.yaml"], ["huge_rate.yaml", "throughput"]),
    "yaml-inf-rate": (["run", *SMALL, "--hw", "inf_rate.yaml"], ["inf_rate.yaml", "finite"]),
    "yaml-nan-rate": (["run", *SMALL, "--hw", "nan_rate.yaml"], ["nan_rate.yaml", "finite"]),
    "yaml-huge-delay": (["run", *SMALL, "--hw", "huge_delay.yaml"], ["huge_delay.yaml", "startup_cycles"]),
    "yaml-inf-clock": (["run", *SMALL, "--hw", "inf_clock.yaml"], ["inf_clock.yaml", "clock_ghz"]),
    "yaml-huge-work": (["run", *SMALL, "--hw", "huge_work.yaml"], ["huge_work.yaml", "work_factor.exp"]),
    "yaml-bool-delay": (["run", *SMALL, "--hw", "bool_delay.yaml"], ["bool_delay.yaml", "startup_cycles", "integer"]),
    "exp-scale-inf": (["sweep", *SMALL, "--exp-scale", "1e400"], ["exp_scale", "finite"]),
    "exp-scale-tiny": (["sweep", *SMALL, "--exp-scale", "1e-300"], ["exp_scale", "throughput"]),
    "exp-scale-zero": (["sweep", *SMALL, "--exp-scale", "0"], ["exp_scale", "> 0"]),
    "factors-tiny": (["sensitivity", *SMALL, "--factors", "1e-300"], ["factors", "1e-300"]),
    "factors-inf": (["sensitivity", *SMALL, "--factors", "inf"], ["factors", "inf"]),
    "factors-nan": (["sensitivity", *SMALL, "--factors", "nan"], ["factors", "nan"]),
    "seq-len-huge": (["run", "--seq-len", "1000000000"], ["memory", "GiB", "available"]),
    "heads-huge": (["run", *SMALL, "--heads", "100000000"], ["memory", "GiB", "available"]),
    # inputs that would be ignored or silently changed
    "block-k-over-seq": (["run", *SMALL[:4], "--block-q", "64", "--block-k", "512"], ["block_k 512", "256"]),
    "block-q-over-seq": (["run", *SMALL[:4], "--block-q", "512", "--block-k", "64"], ["block_q 512", "256"]),
    "queries-no-decode": (["run", *SMALL, "--queries", "4"], ["queries", "decode"]),
    "qkv-with-seq-len": (["run", "--qkv", "ok.npz", "--seq-len", "64"], ["seq_len", "qkv"]),
    "qkv-with-heads": (["run", "--qkv", "ok.npz", "--heads", "2"], ["heads", "qkv"]),
    "topk-all-blocks": (["run", *SMALL, "--algo", "bsfa", "--topk", "4"], ["topk 4", "4 key blocks"]),
    # data files and messages that must not mislead
    "npy-text": (["run", "--qkv", "text.npy"], ["text.npy", "text", "not a numpy .npy"]),
    "npz-text": (["run", "--qkv", "text.npz"], ["text.npz", "text", ".npz"]),
    "npy-empty": (["run", "--qkv", "empty.npy"], ["empty.npy", "empty file"]),
    "qkv-directory": (["run", "--qkv", "a_dir.npz"], ["a_dir.npz", "directory"]),
    "qkv-absent": (["run", "--qkv", "absent.npz"], ["absent.npz", "not found"]),
    "hw-directory": (["run", *SMALL, "--hw", "a_dir.yaml"], ["a_dir.yaml", "directory"]),
    "base-cycle": (["run", *SMALL, "--hw", "cycle_a.yaml"], ["cycle", "cycle_a.yaml", "cycle_b.yaml"]),
    "base-self": (["run", *SMALL, "--hw", "self.yaml"], ["cycle", "self.yaml"]),
    # command-line conventions
    "hw-no-subcommand": (["hw"], ["vfasim hw", "{list,show}"]),
    "figure-no-subcommand": (["figure"], ["vfasim figure", "latency-ratio"]),
    "seq-len-text": (["run", "--seq-len", "abc"], ["--seq-len", "abc"]),
    "schedule": (["run", *SMALL, "--schedule", "nope"], ["nope", "pipelined"]),
}


@pytest.fixture
def bad_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    make_files(tmp_path)
    return tmp_path


def listing(root: Path) -> dict[str, float]:
    return {str(p.relative_to(root)): p.lstat().st_mtime_ns for p in root.rglob("*")}


def assert_one_error_line(status: int, out: str, err: str, fragments: list[str]) -> None:
    assert status == 2, err
    assert out == ""
    assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    missing = [f for f in fragments if f.lower() not in err.lower()]
    assert not missing, f"message {err.strip()!r} does not name {missing}"


@pytest.mark.parametrize("argv, fragments", CLI_CASES.values(), ids=CLI_CASES.keys())
def test_cli_bad_input(capsys, bad_files: Path, argv: list[str], fragments: list[str]) -> None:
    before = listing(bad_files)
    capsys.readouterr()
    status = main(argv)
    out, err = capsys.readouterr()
    assert_one_error_line(status, out, err, fragments)
    assert listing(bad_files) == before  # nothing new, nothing touched


#: id -> (keywords of vfasim.run beside the tiny sizes, fragments of the message)
API_CASES: dict[str, tuple[dict, list[str]]] = {
    "causal-text": ({"causal": "no"}, ["causal", "True or False", "'no'"]),
    "decode-int": ({"decode": 1}, ["decode", "True or False"]),
    "options-dict": ({"options": {"lam": 0.1}}, ["options", "Options", "dict"]),
    "qkv-int": ({"qkv": 123}, ["qkv", "path", "123"]),
    "seq-len-float": ({"seq_len": 256.0}, ["seq_len", "integer", "256.0"]),
    "seq-len-bool": ({"seq_len": True}, ["seq_len", "integer"]),
    "heads-numpy-zero": ({"heads": np.int64(0)}, ["heads", ">= 1"]),
    "lam-text": ({"lam": "x"}, ["lam", "'x'"]),
    "lam-inf": ({"algo": "vsa", "lam": float("inf")}, ["lam", "finite"]),
    "topk-float": ({"algo": "bsfa", "topk": 2.5}, ["topk", "integer"]),
    "minit-text": ({"minit": "false"}, ["minit", "True or False"]),
    "rescale-nan": ({"algo": "fa4", "rescale_threshold": float("nan")}, ["rescale_threshold", "finite"]),
    "unknown-option": ({"lamda": 0.1}, ["unknown option", "lamda"]),
    "queries-no-decode": ({"queries": 3}, ["queries", "decode"]),
    "trace-out-dir": ({"trace_out": "."}, ["trace file", "directory"]),
    "workload-int": ({"workload": 7}, ["workload", "7"]),
    "schedule-none": ({"schedule": None}, ["schedule", "None"]),
}


@pytest.mark.parametrize("kwargs, fragments", API_CASES.values(), ids=API_CASES.keys())
def test_api_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kwargs: dict, fragments: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    kwargs = {"algo": "vfa", **kwargs}
    with pytest.raises(VfasimError) as info:
        vfasim.run("C4V16", kwargs.pop("algo"), **{**SMALL_KW, **kwargs})
    message = str(info.value)
    assert "\n" not in message
    missing = [f for f in fragments if f.lower() not in message.lower()]
    assert not missing, f"message {message!r} does not name {missing}"
    assert list(tmp_path.iterdir()) == []


def test_api_positional_mistakes_and_bad_options_are_one_line() -> None:
    with pytest.raises(VfasimError, match=r"run\(\): too many positional arguments"):
        vfasim.run("C4V16", "vfa", 256)
    with pytest.raises(VfasimError, match="lam must be a finite number"):
        Options(lam="0.1")
    with pytest.raises(VfasimError, match="factors must be positive finite numbers"):
        sensitivity_table("C4V16", "vfa", factors=(1e-300,), **SMALL_KW)


def test_api_takes_numpy_integers_and_returns_deeply_frozen_results() -> None:
    result = vfasim.run("C4V16", "vfa", seq_len=np.int64(256), head_dim=np.int32(32), block_q=64, block_k=64)
    assert result.shape["seq_len"] == 256 and type(result.shape["seq_len"]) is int
    for mutate in (lambda: result.manifest.__setitem__("output_digest", "x"),
                   lambda: result.numerics["flows"].clear(),
                   lambda: result.pipelines[next(iter(result.pipelines))].update(busy_cycles=0)):
        with pytest.raises(TypeError, match="read-only"):
            mutate()
    doc = result.to_dict()
    doc["manifest"]["output_digest"] = "x"  # a plain copy, free to change
    assert result.manifest["output_digest"] != "x"
    assert json.loads(json.dumps(doc))["latency_cycles"] == result.latency_cycles
    assert type(doc["numerics"]) is dict and type(doc["critical_path"]) is dict


def test_relative_base_path_is_read_beside_the_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cores").mkdir()
    (tmp_path / "cores" / "parent.yaml").write_text("base: C16V32\nname: parent\nclock_ghz: 2.0\n")
    (tmp_path / "cores" / "child.yaml").write_text("base: parent.yaml\nname: child\n")
    monkeypatch.chdir(tmp_path)  # not the YAML's folder
    config = vfasim.hw.load_hw("cores/child.yaml")
    assert (config.name, config.clock_ghz) == ("child", 2.0)


def test_help_shows_defaults_and_bare_command_prints_usage(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = capsys.readouterr().out
    assert "--seq-len SEQ_LEN     (default: 4096)" in text and "--seed SEED           (default: 0)" in text
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("usage: vfasim") and "{run,sensitivity,sweep,figure,validate,hw,kernel}" in err


# ---------------------------------------------------------------- fault classes


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_atomic_replace_refuses_what_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    target, real = tmp_path / "out.json", tmp_path / "real.json"
    real.write_text("keep")
    {"fifo": lambda: os.mkfifo(target), "symlink": lambda: target.symlink_to(real),
     "directory": lambda: target.mkdir()}[kind]()
    before = listing(tmp_path)
    with pytest.raises(VfasimError, match="only a regular file is replaced"):
        write_text(target, "new")
    assert listing(tmp_path) == before and real.read_text() == "keep"
    write_text(real, "new")  # a regular file is replaced
    assert real.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out.json", "real.json"])


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "results.parquet"
    target.write_text("old")

    def disk_full(tmp: Path) -> None:
        tmp.write_text("half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(VfasimError, match="cannot write .*results.parquet: No space left on device"):
        write_with(target, disk_full)
    assert [p.name for p in tmp_path.iterdir()] == ["results.parquet"] and target.read_text() == "old"


#: a write through the safe writer that says "writing" once its temporary holds half the content, then waits
HALF_WRITE = "import sys, time; from pathlib import Path; from vfasim.io.outputs import write_with; " \
             "write_with(Path(sys.argv[1]), lambda tmp: (tmp.write_text('half'), print('writing', flush=True), " \
             "time.sleep(60)))"


def test_a_write_killed_midway_leaves_a_temporary_that_the_next_write_removes(tmp_path: Path) -> None:
    target = tmp_path / "results.csv"
    target.write_text("old")
    proc = subprocess.Popen([sys.executable, "-c", HALF_WRITE, str(target)], text=True, stdout=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None and proc.stdout.readline() == "writing\n"
    proc.kill()
    proc.wait(timeout=10)
    left = [p.name for p in tmp_path.iterdir() if p != target]
    assert left == [f".results.csv.{left[0].split('.')[3]}.{proc.pid}.tmp"], left  # named for the target and pid
    live = tmp_path / f".results.csv.abc123.{os.getpid()}.tmp"  # a write in progress (this process runs)
    other = tmp_path / f".results.csv.2.abc123.{proc.pid}.tmp"  # the temporary of another target, results.csv.2
    live.write_text("")
    other.write_text("")
    write_text(target, "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([target.name, live.name, other.name])
    assert target.read_text() == "new"


#: the CLI, saying "ready" on stderr once imported (main installs its Ctrl-C handler right after)
READY_CLI = "import sys; from vfasim.cli import main; print('ready', file=sys.stderr, flush=True); " \
            "sys.exit(main(sys.argv[1:]))"


def _cli_process(*argv: str, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", READY_CLI, *argv], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stderr is not None and proc.stderr.readline() == "ready\n"
    return proc


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_for(predicate, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_ctrl_c_during_run_exits_130_with_one_line(tmp_path: Path) -> None:
    proc = _cli_process("run", "--seq-len", "8192", "--trace-out", "t.json", cwd=tmp_path)  # ~8 s of work
    time.sleep(1.0)  # inside the engine, its oracle thread running beside it
    assert proc.poll() is None
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert (proc.returncode, out, err) == (130, "", "interrupted\n")
    assert time.monotonic() - sent < 2.5  # the oracle thread is not waited for
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_during_sweep_exits_130_and_says_what_is_kept(tmp_path: Path) -> None:
    proc = _cli_process("sweep", "--seq-len", "4096", "--algo", "fa2,vfa", "--exp-scale", "1,2,3,4", "--jobs", "2",
                        "--quiet", "--out", "out", cwd=tmp_path)  # two algorithms: two workers
    assert _wait_for(lambda: len(_children(proc.pid)) >= 2, 20)
    time.sleep(0.5)
    workers = _children(proc.pid)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and out == ""
    assert err.count("\n") == 1 and "interrupted" in err and "out/points.jsonl" in err
    assert _wait_for(lambda: not any(_alive(w) for w in workers), 5)


def test_sweep_workers_end_when_the_sweep_is_killed(tmp_path: Path) -> None:
    proc = _cli_process("sweep", "--seq-len", "4096", "--algo", "fa2,vfa", "--exp-scale", "1,2,3,4", "--jobs", "2",
                        "--quiet", "--out", "out", cwd=tmp_path)  # two algorithms: two workers
    assert _wait_for(lambda: len(_children(proc.pid)) >= 2, 20)
    workers = _children(proc.pid)
    proc.kill()
    proc.wait(timeout=10)
    assert _wait_for(lambda: not any(_alive(w) for w in workers), 5), "workers outlived the killed sweep"


def test_a_second_sweep_on_the_same_folder_is_refused(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    with folder_lock(out, "a test holding the folder"):
        capsys.readouterr()
        status = main(["sweep", *SMALL, "--jobs", "1", "--quiet", "--out", str(out)])
        _, err = capsys.readouterr()
    assert status == 2 and err.count("\n") == 1
    assert "in use by pid" in err and "choose another folder" in err
    assert sorted(p.name for p in out.iterdir()) == [".vfasim.lock"]  # nothing computed, no journal
    assert main(["sweep", *SMALL, "--jobs", "1", "--quiet", "--out", str(out)]) == 0  # the lock ends with its holder


def test_long_runs_warn_with_an_estimate_off_a_terminal(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("vfasim.runner.inputs.LONG_RUN_S", 0.0)  # every run counts as long
    capsys.readouterr()
    assert main(["run", *SMALL, "--json"]) == 0
    out, err = capsys.readouterr()
    assert err.startswith("warning: this run is estimated to take about ") and err.count("\n") == 1
    assert json.loads(out)["latency_cycles"] > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        vfasim.run("C4V16", "vfa", progress=True, **SMALL_KW)  # a progress bar shows instead: no warning


def test_svg_output_is_byte_identical_across_saves(tmp_path: Path) -> None:
    from matplotlib.figure import Figure

    from vfasim.io.outputs import save_figure

    def draw(path: Path) -> bytes:
        fig = Figure(figsize=(3, 2))
        ax = fig.subplots()
        ax.plot([0, 1], [1, 0], label="a")
        ax.legend()
        save_figure(fig, [path], dpi=72)
        return path.read_bytes()

    first = draw(tmp_path / "a.svg")
    time.sleep(1.1)  # a date stamp would differ now
    assert draw(tmp_path / "b.svg") == first
    assert b"clipPath" in first  # ids that are random unless salted


def test_sigterm_during_run_exits_143_with_one_line(tmp_path: Path) -> None:
    proc = _cli_process("run", "--seq-len", "8192", "--trace-out", "t.json", cwd=tmp_path)  # ~8 s of work
    time.sleep(1.0)
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert (proc.returncode, out, err) == (143, "", "terminated\n")
    assert list(tmp_path.iterdir()) == []  # the trace was not half-written
