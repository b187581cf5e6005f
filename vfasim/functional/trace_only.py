"""The engine loop without arithmetic: the same trace, for policies whose trace does not depend on data.

An algorithm's trace depends on the data only through its decisions: which
blocks or rows are skipped (BLASST, VSA, BSFA) and whether a rescale is skipped
(FA4's threshold). With neither, every op, its work and its dependencies follow
from the tiling and the policy alone, so a timing run needs no Q, K or V and
no matmul. ``trace_only`` emits through the engine's own emitters; a test checks
that its digest equals the full engine's.

Columnar: the emitters run once for every (row, step) tile of the loop together,
not once per step. Each tile is a pseudo-row of that one call: the builder it
emits through maps it back to its row and slot, and the op keys that last wrote
each row's m, l and O before a tile (``writer``, which the step loop carries
from step to step) follow from the decisions in closed form. The trace is
ordered by op key when built, so the order of emission does not change it.

A long row's middle tiles, which differ only in their key block, are emitted once and repeated
(``vfasim.repeats``): the loop leaves them out, the builder orders what is left, and the full trace is written
from it, or, where what is left does not show a repeat, the loop emits every tile.
"""

from __future__ import annotations

import numpy as np

from vfasim.errors import VfasimError
from vfasim.functional.engine import _Loop, _meta
from vfasim.functional.policy import Policy, policy_for
from vfasim.functional.precision import Precision
from vfasim.repeats import Repeated, gaps, repeated
from vfasim.functional.stages import pipeline
from vfasim.functional.tiling import Tiling
from vfasim.trace import Trace, TraceBuilder

_TILES = 1 << 16  # tiles emitted at a time


def data_independent(policy: Policy) -> bool:
    """True when the trace follows from tiling and policy alone (no skips, no conditional rescale)."""
    return policy.skip == "none" and policy.rescale_threshold is None


def trace_only(tiling: Tiling, algo: str | Policy, precision: Precision = Precision(), *,
               decode: bool = False, o_in_place: bool = False) -> Trace:
    """The trace ``run_engine`` would emit for ``algo`` on ``tiling``, without computing anything."""
    return trace_repeated(tiling, algo, precision, decode=decode, o_in_place=o_in_place).with_copies()


def trace_repeated(tiling: Tiling, algo: str | Policy, precision: Precision = Precision(), *,
                   decode: bool = False, o_in_place: bool = False) -> Repeated:
    """``trace_only``'s trace as emitted: its long rows' middle tiles left out, with what fills them back."""
    policy = algo if isinstance(algo, Policy) else policy_for(algo)
    if not data_independent(policy):
        raise VfasimError("this algorithm's trace depends on the data (it skips blocks or rescales "
                          "conditionally); it needs the full engine")
    name = algo if isinstance(algo, str) else "custom"
    for repeat in (True, False):
        loop = _TraceLoop(tiling, policy, precision, decode, o_in_place, repeat)
        loop.prelude()
        loop.all_steps()
        built = loop.finish_trace(name)
        found = repeated(built, gaps(built, loop.template, loop.copies))
        if found is not None:
            return found
    raise AssertionError("unreachable: a trace without gaps repeats nothing")  # pragma: no cover


class _TraceLoop(_Loop):
    """``_Loop`` holding only what the emitters read: block order, owners, op writers."""

    def __init__(self, tiling: Tiling, policy: Policy, prec: Precision, decode: bool, o_in_place: bool,
                 repeat: bool = False) -> None:
        self.t, self.policy, self.prec, self.lam = tiling, policy, prec, 1e-3
        self.thresholds, self.decode, self.o_in_place = None, decode, o_in_place
        self.state_dtype = "float32" if policy.fp32_state else prec.vector  # as _Loop: l and O
        self.p_prec = prec.for_p(policy.p_bf16)
        prec.check_shapes(tiling.head_dim, tiling.block_k)
        rows = np.arange(tiling.n_rows)
        self.qblock = rows % tiling.n_qblocks
        self.kv_head = rows // tiling.n_qblocks // (tiling.heads // tiling.kv_heads)
        self.order = tiling.order(policy.reorder)[self.qblock]
        self.local = tiling.local_block[self.qblock]
        self.tb = TraceBuilder(tiling.n_rows, tiling.n_kblocks, meta=_meta(tiling, policy, prec, self.lam, decode,
                                                                       o_in_place),
                               schedule=pipeline(o_in_place))
        self.writer = {name: np.full(tiling.n_rows, -1, np.int64) for name in ("m", "l", "o")}
        template, copies = self._repeats() if repeat else (np.zeros(tiling.n_qblocks, np.int64),) * 2
        self.template, self.copies = template[self.qblock], copies[self.qblock]  # per row
        tile = np.arange(tiling.n_kblocks)
        left_out = (tile > self.template[:, None] - 1) & (tile <= self.template[:, None] - 1 + self.copies[:, None])
        self.emitted = (self.order >= 0) & ~left_out  # the tiles emitted

    def _repeats(self) -> tuple[np.ndarray, np.ndarray]:
        """Per query block, the slot of the tile its left-out tiles repeat and how many there are (0: none).

        A tile repeats the one before it where its key block is one on and it is special and masked alike; of each
        query block's longest run of tiles each of which repeats the one before, the first three are emitted
        (the third is the template), then the run's last, and those between are left out."""
        t, order = self.t, self.t.order(self.policy.reorder)
        special = (order == 0) | (order == t.local_block[:, None]) | (not self.policy.freeze)
        masked = t.tile_needs_mask(np.arange(t.n_qblocks)[:, None], np.maximum(order, 0))
        padded = np.zeros((t.n_qblocks, t.n_kblocks + 2), np.int8)  # a run never crosses a query block
        padded[:, 2:-1] = ((order[:, 1:] >= 0) & (order[:, 1:] == order[:, :-1] + 1)
                           & (special[:, 1:] == special[:, :-1]) & (masked[:, 1:] == masked[:, :-1]))
        edge = np.diff(padded.ravel())
        begin, end = np.flatnonzero(edge == 1), np.flatnonzero(edge == -1)  # runs [begin, end) of padded
        template, copies = np.zeros(t.n_qblocks, np.int64), np.zeros(t.n_qblocks, np.int64)
        if begin.size == 0:
            return template, copies
        qblock, first = np.divmod(begin + 1, t.n_kblocks + 2)
        longest = np.lexsort((end - begin, qblock))  # each query block's longest run last
        last = longest[np.append(qblock[longest][1:] != qblock[longest][:-1], True)]
        # tiles first - 1 ... first - 2 + (end - begin) each repeat the one before: tiles first - 2 on are alike
        template[qblock[last]] = first[last] + 1  # the slot of tile first (a slot is its tile + 1)
        copies[qblock[last]] = np.maximum((end - begin)[last] - 3, 0)
        return template, copies

    def prelude(self) -> None:
        rows = np.arange(self.t.n_rows)
        self.load_q = self.tb.emit("load_q", rows, 0, self._bytes(self.t.block_q, "q"), self.prec.matmul)
        if self.policy.minit:
            self._emit_minit(rows)

    def all_steps(self) -> None:
        """Every step's ops, for the tiles of about ``_TILES`` at a time (whole rows): the temporaries of each emit
        stay small, so the heap reuses them instead of holding the trace's columns among the holes they leave."""
        lo, tiles = 0, 0
        for r, count in enumerate(np.count_nonzero(self.emitted, axis=1).tolist()):
            if tiles and tiles + count > _TILES:
                self._steps(lo, r)
                lo, tiles = r, 0
            tiles += count
        self._steps(lo, self.t.n_rows)

    def _steps(self, lo: int, hi: int) -> None:
        """Every step's ops of rows [lo, hi) at once: the emitters see one pseudo-row per (row, step) tile."""
        row, s = np.nonzero(self.emitted[lo:hi])  # row-major: a row's tiles in order, from tile 0
        row += lo
        kb = self.order[row, s]
        special = (kb == 0) | (kb == self.local[row]) | (not self.policy.freeze)
        per_row = self.qblock, self.load_q, self.writer, self.tb
        self.qblock, self.load_q = self.qblock[row], self.load_q[row]
        self.writer = self._writers_before(row, s + 1, special)
        self.tb = _TileBuilder(self.tb, row, s + 1)
        self._emit_step(np.arange(row.size), kb, 0, special, np.ones(row.size, bool), special)
        after = self.writer  # the emitters leave each tile's writers after it
        self.qblock, self.load_q, self.writer, self.tb = per_row
        last = np.flatnonzero(np.append(row[1:] != row[:-1], True))  # each row's last tile
        for name in self.writer:
            self.writer[name][row[last]] = after[name][last]

    def _writers_before(self, row: np.ndarray, slot: np.ndarray, special: np.ndarray) -> dict[str, np.ndarray]:
        """Op keys that last wrote m, l and O before each tile, as the step loop would hold them.

        After a tile, l was written by its accumulate_l, O by its accumulate_o (rescaled) or
        accumulate_pv (frozen), and m by its running_max where the tile is special, else m is
        as before; before a row's first tile they are the prelude's.
        """
        key, first = self.tb.key, slot == 1
        at = np.arange(row.size)
        latest = np.maximum.accumulate(np.where(special | first, at, 0))  # a row's first tile is always marked
        m_after = np.where(special[latest], key("running_max", row[latest], slot[latest]), self.writer["m"][row])
        o_after = np.where(special, key("accumulate_o", row, slot), key("accumulate_pv", row, slot))
        before = {"m": m_after, "l": key("accumulate_l", row, slot), "o": o_after}
        for name, after in before.items():
            after[1:] = after[:-1].copy()
            after[first] = self.writer[name][row[first]]
        return before

    def finish_trace(self, algo: str) -> Trace:
        t, rows = self.t, np.arange(self.t.n_rows)
        last = t.n_kblocks + 1
        norm = self.tb.emit("normalize", rows, last, t.block_q * t.head_dim, self.state_dtype,
                            deps=(self.writer["o"], self.writer["l"]))
        self.tb.emit("store_o", rows, last, self._bytes(t.block_q, "o"), self.prec.vector, deps=(norm,))
        self.tb.meta["algo"] = algo
        return self.tb.build()


class _TileBuilder(TraceBuilder):
    """Emits for pseudo-rows, one per tile: tile i is ``row[i]`` at ``slot[i]`` (the step given is ignored)."""

    def __init__(self, inner: TraceBuilder, row: np.ndarray, slot: np.ndarray) -> None:
        self.inner, self.row, self.slot = inner, row, slot

    def key(self, kind: str, rows: np.ndarray, step: int | np.ndarray) -> np.ndarray:
        return self.inner.key(kind, self.row[rows], self.slot[rows])

    def emit(self, kind: str, rows: np.ndarray, step: int | np.ndarray, work: int | np.ndarray, dtype: str,
             deps: tuple[np.ndarray, ...] = (), kblock: np.ndarray | None = None,
             buffered: bool = True) -> np.ndarray:
        return self.inner.emit(kind, self.row[rows], self.slot[rows], work, dtype, deps, kblock, buffered)
