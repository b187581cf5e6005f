"""The VFA paper's Figure 1 rebuilt from the built-in paper configs, its claims checked under every reading.

The figure reads the configs as they are (``hw_configs/*.yaml``): the
quantities the paper does not give are fitted once and written there, so
``vfasim run`` and ``vfasim figure`` use one model. Each run also repeats the
bounded fit (``fit.bounded_fit``) and says whether the configs still hold its
values, and scans what each unmet claim would need (``fit.scan``).
"""

from __future__ import annotations

from dataclasses import dataclass

from vfasim.errors import VfasimError
from vfasim.figure.claims import (
    PRIMARY,
    PRIMARY_REASON,
    Evaluator,
    paper_claims,
    with_primary,
)
from vfasim.figure.fa4 import choose_emulation, rescale_capture
from vfasim.figure.fit import GRID, Evaluations, classify, fit_and_scan
from vfasim.figure.params import ModelParams, params_of
from vfasim.figure.study import GRANULARITIES, HEAD_DIMS, PAPER_CONFIGS, Study
from vfasim.figure.views import bar_rows, curve_rows, implied_rows, sequence_fractions
from vfasim.hw import load_hw

SHARE_CLAIMS = frozenset({"P1a", "P1b", "P2", "P3a", "P3b", "P4a"})

__all__ = ["PRIMARY", "PRIMARY_REASON", "SHARE_CLAIMS", "LatencyRatio", "ModelParams", "latency_ratio"]


@dataclass(frozen=True)
class LatencyRatio:
    params: ModelParams  # what the paper configs hold
    fitted: ModelParams | None  # the bounded fit of this run (None: no fit asked)
    best_all: dict | None  # the grid point meeting the most claims at once: params, met
    fit: frozenset[str]
    granularity: str
    head_dim: int
    rows: list[dict]  # one per bar
    claims: list[dict]  # one per (claim, reading, granularity, head dim)
    curve: list[dict]  # C4V16 speedup against exp scale
    implied: list[dict]  # the bars the paper's quoted shares imply
    emulation: dict[tuple[str, str], float]  # FA4-style emulated exp fraction per (config, variant)
    capture: list[dict]  # FA4's rescale skip against VFA's saving
    fractions: dict[str, float]  # sequence run: special and masked tiles
    exp_over_tensor: dict[int, float]  # exp busy / FP16 tensor busy per tile, by head dim


def latency_ratio(seq_len: int = 1024, granularity: str = "block", head_dim: int = 64,
                  fit: frozenset[str] = SHARE_CLAIMS, with_fa4: bool = False,
                  grid: dict[str, tuple] = GRID, search: bool = True, jobs: int = 1) -> LatencyRatio:
    """Build the figure's bars and claims table from the paper configs; fit and scan when ``search``, over ``jobs``
    processes (the same result for any number)."""
    _check(granularity, head_dim, fit)
    configs = {name: load_hw(name) for name in PAPER_CONFIGS}
    emulation = choose_emulation(configs, head_dim) if with_fa4 else {}
    variants = ("fa2", "vfa", "fa4", *(("fa4+emul", "vfa+emul") if with_fa4 else ()))
    study = Study(configs, seq_len, variants, emulation=emulation)
    meas, curve = study.measurements(), study.exp_curve()
    rows = [r for g in GRANULARITIES for d in HEAD_DIMS for r in Evaluator(meas, curve, g, d).rows(paper_claims())]
    params = params_of(configs)
    cells = [(g, d, g == "sequence") for g in GRANULARITIES for d in HEAD_DIMS]
    found, scanned = fit_and_scan(Evaluations(study), fit, head_dim, grid, params, cells, jobs) if search else (None, {})
    fitted, best_all = found or (None, None)
    classify(rows, scanned, params)
    return LatencyRatio(
        params=params, fitted=fitted, best_all=best_all, fit=frozenset(fit), granularity=granularity,
        head_dim=head_dim,
        rows=bar_rows(meas, emulation), claims=with_primary(rows, granularity, head_dim, frozenset(fit)),
        curve=curve_rows(curve, meas), implied=implied_rows(meas, head_dim),
        emulation=emulation, capture=[c for d in HEAD_DIMS for c in rescale_capture(meas, "block", d, PAPER_CONFIGS)],
        fractions=sequence_fractions(study, head_dim),
        exp_over_tensor={d: meas["block", d, "C16V32", "fa2"]["exp"] / meas["block", d, "C16V32", "fa2"]["tensor"]
                         for d in HEAD_DIMS})


def _check(granularity: str, head_dim: int, fit: frozenset[str]) -> None:
    if granularity not in GRANULARITIES:
        raise VfasimError(f"granularity must be one of {', '.join(GRANULARITIES)}, got {granularity!r}")
    if head_dim not in HEAD_DIMS:
        raise VfasimError(f"head dim must be one of {', '.join(map(str, HEAD_DIMS))}, got {head_dim}")
    unknown = set(fit) - {c["id"] for c in paper_claims()}
    if unknown:
        raise VfasimError(f"unknown claim id(s) {', '.join(sorted(unknown))} (see vfasim/data/paper_claims.csv)")
