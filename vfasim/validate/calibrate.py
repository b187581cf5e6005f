"""Fitting a chip's kernel-style tuning on the declared fit rows, and the validation summary.

``fit_style`` tunes ``tensor_efficiency`` and a per-CTA cost of one (chip, kernel
style) by coordinate descent (golden-section search on each in turn, ``ROUNDS`` rounds) minimising the MAPE of the fit rows
(``validate.FIT_SEQ_LENS``, never an unverified table's rows). The per-CTA cost is
``cta_cycles_scale``, a factor on the tiles' measured ``cta_cycles``, for a kernel
whose every tile carries one (``scales_cta_cycles``), else a flat
``unit_overhead_cycles``: one parameter either way. A value that ends
within 1% of its range's end is reported "at bound". The values are printed as
YAML lines for the chip's config, where ``vfasim run`` and ``vfasim validate``
read them; nothing is written to the configs by the fit itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from vfasim.errors import VfasimError
from vfasim.hw import HardwareConfig, builtin_names, load_hw
from vfasim.kernel import Kernel, load_kernel
from vfasim.reuse import reuse
from vfasim.validate import (
    CHIP_KERNELS,
    CHIPS,
    MEASURED,
    ROW_RUNS,
    Prediction,
    Row,
    chip_name,
    group_key,
    kernel_for,
    mape,
    predict_all,
    predict_tiers,
    spec_only,
    subset,
    with_tuning,
)

RANGES = {"tensor_efficiency": (0.3, 1.0), "unit_overhead_cycles": (0.0, 30000.0), "cta_cycles_scale": (0.0, 3.0)}
ROUNDS = 2
STEPS = 9  # golden-section evaluations per parameter and round
GOLD = (np.sqrt(5) - 1) / 2


@dataclass(frozen=True)
class Fitted:
    chip: str
    style: str
    values: dict[str, float]
    at_bound: list[str]
    rows: int
    mape_fit: float
    kept: tuple[str, ...] = ()  # values taken from a microbenchmark as configured, not fitted

    def yaml(self) -> str:
        lines = [f"    {self.style}:"]
        for k, v in self.values.items():
            shown = f"{int(round(v))}" if k == "unit_overhead_cycles" else f"{v:.3f}"
            why = "measured, kept as configured (not fitted)" if k in self.kept else \
                f"fitted on {self.rows} rows with seq_len in the fit set by: vfasim validate --fit"
            lines.append(f"      {k}: {shown}  # source: {why}")
        return "\n".join(lines)


def fit_style(rows: list[Row], chip: str, style: str, jobs: int = 1, per_group: int | None = None) -> Fitted | None:
    """Tune (chip, style) on its fit rows, at most ``per_group`` of each group (``validate.subset``: None keeps
    every published row and ``CAMPAIGN_ROWS_PER_GROUP`` of a campaign's) spread over the group's fit rows;
    None when it has fewer than two. The trials run in one ``reuse`` scope: each row's trace and unit layout is made
    once, and its unit timings once per tensor efficiency (``jobs`` > 1 spreads each trial's rows over processes,
    which keep nothing from one trial to the next)."""
    with reuse():
        return _fit_style(rows, chip, style, jobs, per_group)


def _fit_style(rows: list[Row], chip: str, style: str, jobs: int, per_group: int | None) -> Fitted | None:
    mine = subset([r for r in rows if r.fit and chip_name(r) == chip and _kernel_name(r) == style
                   and ROW_RUNS.get(r.kernel, ("", "all"))[1] != "prepass"], per_group)  # a pre-pass row: no tuning
    if len(mine) < 2:
        return None
    base = load_hw(chip)
    cost = "cta_cycles_scale" if scales_cta_cycles(load_kernel(style)) else "unit_overhead_cycles"
    values = {"tensor_efficiency": 1.0, cost: 1.0 if cost == "cta_cycles_scale" else 0.0}
    kept = MEASURED.get((chip, style), ())
    shipped = base.chip.kernel_tuning.get(style) if base.chip is not None else None
    if kept and shipped is None:
        raise VfasimError(f"{chip}: {style}'s measured {', '.join(kept)} is missing from its config")
    values.update({n: float(getattr(shipped, n)) for n in kept})

    def loss(**trial: float) -> float:
        cfg = _tuned(base, style, {**values, **trial})
        return mape(predict_all(mine, {chip: cfg}, jobs)) or 0.0

    free = {n: r for n, r in RANGES.items() if n in values and n not in kept}
    for _ in range(ROUNDS if len(free) > 1 else 1):
        for name, (lo, hi) in free.items():
            values[name] = float(_golden(lambda x: loss(**{name: x}), lo, hi))  # called at once: no late binding
    return Fitted(chip, style, values, at_bound(values, kept), len(mine), loss(), kept)


def scales_cta_cycles(kernel: Kernel) -> bool:
    """Whether the fit scales the kernel's measured per-CTA cycles (every tile, prefill and decode, carries
    ``cta_cycles``) rather than fitting one flat ``unit_overhead_cycles``."""
    tiles = [*kernel.tiles, *(kernel.decode.tiles if kernel.decode is not None else ())]
    return all(t.cta_cycles is not None for t in tiles)


def at_bound(values: Mapping[str, float | None], kept: tuple[str, ...] = ()) -> list[str]:
    """Names of the fitted values within 1% of either end of their fit range."""
    return [n for n, (lo, hi) in RANGES.items()  # None or absent: not set (a measured figure stands in)
            if n not in kept and (v := values.get(n)) is not None and min(v - lo, hi - v) <= 0.01 * (hi - lo)]


def _tuned(base: HardwareConfig, style: str, values: dict[str, float]) -> HardwareConfig:
    fields = {n: int(round(v)) if n == "unit_overhead_cycles" else float(v) for n, v in values.items()}
    return with_tuning(base, style, **fields)  # the per-CTA cost not fitted: dropped


def _golden(f: Callable[[float], float], lo: float, hi: float) -> float:
    """Golden-section minimum of f on [lo, hi] with STEPS evaluations (ends included as candidates)."""
    a, b = lo, hi
    c, d = b - GOLD * (b - a), a + GOLD * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(STEPS - 2):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - GOLD * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + GOLD * (b - a)
            fd = f(d)
    return c if fc <= fd else d


def fit_all(rows: list[Row], jobs: int = 1, per_group: int | None = None) -> list[Fitted]:
    """Every (chip, kernel) fit in chip and ``CHIP_KERNELS`` order, the fits spread over ``jobs`` processes (each
    fit's trials in one process, which reuses its rows' work from trial to trial), those with most rows first."""
    from vfasim.exec import compute  # the local pool: workers ignore Ctrl-C and end with their parent

    pairs = [(c, s) for c in sorted({CHIPS[r.chip] for r in rows}) for s in CHIP_KERNELS]
    size = Counter((chip_name(r), _kernel_name(r)) for r in rows if r.fit)
    order = sorted(range(len(pairs)), key=lambda i: -size[pairs[i]])
    fitted: dict[int, Fitted | None] = {}
    for i, f in compute(fit_style, [(rows, *pairs[i], 1, per_group) for i in order],
                        [f"vfasim-fit-{'-'.join(pairs[i])}" for i in order], "local", max(jobs, 1), None):
        fitted[order[i]] = f
    return [f for i in range(len(pairs)) if (f := fitted[i]) is not None]


def _kernel_name(row: Row) -> str:
    k = kernel_for(row.kernel)
    return k.name if k is not None else ""


@dataclass(frozen=True)
class Group:
    """One family's predictions: calibrated (tier 2) split into fit and held-out rows, and spec only (tier 1)."""

    chip: str
    kernel: str
    dtype: str
    mode: str
    regime: str
    style: str  # the kernel description that predicts the family
    fit: list[Prediction]
    heldout: list[Prediction]
    spec: list[Prediction]  # tier 1, every row of the family

    def worst(self, n: int = 3) -> list[Prediction]:
        return sorted(self.fit + self.heldout, key=lambda p: -abs(p.error))[:n]


def groups(preds: list[Prediction], spec: list[Prediction]) -> list[Group]:
    """Predictions grouped by family (``validate.group_key``), sorted; ``spec`` are the same rows at tier 1."""
    out: dict[tuple[str, str, str, str, str], Group] = {}
    for p, q in zip(preds, spec, strict=True):
        key = group_key(p)
        g = out.setdefault(key, Group(*key, p.kernel or _kernel_name(p.row), [], [], []))
        (g.fit if p.row.fit else g.heldout).append(p)
        g.spec.append(q)
    return sorted(out.values(), key=lambda g: (g.chip, g.kernel, g.dtype, g.mode, g.regime))


def ratio_errors(preds: list[Prediction]) -> list[dict]:
    """Causal/non-causal and hd64/hd128 throughput ratios, model vs measured, per (chip, kernel, dtype)."""
    by = {(chip_name(p.row), p.row.kernel, p.row.dtype, p.row.head_dim, p.row.causal, p.row.seq_len): p
          for p in preds if p.row.metric == "tflops"}
    out = []
    for (chip, kernel, dtype, d, causal, s), p in sorted(by.items()):
        for name, other in (("causal/non-causal", (chip, kernel, dtype, d, False, s) if causal else None),
                            ("hd64/hd128", (chip, kernel, dtype, 128, causal, s) if d == 64 else None)):
            q = by.get(other) if other else None
            if q is None:
                continue
            meas, model = p.row.value / q.row.value, p.predicted / q.predicted
            out.append({"chip": chip, "kernel": kernel, "dtype": dtype, "ratio": name, "head_dim": d,
                        "causal": causal, "seq_len": s, "measured": meas, "model": model,
                        "points": abs(model - meas) * 100})
    return out


@dataclass(frozen=True)
class Validation:
    groups: list[Group]
    preds: list[Prediction]
    not_modelled: dict[tuple[str, str, str], int]  # (chip as tabled, kernel, reason) -> rows
    ratios: list[dict]
    tuning: dict[str, dict]  # "chip/style" -> the tuning the configs hold
    chips_without_rows: list[str]  # built-in chips (with a chip section) no shipped row measures
    compared: dict[tuple[str, str, str, str], tuple[int, int]]  # row_group -> (rows compared, modelled rows)


def run_validation(per_group: int | None = None, jobs: int = 1, kernels: tuple[Kernel, ...] = (),
                   cache: bool = False) -> Validation:
    """Every modelled row of the shipped tables (or ``per_group`` rows of each group) through the model; ``cache``:
    reusing the runs an earlier validation kept in the run store, and keeping its own (``predict_tiers``)."""
    from vfasim.validate import load_rows, modelled, row_group, subset, why_not

    everything = load_rows()
    rows = subset(everything, per_group)
    mine = [r for r in rows if modelled(r)]
    skipped: dict[tuple[str, str, str], int] = {}
    for r in rows:
        if not modelled(r):
            key = (r.chip, r.kernel, why_not(r))
            skipped[key] = skipped.get(key, 0) + 1
    preds, spec = predict_tiers(mine, [{}, {c: spec_only(load_hw(c)) for c in {chip_name(r) for r in mine}}], jobs,
                                kernels, cache)
    tuning = {}
    for chip in sorted({chip_name(r) for r in mine}):
        cfg = load_hw(chip).chip
        for style, t in (cfg.kernel_tuning.items() if cfg is not None else ()):
            kept = MEASURED.get((chip, style), ())
            tuning[f"{chip}/{style}"] = {**t.model_dump(), "at_bound": at_bound(t.model_dump(), kept)}
    measured = {CHIPS[r.chip] for r in everything if r.chip in CHIPS}
    chips = [n for n in builtin_names() if load_hw(n).chip is not None and n not in measured]
    ran = Counter(row_group(r) for r in mine)
    compared = {g: (ran[g], n) for g, n in Counter(row_group(r) for r in everything if modelled(r)).items()}
    return Validation(groups(preds, spec), preds, skipped, ratio_errors(preds), tuning, chips, compared)
