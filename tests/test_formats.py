"""The number-format registry: its facts agree with ml_dtypes, and the names configs may give agree with it."""

from __future__ import annotations

from typing import get_args

import ml_dtypes

from vfasim import formats
from vfasim.trace import DTYPES


def test_bits_are_the_types_own():
    assert {n: f.bits for n, f in formats.FORMATS.items()} == {
        n: ml_dtypes.finfo(f.dtype).bits for n, f in formats.FORMATS.items()}


def test_the_names_a_config_may_give_are_the_tables():
    assert get_args(formats.VectorFormat) == tuple(formats.VECTOR_DTYPES)
    assert get_args(formats.BlockScaleName) == tuple(formats.BLOCK_RULES)


def test_every_reference_points_into_the_table():
    assert all(r.scale in formats.SCALE_DTYPES for r in formats.BLOCK_RULES.values())
    assert all(dtype in formats.MATMUL_DTYPES for dtype in formats.MATMUL_FORMATS.values())
    per_block = [n for n, f in formats.FORMATS.items() if "per_block" in dict(f.scaling).values()]
    assert all(formats.FORMATS[n].block_scale in formats.BLOCK_RULES for n in per_block)


def test_trace_codes_keep_their_order():
    # a trace stores a dtype as its index here: a new format goes after these, never between them
    assert DTYPES[:6] == ("float32", "float16", "bfloat16", "float8_e4m3", "float8_e5m2", "float4_e2m1")
