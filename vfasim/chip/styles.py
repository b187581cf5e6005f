"""Kernel styles: how a kernel lays its tile streams on a core, and how many fit.

A *tile stream* is one query block's walk over its key blocks (a thread block
in FA2, a consumer warp group in FA3). A style fixes the stream's software
pipelining depth, its K/V buffering, how many streams share one K/V buffer set,
and how many streams it wants per core. Occupancy then follows from the core's
limits (``chip.core_limits``).

Assumptions, per style:
- ``fa2``: one thread block of 4 warps per stream, no pipelining inside it
  (score_buffers 1): a stream's softmax and matmuls serialise; K and V are
  single-buffered. As many streams share a core as fit, and they interleave on its
  pipelines. Its matmuls are ``mma.sync``, issued by the stream's own warps
  (``mma_per_stream``): each stream runs them in its own program order on a 1/k
  share of the core's tensor pipes (k = streams per core; a static split: a stream
  whose neighbour is in its softmax cannot borrow the idle share), and each of its
  4 warps reads its operands from shared memory (``operand_warps``): per tile the
  Q tile once (FA2 keeps Q in shared memory, ``Is_Q_in_regs`` false) and the
  whole K tile (QK) and V tile (PV) per warp, at the core's
  ``shared_read_bytes_per_cycle``, in series with the MMAs they feed. Source for
  the 4 warps and the Q placement: FA2's ``flash_fwd_launch_template.h``
  (``Flash_fwd_kernel_traits<d, bq, bk, 4, false, false>`` at head dims 64, 128 and
  256 on Hopper). Where a core gives no shared-memory read rate (a unified
  buffer, Ascend-like) there are no such reads. Evidence for both: with them the
  fitted FA2 ``tensor_efficiency`` on H100 lands at the ~63-65% that
  microbenchmarks give ``mma.sync`` on Hopper, where without them it was 0.35
  (README, "Validation").
- ``fa3``: two streams per core that share double-buffered K/V tiles and take
  turns between softmax and GEMM (ping-pong), each pipelined two score tiles
  deep (intra-warpgroup overlap). FA3's 128-row tile is two 64-row warp groups:
  run it with ``block_q`` 64.
- ``fa4``: ``fa3`` plus FA4's exp emulation — 15% of each tile's exps computed by
  polynomial on the vector ALUs (FA4 emulates 10-25% of a row). Its other policy,
  the conditional rescale, is the ``fa4`` algorithm (``--algo fa4``).
Stream bytes: Q tile + K/V buffers in shared memory; the score tiles
(score_buffers × block_q × block_k in fp32), one P tile (matmul format; P reuses
no score storage) and the fp32 O accumulator in registers when the core lists
``register_bytes``, else in shared memory too.
"""

from __future__ import annotations

from dataclasses import dataclass

from vfasim.errors import VfasimError
from vfasim.hw.chip import CoreLimits

ACC_BYTES = 4  # fp32 scores and O accumulator


@dataclass(frozen=True)
class KernelStyle:
    name: str
    score_buffers: int  # score tiles in flight per stream (its software-pipelining depth)
    kv_buffers: int  # K and V tile buffers per K/V buffer set
    group_streams: int  # streams sharing one K/V buffer set (one thread block)
    streams: int | None  # streams per core the style needs; None = as many as fit
    exp_emulation: float  # fraction of exps computed by polynomial on the vector ALUs
    mma_per_stream: bool = False  # each stream issues its own matmuls, on its 1/k share of the tensor pipes
    operand_warps: int = 0  # warps per stream that each read the K/V tile from shared memory (0: none)


KERNEL_STYLES: dict[str, KernelStyle] = {
    "fa2": KernelStyle("fa2", score_buffers=1, kv_buffers=1, group_streams=1, streams=None, exp_emulation=0.0,
                       mma_per_stream=True, operand_warps=4),
    "fa3": KernelStyle("fa3", score_buffers=2, kv_buffers=2, group_streams=2, streams=2, exp_emulation=0.0),
    "fa4": KernelStyle("fa4", score_buffers=2, kv_buffers=2, group_streams=2, streams=2, exp_emulation=0.15),
}


def kernel_style(name: str) -> KernelStyle:
    if name not in KERNEL_STYLES:
        raise VfasimError(f"unknown kernel style {name!r} (valid: {', '.join(KERNEL_STYLES)})")
    return KERNEL_STYLES[name]


@dataclass(frozen=True)
class TileShape:
    block_q: int
    block_k: int
    head_dim: int
    q_bytes: float  # bytes per element of Q, K/V and P in the matmul format
    kv_bytes: float
    p_bytes: float


def stream_bytes(style: KernelStyle, shape: TileShape, limits: CoreLimits) -> tuple[int, int]:
    """(shared-memory bytes, register bytes) one stream needs; K/V buffers split over its group."""
    q = shape.block_q * shape.head_dim * shape.q_bytes
    kv = 2 * style.kv_buffers * shape.block_k * shape.head_dim * shape.kv_bytes
    tiles = (style.score_buffers * shape.block_q * shape.block_k * ACC_BYTES
             + shape.block_q * shape.block_k * shape.p_bytes + shape.block_q * shape.head_dim * ACC_BYTES)
    shared = q + kv / style.group_streams
    if limits.register_bytes is None:
        return int(-(-(shared + tiles) // 1)), 0
    return int(-(-shared // 1)), int(-(-tiles // 1))


def occupancy(style: KernelStyle, shape: TileShape, limits: CoreLimits) -> int:
    """Tile streams per core; a one-line error when the style's streams do not fit."""
    shared, regs = stream_bytes(style, shape, limits)
    g = style.group_streams
    fit = limits.buffer_bytes // (shared * g)
    if regs and limits.register_bytes is not None:
        fit = min(fit, limits.register_bytes // (regs * g))
    fit = min(limits.max_streams, fit * g)
    want = style.streams or fit
    if want < 1 or want > fit:
        need = f"{shared:,} bytes of buffer" + (f" and {regs:,} of registers" if regs else "")
        raise VfasimError(
            f"kernel style {style.name} needs {max(want, 1)} tile stream(s) per core but {fit} fit "
            f"(a {shape.block_q}x{shape.block_k} stream at head dim {shape.head_dim} needs {need}; "
            f"the core has {limits.buffer_bytes:,}" + (f" and {limits.register_bytes:,}" if regs else "") + ")")
    return want
