"""Capture per-head Q/K/V of a PyTorch attention model into vfasim's .npz layout.

Usage: python experiments/workload_stats/capture.py --factory SOURCE:FUNC [--arg VALUE ...]
       [--layers 0,3] [--batch-index 0|all] --out DIR
SOURCE is a .py file or an importable module; FUNC(*args) returns ``(model, inputs)``,
inputs being a dict of keyword arguments or a tuple of positional ones for ``model``.
Writes DIR/layer{N}.npz with float32 arrays q, k, v of shape [heads, seq, dim], ready
for ``vfasim run --qkv DIR/layerN.npz``. Needs torch (``pip install 'vfasim[capture]'``).

How: while the model runs once (eval mode, no grad), every call of
``torch.nn.functional.scaled_dot_product_attention`` is recorded, so Q and K are
taken as the kernel receives them (after rotary embeddings and head reshapes).
The N-th call is layer N. Models that compute attention another way (an explicit
softmax, a fused native path) make no such call: load them with their SDPA
attention (Hugging Face: ``attn_implementation="sdpa"``).

Assumptions:
- vfasim scales scores by 1/sqrt(dim); a call with another ``scale`` has Q
  multiplied by scale*sqrt(dim), so that q.k/sqrt(dim) equals the model's score.
- Keys masked for every query of the chosen batch element (padding) are
  dropped, and so are the queries at the same positions when Q and K have equal
  length. Any other additive bias in ``attn_mask`` (ALiBi, relative position) is
  not carried over: a warning says so. Causality is not stored: pass
  ``--causal`` or ``--no-causal`` to vfasim as the printed line says.
- An additive mask entry at or below -1e4 counts as masked.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import math
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MASKED_BELOW = -1e4


class CaptureError(Exception):
    """A bad argument or a model that gave nothing to capture."""


@dataclass(frozen=True)
class Call:
    """One recorded attention call: tensors as numpy, [batch, heads, seq, dim]."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    mask: np.ndarray | None  # bool, True = attend, broadcastable to [batch, heads, Sq, Sk]
    biased: bool  # attn_mask held additive values other than 0 and "masked"
    scale: float | None
    is_causal: bool


def to_numpy(t) -> np.ndarray:
    arr = t.detach().to("cpu").float().numpy()
    return arr if arr.ndim == 4 else arr[None]  # [heads, seq, dim] -> one batch element


def mask_of(attn_mask) -> tuple[np.ndarray | None, bool]:
    """(bool mask with True = attend, whether it also carried other additive values)."""
    if attn_mask is None:
        return None, False
    m = attn_mask.detach().to("cpu")
    if m.dtype.is_floating_point:
        m = m.float().numpy()
        allowed = m > MASKED_BELOW
        return allowed, bool(np.any(allowed & (m != 0)))
    return m.numpy().astype(bool), False


@contextlib.contextmanager
def recording(calls: list[Call]):
    """Record every scaled_dot_product_attention call made inside the block."""
    import torch.nn.functional as F

    original = F.scaled_dot_product_attention

    def spy(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
        mask, biased = mask_of(attn_mask)
        calls.append(Call(to_numpy(query), to_numpy(key), to_numpy(value), mask, biased, scale,
                          bool(is_causal)))
        return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                        is_causal=is_causal, scale=scale, **kw)

    F.scaled_dot_product_attention = spy
    try:
        yield calls
    finally:
        F.scaled_dot_product_attention = original


def capture(model, inputs) -> list[Call]:
    """Run ``model`` once on ``inputs`` (dict: keywords, tuple/list: positional) and record its calls."""
    import torch

    calls: list[Call] = []
    model.eval()
    with torch.no_grad(), recording(calls):
        model(**inputs) if isinstance(inputs, dict) else model(*inputs)
    if not calls:
        raise CaptureError("the model made no call to torch.nn.functional.scaled_dot_product_attention "
                           "(load it with its SDPA attention, e.g. attn_implementation='sdpa')")
    return calls


def kept_positions(call: Call, b: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the real keys and queries of batch element b (padding dropped)."""
    sq, sk = call.q.shape[2], call.k.shape[2]
    if call.mask is None:
        return np.arange(sq), np.arange(sk)
    m = np.broadcast_to(call.mask, (call.q.shape[0], call.q.shape[1], sq, sk))[b]
    keys = np.flatnonzero(m.any(axis=(0, 1)))
    queries = keys if sq == sk else np.arange(sq)
    return queries, keys


def heads_of(call: Call, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q, k, v of batch element b as float32 [heads, seq, dim], scale folded into q."""
    queries, keys = kept_positions(call, b)
    dim = call.q.shape[-1]
    fold = 1.0 if call.scale is None else call.scale * math.sqrt(dim)
    q = call.q[b][:, queries] * np.float32(fold)
    return (q.astype(np.float32), call.k[b][:, keys].astype(np.float32),
            call.v[b][:, keys].astype(np.float32))


def stacked(call: Call, batch_index: str) -> tuple[np.ndarray, ...]:
    """heads_of one batch element, or of all of them stacked as extra heads."""
    batch = call.q.shape[0]
    if batch_index == "all":
        parts = [heads_of(call, b) for b in range(batch)]
        if len({p[1].shape for p in parts}) > 1:
            raise CaptureError("--batch-index all needs batch elements of equal unpadded length")
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))
    b = int(batch_index)
    if not 0 <= b < batch:
        raise CaptureError(f"--batch-index {b} is outside the batch of {batch}")
    return heads_of(call, b)


def save_npz(path: Path, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
    """Write q, k, v to ``path`` atomically (a temporary file renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz.tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, q=q, k=k, v=v)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def load_factory(spec: str):
    """FUNC of 'file.py:FUNC' or 'package.module:FUNC'."""
    source, sep, name = spec.rpartition(":")
    if not sep or not source or not name:
        raise CaptureError(f"--factory must be SOURCE:FUNC, got {spec!r}")
    if source.endswith(".py"):
        if not Path(source).is_file():
            raise CaptureError(f"--factory file {source} not found")
        module_spec = importlib.util.spec_from_file_location(Path(source).stem, source)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_spec.name] = module  # so that its dataclasses resolve
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(source)
    if not callable(getattr(module, name, None)):
        raise CaptureError(f"--factory: {source} has no function {name!r}")
    return getattr(module, name)


def chosen_layers(text: str | None, n: int) -> list[int]:
    """Layer indices from '0,3' (all n when None), each checked to exist."""
    try:
        layers = list(range(n)) if text is None else [int(x) for x in text.split(",")]
    except ValueError:
        raise CaptureError(f"--layers must be comma-separated integers, got {text!r}") from None
    bad = [i for i in layers if not 0 <= i < n]
    if bad:
        raise CaptureError(f"--layers {bad} outside the {n} recorded attention calls")
    return layers


def write_layers(calls: list[Call], layers: list[int], batch_index: str, out: Path) -> list[Path]:
    """One .npz per chosen layer; prints what each holds. Nothing is written on a bad layer."""
    arrays = [stacked(calls[i], batch_index) for i in layers]
    paths = []
    for i, (q, k, v) in zip(layers, arrays):
        path = out / f"layer{i}.npz"
        save_npz(path, q, k, v)
        causal = "--causal" if calls[i].is_causal else "--no-causal"
        print(f"{path}: q {q.shape}, k {k.shape} (run with {causal})")
        if calls[i].biased:
            print(f"warning: layer {i}'s attn_mask held an additive bias that is not carried over")
        paths.append(path)
    return paths


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--factory", required=True, help="SOURCE:FUNC returning (model, inputs)")
    p.add_argument("--arg", action="append", default=[], help="a string argument for FUNC (repeatable)")
    p.add_argument("--layers", help="comma-separated attention calls to keep (default: all)")
    p.add_argument("--batch-index", default="0", help="batch element to keep, or 'all' (stacked as heads)")
    p.add_argument("--out", type=Path, required=True)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        if importlib.util.find_spec("torch") is None:
            raise CaptureError("torch is not installed (pip install 'vfasim[capture]')")
        if args.batch_index != "all" and not args.batch_index.isdigit():
            raise CaptureError(f"--batch-index must be an integer >= 0 or 'all', got {args.batch_index!r}")
        model, inputs = load_factory(args.factory)(*args.arg)
        calls = capture(model, inputs)
        write_layers(calls, chosen_layers(args.layers, len(calls)), args.batch_index, args.out)
    except CaptureError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
