"""The softmax and PV update of the engine loop on its kept tiles, and the per-row flags it raises.

``SoftmaxUpdate`` is mixed into the loop (``engine._Loop``); it reads and writes the loop's running
state (m, l, O), its formats and counters.

Assumptions: rows that have seen only masked entries use m = 0 in exp (the usual -inf guard);
masked (-inf) scores give p = 0 and are not counted as underflows.
"""

from __future__ import annotations

import numpy as np

from vfasim.functional.arrays import all_finite, rescaled, tile_matmul
from vfasim.functional.precision import Precision, Rounding
from vfasim.functional.results import ROW_FLAGS, Counts


class SoftmaxUpdate:
    """``_update`` and ``_flag_rows`` of the engine loop; the attributes below are the loop's."""

    vr: Rounding
    sr: Rounding
    p_prec: Precision
    counts: Counts
    m: np.ndarray
    l: np.ndarray
    o: np.ndarray
    vb: np.ndarray
    kv_head: np.ndarray
    flags: np.ndarray
    p_cast_nonzero: np.ndarray

    def _update(self, rows: np.ndarray, kb: np.ndarray, scores: np.ndarray, m_old: np.ndarray,
                m_new: np.ndarray) -> None:
        if rows.size == 0:
            return
        vr, sr = self.vr, self.sr
        with np.errstate(invalid="ignore", over="ignore"):
            m_use = np.where(np.isneginf(m_new), np.float32(0), m_new)
            alpha = vr(np.exp(vr(np.where(np.isneginf(m_old), -np.inf, m_old - m_use))))
            p = scores - m_use[:, :, None]  # rounded, exponentiated and rounded in place
            p = vr(np.exp(vr(p, out=p), out=p), out=p)
            l_new = sr(sr(alpha * self.l[rows]) + sr(p.sum(axis=2, dtype=np.float32)))
        p_mm, p_over, p_under = self.p_prec.to_matmul(p, "p", -1)
        o_old = self.o[rows]
        with np.errstate(over="ignore", invalid="ignore"):  # overflows are counted below
            pv = tile_matmul(p_mm, self.vb, self.kv_head[rows], kb)
            sr(pv, out=pv)
            o_new = sr(np.add(rescaled(o_old, alpha, sr), pv, out=pv), out=pv)
        p_inf = None if all_finite(p) else np.isinf(p)
        n_inf = 0 if p_inf is None else int(np.count_nonzero(p_inf))
        zeros = p == 0
        if not all_finite(scores):  # masked (-inf) scores give p = 0 without underflowing
            zeros &= np.isfinite(scores)
        self.counts.add(exp_underflow=int(np.count_nonzero(zeros)),
                        cast_p_underflow=p_under, cast_p_overflow=p_over, exp_overflow=n_inf)
        self._flag_rows(rows, p, p_inf if n_inf else None, p_mm, l_new)
        o_over = 0
        if not all_finite(o_new):
            o_over = int(np.count_nonzero(np.isinf(o_new) & np.isfinite(o_old)))
        self.counts.add(l_overflow=int(np.sum(np.isinf(l_new) & np.isfinite(self.l[rows]))), o_overflow=o_over)
        self.l[rows], self.o[rows], self.m[rows] = l_new, o_new, m_new

    def _flag_rows(self, rows: np.ndarray, p: np.ndarray, p_inf: np.ndarray | None, p_mm: np.ndarray,
                   l_new: np.ndarray) -> None:
        """Per-row facts for failure attribution: exp overflow, P lost or saturated in its cast.

        ``p_inf`` is ``isinf(p)``, or None when P holds no Inf. Each row-wise reduction
        runs only when the whole batch says it can find something (they are most of the
        cost of these checks).
        """
        bit = {k: np.uint8(v) for k, v in ROW_FLAGS.items()}
        zero = np.uint8(0)
        overflowed = np.isinf(l_new) if p_inf is None else p_inf.any(axis=2) | np.isinf(l_new)
        self.flags[rows] |= np.where(overflowed, bit["exp_overflow"], zero)
        if not all_finite(p_mm):
            saturated = np.isfinite(p) & ~np.isfinite(p_mm)
            self.flags[rows] |= np.where(saturated.any(axis=2), bit["cast_saturation"], zero)
        if not self.p_cast_nonzero[rows].all():  # a row stays nonzero once it is
            self.p_cast_nonzero[rows] |= (p_mm != 0).any(axis=2)
