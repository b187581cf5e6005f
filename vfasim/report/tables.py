"""Result tables as CSV and Markdown, for experiments that tabulate runs."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from vfasim.io.outputs import write_text


def write_table(rows: list[dict], columns: tuple[str, ...], stem: Path) -> list[Path]:
    """``stem``.csv and ``stem``.md, one row per dict (floats as 3 significant digits in Markdown)."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = stem.with_suffix(".csv"), stem.with_suffix(".md")
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row[c]) for c in columns) + " |" for row in rows]
    return [write_text(csv_path, text.getvalue()), write_text(md_path, "\n".join(lines) + "\n")]


def _cell(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)
