"""The published-measurement tables parse with the documented schema and each one names its source."""

from __future__ import annotations

import csv
import re
from importlib.resources import files
from pathlib import Path

import pytest

VALIDATION_DIR = Path(__file__).resolve().parents[1] / "validation"
TABLES = sorted(VALIDATION_DIR.glob("*.csv"))

CORE = ["chip", "kernel", "dtype", "head_dim", "causal", "seq_len", "batch", "heads"]
METRIC = ["metric", "value", "unit"]
OPTIONAL = {"kv_heads", "seq_len_q", "mode", "approx", "clock_mhz"}
INTEGERS = {"head_dim", "seq_len", "batch", "heads", "kv_heads", "seq_len_q"}
POSITIVE_REALS = {"tflops", "value", "clock_mhz"}
VOCABULARY = {
    "dtype": {"fp16", "bf16", "fp8_e4m3", "16bit"},
    "causal": {"true", "false"},
    "mode": {"prefill", "decode"},
    "metric": {"latency"},
    "unit": {"us"},
}


def _read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def _check_value(column: str, text: str) -> None:
    if column in INTEGERS:
        assert int(text) > 0, f"{column}={text}"
    elif column in POSITIVE_REALS:
        assert float(text) > 0, f"{column}={text}"
    elif column == "approx":
        assert float(text) >= 0, f"approx={text}"
    elif column in VOCABULARY:
        assert text in VOCABULARY[column], f"{column}={text!r} not in {sorted(VOCABULARY[column])}"


def _readme_sections() -> dict[str, str]:
    """Map each `name.csv` heading of the README to the text under it."""
    parts = re.split(r"^## `([^`]+\.csv)`\s*$", (VALIDATION_DIR / "README.md").read_text(), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_there_are_tables_to_validate_against():
    assert TABLES, f"no CSV tables in {VALIDATION_DIR}"


@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.name)
def test_table_follows_the_documented_schema(path):
    header, rows = _read(path)
    assert header[: len(CORE)] == CORE, f"{path.name}: core columns {header[: len(CORE)]}"
    measured = ["tflops"] if "tflops" in header else METRIC
    assert set(measured) <= set(header), f"{path.name}: needs tflops or {METRIC}"
    unknown = set(header) - set(CORE) - set(measured) - OPTIONAL
    assert not unknown, f"{path.name}: undocumented columns {sorted(unknown)}"
    assert rows, f"{path.name} has no rows"
    for lineno, row in enumerate(rows, 2):
        assert None not in row and all(v not in (None, "") for v in row.values()), f"{path.name}:{lineno}: {row}"
        for column, text in row.items():
            _check_value(column, text)


@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.name)
def test_readme_names_a_source_for_each_table(path):
    section = _readme_sections().get(path.name)
    assert section is not None, f"README.md has no section for {path.name}"
    assert re.search(r"^Sources?\b.*:", section, flags=re.M), f"README.md names no source for {path.name}"


def test_every_readme_section_has_its_table():
    assert sorted(_readme_sections()) == [p.name for p in TABLES]


def test_tables_ship_inside_the_package():
    shipped = files("vfasim") / "validation"
    assert sorted(p.name for p in shipped.iterdir() if p.name.endswith(".csv")) == [p.name for p in TABLES]
    assert (shipped / "README.md").is_file()
