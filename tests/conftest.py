"""Shared fixtures; hypothesis runs derandomized so CI is repeatable."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import settings

from vfasim.functional.stages import SOFTWARE_PIPELINE
from vfasim.hw import HardwareConfig
from vfasim.trace import DTYPE_CODE, KIND_CODE, Trace

settings.register_profile("ci", derandomize=True, deadline=None, max_examples=25)
settings.load_profile("ci")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite tests/golden.json")


@pytest.fixture(autouse=True)
def reference_cache_in_tmp(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts with an empty reference cache of its own, never the user's."""
    monkeypatch.setenv("VFASIM_CACHE_DIR", str(tmp_path_factory.mktemp("reference-cache")))


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def tiny_hw(**overrides) -> HardwareConfig:
    """A core with round numbers, so timelines can be worked out by hand."""
    pipe = {"startup_cycles": 1, "issue_overhead_cycles": 0}
    doc = {
        "name": "tiny", "clock_ghz": 1.0, "score_buffers": 1,
        "precision": {"matmul": "float16", "vector": "float32"},
        "pipelines": {
            "cube": {"role": "tensor", "throughput": {"float16": 10}, **pipe},
            "vector": {"role": "vector", "throughput": {"float32": 10}, **pipe},
            "exp": {"role": "exp", "throughput": {"float32": 10}, **pipe},
            "mover": {"role": "memory", "throughput": {"bytes": 10}, **pipe},
        },
        "op_map": {},
    }
    from vfasim.trace import OP_KINDS

    unit_pipe = {"tensor": "cube", "vector": "vector", "exp": "exp", "memory": "mover"}
    doc["op_map"] = {k: unit_pipe[cls] for k, (cls, _) in OP_KINDS.items()}
    doc.update(overrides)
    return HardwareConfig.model_validate(doc)


def rng_qkv(seq: int, dim: int, heads: int = 1, kv_heads: int = 1, seed: int = 0, kv_len: int | None = None):
    rng = np.random.default_rng(seed)
    kv = seq if kv_len is None else kv_len
    q = rng.standard_normal((heads, seq, dim)).astype(np.float32)
    k = rng.standard_normal((kv_heads, kv, dim)).astype(np.float32)
    v = rng.standard_normal((kv_heads, kv, dim)).astype(np.float32)
    return q, k, v


# Two tiles of one query row: (kind, step, key block, work, deps)
TWO_TILES = [
    ("load_k", 1, 0, 20, []),
    ("qk_matmul", 1, 0, 40, [0]),
    ("exp", 1, 0, 30, [1]),
    ("pv_matmul", 1, 0, 40, [2]),
    ("load_k", 2, 1, 20, []),
    ("qk_matmul", 2, 1, 40, [4]),
    ("exp", 2, 1, 30, [5, 2]),
    ("pv_matmul", 2, 1, 40, [6, 3]),
]


def hand_trace(ops) -> Trace:
    n = len(ops)
    deps = [d for *_, ds in ops for d in ds]
    dtype = [DTYPE_CODE["float16" if k in ("qk_matmul", "pv_matmul", "minit_matmul") else "float32"]
             for k, *_ in ops]
    kind = np.array([KIND_CODE[k] for k, *_ in ops], np.uint8)
    sched = SOFTWARE_PIPELINE.columns(kind)
    untaken = ~np.isin(sched["free_buffer"], sched["take_buffer"])  # a hand trace may leave out V loads
    sched["free_buffer"] = np.where(untaken, np.int8(-1), sched["free_buffer"])
    return Trace(
        kind=kind, dtype=np.array(dtype, np.uint8), **sched,
        work=np.array([w for _, _, _, w, _ in ops], np.int64), row=np.zeros(n, np.int32),
        step=np.array([s for _, s, *_ in ops], np.int32), kblock=np.array([b for _, _, b, *_ in ops], np.int32),
        dep_ptr=np.concatenate([[0], np.cumsum([len(ds) for *_, ds in ops])]).astype(np.int64),
        dep_idx=np.array(deps, np.int32))


@pytest.fixture
def efficient_unfloored():
    """The memory-efficient kernel's description with no tile's measured ``block_cycles``: for tests of what the
    pipes and loads give a unit, which those measured floors would hide."""
    from vfasim.kernel import load_kernel

    kernel = load_kernel("efficient")

    def bare(tiles):
        return [t.model_copy(update={"block_cycles": {}}) for t in tiles]
    return kernel.model_copy(update={"tiles": bare(kernel.tiles),
                                     "decode": kernel.decode.model_copy(update={"tiles": bare(kernel.decode.tiles)})})
