"""The tiled online-softmax loop: one pass computes the output *and* emits the trace.

The loop runs over *steps* of the key-block visit order; at each step every
(head, query block) row that still has a block to visit is processed at once
(vectorised), so only one block-row stripe of scores — rows × Bq × Bc — is
ever held, and memory stays linear in sequence length. A step's rows are
computed in batches (on threads when there are several); the step's ops are then
emitted once, from its decisions alone (which tiles update m exactly, are kept, are
rescaled), through the emitters the trace-only loop shares. Algorithms are
``Policy`` values (see ``policy.py``) of this one loop. The softmax and PV update on
kept tiles is ``update.py``'s, the records a run returns ``results.py``'s.

Assumptions:
- A skipped block (BLASST, BSFA) leaves m, l and O untouched; a row masked out
  by the row-skip rule leaves its own m, l and O untouched.
- Key summaries are computed once per KV head over real (unpadded) keys; in
  decode only the newest block is summarised (the others are cached).
- Row skipping applies its row mask as part of the skip test op.
- The block skip test (BLASST, VSA) takes both maxima over the query block's real
  rows: the zero rows padding a last, partial block take no part (as in the
  project's Triton kernel, harness/kernels.py, which leaves rows past Nq out).
- ``v_before_skip_test``: a kernel that loads a block's V before its skip test
  (the project's Triton kernel) reads V for a skipped block too; otherwise only a
  kept block loads V, after the test.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import NoReturn

import numpy as np
from threadpoolctl import threadpool_limits

from vfasim.errors import VfasimError
from vfasim.functional.arrays import all_finite, blocks, per_row, rowmax, tile_matmul, unblock
from vfasim.functional.emit import TraceEmitters
from vfasim.functional.policy import Policy, policy_for, summarize_keys, summarize_queries
from vfasim.functional.precision import Precision
from vfasim.functional.results import ROW_FLAGS, Counts, EngineResult, RowDiagnostics
from vfasim.functional.stages import pipeline
from vfasim.functional.tiling import Tiling
from vfasim.functional.update import SoftmaxUpdate
from vfasim.trace import Trace, TraceBuilder

__all__ = ["EngineResult", "engine_threads", "engine_trace", "run_engine"]

#: bytes of one score array of a step batch (rows × Bq × Bc float32): bounds the per-step working set
STEP_BYTES = 1 << 21
ENGINE_THREADS = 2  # row batches of a step run on this many threads (rows are independent)


def run_engine(q: np.ndarray, k: np.ndarray, v: np.ndarray, tiling: Tiling, algo: str | Policy,
               precision: Precision = Precision(), lam: float = 1e-3, *,
               thresholds: np.ndarray | None = None, decode: bool = False, o_in_place: bool = False,
               progress: bool = False, rows: np.ndarray | None = None, trace: bool = True,
               threads: int | None = None, v_before_skip_test: bool = False) -> EngineResult:
    """Run ``algo`` on Q [H, N, d], K/V [Hkv, Nk, d]; return output, diagnostics and trace.

    ``thresholds`` [rows] are BSFA's calibrated block-max thresholds; ``decode`` marks a
    decode step (key summaries are maintained incrementally); ``o_in_place`` marks a
    kernel whose PV matmul accumulates into O in place (its trace has PV wait for the O
    rescale, see ``stages``); ``progress`` shows a bar
    over the key-block steps on stderr. ``rows`` (engine rows, head × n_qblocks + query
    block) limits the key-block loop to those rows: the others' outputs are NaN and their
    trace holds no tile ops (a checking aid, not a run to time). Without ``trace`` the
    result's trace is None (the numbers alone, for a baseline: about a tenth less work).
    ``threads`` (default ``ENGINE_THREADS``, at most the CPU count) run a step's row batches;
    any count gives the same bits.
    """
    policy = _checked(algo, tiling, lam, thresholds)
    threads = engine_threads(threads)
    # Tile-sized matmuls gain nothing from BLAS threads, and oversubscribed threads spin.
    with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(max_workers=threads) as pool:
        loop = _Loop(q, k, v, tiling, policy, precision, lam, thresholds, decode, o_in_place,
                     v_before_skip_test=v_before_skip_test)
        if not trace:
            loop.tb = _Untraced(tiling.n_rows, tiling.n_kblocks, schedule=pipeline(o_in_place))
        if rows is not None:
            loop.order[np.setdiff1d(np.arange(tiling.n_rows), rows)] = -1
        loop.run(pool, threads, progress)
        return loop.finish(algo if isinstance(algo, str) else "custom")


def engine_trace(q: np.ndarray, k: np.ndarray, v: np.ndarray, tiling: Tiling, algo: str | Policy,
                 precision: Precision = Precision(), lam: float = 1e-3, *, decode: bool = False,
                 o_in_place: bool = False, threads: int | None = None, v_before_skip_test: bool = False) -> Trace:
    """The trace ``run_engine`` emits, bit for bit, without the numbers: the softmax and PV update is skipped.

    A step's decisions (which tiles update m exactly, are kept, are rescaled) read the scores and the
    running max alone, never l or O, so the trace of a data-dependent algorithm needs only the QK side.
    """
    policy = _checked(algo, tiling, lam, None)
    threads = engine_threads(threads)
    with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(max_workers=threads) as pool:
        loop = _Loop(q, k, v, tiling, policy, precision, lam, None, decode, o_in_place, update=False,
                     v_before_skip_test=v_before_skip_test)
        loop.run(pool, threads, progress=False)
        loop.epilogue()
        loop.tb.meta["algo"] = algo if isinstance(algo, str) else "custom"
        return loop.tb.build()


def _checked(algo: str | Policy, tiling: Tiling, lam: float, thresholds: np.ndarray | None) -> Policy:
    policy = algo if isinstance(algo, Policy) else policy_for(algo)
    if policy.skip in ("block", "row") and not 0.0 < lam < 1.0:
        raise VfasimError(f"lam must lie in (0, 1), got {lam}")
    if policy.skip == "topk" and (thresholds is None or thresholds.shape != (tiling.n_rows,)):
        raise VfasimError(f"bsfa needs one calibrated threshold per (head, query block): {tiling.n_rows}")
    return policy


def engine_threads(threads: int | None = None) -> int:
    """Threads a run with ``threads`` (None: ``ENGINE_THREADS``) gets: at most the CPU count."""
    return min(threads or ENGINE_THREADS, os.cpu_count() or 1)


class _Loop(TraceEmitters, SoftmaxUpdate):
    """State of one tiled run: blocked inputs, running (m, l, O) per row, trace builder."""

    def __init__(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, tiling: Tiling, policy: Policy,
                 prec: Precision, lam: float, thresholds: np.ndarray | None, decode: bool,
                 o_in_place: bool, update: bool = True, v_before_skip_test: bool = False) -> None:
        self.t, self.policy, self.prec, self.lam, self.update = tiling, policy, prec, lam, update
        self.v_before_skip_test = v_before_skip_test
        self.thresholds, self.decode, self.o_in_place = thresholds, decode, o_in_place
        self.vr = prec.round_vector  # vector-side values live in float32, rounded to the format by vr
        self.state_dtype = "float32" if policy.fp32_state else prec.vector  # l and O
        self.sr = Precision(vector=self.state_dtype).round_vector
        self.p_prec = prec.for_p(policy.p_bf16)  # the format P is cast to for PV
        self.scale = self.vr(np.float32(1.0 / np.sqrt(tiling.head_dim)))
        bq, d = tiling.block_q, tiling.head_dim
        prec.check_shapes(d, tiling.block_k)
        self.counts = Counts()
        self.pool: ThreadPoolExecutor | None = None  # set by run_engine, with its thread count
        # a step computed, its ops not yet emitted: (rows, key blocks, slot, special, keep, rescales)
        self.pending: tuple[np.ndarray, np.ndarray, int, np.ndarray, np.ndarray, np.ndarray] | None = None
        self.threads = 1
        self.qb = self._quantized(blocks(q, bq), "q", -1).reshape(-1, bq, d)  # rows = (head, qblock)
        self.kb = self._quantized(blocks(k, tiling.block_k), "k", -1)  # [Hkv, Tc, Bc, d]
        self.vb = self._quantized(blocks(v, tiling.block_k), "v", -2) if update else v  # scale blocks along keys
        n = tiling.n_rows
        rows = np.arange(n)
        self.qblock = rows % tiling.n_qblocks
        self.kv_head = rows // tiling.n_qblocks // (tiling.heads // tiling.kv_heads)
        self.order = tiling.order(policy.reorder)[self.qblock]  # [rows, Tc]
        self.local = tiling.local_block[self.qblock]
        self.m = np.full((n, bq), -np.inf, np.float32)
        self.l = np.zeros((n, bq), np.float32)
        self.o = np.zeros((n, bq, d), np.float32)
        self.true_max = np.full((n, bq), -np.inf, np.float32)
        self.block_max = np.full((n, tiling.n_kblocks), -np.inf, np.float32)
        self.above_max = np.zeros((n, tiling.n_kblocks), bool)
        self.kept = np.zeros((n, bq), np.int32)
        self.skipped = np.zeros((n, bq), np.int32)
        self.flags = np.zeros((n, bq), np.uint8)
        self.p_cast_nonzero = np.zeros((n, bq), bool)
        self.tb = TraceBuilder(n, tiling.n_kblocks, meta=_meta(tiling, policy, prec, lam, decode, o_in_place,
                                                                  v_before_skip_test),
                               schedule=pipeline(o_in_place))
        self.writer = {name: np.full(n, -1, np.int64) for name in ("m", "l", "o")}

    @property
    def traced(self) -> bool:
        """Whether the run builds a trace (``run_engine(trace=False)`` gives it an ``_Untraced`` builder)."""
        return not isinstance(self.tb, _Untraced)

    def _quantized(self, x: np.ndarray, operand: str, axis: int) -> np.ndarray:
        values, over, under = self.prec.to_matmul(x, operand, axis)
        self.counts.flows[f"{operand}_overflow"] = over
        self.counts.flows[f"{operand}_underflow"] = under
        return values

    def run(self, pool: ThreadPoolExecutor, threads: int, progress: bool) -> None:
        """The prelude and every key-block step, a step's row batches on ``threads`` threads of ``pool``."""
        self.pool, self.threads = (pool, threads) if threads > 1 else (None, 1)
        self.prelude()
        for step in _steps(self.t.n_kblocks, progress):
            self.step(step)
        self._emit_pending()

    # ---- prelude: Q loads, key summaries, m-init -------------------------------------
    def prelude(self) -> None:
        t, rows = self.t, np.arange(self.t.n_rows)
        self.load_q = self.tb.emit("load_q", rows, 0, self._bytes(t.block_q, "q"), self.prec.matmul)
        if self.policy.minit:
            self._emit_minit(rows)
            self.m = self._minit_values()

    def _minit_values(self) -> np.ndarray:
        """m-init per row: max over visible key blocks of scale · q · k_repr.

        Computed a bounded batch of rows at a time: the proxy scores of all rows at once
        are rows × Bq × Tc, half a gigabyte at 128K tokens.
        """
        t, pol = self.t, self.policy
        reprs = summarize_keys(self.kb, t.kv_len, pol.key_summary)  # [Hkv, Tc, d]
        q = self.qb if pol.q_summary is None else summarize_queries(self.qb, pol.q_summary)
        if pol.q_summary is not None:  # a new vector: round it to the matmul format like Q
            q = self.prec.to_matmul(q, "q")[0]
        hidden = np.arange(t.n_kblocks)[None, :] >= t.n_visible[self.qblock][:, None]  # [rows, Tc]
        m = np.empty((t.n_rows, t.block_q), np.float32)
        batch = max(1, STEP_BYTES // (q.shape[1] * t.n_kblocks * 4))
        for start in range(0, t.n_rows, batch):
            rows = slice(start, start + batch)
            proxy = np.matmul(q[rows], reprs[self.kv_head[rows]].transpose(0, 2, 1))  # k_repr entries are entries of K
            proxy = self.vr(self.vr(proxy) * self.scale)
            m[rows] = rowmax(np.where(hidden[rows, None, :], -np.inf, proxy))  # [batch, 1 or Bq]
        if pol.minit_clamp:
            m = np.minimum(m, self._score_bound(hidden))
        return self.vr(m - np.float32(pol.minit_margin))

    def _score_bound(self, hidden: np.ndarray) -> np.ndarray:
        """[rows, Bq] scale·|q|·max|k| over each row's visible key blocks: no score can exceed it."""
        k_norm = np.linalg.norm(self.kb, axis=-1).max(axis=-1)[self.kv_head]  # [rows, Tc]
        k_max = np.where(hidden, 0, k_norm).max(axis=1)
        return self.vr(self.vr(np.linalg.norm(self.qb, axis=-1) * k_max[:, None]) * self.scale)

    # ---- one step of the key-block loop ------------------------------------------------
    def step(self, s: int) -> None:
        """Key-block step ``s`` for every row that has one, a bounded batch of rows at a time.

        Rows are independent and the trace orders ops by (row, step, kind), so batching
        changes neither numbers nor trace; it keeps the working set cache-sized and flat in N.
        The batches compute; the step's ops are then emitted once, from their decisions, in order
        after the last step's: on threads, while the next step's batches compute (emitting reads
        the decisions and the trace builder alone, never the numbers).
        """
        act = np.flatnonzero(self.order[:, s] >= 0)
        if act.size == 0:
            return
        most = max(1, STEP_BYTES // (self.t.block_q * self.t.block_k * 4))
        # equal parts, a multiple of the threads in number: no thread waits on a short or a last part
        n_parts = min(-(-act.size // (most * self.threads)) * self.threads, act.size)
        parts = np.array_split(act, n_parts)
        if len(parts) > 1 and self.pool is not None:  # NumPy releases the GIL: batches share the cores
            running = [self.pool.submit(self._step_rows, rows, s) for rows in parts]
            self._emit_pending()
            decided = [done.result() for done in running]
        else:
            decided = [self._step_rows(rows, s) for rows in parts]
        self._emit_pending()
        if self.traced:
            special, keep, rescales = (np.concatenate(column) for column in zip(*decided))
            self.pending = (act, self.order[act, s], s + 1, special, keep, rescales)

    def _emit_pending(self) -> None:
        """The ops of the last step computed and not yet emitted, if any."""
        if self.pending is not None:
            self._emit_step(*self.pending)
            self.pending = None

    def _step_rows(self, act: np.ndarray, s: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The numbers of step ``s`` for rows ``act``; the decisions the trace follows (see ``_emit_step``)."""
        kb = self.order[act, s]
        if not self.update:  # the trace alone: m is all the decisions read (a tile not kept has m_new = m_old)
            special, keep, rescales, _, _, self.m[act] = self._decide(act, kb, s, self._tile_max(act, kb))
            return special, keep, rescales
        scores = self._scores(act, kb)
        special, keep, rescales, keep_rows, m_old, m_new = self._decide(act, kb, s, rowmax(scores))
        kept = np.flatnonzero(keep)
        k = slice(None) if kept.size == act.size else kept  # every tile kept: views, not copies of the batch
        if self.policy.skip == "row":
            scores = np.where(keep_rows[:, :, None], scores, np.float32(-np.inf))
        self._update(act[k], kb[k], scores[k], m_old[k], m_new[k])
        return special, keep, rescales

    def _decide(self, act: np.ndarray, kb: np.ndarray, s: int,
                tile_max: np.ndarray) -> tuple[np.ndarray, ...]:
        """(special, keep, rescales, keep_rows, m_old, m_new) of step ``s`` from the tiles' row maxima."""
        self.true_max[act] = np.maximum(self.true_max[act], tile_max)
        self.block_max[act, kb] = tile_max.max(axis=1)
        special = (kb == 0) | (kb == self.local[act]) | (not self.policy.freeze)
        m_old = self.m[act]
        m_cand = np.maximum(m_old, tile_max)
        keep_rows = self._keep_rows(act, kb, tile_max, m_cand)
        m_new = self._new_max(special, keep_rows, m_old, m_cand)
        rescales = special if self.policy.rescale_threshold is None else np.any(m_new != m_old, axis=1)
        keep = np.asarray(keep_rows.any(axis=1))  # [A]; NumPy's stubs allow a scalar for an unknown ndim
        self.above_max[act, s] = keep & np.any(keep_rows & (tile_max > m_new), axis=1)
        self._count(keep, keep_rows, rescales)
        self.kept[act] += keep_rows
        self.skipped[act] += ~keep_rows
        return special, keep, rescales, keep_rows, m_old, m_new

    def _tile_max(self, act: np.ndarray, kb: np.ndarray) -> np.ndarray:
        """``rowmax(self._scores(act, kb))`` without rounding every score: scaling by a positive number and
        rounding are monotone, so a row's largest visible product gives its largest score, the same value (a
        zero's sign aside, which no decision reads). Products holding NaN take the long way."""
        t = self.t
        raw = tile_matmul(self.qb[act], self.kb, self.kv_head[act], kb, transpose=True)
        needs = t.tile_needs_mask(self.qblock[act], kb)
        if needs.any():
            raw[needs] = np.where(t.visible(self.qblock[act[needs]], kb[needs]), raw[needs], -np.inf)
        top = rowmax(raw)
        if np.isnan(top).any():
            return rowmax(self._scores(act, kb))
        with np.errstate(over="ignore"):
            return self.vr(self.vr(top) * self.scale)

    def _scores(self, act: np.ndarray, kb: np.ndarray) -> np.ndarray:
        t = self.t
        raw = tile_matmul(self.qb[act], self.kb, self.kv_head[act], kb, transpose=True)
        with np.errstate(over="ignore"):  # raw is rounded, scaled and rounded in place
            scores = self.vr(np.multiply(self.vr(raw, out=raw), self.scale, out=raw), out=raw)
        if not all_finite(scores):
            overflowed = np.isinf(scores)
            self.counts.add(score_overflow=int(np.count_nonzero(overflowed)))
            self.flags[act] |= np.where(overflowed.any(axis=2), np.uint8(ROW_FLAGS["score_overflow"]), np.uint8(0))
        needs = t.tile_needs_mask(self.qblock[act], kb)
        if needs.any():
            hidden = ~t.visible(self.qblock[act[needs]], kb[needs])
            scores[needs] = np.where(hidden, -np.inf, scores[needs])
        return scores

    def _keep_rows(self, act: np.ndarray, kb: np.ndarray, tile_max: np.ndarray, m_cand: np.ndarray) -> np.ndarray:
        """[A, Br] rows of each tile that take part; with ``protect_special``, sink and local tiles always."""
        keep = self._skip_rule(act, kb, tile_max, m_cand)
        if self.policy.protect_special:
            keep = keep | ((kb == 0) | (kb == self.local[act]))[:, None]
        return keep

    def _skip_rule(self, act: np.ndarray, kb: np.ndarray, tile_max: np.ndarray, m_cand: np.ndarray) -> np.ndarray:
        """[A, Br] rows of each tile that take part (all rows of a kept tile, none of a skipped one)."""
        skip, ones = self.policy.skip, np.ones(tile_max.shape, dtype=bool)
        with np.errstate(invalid="ignore"):
            if skip == "block":  # maxima over the real rows: a padded row's zero scores are no query's
                real = self.t.real_rows(self.qblock[act])
                gap = np.where(real, tile_max, -np.inf).max(axis=1) - np.where(real, m_cand, -np.inf).max(axis=1)
                return ones & ~(gap < np.log(self.lam))[:, None]
            if skip == "row":
                return ~(tile_max - m_cand < np.log(self.lam))
            if skip == "topk":
                assert self.thresholds is not None  # run_engine requires them for top-k skipping
                keep = (kb == self.local[act]) | (tile_max.max(axis=1) >= self.thresholds[act])
                return ones & keep[:, None]
        return ones

    def _new_max(self, special: np.ndarray, keep_rows: np.ndarray, m_old: np.ndarray,
                 m_cand: np.ndarray) -> np.ndarray:
        update = special[:, None] & keep_rows
        if self.policy.rescale_threshold is not None:
            with np.errstate(invalid="ignore"):
                grows = (m_cand - m_old > self.policy.rescale_threshold) | np.isneginf(m_old)
            update &= grows
        return np.where(update, m_cand, m_old)

    def _count(self, keep: np.ndarray, keep_rows: np.ndarray, rescales: np.ndarray) -> None:
        c = self.counts
        c.add(visited_tiles=keep.size, skipped_tiles=int(np.sum(~keep)),
              rescaled_tiles=int(np.sum(rescales & keep)), row_tiles=keep_rows.size,
              skipped_row_tiles=int(np.sum(~keep_rows)))

    # ---- epilogue -----------------------------------------------------------------------
    def epilogue(self) -> None:
        """The normalize and store ops of every row."""
        t, tb, rows = self.t, self.tb, np.arange(self.t.n_rows)
        last = t.n_kblocks + 1
        norm = tb.emit("normalize", rows, last, t.block_q * t.head_dim, self.state_dtype,
                       deps=(self.writer["o"], self.writer["l"]))
        tb.emit("store_o", rows, last, self._bytes(t.block_q, "o"), self.prec.vector, deps=(norm,))

    def finish(self, algo: str) -> EngineResult:
        t, tb = self.t, self.tb
        self.epilogue()
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            out = self.vr(self.o / self.l[:, :, None]).astype(self.prec.vector_np)
        del self.qb, self.kb, self.vb, self.o  # done with: let them go before the trace is built
        tb.meta["algo"] = algo
        c = self.counts
        counts = {"visited_tiles": c.visited_tiles, "skipped_tiles": c.skipped_tiles,
                  "rescaled_tiles": c.rescaled_tiles, "row_tiles": c.row_tiles,
                  "skipped_row_tiles": c.skipped_row_tiles, **c.flows}
        lost = (self.l > 0) & ~self.p_cast_nonzero  # P was nonzero but nothing survived its cast
        flags = self.flags | np.where(lost, np.uint8(ROW_FLAGS["p_cast_zero"]), np.uint8(0))
        diag = RowDiagnostics(*(per_row(a, t) for a in (self.kept, self.skipped, flags, self.l)))
        return EngineResult(
            out=unblock(out, t.heads, t.seq_len), rows=diag,
            used_max=per_row(self.m, t), true_max=per_row(self.true_max, t),
            block_max=self.block_max, above_max=self.above_max, counts=counts,
            trace=tb.build() if self.traced else None)


class _Untraced(TraceBuilder):
    """The op keys the engine chains its dependencies with, and no trace."""

    def emit(self, kind: str, rows: np.ndarray, step: int | np.ndarray, work: int | np.ndarray, dtype: str,
             deps: tuple[np.ndarray, ...] = (), kblock: np.ndarray | None = None,
             buffered: bool = True) -> np.ndarray:
        return self.key(kind, np.asarray(rows, dtype=np.int64), step)

    def build(self) -> NoReturn:
        raise VfasimError("an untraced run has no trace to build")


def _steps(n: int, progress: bool) -> Iterable[int]:
    """range(n), with a progress bar on stderr if asked (tqdm loads only then)."""
    if not progress:
        return range(n)
    from tqdm import tqdm

    return tqdm(range(n), desc="engine", unit="step")


def _meta(t: Tiling, policy: Policy, prec: Precision, lam: float, decode: bool, o_in_place: bool,
          v_before_skip_test: bool = False) -> dict:
    return {"seq_len": t.seq_len, "kv_len": t.kv_len, "head_dim": t.head_dim, "block_q": t.block_q,
            "block_k": t.block_k, "causal": t.causal, "heads": t.heads, "kv_heads": t.kv_heads,
            "matmul_dtype": prec.matmul, "vector_dtype": prec.vector, "decode": decode, "o_in_place": o_in_place,
            "v_before_skip_test": v_before_skip_test,
            "policy": dataclasses.asdict(policy), "lam": lam if policy.skip in ("block", "row") else None}
