"""The packaging config ships every subpackage and every data file of vfasim/ (read from
pyproject.toml, no install): a folder with an __init__.py left out of the wheel, or a YAML/CSV
no package-data glob names, works in the editable checkout and breaks a regular install."""
import fnmatch
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import setuptools

import vfasim

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _shipped_packages() -> set[str]:
    """The packages setuptools builds from the config: an explicit list or a find section."""
    if "packages" in SETUPTOOLS and isinstance(SETUPTOOLS["packages"], list):
        return set(SETUPTOOLS["packages"])
    find = SETUPTOOLS["packages"]["find"]
    finder = setuptools.find_namespace_packages if find.get("namespaces", True) else setuptools.find_packages
    where = ROOT / find.get("where", ["."])[0]
    return set(finder(where=str(where), include=find.get("include", ("*",)), exclude=find.get("exclude", ())))


def _source_files() -> list[Path]:
    """Every file under vfasim/, following its symlinked data folders, bytecode left out."""
    walk = os.walk(ROOT / "vfasim", followlinks=True)
    return sorted(Path(d) / f for d, _, files in walk if "__pycache__" not in Path(d).parts for f in files)


def _matches(path: str, pattern: str) -> bool:
    """Glob match as setuptools does it: ``*`` stays within one folder."""
    parts, globs = path.split("/"), pattern.split("/")
    return len(parts) == len(globs) and all(fnmatch.fnmatchcase(p, g) for p, g in zip(parts, globs))


def test_every_subpackage_is_shipped():
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in _source_files() if p.name == "__init__.py"}
    assert {"vfasim", "vfasim.chip", "vfasim.functional"} <= on_disk
    assert sorted(on_disk - _shipped_packages()) == []


def test_every_data_file_is_shipped():
    globs = SETUPTOOLS["package-data"]["vfasim"]
    data = [p.relative_to(ROOT / "vfasim").as_posix() for p in _source_files() if p.suffix != ".py"]
    assert "hw_configs/c4v16.yaml" in data and "validation/README.md" in data
    assert [f for f in data if not any(_matches(f, g) for g in (*globs, *NOT_SHIPPED))] == []


#: raw artifacts of a measurement campaign that no code in the package reads: the log, the clock trace, the Q/K/V
#: arrays (read by experiments/ from the repository) and compiled kernels' IR; the tables and their sidecars ship
NOT_SHIPPED = ("validation/*/*.txt", "validation/*/*/*.txt", "validation/*/*.npz", "validation/*/*.ttgir")


# -- what a user installs and runs ---------------------------------------------------------------------------

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_optional_features_are_extras_and_the_test_extra_pulls_them():
    hard = " ".join(PROJECT["dependencies"])
    assert "pyarrow" not in hard and "dask" not in hard  # 170 MB and a cluster stack for two optional features
    extras = PROJECT["optional-dependencies"]
    assert extras["parquet"] == ["pyarrow>=15"] and extras["dask"] == ["dask[distributed]>=2024.1"]
    assert "torch" in extras["capture"][0]
    assert extras["test"][0] == "vfasim[parquet,dask]"  # CI installs -e '.[test]' and runs every feature


def test_a_missing_extra_is_named_in_one_line(monkeypatch, tmp_path):
    import pandas as pd

    from vfasim.errors import VfasimError
    from vfasim.exec import compute
    from vfasim.io import extras

    monkeypatch.setattr(extras, "has", lambda extra: False)
    with pytest.raises(VfasimError, match=r"^--executor dask needs the dask extra \(distributed\): pip install 'vfasim\[dask\]'$"):
        list(compute(len, [("x",)], ["t"], "dask", None, "tcp://127.0.0.1:1"))
    import vfasim.sweep.plots as plots

    monkeypatch.setattr(plots, "has", lambda extra: False)
    frame = pd.DataFrame({"hw": ["C4V16"], "algo": ["vfa"], "latency_cycles": [10], "bound": ["exp"],
                          "latency_vs_first_x": [1.0]})
    with pytest.warns(UserWarning, match=r"results.parquet not written: .*pip install 'vfasim\[parquet\]'"):
        written = plots.write_sweep(frame, "hw", ["algo"], tmp_path)
    assert tmp_path / "results.csv" in written and not (tmp_path / "results.parquet").exists()


def test_import_needs_no_fcntl():
    code = ("import sys; sys.modules['fcntl'] = None\n"  # as on Windows: importing fcntl fails
            "import vfasim, vfasim.cli, vfasim.sweep, vfasim.io.outputs; print(vfasim.__version__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == vfasim.__version__


def test_python_dash_m_runs_the_command_line():
    out = subprocess.run([sys.executable, "-m", "vfasim", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == f"vfasim {vfasim.__version__}"


def test_license_version_and_changelog():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "the vfasim authors" in text and PROJECT["license"] == "MIT"
    assert PROJECT["license-files"] == ["LICENSE"] and "Typing :: Typed" in PROJECT["classifiers"]
    assert PROJECT["dynamic"] == ["version"] and "version" not in PROJECT  # one place: vfasim.__version__
    assert vfasim.__version__ != "0.1.0" and f"## {vfasim.__version__}" in (ROOT / "CHANGELOG.md").read_text()


def test_hw_show_keeps_every_numbers_source(capsys):
    import yaml

    from vfasim.cli import main
    from vfasim.hw import load_hw

    assert main(["hw", "show", "C4V16"]) == 0
    out = capsys.readouterr().out
    assert "  matmul: float4_e2m1  # source: paper" in out  # from the file itself
    assert "clock_ghz: 1.5  # assumed, because the paper gives no clock" in out  # from its base, C16V32
    assert "units: 1  # vfasim default, not set in the file" in out
    assert yaml.safe_load(out) == load_hw("C4V16").model_dump(mode="json")  # still the config, as YAML


def test_sweep_without_out_says_it_wrote_nothing(capsys):
    from vfasim.cli import main

    assert main(["sweep", "--seq-len", "128", "--head-dim", "32", "--block-q", "64", "--block-k", "64",
                 "--jobs", "1", "--quiet"]) == 0
    assert "nothing written (--out DIR keeps results.csv" in capsys.readouterr().out
