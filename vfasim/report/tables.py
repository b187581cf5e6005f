"""Result tables as CSV and Markdown, for experiments that tabulate runs."""

from __future__ import annotations

import csv
from pathlib import Path


def write_table(rows: list[dict], columns: tuple[str, ...], stem: Path) -> list[Path]:
    """``stem``.csv and ``stem``.md, one row per dict (floats as 3 significant digits in Markdown)."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = stem.with_suffix(".csv"), stem.with_suffix(".md")
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row[c]) for c in columns) + " |" for row in rows]
    md_path.write_text("\n".join(lines) + "\n")
    return [csv_path, md_path]


def _cell(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)
