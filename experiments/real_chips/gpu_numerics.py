"""The GPU's VFA and vfasim's VFA on the same Q/K/V: error against float64 side by side, and how close the bits are.

Usage: python experiments/real_chips/gpu_numerics.py [--campaign gpu_h100_2026_11] [--out DIR]

Reads the inputs and the Triton kernels' outputs the harness saved in ``validation/<campaign>/numerics.npz``
(float32 arrays holding the fp16 values) and runs vfasim's functional engine on the same Q/K/V in the precision
of the measured kernel (fp16 matmul inputs, fp32 softmax state: the C16V32 core) with the kernel's tiles
(128 x 128 at head dim 128). For every saved output: the relative L2 error against a float64 reference of the
GPU's output and of the model's, the model's own verdict, and the GPU-vs-model difference (largest absolute
difference in fp16 units in the last place, and the fraction of bit-identical fp16 outputs). The GPU stores O in
fp16, the model keeps it in fp32: ``model_fp16_out_rel_err`` is the model's error with O rounded as the GPU's is.
Writes DIR/gpu_numerics.csv and .md (default DIR: experiments/real_chips/out).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from vfasim import run
from vfasim.runner.api import engine_precision
from vfasim.functional import Tiling, reference_attention, run_engine
from vfasim.hw import load_hw
from vfasim.report.tables import write_table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ALGOS = {"triton_fa2": "fa2", "triton_vfa": "vfa", "triton_vsa": "vsa"}
COLUMNS = ("case", "kernel", "causal", "gpu_rel_err", "model_rel_err", "model_fp16_out_rel_err", "model_verdict",
           "max_ulp_gpu_vs_model",
           "bit_identical_fraction", "gpu_nonfinite", "model_nonfinite")


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref|| / ||ref|| over finite outputs (non-finite ones are counted apart, never skipped silently)."""
    ok = np.isfinite(out)
    return float(np.linalg.norm((out - ref)[ok]) / np.linalg.norm(ref[ok])) if ok.any() else float("nan")


def ulps(a: np.ndarray, b: np.ndarray) -> tuple[int, float]:
    """(largest |a - b| in fp16 ulps, fraction of equal fp16 values) over elements finite in both."""
    ok = np.isfinite(a) & np.isfinite(b)
    ia = a[ok].astype(np.float16).view(np.int16).astype(np.int64)
    ib = b[ok].astype(np.float16).view(np.int16).astype(np.int64)
    ia = np.where(ia < 0, -32768 - ia, ia)  # sign-magnitude -> ordered integers
    ib = np.where(ib < 0, -32768 - ib, ib)
    diff = np.abs(ia - ib)
    return int(diff.max(initial=0)), float(np.mean(diff == 0)) if diff.size else float("nan")


def compare(z: np.lib.npyio.NpzFile, case: str, kernel: str, folder: Path) -> dict:
    inputs = case.rsplit("_", 1)[0]  # "<inputs>_full" or "<inputs>_causal"
    q, k, v = (z[f"{inputs}__{n}"][0] for n in "qkv")  # [heads, seq, d]
    causal = case.endswith("_causal")
    path = folder / f"{inputs}.npz"
    np.savez(path, q=q, k=k, v=v)
    res = run("C16V32", ALGOS[kernel], qkv=path, causal=causal, block_q=128, block_k=128, numerics="full")
    gpu = z[f"{case}__{kernel}"][0]
    ref = reference_attention(q, k, v, causal)
    model = model_output(q, k, v, causal, kernel)
    max_ulp, same = ulps(gpu, model)
    return {"case": case, "kernel": kernel, "causal": causal, "gpu_rel_err": rel_err(gpu, ref),
            "model_rel_err": rel_err(model, ref),
            "model_fp16_out_rel_err": rel_err(model.astype(np.float16).astype(np.float32), ref),
            "model_verdict": res.numerics["verdict"],
            "max_ulp_gpu_vs_model": max_ulp, "bit_identical_fraction": same,
            "gpu_nonfinite": int(np.sum(~np.isfinite(gpu))), "model_nonfinite": int(np.sum(~np.isfinite(model)))}


def model_output(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool, kernel: str) -> np.ndarray:
    """The engine's output on the same inputs in C16V32's precision (a RunResult keeps digests, not arrays)."""
    t = Tiling(q.shape[1], k.shape[1], q.shape[2], 128, 128, causal, q.shape[0], k.shape[0])
    return run_engine(q, k, v, t, ALGOS[kernel], engine_precision(load_hw("C16V32"))).out


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--campaign", default="gpu_h100_2026_11")
    p.add_argument("--cases", default=None, help="comma list of cases (default: every saved output)")
    p.add_argument("--out", type=Path, default=HERE / "out")
    args = p.parse_args(argv)
    z = np.load(ROOT / "validation" / args.campaign / "numerics.npz")
    outputs = sorted(name for name in z.files if "__triton_" in name)
    if args.cases is not None:
        outputs = [n for n in outputs if n.split("__")[0] in args.cases.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        rows = [compare(z, name.split("__")[0], name.split("__")[1], Path(tmp)) for name in outputs]
    write_table(rows, COLUMNS, args.out / "gpu_numerics")
    for r in rows:
        print(f"{r['case']:<36} {r['kernel']:<11} GPU {r['gpu_rel_err']:.2e}  model {r['model_rel_err']:.2e} "
              f"(O in fp16: {r['model_fp16_out_rel_err']:.2e}) "
              f"({r['model_verdict']})  max {r['max_ulp_gpu_vs_model']} ulp, {100 * r['bit_identical_fraction']:.1f}% "
              "bit-identical")
    return rows


if __name__ == "__main__":
    main()
