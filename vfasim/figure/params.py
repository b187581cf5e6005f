"""The quantities the VFA paper does not give, their physical ranges, and where they live in the configs.

Each ``ModelParams`` field is one physical quantity with a range and a reason
(``PARAM_RANGES``). The built-in paper configs hold the fitted values
(``hw_configs/*.yaml``, each marked "fitted to claims …"); ``params_of`` reads
them back and ``apply_params`` writes a candidate into a config, so the fit and
``vfasim run`` use one model.

Assumptions:
- A row reduction, an O read-modify-write and a cast of P are charged as a
  multiple of one elementwise vector pass over their elements (``work_factor``).
- The per-dependent-op latency is the start-up of every vector and exp op: a
  tile-level op waits out its pipeline's depth once, because it consumes the
  result of the op before it.
- The O read-modify-write costs the same on every tile that does one: the
  rescale, the accumulate after it, and the accumulate on a frozen block.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from vfasim.hw import FUSED, HardwareConfig
from vfasim.hw.registry import variant

REDUCTIONS = ("rowmax", "running_max", "rowsum", "minit_max")
O_UPDATES = ("rescale_o", "accumulate_o", "accumulate_pv")


@dataclass(frozen=True)
class ModelParams:
    reduction_factor: float = 1.0  # a row reduction per element, in elementwise passes
    o_rmw_factor: float = 1.0  # an O read-modify-write per element (rescale or accumulate)
    cast_fp8_factor: float = 1.0  # casting P to fp8 per element
    quant_mxfp4_factor: float = 1.0  # block absmax + E8M0 scale of P (MXFP4), on top of the cast's pass
    op_latency_cycles: int = 4  # start-up each dependent vector/exp op waits out
    o_in_cube: bool = False  # frozen blocks accumulate O in the cube: no hand-off, no vector update


#: field -> (low, high, why); a fitted value equal to low or high is reported "at bound"
PARAM_RANGES: dict[str, tuple[float, float, str]] = {
    "reduction_factor": (1.0, 4.0, ("a row reduction is a pass plus a log2(128) = 7-step shuffle tree "
                                    "whose steps use a fraction of the lanes: 1-4 passes")),
    "o_rmw_factor": (1.0, 3.0, ("read O, multiply-add, write O back: 1 pass in registers, up to 3 "
                                "when O lives in tensor memory or a buffer (load, op, store)")),
    "cast_fp8_factor": (1.0, 2.0, "fp32 -> fp8 is a convert, plus a saturate/pack pass: 1-2 passes"),
    "quant_mxfp4_factor": (1.0, 4.0, ("MXFP4 needs a 32-element absmax, an E8M0 exponent and a scaled "
                                      "convert: 1-4 passes on top of the cast's 1 (2-5 in all)")),
    "op_latency_cycles": (4, 64, ("pipeline depth a dependent op waits: 4-6 cycles for an ALU, tens for "
                                  "an SFU or a shuffle chain, up to ~64 for a buffer round trip")),
    "o_in_cube": (0, 1, "VFA's frozen max lets O stay in the cube's accumulator (split cores, SPEC 3b)"),
}


def apply_params(hw: HardwareConfig, p: ModelParams) -> HardwareConfig:
    """``hw`` with the unknown quantities set to ``p`` (the same change for every config)."""
    factors = dict(hw.work_factor)
    factors.update({k: p.reduction_factor for k in REDUCTIONS})
    factors.update({k: p.o_rmw_factor for k in O_UPDATES})
    if hw.precision.matmul.startswith("float8"):
        factors["cast_p"] = p.cast_fp8_factor
    if hw.precision.block_scale == "mxfp4":
        factors["quant_p"] = p.quant_mxfp4_factor
    latency = {"startup_cycles": int(p.op_latency_cycles)}
    return variant(hw, {"work_factor": factors, "pipelines": {"vector": latency, "exp": latency},
                        "op_map": {"accumulate_pv": FUSED if p.o_in_cube else hw.op_map["accumulate_o"],
                                   "move_pv": FUSED if p.o_in_cube else hw.op_map["move_o"]}}, "the figure's parameters")


def relevant_key(p: ModelParams, hw: HardwareConfig) -> tuple:
    """The fields of ``p`` that ``apply_params`` lets change ``hw`` (equal keys: equal configs)."""
    key: tuple = (p.reduction_factor, p.o_rmw_factor, p.op_latency_cycles, p.o_in_cube)
    if hw.precision.matmul.startswith("float8"):
        key += (p.cast_fp8_factor,)
    if hw.precision.block_scale == "mxfp4":
        key += (p.quant_mxfp4_factor,)
    return key


def params_of(configs: dict[str, HardwareConfig]) -> ModelParams:
    """The values the paper configs hold (each field read from the config it is fitted in)."""
    base, c8, c4 = configs["C16V32"], configs["C8V32"], configs["C4V32"]
    return ModelParams(
        reduction_factor=base.work_factor.get("rowmax", 1.0),
        o_rmw_factor=base.work_factor.get("rescale_o", 1.0),
        cast_fp8_factor=c8.work_factor.get("cast_p", 1.0),
        quant_mxfp4_factor=c4.work_factor.get("quant_p", 1.0),
        op_latency_cycles=base.pipelines["vector"].startup_cycles,
        o_in_cube=base.op_map["accumulate_pv"] == FUSED)


def at_bound(p: ModelParams) -> dict[str, str]:
    """Field -> "at lower bound" / "at upper bound" for the fitted values sitting at a range edge."""
    out = {}
    for f in fields(p):
        lo, hi, _ = PARAM_RANGES[f.name]
        value = float(getattr(p, f.name))
        if f.name != "o_in_cube" and value in (lo, hi):
            out[f.name] = "at lower bound" if value == lo else "at upper bound"
    return out


def describe(p: ModelParams) -> str:
    """One line: each value, with "at bound" where it sits at a range edge."""
    marks = at_bound(p)
    parts = [f"{f.name}={getattr(p, f.name)}" + (f" ({marks[f.name]})" if f.name in marks else "")
             for f in fields(p)]
    return ", ".join(parts)
