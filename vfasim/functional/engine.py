"""The tiled online-softmax loop: one pass computes the output *and* emits the trace.

The loop runs over *steps* of the key-block visit order; at each step every
(head, query block) row that still has a block to visit is processed at once
(vectorised), so only one block-row stripe of scores — rows × Bq × Bc — is
ever held, and memory stays linear in sequence length.

Algorithms are policies of the same loop (see ``ALGORITHMS``):
- fa2: exact max update and rescale on every block.
- vfa: m initialised from sabsmax key-block summaries, order (sink, local, rest),
  exact updates only on the sink and local blocks, frozen max elsewhere.
- vsa: vfa plus the BLASST skip test on every visited block.

Assumptions:
- BLASST's block test takes the max over rows of both the block max and the
  running max (as in the BLASST talk): skip when max(m̃) − max(m_new) < ln λ.
  A skipped block leaves m, l and O untouched.
- Rows that have seen only masked entries use m = 0 in exp (the usual -inf guard).
- The key summaries are computed once per KV head over real (unpadded) keys;
  their cost is one vector op per head in the prelude.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from vfasim.errors import VfasimError
from vfasim.functional.precision import Precision
from vfasim.functional.tiling import Tiling
from vfasim.trace import Trace, TraceBuilder


@dataclass(frozen=True)
class Policy:
    minit: bool = False  # initialise m from key-block summaries
    reorder: bool = False  # visit sink and local blocks first
    freeze: bool = False  # exact max update only on sink and local blocks
    skip: bool = False  # BLASST block skip with threshold lam


ALGORITHMS: dict[str, Policy] = {
    "fa2": Policy(),
    "vfa": Policy(minit=True, reorder=True, freeze=True),
    "vsa": Policy(minit=True, reorder=True, freeze=True, skip=True),
}


@dataclass(frozen=True)
class EngineResult:
    out: np.ndarray  # [heads, seq_len, head_dim] in the vector dtype
    used_max: np.ndarray  # [heads, seq_len] the max each row's exp used at the end
    true_max: np.ndarray  # [heads, seq_len] the row max over every score seen
    visited_tiles: int
    skipped_tiles: int
    trace: Trace


def policy_for(algo: str) -> Policy:
    if algo not in ALGORITHMS:
        raise VfasimError(f"unknown algorithm {algo!r} (valid: {', '.join(ALGORITHMS)})")
    return ALGORITHMS[algo]


def run_engine(q: np.ndarray, k: np.ndarray, v: np.ndarray, tiling: Tiling, algo: str,
               precision: Precision = Precision(), lam: float = 0.01) -> EngineResult:
    """Run ``algo`` on Q [H, N, d], K/V [Hkv, Nk, d]; return output, diagnostics and trace."""
    policy = policy_for(algo)
    if policy.skip and not 0.0 < lam < 1.0:
        raise VfasimError(f"lam must lie in (0, 1), got {lam}")
    # Tile-sized matmuls gain nothing from BLAS threads, and oversubscribed threads spin.
    with threadpool_limits(limits=1, user_api="blas"):
        loop = _Loop(q, k, v, tiling, policy, precision, lam)
        loop.prelude()
        for step in range(tiling.n_kblocks):
            loop.step(step)
        return loop.finish(algo)


def key_summary(kb: np.ndarray, kv_len: int) -> np.ndarray:
    """sabsmax per key block and dimension: [Hkv, Tc, Bc, d] -> [Hkv, Tc, d], padding ignored."""
    tc, bc = kb.shape[1], kb.shape[2]
    real = (np.arange(tc)[:, None] * bc + np.arange(bc)) < kv_len
    mag = np.where(real[None, :, :, None], np.abs(kb), -1.0)
    pick = np.argmax(mag, axis=2)[:, :, None, :]
    return np.take_along_axis(kb, pick, axis=2)[:, :, 0, :]


class _Loop:
    """State of one tiled run: blocked inputs, running (m, l, O) per row, trace builder."""

    def __init__(self, q, k, v, tiling: Tiling, policy: Policy, prec: Precision, lam: float) -> None:
        self.t, self.policy, self.prec, self.lam = tiling, policy, prec, lam
        vt = prec.vector_np
        self.vt = vt
        self.scale = vt.type(1.0 / np.sqrt(tiling.head_dim))
        self.qb = _blocks(prec.to_matmul(q), tiling.block_q)  # [H, Tr, Bq, d]
        self.kb = _blocks(prec.to_matmul(k), tiling.block_k)  # [Hkv, Tc, Bc, d]
        self.vb = _blocks(prec.to_matmul(v), tiling.block_k)
        self.qb = self.qb.reshape(-1, tiling.block_q, tiling.head_dim)  # rows = (head, qblock)
        n = tiling.n_rows
        rows = np.arange(n)
        self.qblock = rows % tiling.n_qblocks
        self.kv_head = rows // tiling.n_qblocks // (tiling.heads // tiling.kv_heads)
        self.order = tiling.order(policy.reorder)[self.qblock]  # [rows, Tc]
        self.local = tiling.local_block[self.qblock]
        self.m = np.full((n, tiling.block_q), -np.inf, vt)
        self.l = np.zeros((n, tiling.block_q), vt)
        self.o = np.zeros((n, tiling.block_q, tiling.head_dim), vt)
        self.true_max = np.full((n, tiling.block_q), -np.inf, vt)
        self.visited = self.skipped = 0
        self.tb = TraceBuilder(n, tiling.n_kblocks, meta=_meta(tiling, policy, prec, lam))
        self.writer = {name: np.full(n, -1, np.int64) for name in ("m", "l", "o")}

    # ---- prelude: Q loads, key summaries, m-init -------------------------------------
    def prelude(self) -> None:
        t, rows, d = self.t, np.arange(self.t.n_rows), self.t.head_dim
        self.load_q = self.tb.emit("load_q", rows, 0, t.block_q * d * self.prec.bytes_per("matmul"),
                                   self.prec.matmul)
        if self.policy.minit:
            self._minit(rows)

    def _minit(self, rows: np.ndarray) -> None:
        t, d, tb = self.t, self.t.head_dim, self.tb
        group = t.heads // t.kv_heads
        owner = rows - self.qblock - (rows // t.n_qblocks % group) * t.n_qblocks  # first row of the KV head
        first = np.unique(owner)
        summ = tb.emit("key_summary", first, 0, t.kv_len * d, self.prec.vector)
        n_vis = t.n_visible[self.qblock]
        mm = tb.emit("minit_matmul", rows, 0, t.block_q * d * n_vis, self.prec.matmul,
                     deps=(self.load_q, tb.key("key_summary", owner, 0)))
        self.writer["m"] = tb.emit("minit_max", rows, 0, t.block_q * n_vis, self.prec.vector, deps=(mm,))
        reprs = key_summary(self.kb, t.kv_len)[self.kv_head]  # [rows, Tc, d]
        proxy = np.matmul(self.qb, reprs.transpose(0, 2, 1)).astype(self.vt) * self.scale
        hidden = np.arange(t.n_kblocks)[None, None, :] >= n_vis[:, None, None]
        self.m = np.where(hidden, -np.inf, proxy).max(axis=2).astype(self.vt)

    # ---- one step of the key-block loop ------------------------------------------------
    def step(self, s: int) -> None:
        act = np.flatnonzero(self.order[:, s] >= 0)
        if act.size == 0:
            return
        kb = self.order[act, s]
        scores, ops = self._scores(act, kb, s + 1)
        tile_max = scores.max(axis=2)
        self.true_max[act] = np.maximum(self.true_max[act], tile_max)
        special = (kb == 0) | (kb == self.local[act]) | (not self.policy.freeze)
        m_old = self.m[act]
        m_cand = np.maximum(m_old, tile_max)
        keep = self._skip_test(tile_max, m_cand)
        m_new = np.where(special[:, None], m_cand, m_old)
        self.visited += act.size
        self.skipped += int(np.sum(~keep))
        ops = self._emit_stats(act, kb, s + 1, special, ops)
        k = np.flatnonzero(keep)
        ops = {name: ids[k] for name, ids in ops.items()}
        self._update(act[k], kb[k], s + 1, special[k], scores[k], m_old[k], m_new[k], ops)

    def _scores(self, act: np.ndarray, kb: np.ndarray, slot: int) -> tuple[np.ndarray, dict]:
        t, tb, prec = self.t, self.tb, self.prec
        heads = self.kv_head[act]
        load_k = tb.emit("load_k", act, slot, t.block_k * t.head_dim * prec.bytes_per("matmul"),
                         prec.matmul, kblock=kb)
        qk = tb.emit("qk_matmul", act, slot, t.block_q * t.block_k * t.head_dim, prec.matmul,
                     deps=(load_k, self.load_q[act]), kblock=kb)
        raw = np.matmul(self.qb[act], self.kb[heads, kb].transpose(0, 2, 1))
        scores = raw.astype(self.vt) * self.scale
        score_op = tb.emit("scale", act, slot, t.block_q * t.block_k, prec.vector, deps=(qk,), kblock=kb)
        needs = t.tile_needs_mask(self.qblock[act], kb)
        if needs.any():
            hidden = ~t.visible(self.qblock[act[needs]], kb[needs])
            scores[needs] = np.where(hidden, -np.inf, scores[needs])
            mask = tb.emit("mask", act[needs], slot, t.block_q * t.block_k, prec.vector,
                           deps=(score_op[needs],), kblock=kb[needs])
            score_op = score_op.copy()
            score_op[needs] = mask
        return scores, {"load_k": load_k, "score": score_op}

    def _skip_test(self, tile_max: np.ndarray, m_cand: np.ndarray) -> np.ndarray:
        if not self.policy.skip:
            return np.ones(tile_max.shape[0], dtype=bool)
        with np.errstate(invalid="ignore"):
            gap = tile_max.max(axis=1) - m_cand.max(axis=1)
        return ~(gap < np.log(self.lam))

    def _emit_stats(self, act, kb, slot, special, ops) -> dict[str, np.ndarray]:
        """Trace of the statistic ops (rowmax, running max, skip test); op keys per row."""
        t, tb, vec = self.t, self.tb, self.prec.vector
        br = t.block_q
        stat = special | self.policy.skip
        rm = tb.emit("rowmax", act[stat], slot, br * t.block_k, vec, deps=(ops["score"][stat],), kblock=kb[stat])
        run = tb.emit("running_max", act[stat], slot, br, vec, deps=(rm, self.writer["m"][act[stat]]),
                      kblock=kb[stat])
        decided = np.full(act.size, -1, np.int64)
        if self.policy.skip:
            decided = tb.emit("skip_test", act, slot, br, vec, deps=(run,), kblock=kb)
        running = np.full(act.size, -1, np.int64)
        running[stat] = run
        return {**ops, "running": running, "decided": decided}

    # ---- the softmax and PV update on kept tiles --------------------------------------
    def _update(self, rows, kb, slot, special, scores, m_old, m_new, ops) -> None:
        if rows.size == 0:
            return
        with np.errstate(invalid="ignore", over="ignore"):
            m_use = np.where(np.isneginf(m_new), self.vt.type(0), m_new)
            alpha = np.exp(np.where(np.isneginf(m_old), -np.inf, m_old - m_use)).astype(self.vt)
            p = np.exp(scores - m_use[:, :, None]).astype(self.vt)
        self.l[rows] = alpha * self.l[rows] + p.sum(axis=2, dtype=self.vt)
        p_mm = self.prec.to_matmul(p)
        pv = np.matmul(p_mm, self.vb[self.kv_head[rows], kb]).astype(self.vt)
        self.o[rows] = alpha[:, :, None] * self.o[rows] + pv
        self.m[rows] = m_new
        self._emit_update(rows, kb, slot, special, ops)

    def _emit_update(self, rows, kb, slot, special, ops) -> None:
        t, tb, prec = self.t, self.tb, self.prec
        running, decided, score = ops["running"], ops["decided"], ops["score"]
        br, bc, d, vec = t.block_q, t.block_k, t.head_dim, prec.vector
        sp = np.flatnonzero(special)
        factor = np.full(rows.size, -1, np.int64)
        factor[sp] = tb.emit("rescale_factor", rows[sp], slot, br, vec, deps=(running[sp],), kblock=kb[sp])
        m_src = np.where(special, running, self.writer["m"][rows])
        sub = tb.emit("sub", rows, slot, br * bc, vec, deps=(score, m_src, decided), kblock=kb)
        ex = tb.emit("exp", rows, slot, br * bc, vec, deps=(sub,), kblock=kb)
        rs = tb.emit("rowsum", rows, slot, br * bc, vec, deps=(ex,), kblock=kb)
        acc_l = tb.emit("accumulate_l", rows, slot, br, vec, deps=(rs, factor, self.writer["l"][rows]), kblock=kb)
        cast = tb.emit("cast_p", rows, slot, br * bc, vec, deps=(ex,), kblock=kb)
        load_v = tb.emit("load_v", rows, slot, bc * d * prec.bytes_per("matmul"), prec.matmul,
                         deps=(ops["load_k"], decided), kblock=kb)
        pv = tb.emit("pv_matmul", rows, slot, br * bc * d, prec.matmul, deps=(cast, load_v), kblock=kb)
        o_src = self.writer["o"][rows].copy()
        o_src[sp] = tb.emit("rescale_o", rows[sp], slot, br * d, vec, deps=(factor[sp], o_src[sp]), kblock=kb[sp])
        acc_o = tb.emit("accumulate_o", rows, slot, br * d, vec, deps=(pv, o_src), kblock=kb)
        self.writer["m"][rows] = m_src
        self.writer["l"][rows] = acc_l
        self.writer["o"][rows] = acc_o

    # ---- epilogue -----------------------------------------------------------------------
    def finish(self, algo: str) -> EngineResult:
        t, tb, rows = self.t, self.tb, np.arange(self.t.n_rows)
        last = t.n_kblocks + 1
        norm = tb.emit("normalize", rows, last, t.block_q * t.head_dim, self.prec.vector,
                       deps=(self.writer["o"], self.writer["l"]))
        tb.emit("store_o", rows, last, t.block_q * t.head_dim * self.prec.bytes_per("vector"),
                self.prec.vector, deps=(norm,))
        with np.errstate(invalid="ignore", divide="ignore"):
            out = (self.o / self.l[:, :, None]).astype(self.vt)
        tb.meta["algo"] = algo
        return EngineResult(
            out=_unblock(out, t.heads, t.seq_len),
            used_max=_unblock(self.m[:, :, None], t.heads, t.seq_len)[..., 0],
            true_max=_unblock(self.true_max[:, :, None], t.heads, t.seq_len)[..., 0],
            visited_tiles=self.visited, skipped_tiles=self.skipped, trace=tb.build())


def _blocks(x: np.ndarray, block: int) -> np.ndarray:
    """[H, N, d] -> [H, ceil(N/block), block, d], zero padded."""
    h, n, d = x.shape
    nb = -(-n // block)
    padded = np.zeros((h, nb * block, d), dtype=x.dtype)
    padded[:, :n] = x
    return padded.reshape(h, nb, block, d)


def _unblock(x: np.ndarray, heads: int, seq_len: int) -> np.ndarray:
    """[H*Tr, Bq, d] -> [H, seq_len, d]."""
    rows, bq, d = x.shape
    return x.reshape(heads, rows // heads * bq, d)[:, :seq_len]


def _meta(t: Tiling, policy: Policy, prec: Precision, lam: float) -> dict:
    return {"seq_len": t.seq_len, "kv_len": t.kv_len, "head_dim": t.head_dim, "block_q": t.block_q,
            "block_k": t.block_k, "causal": t.causal, "heads": t.heads, "kv_heads": t.kv_heads,
            "matmul_dtype": prec.matmul, "vector_dtype": prec.vector,
            "lam": lam if policy.skip else None}
