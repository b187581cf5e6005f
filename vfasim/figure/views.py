"""Tables the figure draws: bars normalised to FA's tensor time on C16V32, the exp-scale curve, the bars
the paper's quoted shares imply, and the sequence run's special and masked tiles."""

from __future__ import annotations

import numpy as np

from vfasim.figure.claims import paper_claims
from vfasim.figure.study import Study
from vfasim.trace import KIND_CODE

BAR_COLUMNS = ("granularity", "head_dim", "hw", "algo", "tensor", "vector", "exp", "stacked", "overlapped",
               "vector_share", "bottleneck", "exp_emulation")


def bar_rows(meas: dict[tuple, dict], emulation: dict[tuple[str, str], float]) -> list[dict]:
    """One row per bar; busy and latency in units of FA's tensor busy on C16V32 at the same (g, d)."""
    out = []
    for (g, d, name, v), m in meas.items():
        unit = meas[g, d, "C16V32", "fa2"]["tensor"]
        out.append({"granularity": g, "head_dim": d, "hw": name, "algo": v,
                    **{k: m[k] / unit for k in ("tensor", "vector", "exp", "stacked", "overlapped")},
                    "vector_share": m["vector_share"], "bottleneck": m["bottleneck"],
                    "exp_emulation": emulation.get((name, v), 0.0)})
    return out


def curve_rows(curve: dict[tuple, dict], meas: dict[tuple, dict]) -> list[dict]:
    """VFA on C4V16 as its exp rate grows: speedup under each latency and baseline."""
    out = []
    for (g, d, v, s), m in curve.items():
        if v != "vfa":
            continue
        row = {"granularity": g, "head_dim": d, "exp_scale": s}
        for lat in ("stacked", "overlapped"):
            row[f"{lat}_vs_vfa_c16v32"] = meas[g, d, "C16V32", "vfa"][lat] / m[lat]
            row[f"{lat}_vs_fa_c16v32"] = meas[g, d, "C16V32", "fa2"][lat] / m[lat]
            row[f"{lat}_vs_fa_same"] = curve[g, d, "fa2", s][lat] / m[lat]
        out.append(row)
    return out


def implied_rows(meas: dict[tuple, dict], d: int) -> list[dict]:
    """The six quoted bars as the paper's shares imply them, given the model's tensor and exp per tile.

    V = s / (1 − s) · (T + E); heights in FA-tensor-on-C16V32 units; speedups against
    VFA on C16V32 (quoted, P1b) under both latencies, and for C4V16 also with unbounded exp.
    """
    unit = meas["block", d, "C16V32", "fa2"]["tensor"]
    out = []
    for c in paper_claims():
        if c["kind"] != "share":
            continue
        m, s = meas["block", d, c["hw"], c["algo"]], float(c["paper_value"])
        t, e = m["tensor"] / unit, m["exp"] / unit
        out.append({"claim": c["id"], "hw": c["hw"], "algo": c["algo"], "share": s, "tensor": t, "exp": e,
                    "vector": s / (1 - s) * (t + e)})
    ref = next(r for r in out if r["claim"] == "P1b")
    for r in out:
        r["stacked"] = r["tensor"] + r["exp"] + r["vector"]
        r["overlapped"] = max(r["tensor"], r["exp"], r["vector"])
        r["stacked_vs_vfa_c16v32"] = (ref["tensor"] + ref["exp"] + ref["vector"]) / r["stacked"]
        r["overlapped_vs_vfa_c16v32"] = max(ref["tensor"], ref["exp"], ref["vector"]) / r["overlapped"]
        r["stacked_unbounded_exp"] = (ref["tensor"] + ref["exp"] + ref["vector"]) / (r["tensor"] + r["vector"])
    return out


def sequence_fractions(study: Study, d: int) -> dict[str, float]:
    """Of VFA's visited tiles in the sequence run: the sink or local ones (full FA cost), and the masked ones."""
    trace = study.traces["sequence", d, "C16V32", "vfa"]
    tiles = trace.tile_ids()
    visited = np.unique(tiles[trace.kblock >= 0]).size
    special = np.unique(tiles[trace.kind == KIND_CODE["rowmax"]]).size
    masked = np.unique(tiles[trace.kind == KIND_CODE["mask"]]).size
    return {"seq_len": study.seq_len, "tiles": visited, "special": special / visited, "masked": masked / visited}
