"""Numerical checks reported beside every timing: error vs the oracle, bits vs the baseline,
a verdict, and the cause of every failed row.

Nothing is computed over finite outputs only: one NaN or Inf makes the error figures NaN,
with the non-finite fraction beside them, and a NaN never compares equal to anything.

The verdict compares the run with the fa2 baseline at the same precision (fa2's own
error is what the formats cost; anything beyond it is the algorithm's):
- ``broken``: any NaN/Inf in the output, or at least ``BROKEN_ROW_FRACTION`` of the rows
  bad, or a relative error more than ``BROKEN_EXCESS`` above fa2's;
- ``degraded``: relative error above ``DEGRADED_FACTOR`` × fa2's, or any bad row;
- ``ok``: otherwise.
A row is *bad* when it is non-finite or its relative error exceeds ``BAD_ROW_FACTOR`` × the
same row's fa2 error plus ``BAD_ROW_FLOOR``. Every bad row gets the first cause of ``CAUSES``
its facts support (``RowDiagnostics`` from the engine):
- ``no_block_visited``: every tile of the row was skipped, so l = 0 and the output is 0/0;
- ``score_overflow``: a score overflowed the vector format (QKᵀ·scale beyond its max);
- ``exp_overflow``: exp(S − m) or l overflowed: the max used sat below the true max by more
  than ln(max) of the vector format (e.g. 11.1 for fp16);
- ``cast_saturation``: a finite P became non-finite in its cast to the matmul format;
- ``p_underflow``: every P of the row underflowed on the vector side (l = 0): the max used sat
  above the true max by more than the format allows (≈ 17.3 for fp16 with subnormals);
- ``p_cast_underflow``: P survived the vector side but was lost in its unscaled cast to the
  matmul format: every P of the row became zero (l > 0, PV = 0), or the max used sat above
  the true max by more than the format's normal range (ln of 1/smallest normal: 9.7 for fp16,
  4.2 for fp8 e4m3), so P landed among its subnormals;
- ``skipped_mass``: the row skipped tiles (BLASST / VSA / BSFA) and lost their mass;
- ``unattributed``: none of the above (reported, not hidden).

Assumptions: ULP distance is measured in the output's own format, by the
usual order-preserving map of IEEE bit patterns to integers (±0 are 0 apart).
"""

from __future__ import annotations

import numpy as np

from vfasim.functional.results import ROW_FLAGS, RowDiagnostics

_INT_OF = {2: np.int16, 4: np.int32, 8: np.int64}


DEGRADED_FACTOR = 2.0
BROKEN_EXCESS = 0.10
BROKEN_ROW_FRACTION = 0.01
BAD_ROW_FACTOR = 4.0
BAD_ROW_FLOOR = 0.01
#: cause -> one line for people; the order is the attribution order
CAUSES: dict[str, str] = {
    "no_block_visited": "every tile was skipped: l = 0, output 0/0",
    "score_overflow": "a score overflowed the vector format",
    "exp_overflow": "max used below the true max by more than exp's range: exp or l overflowed",
    "cast_saturation": "a finite P became non-finite in its cast to the matmul format",
    "p_underflow": "max used above the true max by more than the vector format allows: every P underflowed",
    "p_cast_underflow": "max used above the true max by more than the matmul format's normal range: P lost "
                        "in its cast",
    "skipped_mass": "the row skipped tiles and lost their mass",
    "unattributed": "none of the above",
}
CAUSE_NAMES: tuple[str, ...] = tuple(CAUSES)
WORST_ROWS = 5


def error_vs_reference(out: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    """Relative Frobenius error and max absolute error over every output (NaN if any is non-finite).

    ``rel_err_finite_only`` is the same error over the finite outputs, always beside
    ``nonfinite_fraction``, so a broken run never shows a clean small number alone.
    """
    diff = out.astype(np.float64) - ref
    finite = np.isfinite(diff)
    all_finite = bool(finite.all())
    norm = float(np.linalg.norm(ref[finite]))
    rel = float(np.linalg.norm(diff[finite]) / norm) if norm > 0 else float(np.linalg.norm(diff[finite]))
    return {"rel_err_vs_fp64": rel if all_finite else float("nan"),
            "max_abs_err_vs_fp64": float(np.max(np.abs(diff), initial=0.0)) if all_finite else float("nan"),
            "nonfinite_fraction": float(np.mean(~finite)) if finite.size else 0.0,
            "rel_err_finite_only": rel}


def row_errors(out: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Relative error of every output row [..., rows] (NaN where the row is non-finite)."""
    diff = np.linalg.norm(out.astype(np.float64) - ref, axis=-1)
    norm = np.linalg.norm(ref, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm > 0, diff / np.where(norm > 0, norm, 1.0), diff)


def bad_rows(err: np.ndarray, base_err: np.ndarray) -> np.ndarray:
    """Rows that are non-finite or far worse than the same row of the fa2 baseline."""
    with np.errstate(invalid="ignore"):
        return ~np.isfinite(err) | (err > BAD_ROW_FACTOR * np.nan_to_num(base_err) + BAD_ROW_FLOOR)


def row_causes(rows: RowDiagnostics, bad: np.ndarray, overshoot: np.ndarray, p_cast_limit: float) -> np.ndarray:
    """Index into CAUSE_NAMES of every bad row's first supported cause; -1 for rows that are fine.

    ``overshoot`` is used max − true max per row; ``p_cast_limit`` the overshoot beyond which
    an unscaled cast of P leaves the matmul format's normal range (inf when P is scaled).
    """
    flag = rows.flags
    p_cast_lost = (flag & ROW_FLAGS["p_cast_zero"] > 0) | (overshoot > p_cast_limit)
    tests = (rows.kept_tiles == 0, flag & ROW_FLAGS["score_overflow"] > 0, flag & ROW_FLAGS["exp_overflow"] > 0,
             flag & ROW_FLAGS["cast_saturation"] > 0, rows.row_sum == 0, p_cast_lost,
             rows.skipped_tiles > 0, np.ones_like(bad))
    cause = np.select(tests, np.arange(len(CAUSE_NAMES)), default=len(CAUSE_NAMES) - 1)
    return np.where(bad, cause, -1)


def cause_counts(cause: np.ndarray) -> dict[str, int]:
    counts = np.bincount(cause[cause >= 0], minlength=len(CAUSE_NAMES))
    return {name: int(c) for name, c in zip(CAUSE_NAMES, counts) if c}


def worst_rows(err: np.ndarray, cause: np.ndarray, gap: np.ndarray, limit: int = WORST_ROWS) -> list[dict]:
    """Up to ``limit`` bad rows, non-finite first, then by error: head, row, cause, error, gap."""
    heads, rows = np.nonzero(cause >= 0)
    e = err[heads, rows]
    order = np.lexsort((rows, heads, -np.nan_to_num(e, nan=np.inf)))[:limit]
    return [{"head": int(heads[i]), "row": int(rows[i]), "cause": CAUSE_NAMES[cause[heads[i], rows[i]]],
             "row_err": float(e[i]), "max_gap": float(gap[heads[i], rows[i]])} for i in order]


def verdict(rel_err: float, base_rel_err: float, bad_fraction: float) -> str:
    """ok / degraded / broken against fa2 at the same precision (see the module notes)."""
    if not np.isfinite(rel_err) or bad_fraction >= BROKEN_ROW_FRACTION or rel_err > base_rel_err + BROKEN_EXCESS:
        return "broken"
    if bad_fraction > 0 or rel_err > DEGRADED_FACTOR * base_rel_err:
        return "degraded"
    return "ok"


def ordered_ints(x: np.ndarray) -> np.ndarray:
    """Map floats to integers whose order and spacing follow the float's ULPs."""
    i = x.view(_INT_OF[x.dtype.itemsize]).astype(np.int64)
    sign_bit = np.int64(1) << (8 * x.dtype.itemsize - 1)
    return np.where(i < 0, -(i & (sign_bit - 1)), i)


def bits_vs_baseline(out: np.ndarray, base: np.ndarray) -> dict[str, float | None]:
    """Fraction of bit-identical outputs and the largest ULP distance.

    A NaN differs from everything, itself included; the ULP distance is None when a
    differing pair is not finite (no distance measures it).
    """
    if out.dtype != base.dtype:
        raise ValueError(f"cannot compare bits of {out.dtype} with {base.dtype}")
    nan = np.isnan(out) | np.isnan(base)
    same = (out.view(_INT_OF[out.dtype.itemsize]) == base.view(_INT_OF[base.dtype.itemsize])) & ~nan
    both_finite = np.isfinite(out) & np.isfinite(base)
    ulp = np.abs(ordered_ints(out) - ordered_ints(base))[both_finite]
    unmeasurable = bool(np.any(~same & ~both_finite))  # a NaN, or an Inf against something else
    return {"bit_identical_vs_fa2": float(np.mean(same)) if same.size else 1.0,
            "max_ulp_vs_fa2": None if unmeasurable else int(np.max(ulp, initial=0))}


def non_finite(out: np.ndarray) -> dict[str, int]:
    return {"nan_count": int(np.isnan(out).sum()), "inf_count": int(np.isinf(out).sum())}


def frozen_max_stats(used_max: np.ndarray, true_max: np.ndarray) -> dict[str, float]:
    """How often (and by how much) the max a row's exp used sits below its true max."""
    with np.errstate(invalid="ignore"):  # inf - inf where a score overflowed
        gap = true_max.astype(np.float64) - used_max.astype(np.float64)
    below = gap > 0
    return {"frozen_max_below_true_rows": float(np.mean(below)),
            "frozen_max_largest_gap": float(np.max(gap[below], initial=0.0))}


def gap_quantiles(used_max: np.ndarray, true_max: np.ndarray) -> dict[str, float]:
    """Distribution of (true row max − used max) over rows: >0 means the exp ran above 1."""
    with np.errstate(invalid="ignore"):
        gap = (true_max.astype(np.float64) - used_max.astype(np.float64)).ravel()
    gap = gap[np.isfinite(gap)]
    if gap.size == 0:
        return {}
    qs = (0, 1, 10, 50, 90, 99, 100)
    return {f"p{q}": float(v) for q, v in zip(qs, np.percentile(gap, qs))}
