"""What one engine run returns: the output, per-row diagnostics, counters and the trace."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from vfasim.errors import VfasimError
from vfasim.trace import Trace


@dataclass(frozen=True)
class EngineResult:
    out: np.ndarray  # [heads, seq_len, head_dim] in the vector dtype
    used_max: np.ndarray  # [heads, seq_len] the max each row's exp used at the end
    true_max: np.ndarray  # [heads, seq_len] the row max over every score seen
    block_max: np.ndarray  # [rows, Tc] max score of each visited tile, -inf if not visited
    above_max: np.ndarray  # [rows, Tc] bool: at this step a frozen-max tile held scores above the used max
    counts: dict[str, int]  # visited/skipped/rescaled tiles, skipped rows, over/underflows
    trace: Trace | None  # None when run without one (``run_engine(trace=False)``)
    rows: RowDiagnostics  # per query row: what happened to it, for attributing failures

    def traced(self) -> Trace:
        """The trace, for timing; a run made with ``trace=False`` has none."""
        if self.trace is None:
            raise VfasimError("this engine run was made without its trace (run_engine(trace=False))")
        return self.trace


@dataclass(frozen=True)
class RowDiagnostics:
    """Per output row [heads, seq_len]: the facts a failure is attributed to (see ``checks``)."""

    kept_tiles: np.ndarray  # tiles whose softmax and PV the row took part in
    skipped_tiles: np.ndarray  # visited tiles the row skipped (block, row or top-k rule)
    flags: np.ndarray  # uint8 bit set of ROW_FLAGS
    row_sum: np.ndarray  # final l, in the vector format


#: bits of ``RowDiagnostics.flags``: a step of the row produced a non-finite value
ROW_FLAGS: dict[str, int] = {"score_overflow": 1, "exp_overflow": 2, "cast_saturation": 4,
                             "p_cast_zero": 8}


@dataclass
class Counts:
    visited_tiles: int = 0
    skipped_tiles: int = 0
    rescaled_tiles: int = 0
    row_tiles: int = 0
    skipped_row_tiles: int = 0
    flows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("score_overflow", "exp_underflow", "exp_overflow", "cast_p_underflow", "cast_p_overflow",
         "l_overflow", "o_overflow"), 0))
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # row batches run in threads

    def add(self, **counts: int) -> None:
        """Add to the tile counters (``visited_tiles=…``) and flows (any other name), atomically."""
        with self.lock:
            for name, value in counts.items():
                if name in self.flows:
                    self.flows[name] += value
                else:
                    setattr(self, name, getattr(self, name) + value)
