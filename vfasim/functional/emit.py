"""The trace side of the engine loop: which ops a step emits, their work and dependencies.

``TraceEmitters`` is mixed into the loop (and into the trace-only loop, which runs
these emitters without the arithmetic); it reads the loop's tiling, policy, formats
and the op keys that last wrote each row's m, l and O (``writer``).
"""

from __future__ import annotations

import numpy as np

from vfasim.functional.policy import Policy
from vfasim.functional.precision import Precision
from vfasim.functional.tiling import Tiling
from vfasim.trace import TraceBuilder


class TraceEmitters:
    """Emit methods of the engine loop; the attributes below are the loop's."""

    t: Tiling
    policy: Policy
    prec: Precision
    p_prec: Precision
    state_dtype: str
    decode: bool
    o_in_place: bool
    tb: TraceBuilder
    qblock: np.ndarray
    load_q: np.ndarray
    writer: dict[str, np.ndarray]
    v_before_skip_test: bool = False  # V is loaded before the skip test, so a skipped block reads it too

    def _bytes(self, rows: int, operand: str) -> int:
        return int(np.ceil(rows * self.t.head_dim * self.prec.bytes_per(operand)))

    def _emit_minit(self, rows: np.ndarray) -> None:
        t, d, tb = self.t, self.t.head_dim, self.tb
        group = t.heads // t.kv_heads
        owner = rows - self.qblock - (rows // t.n_qblocks % group) * t.n_qblocks  # first row of the KV head
        summarised = t.block_k if self.decode else t.kv_len
        clamp = self.policy.minit_clamp  # key norms beside the summaries; query norms and the bound
        tb.emit("key_summary", np.unique(owner), 0, summarised * d * (2 if clamp else 1), self.prec.vector)
        n_vis = t.n_visible[self.qblock]
        q_rows = 1 if self.policy.q_summary else t.block_q
        mm = tb.emit("minit_matmul", rows, 0, q_rows * d * n_vis, self.prec.matmul,
                     deps=(self.load_q, tb.key("key_summary", owner, 0)))
        extra = (t.block_q * d + n_vis + t.block_q) if clamp else 0
        self.writer["m"] = tb.emit("minit_max", rows, 0, q_rows * n_vis + extra, self.prec.vector, deps=(mm,))

    def _emit_step(self, act: np.ndarray, kb: np.ndarray, slot: int, special: np.ndarray, keep: np.ndarray,
                   rescales: np.ndarray) -> None:
        """The ops of one key-block step for rows ``act`` from the step's decisions alone.

        ``special``: the tile updates m exactly; ``keep``: some row of the tile takes part
        (the others stop after the skip test); ``rescales``: O and l are rescaled.
        """
        ops = self._emit_stats(act, kb, slot, special, self._emit_scores(act, kb, slot))
        if self.v_before_skip_test:  # a dropped block's V is read, then let go (it holds no buffer past the test)
            drop = np.flatnonzero(~keep)
            self._emit_load_v(act[drop], kb[drop], slot, (ops["load_k"][drop],), buffered=False)
        k = np.flatnonzero(keep)
        self._emit_update(act[k], kb[k], slot, rescales[k], {name: ids[k] for name, ids in ops.items()})

    def _emit_scores(self, act: np.ndarray, kb: np.ndarray, slot: int) -> dict[str, np.ndarray]:
        """K load, QK, the move of S to the vector side, its scaling and (on tiles that need it) the mask."""
        t, tb, prec = self.t, self.tb, self.prec
        load_k = tb.emit("load_k", act, slot, self._bytes(t.block_k, "k"), prec.matmul, kblock=kb)
        qk = tb.emit("qk_matmul", act, slot, t.block_q * t.block_k * t.head_dim, prec.matmul,
                     deps=(load_k, self.load_q[act]), kblock=kb)
        moved = tb.emit("move_s", act, slot, t.block_q * t.block_k * 4, "float32", deps=(qk,), kblock=kb)
        score_op = tb.emit("scale", act, slot, t.block_q * t.block_k, prec.vector, deps=(moved,), kblock=kb)
        needs = t.tile_needs_mask(self.qblock[act], kb)
        if needs.any():
            score_op = score_op.copy()
            score_op[needs] = tb.emit("mask", act[needs], slot, t.block_q * t.block_k, prec.vector,
                                      deps=(score_op[needs],), kblock=kb[needs])
        return {"load_k": load_k, "score": score_op}

    def _emit_stats(self, act: np.ndarray, kb: np.ndarray, slot: int, special: np.ndarray,
                    ops: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Trace of the statistic ops (rowmax, running max, skip test); op keys per row."""
        t, tb, vec, br = self.t, self.tb, self.prec.vector, self.t.block_q
        skipping = self.policy.skip != "none"
        stat = special | skipping
        rm = tb.emit("rowmax", act[stat], slot, br * t.block_k, vec, deps=(ops["score"][stat],), kblock=kb[stat])
        run = tb.emit("running_max", act[stat], slot, br, vec, deps=(rm, self.writer["m"][act[stat]]),
                      kblock=kb[stat])
        decided = np.full(act.size, -1, np.int64)
        if skipping:
            work = br + (br * t.block_k if self.policy.skip == "row" else 0)
            decided = tb.emit("skip_test", act, slot, work, vec, deps=(run,), kblock=kb)
        running = np.full(act.size, -1, np.int64)
        running[stat] = run
        return {**ops, "running": running, "decided": decided}

    def _emit_update(self, rows: np.ndarray, kb: np.ndarray, slot: int, rescales: np.ndarray,
                     ops: dict[str, np.ndarray]) -> None:
        t, tb, prec = self.t, self.tb, self.prec
        running, decided, score = ops["running"], ops["decided"], ops["score"]
        br, bc, d, vec = t.block_q, t.block_k, t.head_dim, prec.vector
        sp = np.flatnonzero(rescales)
        factor = np.full(rows.size, -1, np.int64)
        factor[sp] = tb.emit("rescale_factor", rows[sp], slot, br, vec, deps=(running[sp],), kblock=kb[sp])
        m_src = np.where(running >= 0, running, self.writer["m"][rows])
        sub = tb.emit("sub", rows, slot, br * bc, vec, deps=(score, m_src, decided), kblock=kb)
        ex = self._emit_exp(rows, kb, slot, sub)
        rs = tb.emit("rowsum", rows, slot, br * bc, vec, deps=ex, kblock=kb)
        state, p_fmt = self.state_dtype, self.p_prec
        acc_l = tb.emit("accumulate_l", rows, slot, br, state, deps=(rs, factor, self.writer["l"][rows]), kblock=kb)
        p_ready = ex
        if p_fmt.scaling["p"] != "none":
            p_ready = (tb.emit("quant_p", rows, slot, br * bc, vec, deps=ex, kblock=kb),)
        cast = tb.emit("cast_p", rows, slot, br * bc, vec, deps=p_ready, kblock=kb)
        cast = tb.emit("move_p", rows, slot, int(np.ceil(br * bc * p_fmt.bytes_per("p"))), p_fmt.matmul,
                       deps=(cast,), kblock=kb)
        v_deps = (ops["load_k"],) if self.v_before_skip_test else (ops["load_k"], decided)
        load_v = self._emit_load_v(rows, kb, slot, v_deps)
        o_src = self.writer["o"][rows].copy()
        o_src[sp] = tb.emit("rescale_o", rows[sp], slot, br * d, state, deps=(factor[sp], o_src[sp]), kblock=kb[sp])
        in_place = (o_src,) if self.o_in_place else ()  # the MMA reads O as its accumulator
        pv = tb.emit("pv_matmul", rows, slot, br * bc * d, p_fmt.matmul, deps=(cast, load_v, *in_place), kblock=kb)
        frozen = np.flatnonzero(~rescales)  # partial O handed from the cube to the vector side (fp32)
        pv[sp] = tb.emit("move_o", rows[sp], slot, br * d * 4, "float32", deps=(pv[sp],), kblock=kb[sp])
        pv[frozen] = tb.emit("move_pv", rows[frozen], slot, br * d * 4, "float32", deps=(pv[frozen],),
                             kblock=kb[frozen])
        acc_o = np.empty(rows.size, np.int64)
        acc_o[sp] = tb.emit("accumulate_o", rows[sp], slot, br * d, state, deps=(pv[sp], o_src[sp]), kblock=kb[sp])
        acc_o[frozen] = tb.emit("accumulate_pv", rows[frozen], slot, br * d, state, deps=(pv[frozen], o_src[frozen]),
                                kblock=kb[frozen])
        self.writer["m"][rows] = m_src
        self.writer["l"][rows] = acc_l
        self.writer["o"][rows] = acc_o

    def _emit_load_v(self, rows: np.ndarray, kb: np.ndarray, slot: int, deps: tuple[np.ndarray, ...],
                     buffered: bool = True) -> np.ndarray:
        return self.tb.emit("load_v", rows, slot, self._bytes(self.t.block_k, "v"), self.prec.matmul, deps=deps,
                            kblock=kb, buffered=buffered)

    def _emit_exp(self, rows: np.ndarray, kb: np.ndarray, slot: int, sub: np.ndarray) -> tuple[np.ndarray, ...]:
        """exp on the SFU, less the fraction FA4-style emulation moves to the vector ALUs."""
        elements = self.t.block_q * self.t.block_k
        emulated = int(round(elements * self.policy.exp_emulation))
        ops: tuple[np.ndarray, ...] = (
            self.tb.emit("exp", rows, slot, elements - emulated, self.prec.vector, deps=(sub,), kblock=kb),)
        if emulated:
            ops += (self.tb.emit("exp_emul", rows, slot, emulated, self.prec.vector, deps=(sub,), kblock=kb),)
        return ops
