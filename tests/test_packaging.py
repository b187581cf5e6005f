"""The packaging config ships every subpackage and every data file of vfasim/ (read from
pyproject.toml, no install): a folder with an __init__.py left out of the wheel, or a YAML/CSV
no package-data glob names, works in the editable checkout and breaks a regular install."""
import fnmatch
import os
import tomllib
from pathlib import Path

import setuptools

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


#: raw artifacts of a measurement campaign that no code in the package reads: the log, the clock trace and the
#: Q/K/V arrays (read by experiments/ from the repository); the tables and their sidecars ship
NOT_SHIPPED = ("validation/*/*.txt", "validation/*/*.npz")
