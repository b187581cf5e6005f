"""Numerical checks reported beside every timing: error vs the oracle, bits vs the baseline.

Assumptions: ULP distance is measured in the output's own format, by the
usual order-preserving map of IEEE bit patterns to integers (±0 are 0 apart).
"""

from __future__ import annotations

import numpy as np

_INT_OF = {2: np.int16, 4: np.int32, 8: np.int64}


def error_vs_reference(out: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    """Relative Frobenius error and max absolute error, over finite outputs only."""
    diff = out.astype(np.float64) - ref
    finite = np.isfinite(diff)
    norm = float(np.linalg.norm(ref[finite]))
    rel = float(np.linalg.norm(diff[finite]) / norm) if norm > 0 else float(np.linalg.norm(diff[finite]))
    return {"rel_err_vs_fp64": rel,
            "max_abs_err_vs_fp64": float(np.max(np.abs(diff[finite]), initial=0.0))}


def ordered_ints(x: np.ndarray) -> np.ndarray:
    """Map floats to integers whose order and spacing follow the float's ULPs."""
    i = x.view(_INT_OF[x.dtype.itemsize]).astype(np.int64)
    sign_bit = np.int64(1) << (8 * x.dtype.itemsize - 1)
    return np.where(i < 0, -(i & (sign_bit - 1)), i)


def bits_vs_baseline(out: np.ndarray, base: np.ndarray) -> dict[str, float]:
    """Fraction of bit-identical outputs and the largest ULP distance (NaN pairs count as differing)."""
    if out.dtype != base.dtype:
        raise ValueError(f"cannot compare bits of {out.dtype} with {base.dtype}")
    same = out.view(_INT_OF[out.dtype.itemsize]) == base.view(_INT_OF[base.dtype.itemsize])
    both_finite = np.isfinite(out) & np.isfinite(base)
    ulp = np.abs(ordered_ints(out) - ordered_ints(base))[both_finite]
    return {"bit_identical_vs_fa2": float(np.mean(same)),
            "max_ulp_vs_fa2": int(np.max(ulp, initial=0))}


def non_finite(out: np.ndarray) -> dict[str, int]:
    return {"nan_count": int(np.isnan(out).sum()), "inf_count": int(np.isinf(out).sum())}


def frozen_max_stats(used_max: np.ndarray, true_max: np.ndarray) -> dict[str, float]:
    """How often (and by how much) the max a row's exp used sits below its true max."""
    gap = true_max.astype(np.float64) - used_max.astype(np.float64)
    below = gap > 0
    return {"frozen_max_below_true_rows": float(np.mean(below)),
            "frozen_max_largest_gap": float(np.max(gap[below], initial=0.0))}


def gap_quantiles(used_max: np.ndarray, true_max: np.ndarray) -> dict[str, float]:
    """Distribution of (true row max − used max) over rows: >0 means the exp ran above 1."""
    gap = (true_max.astype(np.float64) - used_max.astype(np.float64)).ravel()
    gap = gap[np.isfinite(gap)]
    if gap.size == 0:
        return {}
    qs = (0, 1, 10, 50, 90, 99, 100)
    return {f"p{q}": float(v) for q, v in zip(qs, np.percentile(gap, qs))}
