"""README examples run as written: every shell block (its `vfasim …` and `sed …` lines, in order, in one
folder) and every Python block."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from vfasim.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", README, flags=re.S)
SH_BLOCKS = [body for lang, body in BLOCKS if lang == "sh"]
#: lines a block may hold that this test does not run: the test suite itself, and the docs tools (tests/test_docs.py
#: builds the site)
NOT_RUN = ("python -m pytest", "mkdocs serve", "mkdocs build")
#: a command whose full run takes long runs here at a smaller size (the extra arguments only shrink it)
SMALLER = {("figure", "latency-ratio"): ["--seq-len", "256", "--fit", ""]}


def run_line(line: str, capsys: pytest.CaptureFixture[str], folder: Path) -> None:
    """Run one line of a shell block in ``folder``: `vfasim …` in this process (``> FILE`` writes its output
    there), `sed …` as a process; any other command fails the test, so a new kind of line is noticed."""
    line = line.split("&&")[-1].strip()  # `pip install … && vfasim …`: the vfasim part
    argv = shlex.split(line)
    if argv[0] == "sed":
        subprocess.run(argv, cwd=folder, check=True)
        return
    assert argv[0] == "vfasim", f"README runs a command this test does not know: {line}"
    out_file = None
    if ">" in argv:
        argv, out_file = argv[:argv.index(">")], argv[argv.index(">") + 1]
    argv = argv[1:] + SMALLER.get(tuple(argv[1:3]), [])
    capsys.readouterr()
    assert main(argv) == 0, line
    out = capsys.readouterr().out
    assert out.strip(), f"{line} printed nothing"
    if out_file is not None:
        (folder / out_file).write_text(out)


def runnable(body: str) -> list[str]:
    return [ln for ln in body.splitlines() if ln.strip() and not ln.strip().startswith(NOT_RUN)]


def test_readme_opens_with_install_and_test_commands():
    lang, body = BLOCKS[0]
    first, second = body.strip().splitlines()
    assert first.startswith("pip install") and "vfasim run --hw C4V16 --algo vfa" in first
    assert second == "python -m pytest"
    ci = (ROOT / ".ci" / "run").read_text()
    assert second in ci.splitlines()


@pytest.mark.parametrize("block", [b for b in SH_BLOCKS if runnable(b)],
                         ids=lambda b: runnable(b)[-1][:60])
def test_readme_block_runs(block, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # commands that write files write them here
    for line in runnable(block):
        run_line(line, capsys, tmp_path)


def test_the_kernel_example_changes_what_it_says_it_changes(capsys, tmp_path, monkeypatch):
    """The copied kernel's edits took: the run names the new kernel."""
    monkeypatch.chdir(tmp_path)
    block = next(b for b in SH_BLOCKS if "kernel show" in b)
    lines = runnable(block)
    for line in lines[:-1]:
        run_line(line, capsys, tmp_path)
    text = (tmp_path / "my_kernel.yaml").read_text()
    assert "score_buffers: 2" in text and "name: fa2-overlap" in text
    assert main(shlex.split(lines[-1])[1:]) == 0
    assert "kernel fa2-overlap" in capsys.readouterr().out


@pytest.mark.parametrize("code", [body for lang, body in BLOCKS if lang == "python"])
def test_readme_python_runs(code, capsys):
    exec(compile(code, "README.md", "exec"), {})
    assert capsys.readouterr().out.strip()
