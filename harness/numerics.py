"""Numerics of the Triton kernels against float64, on inputs anyone can regenerate with NumPy.

Inputs: ``harness/inputs.py`` make_inputs (NumPy-seeded float32 Q, K, V, "normal" or "sink"), then cast on the
GPU to the format (round to nearest even).
The npz holds, per input set, Q/K/V as float32 arrays with the exact values of the format, and per
case the outputs of triton_fa2/vfa/vsa (float32 holding the output format's values), the float64
reference rounded to float32, and the VSA emulation in float64 rounded to float32.
"""

from __future__ import annotations

import io
import zlib

import numpy as np
import torch

from harness import kernels, reference
from harness.attention import TORCH_DTYPE
from harness.inputs import SEED, make_inputs

def cases(quick: bool):
    seqs = (256,) if quick else (1024, 2048)
    dims = (128,) if quick else (128, 64)
    dts = ("fp16", "bf16") if quick else ("fp16", "bf16", "fp8_e4m3")
    for d in dims:
        for n in seqs:
            for dt in dts:
                for kind in ("normal", "sink"):
                    yield d, n, dt, kind


def run_numerics(add_row, out_npz: str, quick: bool, log, budget, cap_bytes: int = 15 << 20) -> None:
    heads = 2
    arrays: dict[str, np.ndarray] = {}
    size = 0
    for d, n, dt, kind in cases(quick):
        if budget.left() < 20:
            log("numerics: budget reached, remaining cases skipped")
            break
        seed = SEED + n + d + (1000 if kind == "sink" else 0)
        qn, kn, vn = make_inputs(n, d, heads, kind, seed)
        td = TORCH_DTYPE[dt]
        q, k, v = (torch.from_numpy(x).cuda().to(td) for x in (qn, kn, vn))
        vt = v
        if dt == "fp8_e4m3":
            from harness.attention import transposed_v
            vt = transposed_v(v)
        set_id = f"{kind}_{dt}_d{d}_n{n}"
        store = d == 128 and dt in ("fp16", "bf16")
        new: dict[str, np.ndarray] = {}
        if store:
            for name, x in (("q", q), ("k", k), ("v", v)):
                new[f"{set_id}__{name}"] = x.float().cpu().numpy()
        cfg = kernels.config_for(d, n)
        qd, kd, vd = (x.float() for x in (q, k, v))
        for causal in (False, True):
            case_id = f"{set_id}_{'causal' if causal else 'full'}"
            ref = reference.exact(qd, kd, vd, causal)
            emu, skip_frac = reference.vsa_emulated(qd, kd, vd, causal, cfg[0], cfg[1])
            outs = {"emul_vsa_fp64": emu}
            kr = kernels.krepr(k, cfg[1])
            for mode in ("fa2", "vfa", "vsa"):
                try:
                    outs[f"triton_{mode}"] = kernels.attention(q, k, vt, causal, mode, kr=kr)
                except Exception as e:  # noqa: BLE001
                    log(f"numerics {case_id} {mode} failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            torch.cuda.synchronize()
            case_arrays = {}
            if store:
                case_arrays[f"{case_id}__ref"] = ref.float().cpu().numpy()
                for name, o in outs.items():
                    case_arrays[f"{case_id}__{name}"] = o.float().cpu().numpy()
            add_size = sum(len(zlib.compress(a.tobytes(), 1)) for a in {**new, **case_arrays}.values())
            in_npz = store and size + add_size <= cap_bytes
            if in_npz:
                arrays.update(new)
                arrays.update(case_arrays)
                size += add_size
                new = {}
            for name, o in outs.items():
                od = o.double()
                bad = int((~torch.isfinite(od)).sum())
                diff = torch.nan_to_num(od - ref, nan=0.0, posinf=0.0, neginf=0.0)
                add_row({"case": case_id, "inputs": kind, "kernel": name, "dtype": dt, "head_dim": d,
                         "causal": causal, "seq_len": n, "batch": 1, "heads": heads, "kv_heads": heads,
                         "rel_l2": float(diff.norm() / ref.norm()), "max_abs_err": float(diff.abs().max()),
                         "nonfinite": bad, "in_npz": in_npz})
            log(f"numerics {case_id}: " + ", ".join(
                f"{name} {float((o.double() - ref).norm() / ref.norm()):.2e}" for name, o in outs.items())
                + f"; vsa skipped {skip_frac:.2f} of visited blocks (emulation)")
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    with open(out_npz, "wb") as f:
        f.write(buf.getvalue())
    log(f"numerics.npz: {len(arrays)} arrays, {len(buf.getvalue()) / 2 ** 20:.2f} MiB")
