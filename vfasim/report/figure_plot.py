"""Drawing and writing the latency-ratio figure (consumes rows from vfasim.figure)."""

from __future__ import annotations

import csv
import json
from dataclasses import asdict
from pathlib import Path

from matplotlib.figure import Figure

COLORS = {"tensor": "#4c72b0", "vector": "#dd8452", "exp": "#55a868"}
CSV_COLUMNS = ("hw", "algo", "tensor", "vector", "exp", "latency", "vector_share", "speedup_vs_c16v32_fa")


def plot_latency_ratio(rows: list[dict], out: Path, stem: str = "latency_ratio") -> list[Path]:
    """Stacked busy-time bars per (config, variant) with the end-to-end latency marked; PNG + SVG."""
    fig = Figure(figsize=(max(6, 0.7 * len(rows)), 4.2))  # no pyplot: no global backend or state
    ax = fig.subplots()
    x = range(len(rows))
    bottom = [0.0] * len(rows)
    for cls, color in COLORS.items():
        heights = [r[cls] for r in rows]
        ax.bar(x, heights, bottom=bottom, color=color, label=cls.capitalize(), width=0.7)
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.scatter(x, [r["latency"] for r in rows], marker="_", s=400, color="black", zorder=3,
               label="end-to-end latency")
    ax.set_xticks(list(x), [f"{r['hw']}\n{r['algo']}" for r in rows], fontsize=6, rotation=35, ha="right")
    ax.set_ylabel("latency ratio (FA tensor on C16V32 = 1)")
    ax.set_title("Latency ratio normalized to Tensor on C16V32")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.{ext}" for ext in ("png", "svg")]
    for path in paths:
        fig.savefig(path, dpi=150)
    return paths


def write_rows(rows: list[dict], path: Path, columns: tuple[str, ...] | None = None) -> Path:
    columns = columns or tuple(rows[0])
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def markdown_table(rows: list[dict], columns: tuple[str, ...]) -> str:
    def cell(v) -> str:
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(cell(r[c]) for c in columns) + " |" for r in rows]) + "\n"


CLAIM_COLUMNS = ("id", "claim", "role", "paper", "model", "difference", "within_tolerance")


def write_latency_ratio(result, out: Path) -> list[Path]:
    """Figure (PNG, SVG), bars CSV, claims CSV + Markdown, fitted parameters, sensitivity CSV."""
    paths = plot_latency_ratio(result.rows, out)
    paths.append(write_rows(result.rows, out / "latency_ratio.csv", CSV_COLUMNS))
    paths.append(write_rows(result.claims, out / "claims.csv", (*CLAIM_COLUMNS, "source")))
    (out / "claims.md").write_text(markdown_table(result.claims, CLAIM_COLUMNS))
    (out / "params.json").write_text(json.dumps({"fit": sorted(result.fit), **asdict(result.params)}, indent=1))
    paths += [out / "claims.md", out / "params.json"]
    if result.sensitivity:
        paths.append(write_rows(result.sensitivity, out / "sensitivity.csv"))
    return paths
