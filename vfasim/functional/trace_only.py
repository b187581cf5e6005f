"""The engine loop without arithmetic: the same trace, for policies whose trace does not depend on data.

An algorithm's trace depends on the data only through its decisions: which
blocks or rows are skipped (BLASST, VSA, BSFA) and whether a rescale is skipped
(FA4's threshold). With neither, every op, its work and its dependencies follow
from the tiling and the policy alone, so a timing run needs no Q, K or V and
no matmul. ``trace_only`` walks the same loop and emits through the engine's own
emitters; a test checks that its digest equals the full engine's.
"""

from __future__ import annotations

import numpy as np

from vfasim.errors import VfasimError
from vfasim.functional.engine import _Loop, _meta
from vfasim.functional.policy import Policy, policy_for
from vfasim.functional.precision import Precision
from vfasim.functional.stages import SOFTWARE_PIPELINE
from vfasim.functional.tiling import Tiling
from vfasim.trace import Trace, TraceBuilder


def data_independent(policy: Policy) -> bool:
    """True when the trace follows from tiling and policy alone (no skips, no conditional rescale)."""
    return policy.skip == "none" and policy.rescale_threshold is None


def trace_only(tiling: Tiling, algo: str | Policy, precision: Precision = Precision(), *,
               decode: bool = False) -> Trace:
    """The trace ``run_engine`` would emit for ``algo`` on ``tiling``, without computing anything."""
    policy = algo if isinstance(algo, Policy) else policy_for(algo)
    if not data_independent(policy):
        raise VfasimError("this algorithm's trace depends on the data (it skips blocks or rescales "
                          "conditionally); it needs the full engine")
    loop = _TraceLoop(tiling, policy, precision, decode)
    loop.prelude()
    for step in range(tiling.n_kblocks):
        loop.step(step)
    return loop.finish_trace(algo if isinstance(algo, str) else "custom")


class _TraceLoop(_Loop):
    """``_Loop`` holding only what the emitters read: block order, owners, op writers."""

    def __init__(self, tiling: Tiling, policy: Policy, prec: Precision, decode: bool) -> None:
        self.t, self.policy, self.prec, self.lam = tiling, policy, prec, 1e-3
        self.thresholds, self.decode = None, decode
        self.state_dtype = "float32" if policy.fp32_state else prec.vector  # as _Loop: l and O
        self.p_prec = prec.for_p(policy.p_bf16)
        prec.check_shapes(tiling.head_dim, tiling.block_k)
        rows = np.arange(tiling.n_rows)
        self.qblock = rows % tiling.n_qblocks
        self.kv_head = rows // tiling.n_qblocks // (tiling.heads // tiling.kv_heads)
        self.order = tiling.order(policy.reorder)[self.qblock]
        self.local = tiling.local_block[self.qblock]
        self.tb = TraceBuilder(tiling.n_rows, tiling.n_kblocks, meta=_meta(tiling, policy, prec, self.lam, decode),
                               schedule=SOFTWARE_PIPELINE)
        self.writer = {name: np.full(tiling.n_rows, -1, np.int64) for name in ("m", "l", "o")}

    def prelude(self) -> None:
        rows = np.arange(self.t.n_rows)
        self.load_q = self.tb.emit("load_q", rows, 0, self._bytes(self.t.block_q, "q"), self.prec.matmul)
        if self.policy.minit:
            self._emit_minit(rows)

    def step(self, s: int) -> None:
        act = np.flatnonzero(self.order[:, s] >= 0)
        if act.size == 0:
            return
        kb = self.order[act, s]
        special = (kb == 0) | (kb == self.local[act]) | (not self.policy.freeze)
        self._emit_step(act, kb, s + 1, special, np.ones(act.size, bool), special)

    def finish_trace(self, algo: str) -> Trace:
        t, rows = self.t, np.arange(self.t.n_rows)
        last = t.n_kblocks + 1
        norm = self.tb.emit("normalize", rows, last, t.block_q * t.head_dim, self.state_dtype,
                            deps=(self.writer["o"], self.writer["l"]))
        self.tb.emit("store_o", rows, last, self._bytes(t.block_q, "o"), self.prec.vector, deps=(norm,))
        self.tb.meta["algo"] = algo
        return self.tb.build()
