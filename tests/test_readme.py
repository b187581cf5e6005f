"""README examples run as written: every `vfasim …` command and every Python block."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from vfasim.cli import main

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", README, flags=re.S)
COMMANDS = [line.split("&&")[-1].strip() for lang, body in BLOCKS if lang == "sh"
            for line in body.splitlines() if "vfasim " in line]


def test_readme_opens_with_install_and_test_commands():
    lang, body = BLOCKS[0]
    first, second = body.strip().splitlines()
    assert first.startswith("pip install") and "vfasim run --hw C4V16 --algo vfa" in first
    assert second == "python -m pytest"
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert second in ci.splitlines()


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_command_runs(command, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # commands that write files write them here
    assert main(shlex.split(command)[1:]) == 0
    assert capsys.readouterr().out.strip()


@pytest.mark.parametrize("code", [body for lang, body in BLOCKS if lang == "python"])
def test_readme_python_runs(code, capsys):
    exec(compile(code, "README.md", "exec"), {})
    assert capsys.readouterr().out.strip()
