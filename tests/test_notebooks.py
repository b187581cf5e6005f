"""The notebooks run top to bottom (at a tiny size) in a fresh kernel, and are committed executed."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from vfasim.hw import builtin_names, load_hw

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, tmp_path, monkeypatch):
    monkeypatch.setenv("VFASIM_NB_SEQ", "256")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert outputs and not [o for o in outputs if o.get("output_type") == "error"]
    if path.name == "quickstart.ipynb":  # "every paper core": the one-core configs, no real chip
        table = next(o["data"]["text/plain"] for o in outputs if "hw algo" in o.get("data", {}).get("text/plain", ""))
        chips = [n for n in builtin_names() if load_hw(n).chip is not None]
        assert chips and not [n for n in chips if n in table], table


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_are_committed_executed_in_order(path):
    """Readable without running: every code cell ran, top to bottom, without an error, and plots are there."""
    cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    assert [c.get("execution_count") for c in cells] == list(range(1, len(cells) + 1))
    outputs = [o for c in cells for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)
