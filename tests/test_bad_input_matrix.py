"""The bad-input matrix: each class of bad input the hardening reviews found, on every subcommand and the API.

A case is one table row: its class, and a command line (run in this process through
``vfasim.cli.main``) or a call of the Python API. Every case must end with exit status 2 and
one ``error:`` line naming what was wrong (the API: a one-line ``VfasimError``), no traceback,
and nothing written or touched in its folder. Faults that belong to the process itself (a
closed or full stdout, a killed parent) run in a subprocess. Accepted inputs are checked to
show in the JSON as asked. Sizes are tiny and available memory is capped at 4 GiB (as under
the review's ``ulimit``), so a refusal never depends on the machine's memory.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import vfasim
from vfasim.cli import main
from vfasim.errors import VfasimError
from vfasim.runner.api import Options, run_configs
from vfasim.sensitivity import sensitivity_table

from test_bad_inputs import READY_CLI, ROOT, _alive, _children, _wait_for

CAP_BYTES = 4 * 2**30
SMALL = ["--seq-len", "256", "--head-dim", "32", "--block-q", "64", "--block-k", "64"]
KW = {"seq_len": 256, "head_dim": 32, "block_q": 64, "block_k": 64}
CHIP = ["--hw", "H100-SXM", "--algo", "fa2", "--seq-len", "1024", "--heads", "8", "--kv-heads", "2"]
SWEEP = ["sweep", "--hw", "C16V32", *SMALL, "--jobs", "1", "--quiet"]


@dataclass(frozen=True)
class Case:
    klass: str
    fragments: tuple[str, ...]  # what the message must name (case-insensitive)
    argv: tuple[str, ...] = ()  # a command line, or
    call: Callable[[], object] | None = None  # an API call
    budget_bytes: float = CAP_BYTES  # available memory the run sees


def cli(klass: str, *argv: str, names: tuple[str, ...], budget: float = CAP_BYTES) -> Case:
    return Case(klass, names, argv=argv, budget_bytes=budget)


def api(klass: str, call: Callable[[], object], *names: str) -> Case:
    return Case(klass, names, call=call)


def _h100() -> vfasim.hw.HardwareConfig:
    return vfasim.hw.load_hw("H100-SXM")


def _c16(**update: object) -> vfasim.hw.HardwareConfig:
    return vfasim.hw.load_hw("C16V32").model_copy(update=update)


CASES: dict[str, Case] = {
    # inputs a run would not read: refused, naming them
    "ign-lam-fa2": cli("ignored options", "run", "--algo", "fa2", *SMALL, "--lam", "0.5", names=("lam", "fa2")),
    "ign-topk-vfa": cli("ignored options", "run", "--algo", "vfa", *SMALL, "--topk", "3", names=("topk", "vfa")),
    "ign-dispatch-core": cli("ignored options", "run", *SMALL, "--dispatch", "persistent",
                             names=("dispatch", "chip")),
    "ign-dispatch-bad-core": cli("ignored options", "run", *SMALL, "--dispatch", "bogus", names=("dispatch",)),
    "ign-numheads-core": cli("ignored options", "run", *SMALL, "--heads", "2", "--numerics-heads", "1",
                             names=("numerics_heads", "chip")),
    "ign-numerics-chip": cli("ignored options", "run", *CHIP, "--numerics", "full", names=("numerics",)),
    "ign-jobs-core": cli("ignored options", "run", *SMALL, "--jobs", "2", names=("jobs", "chip")),
    "ign-jobs-chip": cli("ignored options", "run", *CHIP, "--jobs", "2", names=("jobs", "numerics_heads")),
    "numheads-text": cli("chip runs", "run", *CHIP, "--numerics-heads", "half", names=("--numerics-heads", "half")),
    "ign-executor-chip": cli("ignored options", "run", *CHIP, "--executor", "dask", "--scheduler", "tcp://h:1",
                             names=("executor", "numerics_heads")),
    "dask-no-scheduler": cli("chip runs", "run", *CHIP, "--numerics-heads", "1", "--executor", "dask",
                             names=("executor dask", "scheduler")),
    "ign-check-chip": cli("ignored options", "run", *CHIP, "--check", names=("--check", "--numerics-heads")),
    "ign-check-numerics-off": cli("ignored options", "run", *SMALL, "--numerics", "off", "--check",
                                  names=("--check", "verdict")),
    "ign-seed-chip": cli("ignored options", "run", *CHIP, "--seed", "5", names=("seed", "numerics_heads")),
    "ign-workload-chip": cli("ignored options", "run", *CHIP, "--workload", "random", names=("workload",)),
    "ign-seed-numerics-off": cli("ignored options", "run", "--algo", "fa2", *SMALL, "--numerics", "off", "--seed", "3",
                                 names=("seed", "numerics off")),
    "ign-lam-chip-fa2": cli("ignored options", "run", *CHIP, "--lam", "0.5", names=("lam", "fa2")),
    "ign-topk-sensitivity": cli("ignored options", "sensitivity", "--algo", "vfa", *SMALL, "--topk", "3",
                                names=("topk", "vfa")),
    "ign-lam-sweep": cli("ignored options", *SWEEP, "--algo", "fa2", "--set", "lam=0.1,0.2", names=("lam", "fa2")),
    "ign-trace-cores-core": cli("ignored options", "run", *SMALL, "--trace-out", "t.json", "--trace-cores", "0",
                                names=("trace_cores", "chip")),
    "ign-trace-cores-no-out": cli("ignored options", "run", *CHIP, "--trace-cores", "0", names=("trace_cores",
                                                                                               "trace-out")),
    "trace-cores-missing": cli("chip runs", "run", *CHIP, "--trace-out", "t.json", "--trace-cores", "0,132",
                               names=("trace_cores", "0-131", "132")),
    "trace-cores-text": cli("chip runs", "run", *CHIP, "--trace-out", "t.json", "--trace-cores", "a,b",
                            names=("--trace-cores", "a,b")),
    # decode
    "dec-bq-big": cli("decode", "run", *SMALL, "--decode", "--queries", "4", "--block-q", "256",
                      names=("block_q 256", "4 query")),
    "dec-bq-big-sensitivity": cli("decode", "sensitivity", *SMALL, "--decode", "--queries", "4", "--block-q", "128",
                                  names=("block_q 128", "4 query")),
    # chip launches: estimated before anything is allocated
    "chip-heads-huge": cli("chip runs", "run", "--hw", "H100-SXM", "--algo", "fa2", "--seq-len", "1024",
                           "--heads", "100000000", names=("work units", "heads 100000000", "memory")),
    "chip-batch-heads-big": cli("chip runs", "run", "--hw", "H100-SXM", "--algo", "fa2", "--seq-len", "1024",
                                "--heads", "64", "--batch", "100000", names=("batch 100000", "memory", "available")),
    "core-timing-only-huge": cli("chip runs", "run", "--algo", "fa2", "--numerics", "off", "--seq-len", "4000000",
                                 names=("seq_len 4000000", "memory", "available")),
    "chip-sensitivity": cli("chip runs", "sensitivity", "--hw", "H100-SXM", "--algo", "fa2", "--seq-len", "1024",
                            "--heads", "8", names=("sensitivity", "H100-SXM", "chip")),
    "chip-bsfa": cli("chip runs", "run", "--hw", "H200", "--algo", "bsfa", "--seq-len", "1024", "--heads", "4",
                     names=("bsfa", "one core")),
    "chip-cores-float": cli("chip runs", "run", "--hw", "cores_float.yaml", "--algo", "fa2", "--seq-len", "1024",
                            names=("cores_float.yaml", "chip.cores")),
    "chip-cores-huge": cli("chip runs", "run", "--hw", "cores_huge.yaml", "--algo", "fa2", "--seq-len", "1024",
                           names=("cores_huge.yaml", "chip.cores")),
    # hardware and kernel YAML
    "yaml-clockbool": cli("hw YAML configs", "run", *SMALL, "--hw", "clockbool.yaml",
                          names=("clockbool.yaml", "clock_ghz")),
    "yaml-ratebool": cli("hw YAML configs", "run", *SMALL, "--hw", "ratebool.yaml",
                         names=("ratebool.yaml", "throughput")),
    "yaml-dupkey": cli("hw YAML configs", "run", *SMALL, "--hw", "dupkey.yaml",
                       names=("dupkey.yaml", "duplicate key 'clock_ghz'")),
    "yaml-dupkey-show": cli("hw YAML configs", "hw", "show", "dupkey.yaml", names=("dupkey.yaml", "duplicate key")),
    "yaml-chip-style-unknown": cli("hw YAML configs", "run", "--hw", "style_unknown.yaml", "--algo", "fa2",
                                   "--seq-len", "1024", names=("kernel_tuning", "fa9")),
    "yaml-chip-style-unknown-show": cli("hw YAML configs", "hw", "show", "style_unknown.yaml",
                                        names=("kernel_tuning", "fa9")),
    "yaml-fifo": cli("hw YAML configs", "run", *SMALL, "--hw", "fifo.yaml", names=("fifo.yaml", "not a regular")),
    "yaml-devzero": cli("hw YAML configs", "run", *SMALL, "--hw", "/dev/zero", names=("/dev/zero",)),
    "kernel-dupkey": cli("hw YAML configs", "kernel", "show", "kernel_dup.yaml",
                         names=("kernel_dup.yaml", "duplicate key 'warps'")),
    "kernel-warps-bool": cli("hw YAML configs", "kernel", "show", "kernel_bool.yaml",
                             names=("kernel_bool.yaml", "score_buffers")),
    "kernel-flag-string": cli("hw YAML configs", "kernel", "show", "kernel_flagstr.yaml",
                              names=("kernel_flagstr.yaml", "pad_streams")),
    "sweep-set-clockbool": cli("hw YAML configs", *SWEEP, "--set", "clock_ghz=true", names=("clock_ghz",)),
    # Q/K/V files: headers read first
    "qkv-huge-header-npy": cli("Q/K/V files", "run", "--hw", "C16V32", "--block-q", "64", "--block-k", "64",
                               "--qkv", "huge_header.npy", names=("huge_header.npy", "declares", "truncated")),
    "qkv-huge-member-npz": cli("Q/K/V files", "run", "--hw", "C16V32", "--qkv", "huge_member.npz",
                               names=("huge_member.npz", "member k.npy", "truncated")),
    "qkv-with-seed": cli("Q/K/V files", "run", "--hw", "C16V32", "--block-q", "64", "--block-k", "64", "--qkv",
                         "good.npz", "--seed", "7", names=("seed", "qkv", "sampled")),
    "qkv-bomb": cli("Q/K/V files", "run", "--hw", "C16V32", "--block-q", "64", "--block-k", "64", "--qkv",
                    "bomb.npz", names=("bomb.npz", "memory"), budget=280 * 2**20),
    # output paths
    "spec-devzero": cli("input files", "run", "--spec", "/dev/zero", names=("spec", "/dev/zero", "regular file")),
    "spec-fifo": cli("input files", "run", "--spec", "fifo.yaml", names=("spec", "fifo.yaml", "regular file")),
    # sweep
    "sw-scheduler-nodask": cli("sweep", *SWEEP, "--scheduler", "tcp://127.0.0.1:1", names=("--scheduler",)),
    "sw-dask-garbage": cli("sweep", *SWEEP, "--executor", "dask", "--scheduler", "not an address",
                           names=("scheduler", "not an address")),
    # validate: every check before the work
    "val-jobs0": cli("validate", "validate", "--rows", "1", "--jobs", "0", names=("--jobs", "0")),
    "val-jobsneg": cli("validate", "validate", "--rows", "1", "--jobs", "-1", names=("--jobs", "-1")),
    "val-out-file": cli("validate", "validate", "--rows", "1", "--out", "a_file", names=("a_file", "not a directory")),
    "val-out-devfull": cli("validate", "validate", "--rows", "1", "--out", "/dev/full", names=("/dev/full",)),
    "val-out-dir-in-way": cli("validate", "validate", "--rows", "1", "--out", "vo",
                              names=("validate_scatter.png", "directory")),
    "val-fit-out": cli("validate", "validate", "--rows", "1", "--fit", "--out", "fo", names=("--fit", "--out")),
    "val-fit-json": cli("validate", "validate", "--rows", "1", "--fit", "--json", names=("--fit", "--json")),
    # figure: its output checked before the work
    "figure-out-file": cli("output paths", "figure", "latency-ratio", "--out", "a_file",
                           names=("a_file", "not a directory")),
    # the Python API
    "api-options-and-kw": api("Python API", lambda: vfasim.run("C16V32", "vsa", **KW, options=Options(lam=0.2),
                                                               lam=0.1), "lam", "options"),
    "api-dispatch-core": api("Python API", lambda: vfasim.run("C16V32", "vfa", **KW, dispatch="bogus"), "dispatch"),
    "api-chip-numerics": api("Python API", lambda: vfasim.run("H100-SXM", "fa2", seq_len=1024, heads=8, kv_heads=2,
                                                              numerics="full"), "numerics"),
    "api-lam-fa2": api("Python API", lambda: vfasim.run("C16V32", "fa2", **KW, lam=0.5), "lam", "fa2"),
    "api-hwcfg-mutated": api("Python API", lambda: vfasim.run(_c16(clock_ghz=-1.0), "vfa", **KW), "clock_ghz"),
    "api-hwcfg-mutated-nan": api("Python API", lambda: vfasim.run(_c16(clock_ghz=float("nan")), "vfa", **KW),
                                 "clock_ghz", "finite"),
    "api-kernel-mutated": api("Python API", lambda: vfasim.run(_h100(), "fa2", seq_len=1024, kernel=vfasim.kernel.load_kernel(
        "fa2").model_copy(update={"warps": 0})), "warps"),
    "api-sens-chip": api("Python API", lambda: sensitivity_table("H100-SXM", "fa2", seq_len=1024, heads=8,
                                                                 kv_heads=2), "H100-SXM"),
    "api-runconfigs-empty": api("Python API", lambda: run_configs([], "vfa", **KW), "run_configs"),
    "api-seed-chip": api("Python API", lambda: vfasim.run("H100-SXM", "fa2", seq_len=1024, seed=3), "seed"),
}


def make_files(root: Path) -> None:
    """The hostile regular files the cases name, in ``root`` (made once, copied for each case)."""
    texts = {
        "clockbool.yaml": "base: C16V32\nname: bad\nclock_ghz: true\n",
        "ratebool.yaml": "base: C16V32\nname: bad\npipelines:\n  exp:\n    throughput:\n      float32: true\n",
        "dupkey.yaml": "base: C16V32\nname: bad\nclock_ghz: 1.0\nclock_ghz: 2.0\n",
        "style_unknown.yaml": "base: H100-SXM\nname: bad\nchip:\n  kernel_tuning:\n    fa9:\n"
                              "      tensor_efficiency: 0.5\n",
        "cores_float.yaml": "base: H100-SXM\nname: bad\nchip:\n  cores: 1.0e+8\n",
        "cores_huge.yaml": "base: H100-SXM\nname: bad\nchip:\n  cores: 100000000\n",
        "kernel_dup.yaml": _kernel_text().replace("\nwarps: 4  #", "\nwarps: 4\nwarps: 8  #", 1),
        "kernel_bool.yaml": _kernel_text().replace("score_buffers: 1", "score_buffers: true", 1),
        "kernel_flagstr.yaml": _kernel_text() + "pad_streams: 'yes'\n",  # a flag given as text, not true/false
        "a_file": "not a folder\n",
    }
    for name, text in texts.items():
        (root / name).write_text(text)
    with open(root / "huge_header.npy", "wb") as f:  # 1 KB claiming 3 x 64 x 1e6 x 4096 float32
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False,
                                                 "shape": (3, 64, 1_000_000, 4096)})
        f.write(bytes(1000))
    small = np.zeros((64, 32), np.float32)
    _npz(root / "good.npz", {n: _npy(np.random.default_rng(0).standard_normal((64, 32), np.float32)) for n in "qkv"})
    _npz(root / "huge_member.npz", {"q": _npy(small), "k": _npy(small)[:128] + bytes(64), "v": _npy(small)})
    zeros = _npy(np.zeros((4, 2**20), np.float32))  # 16 MiB each, a few KB compressed
    _npz(root / "bomb.npz", {"q": zeros, "k": zeros, "v": zeros}, zipfile.ZIP_DEFLATED)


def _kernel_text() -> str:
    return (ROOT / "vfasim" / "kernels" / "fa2.yaml").read_text().replace("name: fa2", "name: mine", 1)


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def _npz(path: Path, members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> None:
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in members.items():
            z.writestr(f"{name}.npy", data)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    make_files(root)
    return root


@pytest.fixture
def folder(files: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A case's own folder: the hostile files, a FIFO, and a directory where validate's scatter would go."""
    for f in files.iterdir():
        shutil.copyfile(f, tmp_path / f.name)
    os.mkfifo(tmp_path / "fifo.yaml")
    (tmp_path / "vo" / "validate_scatter.png").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def listing(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.lstat().st_mtime_ns for p in root.rglob("*")}


def cap_memory(monkeypatch: pytest.MonkeyPatch, available: float) -> None:
    monkeypatch.setattr("vfasim.runner.inputs.available_bytes", lambda: available)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_bad_input_is_one_line_and_writes_nothing(case: Case, folder: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    cap_memory(monkeypatch, case.budget_bytes)
    before = listing(folder)
    if case.call is not None:
        with pytest.raises(VfasimError) as info:
            case.call()
        message = str(info.value)
        assert "\n" not in message
    else:
        capsys.readouterr()
        status = main(list(case.argv))
        out, err = capsys.readouterr()
        assert (status, out) == (2, ""), err
        assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
        message = err
    missing = [f for f in case.fragments if f.lower() not in message.lower()]
    assert not missing, f"message {message.strip()!r} does not name {missing}"
    assert listing(folder) == before  # nothing new, nothing touched


def test_the_matrix_covers_every_subcommand_and_the_api() -> None:
    used = {c.argv[0] for c in CASES.values() if c.argv} | {"api" for c in CASES.values() if c.call}
    assert used >= {"run", "sensitivity", "sweep", "figure", "validate", "hw", "kernel", "api"}


def test_a_sweep_on_a_scheduler_without_workers_ends_with_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    distributed = pytest.importorskip("distributed")
    monkeypatch.setattr("vfasim.exec.DASK_WORKER_WAIT_S", 1.0, raising=False)
    monkeypatch.chdir(tmp_path)
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster:
        capsys.readouterr()
        status = main([*SWEEP, "--executor", "dask", "--scheduler", cluster.scheduler_address])
    out, err = capsys.readouterr()
    assert (status, out) == (2, "") and err.count("\n") == 1 and "no Dask worker joined" in err, err
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------ faults of the process itself (subprocesses)

STDOUT_FAULTS = {"full": "> /dev/full", "closed": ">&-"}


@pytest.mark.parametrize("command", [["run", *SMALL, "--json"], ["run", *SMALL, "--trace-out", "-"], ["hw", "list"]],
                         ids=["run", "run-trace", "hw"])
@pytest.mark.parametrize("fault", STDOUT_FAULTS)
def test_stdout_that_cannot_take_the_result_is_one_line_and_exit_2(tmp_path: Path, fault: str,
                                                                   command: list[str]) -> None:
    argv = " ".join(f"'{a}'" for a in command)
    script = f"'{sys.executable}' -c 'from vfasim.cli import main; import sys; sys.exit(main(sys.argv[1:]))' {argv}"
    proc = subprocess.run(["bash", "-c", f"{script} {STDOUT_FAULTS[fault]}"], cwd=tmp_path, text=True,
                          capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: ") and "standard output" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_under_an_address_space_cap_a_run_too_large_is_refused_by_its_estimate(tmp_path: Path) -> None:
    """A real cap (``ulimit -v`` 1.5 GiB), not a patched one: the estimate refuses the run before it allocates,
    rather than the allocation failing (``out of memory``) or the kernel killing it."""
    import resource

    cap = 1536 * 2**20
    proc = subprocess.run([sys.executable, "-m", "vfasim", "run", "--algo", "fa2", "--numerics", "off", "--seq-len",
                           "262144"], cwd=tmp_path, text=True, capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)},
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)))
    assert (proc.returncode, proc.stdout, proc.stderr.count("\n")) == (2, "", 1), proc.stderr
    assert "seq_len 262144" in proc.stderr and "GiB available" in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_validate_workers_end_when_validate_is_killed(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", READY_CLI, "validate", "--rows", "2", "--jobs", "2"],
                            cwd=tmp_path, env=env, text=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None and proc.stderr.readline() == "ready\n"
    assert _wait_for(lambda: len(_children(proc.pid)) >= 2, 60)
    workers = _children(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert _wait_for(lambda: not any(_alive(w) for w in workers), 5), "workers outlived the killed validate"


# ------------------------------------------------------------ accepted inputs show in the result as asked


def test_accepted_inputs_show_in_the_result(monkeypatch) -> None:
    serial = vfasim.run("H100-SXM", "fa2", seq_len=1024, heads=8, kv_heads=2, schedule="serial")
    pipelined = vfasim.run("H100-SXM", "fa2", seq_len=1024, heads=8, kv_heads=2)
    assert serial.manifest["schedule"] == "serial" and pipelined.manifest["schedule"] == "pipelined"
    checked = vfasim.run("H100-SXM", "fa2", seq_len=1024, heads=8, kv_heads=2, numerics_heads=4, seed=3,
                         workload="random")
    assert (checked.workload, checked.manifest["seed"], checked.spec["seed"]) == ("random", 3, 3)
    assert list(checked.chip["numerics_heads"]) == [0, 1, 2, 3] and checked.numerics["verdict"]
    decode = vfasim.run("C16V32", "vfa", seq_len=256, head_dim=32, block_k=64, decode=True, queries=4, block_q=4)
    assert decode.shape["block_q"] == 4
    vsa = vfasim.run("C16V32", "vsa", **KW, options=Options(lam=0.2))
    assert vsa.options["lam"] == 0.2 and vsa.spec["options"]["lam"] == 0.2
