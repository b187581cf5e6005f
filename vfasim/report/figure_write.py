"""Writing the latency-ratio outputs: bars, claims (CSV + Markdown), parameters, curve, implied bars.

Every file is written atomically (``vfasim.io.outputs``), so an interrupted run leaves nothing half-written.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from vfasim.figure.claims import PRIMARY_REASON
from vfasim.figure.fit import P7_PROOF
from vfasim.figure.params import PARAM_RANGES, at_bound, describe
from vfasim.figure.views import BAR_COLUMNS
from vfasim.io.outputs import write_text

if TYPE_CHECKING:
    from vfasim.figure import LatencyRatio

CLAIM_COLUMNS = ("claim", "reading", "primary", "granularity", "head_dim", "paper_value", "model_value", "met",
                 "role", "miss_class")
#: every file ``write_latency_ratio`` writes into its folder
FIGURE_FILES = ("latency_ratio.png", "latency_ratio.svg", "latency_ratio.csv", "claims.csv", "claims.md",
                "params.json", "exp_curve.csv", "implied.csv")
CURVE_COLUMNS = ("granularity", "head_dim", "exp_scale", "stacked_vs_vfa_c16v32", "overlapped_vs_vfa_c16v32",
                 "stacked_vs_fa_c16v32", "overlapped_vs_fa_c16v32", "stacked_vs_fa_same", "overlapped_vs_fa_same")


def write_latency_ratio(result: LatencyRatio, out: Path) -> list[Path]:
    """Figure (PNG, SVG), latency_ratio.csv, claims.csv/.md, params.json, exp_curve.csv, implied.csv."""
    from vfasim.report.figure_plot import (
        plot_latency_ratio,  # matplotlib only when drawing
    )

    out.mkdir(parents=True, exist_ok=True)
    paths = plot_latency_ratio(result, out)
    files = {
        "latency_ratio.csv": csv_text(result.rows, BAR_COLUMNS),
        "claims.csv": csv_text(result.claims, CLAIM_COLUMNS),
        "claims.md": claims_markdown(result),
        "params.json": json.dumps(params_doc(result), indent=1) + "\n",
        "exp_curve.csv": csv_text(result.curve, CURVE_COLUMNS),
        "implied.csv": csv_text(result.implied, tuple(result.implied[0])),
    }
    for name, text in files.items():
        paths.append(write_text(out / name, text))
    return paths


def _cell(v: object) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def csv_text(rows: list[dict], columns: tuple[str, ...]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([[_cell(r[c]) for c in columns] for r in rows])
    return buf.getvalue()


def markdown_table(rows: list[dict], columns: tuple[str, ...]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(_cell(r[c]) for c in columns) + " |" for r in rows]) + "\n"


def params_doc(result: LatencyRatio) -> dict:
    doc: dict[str, object] = {"configs": asdict(result.params), "configs_at_bound": at_bound(result.params),
           "ranges": {k: [lo, hi, why] for k, (lo, hi, why) in PARAM_RANGES.items()}, "fit": sorted(result.fit)}
    if result.fitted is not None:
        assert result.best_all is not None  # bounded_fit gives both or neither
        doc |= {"fitted": asdict(result.fitted), "fitted_at_bound": at_bound(result.fitted),
                "configs_hold_the_fit": result.fitted == result.params,
                "best_all_claims": {"params": asdict(result.best_all["params"]), "met": sorted(result.best_all["met"])}}
    doc |= {"fa4_exp_emulation": {f"{k[0]}/{k[1]}": v for k, v in result.emulation.items()}, "sequence_tiles": result.fractions,
            "exp_over_tensor_per_tile": result.exp_over_tensor}
    return doc


def summary(result: LatencyRatio) -> str:
    """What the command prints: the primary claims, the parameters, and the headline facts."""
    primary = [c for c in result.claims if c["primary"]]
    met = sum(c["met"] for c in primary)
    lines = [markdown_table(primary, ("claim", "reading", "paper_value", "model_value", "met", "miss_class")),
             f"primary ({result.granularity}, head dim {result.head_dim}): {met} of {len(primary)} claims met",
             *(f"  {c['claim']} {c['miss_class']}: {c['why']}" for c in primary if not c["met"]),
             f"configs: {describe(result.params)}"]
    if result.fitted is not None:
        assert result.best_all is not None  # bounded_fit gives both or neither
        same = "yes" if result.fitted == result.params else "NO, refit differs"
        lines += [f"bounded fit to {','.join(sorted(result.fit))}: {describe(result.fitted)}; configs hold it: {same}",
                  (f"best any grid point does on all claims at once: {len(result.best_all['met'])} of 12 "
                   f"({','.join(sorted(result.best_all['met']))}) at {describe(result.best_all['params'])}")]
    lines += ["exp time / FP16 tensor time per tile: " + ", ".join(
        f"{r:.2f} (head dim {d})" for d, r in result.exp_over_tensor.items())]
    f = result.fractions
    lines.append(f"sequence run ({f['seq_len']} tokens, causal): {f['tiles']} VFA tiles, {f['special']:.0%} sink or "
                 f"local (full FA cost), {f['masked']:.0%} masked")
    lines += [_capture_line(result)]
    if result.emulation:
        lines.append("FA4-style emulated exp fraction (best overlapped block latency, capped at 25%): " + ", ".join(
            f"{name}/{variant} {v:.0%}" for (name, variant), v in result.emulation.items()))
    return "\n".join(lines)


def _capture_line(result: LatencyRatio) -> str:
    rows = [c for c in result.capture if c["head_dim"] == result.head_dim]
    parts = ", ".join(f"{c['hw']} {c['captured']:.0%}" for c in rows)
    return f"share of VFA's vector saving that FA4's conditional rescale already captures (block, head dim " \
           f"{result.head_dim}): {parts}"


def claims_markdown(result: LatencyRatio) -> str:
    primary = [c for c in result.claims if c["primary"]]
    misses = [c for c in result.claims if not c["met"] and c["granularity"] == "block"]
    parts = [
        "# Figure 1 claims\n", summary(result), "\n## Primary reading, and why\n", PRIMARY_REASON + "\n",
        "\n## Misses at the primary reading: class and reason\n",
        markdown_table([c for c in primary if not c["met"]], ("claim", "miss_class", "why")),
        f"\nProof used for P7 with doubled exp and a shared baseline: {P7_PROOF}.\n",
        "\n## Every unmet reading at block granularity\n",
        markdown_table(misses, ("claim", "reading", "head_dim", "model_value", "miss_class", "why")),
        "\n## Every reading\n", markdown_table(result.claims, CLAIM_COLUMNS),
    ]
    return "".join(parts)
