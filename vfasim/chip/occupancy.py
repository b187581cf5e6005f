"""What a kernel's tile streams need on one core, and how many fit.

A *tile stream* is one query block's walk over its key blocks (a whole thread
block in FA2, one consumer warp group in FA3). The kernel (``vfasim.kernel``)
fixes a stream's software-pipelining depth, its K/V stages, how many streams
share one thread block (CTA) and its K/V buffers, and how many CTAs a core runs.

Assumptions:
- Shared memory per stream: the Q tile (unless Q lives in registers) and its
  share of the CTA's K/V stages (``kv_stages`` × (K + V) tiles, or ``kv_stages``
  tiles when K and V share one ring), or the tile rule's ``shared_bytes`` (a CTA's shared storage as its source
  declares it) split among the CTA's streams.
- Registers per stream: what the kernel's tile rule declares
  (``registers_per_thread`` × the stream's threads), else its live tiles:
  ``score_buffers`` fp32 score tiles, a P tile in the matmul format unless P
  aliases the scores, the fp32 O accumulator, and the Q tile when Q lives in
  registers. A CTA adds its producer threads' registers.
- Where a core lists no ``register_bytes`` (a unified buffer, Ascend-like), the
  register tiles count against ``buffer_bytes`` too.
"""

from __future__ import annotations

from dataclasses import dataclass

from vfasim.errors import VfasimError
from vfasim.hw.chip import CoreLimits
from vfasim.kernel import Kernel, TileRule
from vfasim.kernel.model import ACC_BYTES

WARP = 32
REGISTER_BYTES = 4


@dataclass(frozen=True)
class TileShape:
    block_q: int  # a stream's query rows
    block_k: int
    head_dim: int
    q_bytes: float  # bytes per element of Q, K/V and P in the matmul format
    kv_bytes: float
    p_bytes: float


@dataclass(frozen=True)
class Need:
    """What one stream of a kernel needs, and the CTA it belongs to."""

    shared: int  # bytes of shared memory per stream
    registers: int  # bytes of registers per stream (0: counted in shared)
    streams_per_cta: int
    cta_extra_registers: int  # producer threads' registers per CTA


def stream_need(kernel: Kernel, rule: TileRule, shape: TileShape, limits: CoreLimits) -> Need:
    """Bytes of shared memory and registers one stream of ``kernel`` needs on a core with ``limits``."""
    g = kernel.streams_per_cta(rule)
    q = shape.block_q * shape.head_dim * shape.q_bytes
    stages = rule.kv_stages or kernel.kv_stages
    kv = (1 if kernel.kv_ring else 2) * stages * shape.block_k * shape.head_dim * shape.kv_bytes / g
    tiles = (kernel.score_buffers * shape.block_q * shape.block_k * ACC_BYTES
             + (0 if kernel.p_aliases_scores else shape.block_q * shape.block_k * shape.p_bytes)
             + shape.block_q * shape.head_dim * ACC_BYTES)
    shared = kv + (0 if kernel.q_in == "registers" else q) if rule.shared_bytes is None else rule.shared_bytes / g
    regs = tiles + (q if kernel.q_in == "registers" else 0)
    threads = (rule.warps or kernel.warps) * WARP
    if rule.registers_per_thread is not None:
        regs = rule.registers_per_thread * threads * REGISTER_BYTES
    producer = rule.producer_registers_per_thread
    extra = kernel.producer_threads * (kernel.producer_registers_per_thread if producer is None else producer) \
        * REGISTER_BYTES
    if limits.register_bytes is None:
        return Need(_up(shared + regs), 0, g, 0)
    return Need(_up(shared), _up(regs), g, extra)


def _up(x: float) -> int:
    return int(-(-x // 1))


def occupancy(kernel: Kernel, rule: TileRule, shape: TileShape, limits: CoreLimits) -> int:
    """Tile streams per core; a one-line error naming the resource and the numbers when they do not fit."""
    need = stream_need(kernel, rule, shape, limits)
    g = need.streams_per_cta
    ctas = limits.buffer_bytes // (need.shared * g)
    short = "shared memory"
    if need.registers and limits.register_bytes is not None:
        by_regs = limits.register_bytes // (need.registers * g + need.cta_extra_registers)
        short = "registers" if by_regs < ctas else short
        ctas = min(ctas, by_regs)
    fit = min(limits.max_streams, ctas * g)
    bound = rule.ctas_per_core or kernel.ctas_per_core
    want = bound * g if bound is not None else fit
    if want < 1 or want > fit:
        regs = (f" and {need.registers * g + need.cta_extra_registers:,} bytes of registers"
                if need.registers else "")
        cap = f"{limits.buffer_bytes:,} bytes of shared memory" + (
            f" and {limits.register_bytes:,} of registers" if need.registers else "")
        raise VfasimError(
            f"kernel {kernel.name} needs {max(want, g)} tile stream(s) per core but {fit} fit (short of {short}): "
            f"a CTA of {g} {shape.block_q}x{shape.block_k} stream(s) at head dim {shape.head_dim} needs "
            f"{need.shared * g:,} bytes of shared memory{regs}; the core has {cap}")
    return want
