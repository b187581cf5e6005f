"""The algorithm family as policies of one online-softmax loop, and the block summaries VFA uses.

Each algorithm is a ``Policy``: where m starts (m-init or -inf), the key-block
order, on which blocks m is updated exactly (all, or only sink and local), when
a block or row is skipped, and whether a rescale is skipped while the max grows
by less than a threshold (FA4).

Assumptions:
- FA4's threshold is 8 in log2 units, i.e. 8·ln 2 on the natural-log scores
  used here; the decision is per row, and a tile's rescale op is skipped when
  no row of it changed its max.
- BLASST takes the max over rows of both the block max and the running max
  (the BLASST talk); the row-skip variant applies the same test per row.
- BSFA keeps the diagonal (local) block always and any other block whose max
  reaches the calibrated threshold of its (head, query block).

Mitigations (``MITIGATIONS``) are this project's own options, not the paper's: changes a
kernel author could adopt against the failures ``checks`` attributes. Each is off by default:
- ``protect_special``: skipping rules never skip the sink block or the local block, so every
  row keeps at least those (against ``no_block_visited``);
- ``minit_clamp``: m-init is clamped to scale·‖q‖·max‖k‖ over the visible keys, an upper bound
  of every true score (Cauchy–Schwarz), so it never overshoots by more than that bound does;
- ``minit_margin``: m-init is lowered by this many natural-log units (against ``p_underflow``
  and ``p_cast_underflow``; too large a margin risks ``exp_overflow`` on frozen blocks);
- ``fp32_state``: l and O are accumulated and normalised in fp32 on a 16-bit vector side;
- ``p_bf16``: P is cast to bf16, unscaled, for the PV matmul (against ``p_cast_underflow`` of
  8- and 4-bit P), and PV runs at the bf16 matmul rate.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from vfasim.errors import VfasimError

FA4_THRESHOLD = 8 * math.log(2)
KEY_SUMMARIES = ("sabsmax", "max", "mean", "absmax")
Q_SUMMARIES = ("absmax", "sabsmax", "mean")
SKIPS = ("none", "block", "row", "topk")


def _one_of(field: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise VfasimError(f"{field} {value!r} is not one of {', '.join(valid)}")


@dataclass(frozen=True)
class Policy:
    minit: bool = False  # initialise m from key-block summaries
    reorder: bool = False  # visit the sink and local blocks first
    freeze: bool = False  # exact max update only on the sink and local blocks
    skip: str = "none"  # none | block (BLASST) | row (BLASST row mask) | topk (BSFA)
    rescale_threshold: float | None = None  # FA4: keep the used max unless it grows by more
    key_summary: str = "sabsmax"  # per-dimension summary of a key block for m-init
    q_summary: str | None = None  # block-wise m-init: one summary of Q_i broadcast to its rows
    exp_emulation: float = 0.0  # FA4: fraction of each tile's exps computed by polynomial on the vector ALUs
    protect_special: bool = False  # mitigation: never skip the sink and local blocks
    minit_clamp: bool = False  # mitigation: m-init <= scale·|q|·max|k|
    minit_margin: float = 0.0  # mitigation: m-init lowered by this much (natural log)
    fp32_state: bool = False  # mitigation: l and O in fp32 on a 16-bit vector side
    p_bf16: bool = False  # mitigation: P cast to bf16 (unscaled) for PV

    def __post_init__(self) -> None:
        _one_of("skip", self.skip, SKIPS)
        _one_of("key_summary", self.key_summary, KEY_SUMMARIES)
        if self.q_summary is not None:
            _one_of("q_summary", self.q_summary, Q_SUMMARIES)
        if not 0.0 <= self.exp_emulation < 1.0:
            raise VfasimError(f"exp_emulation must lie in [0, 1), got {self.exp_emulation}")
        if self.rescale_threshold is not None and not self.rescale_threshold >= 0:
            raise VfasimError(f"rescale_threshold must be >= 0, got {self.rescale_threshold}")
        if not (0.0 <= self.minit_margin < math.inf):
            raise VfasimError(f"minit_margin must be a finite number >= 0, got {self.minit_margin}")


ALGORITHMS: dict[str, Policy] = {
    "fa2": Policy(),
    "fa4": Policy(rescale_threshold=FA4_THRESHOLD),
    "vfa": Policy(minit=True, reorder=True, freeze=True),
    "vsa": Policy(minit=True, reorder=True, freeze=True, skip="block"),
    "blasst": Policy(skip="block"),
    "blasst_swa": Policy(reorder=True, skip="block"),
    "blasst_fa4": Policy(skip="block", rescale_threshold=FA4_THRESHOLD),
    "blasst_rowskip": Policy(skip="row"),
    "bsfa": Policy(skip="topk"),
}
#: options a user may change, and the algorithms they make sense for
OPTION_SCOPE: dict[str, tuple[str, ...]] = {
    "minit": ("vfa", "vsa"), "reorder": ("vfa", "vsa"), "key_summary": ("vfa", "vsa"),
    "q_summary": ("vfa", "vsa"), "rescale_threshold": ("fa4", "blasst_fa4"),
    "exp_emulation": tuple(ALGORITHMS),
    "protect_special": ("vsa", "blasst", "blasst_swa", "blasst_fa4", "blasst_rowskip"),
    "minit_clamp": ("vfa", "vsa"), "minit_margin": ("vfa", "vsa"),
    "fp32_state": tuple(ALGORITHMS), "p_bf16": tuple(ALGORITHMS),
}
MITIGATIONS: tuple[str, ...] = ("protect_special", "minit_clamp", "minit_margin", "fp32_state", "p_bf16")


def policy_for(algo: str, **options: Any) -> Policy:  # options: Policy fields, checked by name below
    """The policy of ``algo`` with ablation ``options`` applied (None = keep the default)."""
    if algo not in ALGORITHMS:
        raise VfasimError(f"unknown algorithm {algo!r} (valid: {', '.join(ALGORITHMS)})")
    chosen = {k: v for k, v in options.items() if v is not None}
    for name in chosen:
        if name not in OPTION_SCOPE:
            raise VfasimError(f"unknown algorithm option {name!r}")
        if algo not in OPTION_SCOPE[name]:
            raise VfasimError(f"option {name} applies to {', '.join(OPTION_SCOPE[name])}, not {algo}")
    return dataclasses.replace(ALGORITHMS[algo], **chosen)


def summarize_keys(kb: np.ndarray, kv_len: int, how: str) -> np.ndarray:
    """Per key block and dimension: [Hkv, Tc, Bc, d] -> [Hkv, Tc, d], padded keys ignored."""
    tc, bc = kb.shape[1], kb.shape[2]
    real = ((np.arange(tc)[:, None] * bc + np.arange(bc)) < kv_len)[None, :, :, None]
    if how == "mean":
        return np.sum(np.where(real, kb, 0), axis=2) / np.maximum(real.sum(axis=2), 1)
    if how == "max":
        return np.max(np.where(real, kb, -np.inf), axis=2)
    if how == "absmax":
        return np.max(np.where(real, np.abs(kb), 0), axis=2)
    return signed_absmax(np.where(real, kb, 0), axis=2)


def signed_absmax(x: np.ndarray, axis: int) -> np.ndarray:
    """The entry of largest magnitude along ``axis``, sign kept (first one on ties)."""
    pick = np.expand_dims(np.argmax(np.abs(x), axis=axis), axis)
    return np.squeeze(np.take_along_axis(x, pick, axis=axis), axis=axis)


def summarize_queries(qb: np.ndarray, how: str) -> np.ndarray:
    """Block-wise Q summary [rows, Bq, d] -> [rows, 1, d] (absmax, sabsmax or mean)."""
    if how == "mean":
        return qb.mean(axis=1, keepdims=True)
    if how == "absmax":
        return np.abs(qb).max(axis=1, keepdims=True)
    return signed_absmax(qb, axis=1)[:, None, :]


def append_key_summary(summary: np.ndarray, count: int, new_keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Decode: fold newly appended keys [n, d] into the running sabsmax of the open block.

    Returns the updated summary [d] and key count; equal to recomputing it over all keys.
    """
    stacked = new_keys if count == 0 else np.concatenate([summary[None, :], new_keys])
    return signed_absmax(stacked, axis=0), count + new_keys.shape[0]


def calibrate_bsfa(block_max: list[np.ndarray], local: np.ndarray, topk: int) -> np.ndarray:
    """Thresholds [rows] keeping the top-k off-diagonal blocks, averaged over calibration runs.

    ``block_max`` holds one [rows, Tc] array per calibration run (-inf where not visited);
    rows with at most k off-diagonal blocks get -inf (keep everything).
    """
    if topk < 0:
        raise VfasimError(f"topk must be >= 0, got {topk}")
    per_run = []
    for bm in block_max:
        off = bm.copy()
        off[np.arange(off.shape[0]), local] = -np.inf
        ranked = np.concatenate([-np.sort(-off, axis=1), np.full((off.shape[0], 1), -np.inf)], axis=1)
        kth = ranked[:, topk - 1] if 0 < topk < ranked.shape[1] else np.full(off.shape[0], np.inf)
        enough = np.isfinite(ranked[:, min(topk, ranked.shape[1] - 1)])  # more than k candidates
        per_run.append(np.where(enough, kth, -np.inf))
    return np.mean(per_run, axis=0)
