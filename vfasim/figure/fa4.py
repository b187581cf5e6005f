"""FA4 beside VFA: how much exp to emulate on the vector ALUs per config, and how much of VFA's vector
saving FA4's conditional rescale already captures.

Assumptions:
- The emulated fraction is chosen per config and algorithm (FA4, VFA), from 0
  to ``MAX_EMULATION`` in steps of 5%, as the one with the lowest overlapped
  (pipelined) block latency: emulation only pays when it balances the exp and vector pipelines,
  which the stacked sum cannot see. Ties keep the smaller fraction.
- The rescale-skip share is measured on FA4 without emulation, so that it
  counts only the skipped rescales.
"""

from __future__ import annotations

import itertools

from vfasim.figure.study import make_trace, overlapped
from vfasim.hw import HardwareConfig

MAX_EMULATION = 0.25
FRACTIONS = (0.0, 0.05, 0.10, 0.15, 0.20, 0.25)
EMULATED = ("fa4+emul", "vfa+emul")


def choose_emulation(configs: dict[str, HardwareConfig], head_dim: int) -> dict[tuple[str, str], float]:
    """(config, variant) -> the emulated exp fraction giving that variant its lowest overlapped block latency."""
    out = {}
    for (name, hw), variant in itertools.product(configs.items(), EMULATED):
        latency = {f: overlapped(make_trace(hw, variant, "block", head_dim, 0, f), hw, "block") for f in FRACTIONS}
        out[name, variant] = min(FRACTIONS, key=lambda f: (latency[f], f))
    return out


def rescale_capture(meas: dict[tuple, dict], g: str, d: int, configs: tuple[str, ...]) -> list[dict]:
    """Per config: vector busy saved by FA4's rescale skip, by VFA, and the ratio of the two."""
    out = []
    for name in configs:
        fa2, fa4, vfa = (meas[g, d, name, v]["vector"] for v in ("fa2", "fa4", "vfa"))
        saved = fa2 - vfa
        out.append({"hw": name, "granularity": g, "head_dim": d, "fa4_saving": fa2 - fa4, "vfa_saving": saved,
                    "captured": (fa2 - fa4) / saved if saved else float("nan")})
    return out
