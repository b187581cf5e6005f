"""Fitting the unknown quantities to the claims, what unmet claims would need, and why each miss is a miss.

- ``bounded_fit``: grid search inside ``PARAM_RANGES`` for the values that meet
  the most fitted claims (primary reading, block granularity), then miss them
  least (sum of squared misses in tolerance units); ties keep the first found.
- ``scan`` ("what it would take"): each parameter alone, far outside its range
  (1/16 of the low end to 64× the high end), to find the value at which each
  unmet claim would be met and what that value breaks.
- ``classify``: every unmet row gets one of three classes (``MISS_CLASSES``).
"""

from __future__ import annotations

import itertools
from dataclasses import fields, replace
from typing import Any

import numpy as np

from vfasim.figure.claims import (
    Evaluator,
    distance,
    is_primary,
    misfit,
    paper_claims,
    primary_of,
)
from vfasim.figure.params import PARAM_RANGES, ModelParams, apply_params, relevant_key
from vfasim.figure.study import Study

GRID: dict[str, tuple] = {
    "reduction_factor": (1.0, 2.0, 3.0, 4.0),
    "o_rmw_factor": (1.0, 2.0, 3.0),
    "cast_fp8_factor": (1.0, 1.5, 2.0),
    "quant_mxfp4_factor": (1.0, 2.0, 3.0, 4.0),
    "op_latency_cycles": (4, 16, 32, 48, 64),
    "o_in_cube": (False, True),
}
SCAN_POINTS = 14
FIT_TASK = "bounded fit"  # fit_and_scan's task for the fit; the scan's tasks are named by their parameter
MISS_CLASSES = ("impossible in any fixed-schedule model", "impossible with plausible costs",
                "met only under another reading")
UNSEARCHED = "not classified (no search)"
P7_PROOF = ("a fixed schedule's latency is a sum or max of op times, and halving the exp rate's op "
            "times at most halves it (L(t/2) >= L(t)/2), so with a baseline shared by P6c and P7, "
            "P7 <= 2 x P6c <= 4.6 < 5.1 whenever P6c is met")


class Evaluations:
    """Claim rows per parameter set; a config is re-timed only when a field it depends on changes."""

    def __init__(self, study: Study) -> None:
        self.study = study
        self.memo: dict[tuple, dict] = {}

    def rows(self, p: ModelParams, g: str, d: int, with_latency: bool, primary: bool = False) -> list[dict]:
        """Every (claim, reading) row at (g, d) with the paper configs set to ``p`` (``primary``: its primary rows)."""
        meas: dict[tuple, dict] = {}
        for name, hw in self.study.configs.items():
            key = ("bars", name, relevant_key(p, hw), g, d, with_latency)
            if key not in self.memo:
                self.memo[key] = self.study.measurements({name: apply_params(hw, p)}, with_latency, only=(g, d),
                                                         variants=("fa2", "vfa"))
            meas.update(self.memo[key])
        c4 = self.study.configs["C4V16"]
        curve_key = ("curve", relevant_key(p, c4), g, d, with_latency)
        if curve_key not in self.memo:
            self.memo[curve_key] = self.study.exp_curve({"C4V16": apply_params(c4, p)}, (float("inf"),),
                                                        with_latency, only=(g, d))
        return Evaluator(meas, self.memo[curve_key], g, d).rows(paper_claims(), primary)


def bounded_fit(ev: Evaluations, fit: set[str], d: int, grid: dict[str, tuple] = GRID) -> tuple[ModelParams, dict]:
    """The grid point whose primary block rows meet the most of ``fit``, then miss them least.

    Also returns the best any grid point does on all claims at once (``best_all``: params, ids met),
    the evidence that a claim no grid point meets is out of reach with plausible costs.
    """
    every = {c["id"] for c in paper_claims()}
    best, best_score = ModelParams(), (np.inf, np.inf)
    top, top_score, top_met = ModelParams(), (np.inf, np.inf), frozenset[str]()
    for values in itertools.product(*grid.values()):
        point: dict[str, Any] = dict(zip(grid, values))
        p = replace(ModelParams(), **point)
        rows = ev.rows(p, "block", d, False, primary=True)
        score, all_score = misfit(rows, fit), misfit(rows, every)
        if score < best_score:
            best, best_score = p, score
        if all_score < top_score:
            top, top_score, top_met = p, all_score, frozenset(r["claim"] for r in rows if r["met"])
    return best, {"params": top, "met": top_met}


def scan_values(name: str) -> list[Any]:
    lo, hi, _ = PARAM_RANGES[name]
    if name == "o_in_cube":
        return [False, True]
    values = np.geomspace(lo / 16, hi * 64, SCAN_POINTS)
    out = sorted({*values.tolist(), lo, hi})
    return [round(v) if name == "op_latency_cycles" else v for v in out if v > 0]


def row_key(r: dict) -> tuple:
    return r["claim"], r["reading"], r["granularity"], r["head_dim"]


def scan(ev: Evaluations, p: ModelParams, cells: list[tuple[str, int, bool]],
         names: tuple[str, ...] | None = None) -> dict[tuple, list[tuple]]:
    """Row key -> [(parameter, value, met, primary claims met at that point)] over each parameter alone (of ``names``,
    default every one, in field order).

    Cells are (granularity, head dim, coarse): a coarse cell (the sequence runs, whose timing
    costs most) is searched at every other value.
    """
    out: dict[tuple, list[tuple]] = {}
    for f in fields(p):
        if names is not None and f.name not in names:
            continue
        values = scan_values(f.name)
        for i, value in enumerate(values):
            change: dict[str, Any] = {f.name: value}
            q = replace(p, **change)
            for g, d, coarse in cells:
                if coarse and i % 2 and i != len(values) - 1:
                    continue
                rows = ev.rows(q, g, d, True)
                met = frozenset(r["claim"] for r in primary_of(rows, g, d) if r["met"])
                for r in rows:
                    out.setdefault(row_key(r), []).append((f.name, value, r["met"], met, r["miss"]))
    return out


def fit_and_scan(ev: Evaluations, fit: frozenset[str], d: int, grid: dict[str, tuple], p: ModelParams,
                 cells: list[tuple[str, int, bool]], jobs: int = 1) -> tuple[tuple[ModelParams, dict] | None, dict]:
    """``bounded_fit`` (None without ``fit``) and ``scan``, as tasks over ``jobs`` processes (the fit, and each
    parameter's scan); the results are those of one process. In one process the tasks share ``ev``'s memo."""
    from vfasim.exec import compute  # the local pool: workers ignore Ctrl-C and end with their parent

    parts = ([FIT_TASK] if fit else []) + [f.name for f in fields(p)]
    tasks = [(ev, part, fit, d, grid, p, cells) for part in parts]
    done = dict(compute(_search_part, tasks, [f"vfasim-figure-{part}" for part in parts], "local", jobs, None))
    scanned: dict[tuple, list[tuple]] = {}
    for i, part in enumerate(parts):  # in parameter order, as one scan appends them
        if part != FIT_TASK:
            for key, points in done[i].items():
                scanned.setdefault(key, []).extend(points)
    return (done[0] if fit else None), scanned


def _search_part(ev: Evaluations, part: str, fit: frozenset[str], d: int, grid: dict[str, tuple], p: ModelParams,
                 cells: list[tuple[str, int, bool]]) -> Any:
    """One task of ``fit_and_scan``: the bounded fit (``FIT_TASK``) or the scan of the parameter ``part``."""
    return bounded_fit(ev, set(fit), d, grid) if part == FIT_TASK else scan(ev, p, cells, (part,))


def needs(points: list[tuple], p: ModelParams) -> dict[str, tuple]:
    """Parameter -> (value nearest the fitted one that meets the row, primary claims met there).

    Where no scanned value meets it but the miss changes sign between two neighbours, the row
    is met somewhere between them: the geometric mean stands for it, marked with "~".
    """
    out: dict[str, tuple] = {}
    for name in dict.fromkeys(x[0] for x in points):
        mine = sorted((x for x in points if x[0] == name), key=lambda x: float(x[1]))
        here = max(float(getattr(p, name)), 1e-9)
        hits = [(x[1], x[3]) for x in mine if x[2]]
        hits += [(f"~{np.sqrt(float(a[1]) * float(b[1])):.3g}", b[3]) for a, b in itertools.pairwise(mine)
                 if not a[2] and not b[2] and a[4] * b[4] < 0 and name != "o_in_cube"]
        if hits:
            out[name] = min(hits, key=lambda h: abs(np.log(max(_num(h[0]), 1e-9) / here)))
    return out


def needs_text(need: dict[str, tuple], fitted_met: frozenset[str]) -> str:
    if not need:
        return "no single parameter meets it anywhere from 1/16 of its low end to 64x its high end"
    parts = []
    for name, (value, met_there) in need.items():
        lo, hi, _ = PARAM_RANGES[name]
        where = "in range" if lo <= _num(value) <= hi else f"range {lo:g}-{hi:g}"
        lost = sorted(fitted_met - met_there)
        parts.append(f"{name}={_fmt(value)} ({where}" + (f"; loses {','.join(lost)})" if lost else ")"))
    return "needs " + " or ".join(parts)


def _num(v: str | float) -> float:
    """A scanned value as a number ("~x" marks a value between two scanned ones)."""
    return float(v.lstrip("~")) if isinstance(v, str) else float(v)


def _fmt(v: str | float) -> str:
    return str(v) if isinstance(v, (bool, str)) else f"{float(v):.3g}"


def classify(rows: list[dict], scanned: dict[tuple, list[tuple]], p: ModelParams) -> None:
    """Set ``miss_class`` (and ``why``) on every row; empty when met.

    Order: a proof (impossible in any fixed-schedule model), then another reading that meets
    the claim in the same cell, then the scan (impossible with plausible costs, and what it
    needs). That no grid point inside the ranges does better on all claims at once is
    ``bounded_fit``'s second result, reported once beside the table.
    """
    met_by_cell: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["met"]:
            met_by_cell.setdefault((r["claim"], r["granularity"], r["head_dim"]), []).append(r)
    for r in rows:
        r["miss_class"], r["why"] = ("", "") if r["met"] else _miss(r, rows, met_by_cell, scanned, p)


def _miss(r: dict, rows: list[dict], met_by_cell: dict, scanned: dict, p: ModelParams) -> tuple[str, str]:
    reading, cell = r["_reading"], (r["granularity"], r["head_dim"])
    need = ""
    if row_key(r) in scanned:
        met_here = frozenset(x["claim"] for x in rows if x["met"] and is_primary(x["kind"], x["_reading"])
                             and (x["granularity"], x["head_dim"]) == cell)
        need = needs_text(needs(scanned[row_key(r)], p), met_here)
    others = met_by_cell.get((r["claim"], *cell), [])
    if r["claim"] == "P7" and reading.exp == "doubled" and reading.baseline != "fa@same":
        return MISS_CLASSES[0], P7_PROOF
    if others:
        nearest = min(others, key=lambda o: distance(o["_reading"], reading))
        return MISS_CLASSES[2], f"met under: {nearest['reading']}" + (f"; {need}" if need else "")
    if need:
        return MISS_CLASSES[1], need
    return UNSEARCHED, "the one-parameter search did not run (--fit '')"
