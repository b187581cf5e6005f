"""mypy finds no error in vfasim/ under the project's own configuration ([tool.mypy] in pyproject.toml).

mypy and the stub packages come with the ``test`` extra. It runs as this interpreter's
``python -m mypy`` in a child process, not in-process through ``mypy.api.run``: in-process it
leaves its ~2 million objects and its GC thresholds to the rest of the session and its
interpreter takes seconds more to exit. The cache is the default ``.mypy_cache`` (git-ignored):
cold (as in CI) the check takes seconds, warm well under one.
"""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_finds_no_errors():
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "pyproject.toml"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert done.returncode == 0 and not errors, "\n".join(errors or [done.stdout, done.stderr])
    n_modules = len(list((ROOT / "vfasim").rglob("*.py")))
    assert f"Success: no issues found in {n_modules} source files" in done.stdout  # every module was checked
