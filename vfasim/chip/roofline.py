"""A chip run against the chip's rooflines: each resource's ceiling on the kernel's FLOP/s, and the bound.

For each resource the ceiling is the kernel FLOP/s the run would reach were that resource busy all
the time and nothing else limited it: achieved FLOP/s over the resource's utilisation. The compute
ceilings (tensor, vector, exp, and a stream pipelines share such as ``vector+exp``) come from the
chip model's per-role utilisation, so they hold at this kernel's own mix of ops and its tensor
efficiency; the memory ceilings are the port's bandwidth times the kernel's intensity (FLOPs per
byte through that port). The lowest ceiling names the roofline bound; the achieved fraction is how
close the run comes to it (below ``BUSY_ENOUGH`` the chip model calls the run launch-bound).

Assumptions:
- FLOPs follow the chip model's convention (4 · head_dim · visible query-key pairs).
- The L2 port's bytes are HBM bytes plus L2 hits, as the chip model counts them.
- A resource with no work has no ceiling (left out).
"""

from __future__ import annotations

from vfasim.chip.run import ChipResult
from vfasim.hw.config import HardwareConfig


def roofline(res: ChipResult, config: HardwareConfig) -> dict[str, object]:
    """Intensities, achieved and peak bandwidths, each resource's ceiling (TFLOP/s) and the bound."""
    seconds = res.latency_cycles / (config.clock_ghz * 1e9)
    tflops = res.flops / seconds / 1e12 if seconds else 0.0
    util = {k.removeprefix("class_"): v for k, v in res.utilization.items()
            if k.startswith("class_") and k != "class_memory"}
    peaks = _port_tbps(config)
    moved = {"hbm": res.hbm_bytes, "l2": res.l2_port_bytes}
    for port, peak in peaks.items():
        util[port] = moved[port] / seconds / 1e12 / peak if seconds else 0.0
    ceilings = {k: float(tflops / u) for k, u in util.items() if u > 0}
    bound = min(ceilings, key=lambda k: ceilings[k]) if ceilings else "none"
    return {"tflops": tflops,
            "intensity_flop_per_hbm_byte": res.flops / res.hbm_bytes if res.hbm_bytes else None,
            "intensity_flop_per_l2_byte": res.flops / res.l2_port_bytes if res.l2_port_bytes else None,
            "peak_tbps": peaks, "ceilings_tflops": ceilings, "bound": bound,
            "achieved_fraction": float(tflops / ceilings[bound]) if ceilings else 0.0}


def _port_tbps(config: HardwareConfig) -> dict[str, float]:
    """The chip's HBM and L2-port bandwidths, TB/s (those it has)."""
    chip = config.chip
    ports = {"hbm": chip.hbm, "l2": chip.l2} if chip is not None else {}
    return {name: spec.bandwidth_gb_per_s / 1e3 for name, spec in ports.items() if spec is not None}
