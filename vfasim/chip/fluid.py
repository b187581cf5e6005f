"""The chip's event loop: work units on stream slots of cores, sharing the L2 and HBM ports.

A small deterministic event loop over work units (not ops). Each core has
``streams`` slots; a slot runs one unit at a time. Dispatch policies:
- ``waves``: unit i goes to slot i mod (cores × streams) — units dealt to the
  cores in order, in waves; a slot runs its units one after another.
- ``greedy``: one queue in launch order; each slot that frees takes the next
  unit (a GPU's hardware block scheduler handing thread blocks to free SMs).
- ``persistent``: one queue (longest unit first for causal launches); each slot
  that frees takes the next unit.
Slot s sits on core s mod cores, so the first wave spreads over all cores.

A unit first waits the exposed memory latency, then progresses at speed
x / T, where T is its compute time with k streams busy on its core (k counts
the units on that core now) and x ∈ [0, 1] its share of the memory ports. The
shares are max-min fair (progressive filling): all units' x rise together; a
port (L2 or HBM, capacity in bytes per cycle) that saturates freezes the units
that use it, and x stops at 1 (compute-bound) otherwise. A memory-bound unit
therefore stretches, and what bound each unit is recorded: compute, L2 port,
HBM port, or latency, whichever held it longest. Time is continuous between
events (a fluid model); reported spans are in (fractional) core cycles.

``loop.py`` makes the events one by one (and records the ports' throughput at each, for a trace);
``lazy.py`` makes the same events, bit for bit, touching only the units an event can change.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from vfasim.chip.lazy import LazyLoop
from vfasim.chip.loop import BOUNDS, EventLoop, LaunchTimes, Ports, waterfill

__all__ = ["BOUNDS", "POLICIES", "LaunchTimes", "Ports", "dispatch_queues", "run_launch", "waterfill"]

POLICIES = ("waves", "greedy", "persistent")


def dispatch_queues(n_units: int, slots: int, policy: str, order: np.ndarray) -> list[list[int]]:
    """Per-slot unit lists (waves) or one queue shared by every slot (greedy, persistent), in order."""
    if policy == "waves":
        return [list(range(s, n_units, slots)) for s in range(slots)]
    return [order.tolist()]


def run_launch(kind: np.ndarray, cores: int, streams: int, policy: str, order: np.ndarray,
               cycles: Callable[[int, int], float], on_start: Callable[[int], tuple[float, float, float, float]],
               ports: Ports, t0: float = 0.0, samples: bool = False) -> LaunchTimes:
    """Event loop of one launch of units of ``kind``.

    ``cycles(kind, k)`` is a unit's compute time with k streams busy on its core;
    ``on_start(u)`` gives (latency, hbm bytes, l2 port bytes, l2 hit bytes) of unit u.
    ``samples``: also record the ports' throughput at every event (``LaunchTimes.samples``).
    """
    loop = EventLoop(kind, cores, streams, cycles, on_start, ports, t0) if samples else \
        LazyLoop(kind, cores, streams, cycles, on_start, ports, t0)
    queues = dispatch_queues(kind.size, cores * streams, policy, order)
    shared = policy != "waves"
    loop.run([q[::-1] for q in queues], shared)  # popped from the end
    return loop.times
