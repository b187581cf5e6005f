"""mypy finds no error in vfasim/ under the project's own configuration ([tool.mypy] in pyproject.toml).

mypy and the stub packages come with the ``test`` extra. It runs as this interpreter's
``python -m mypy`` in a child process, not in-process through ``mypy.api.run``: in-process it
leaves its ~2 million objects and its GC thresholds to the rest of the session and its
interpreter takes seconds more to exit. The cache is the default ``.mypy_cache`` (git-ignored):
cold (as in CI) the check takes seconds, warm well under one.
"""
import os
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


USER_SCRIPT = '''
import pandas as pd

import vfasim
from vfasim.runner.results import Numerics

r = vfasim.run("C16V32", "vfa", seq_len=256, head_dim=32, block_q=64, block_k=64)
err: float | None = r.numerics["rel_err_vs_fp64"]
if err is not None and r.numerics["verdict"] != "broken":
    print(f"{err * 100:.3f} %")
numerics: Numerics = r.numerics
waits: int = r.critical_path["by_pipeline"]["vector"] + r.critical_path["bound_by"]["data"]
tokens: int = r.shape["seq_len"] * r.shape["heads"]
minit: bool = r.options["policy"]["minit"]
lam: float | None = r.options["lam"]
digest: str = r.manifest["trace_digest"]
tflops: float = r.chip.get("tflops", 0.0) * 2
kernel: str | None = r.spec["kernel"]
frame: pd.DataFrame = vfasim.to_frame([r, r])
one: pd.DataFrame = r.to_frame()
text: str = r.to_json()
row: dict[str, object] = r.to_row()
'''


def test_a_users_script_type_checks_against_the_package(tmp_path):
    """What a user writes against ``RunResult`` is mypy-clean under --strict: its nested parts are typed."""
    script = tmp_path / "user.py"
    script.write_text(USER_SCRIPT)
    env = {**os.environ, "MYPYPATH": str(ROOT)}  # the package's source, as an installed copy (py.typed) is seen
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--cache-dir",
                           str(ROOT / ".mypy_cache" / "user"), str(script)],  # warm after the first run
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


def test_results_become_a_flat_frame_and_json():
    import json

    import vfasim

    r = vfasim.run("C16V32", "vfa", seq_len=256, head_dim=32, block_q=64, block_k=64)
    frame = vfasim.to_frame([r, r])
    assert len(frame) == 2 and list(frame.columns) == list(r.to_row())
    assert not any(isinstance(v, dict) for v in frame.iloc[0])  # flat: no nested dicts in cells
    doc = json.loads(r.to_json())
    assert doc["latency_cycles"] == r.latency_cycles and doc["numerics"]["verdict"] == r.numerics["verdict"]
