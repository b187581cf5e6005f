"""Dependent-chain latency of the online-softmax row operations of a FlashAttention tile, in SM cycles.

Usage on the GPU machine (repository root)::

    python3 -m harness.oplatency --out /tmp/oplat [--quick]

One program of ``num_warps`` warps (4, as the Triton attention tiles; a grid of 1, alone on the GPU) computes
``s = tl.dot(a, b)`` once (fp16 [BM, 64] x [64, BN], fp32 accumulator), so ``s`` has the layout a ``tl.dot`` result
has: ``mma.sync`` fragments for BM = 16 (Triton spreads the 4 warps along the key axis, so a row's scores sit in
several warps) and wgmma fragments for BM >= 64 (the warp group stacked along the rows, a row inside one warp).
The rows of ``s`` are scaled to sum to 1 (all entries > 0) so every chain stays finite. Then a loop of STEPS
iterations (a run-time argument: not specialised, not unrolled to a constant) runs one variant, each iteration
depending on the previous one through a per-row fp32 vector or the tile:

- ``loop``: ``m = m * 0.999 + 0.001`` on the row vector (one FFMA): the loop's own cost, to subtract;
- ``rowmax``: ``m = rowmax(s + m[:, None])``;
- ``rowsum``: ``l = rowsum(s * l[:, None])`` (rows of s sum to 1, so l stays near 1);
- ``exp2``: ``x = exp2(x * -0.5)`` over the whole tile (x starts as s and stays in [0.7, 1]): one FMUL and one
  MUFU.EX2 per element, BM * BN / threads of them per thread, independent within an iteration;
- ``softmax_step``: the FA2 online-softmax update without a matmul (and without the accumulator rescale):
  ``bias = l * 2^-20``, ``m_new = max(m, rowmax(s + bias))``, ``alpha = exp2(m - m_new)``,
  ``p = exp2(s + bias - m_new)``, ``l = l * alpha + rowsum(p)``, ``m = m_new``. The bias makes the next
  iteration's scores depend on the last l, so rowmax, exp2 and rowsum are all on the carried chain (an upper
  bound: in a real kernel the scores of the next key block do not wait for this block's l).

``%clock64`` (``harness.micro._clock``) is read before and after the loop; the span is stored by the CTA's first
thread, so it is warp 0's (with BM = 16 the warps meet at a barrier in every reduction; with BM >= 64 they run the
same code without one). Cycles per iteration = span / STEPS, the median over a few launches, with the spread;
the slope (span(STEPS) - span(STEPS / 2)) / (STEPS / 2) is recorded beside it, as a check that no fixed cost is
mixed in. Each kernel's result is checked against the same recurrence in float64 on the host, and its TTGIR
(the MMA layout's attributes; reductions and layout conversions inside the loop) and PTX (the instructions between
a loop label and its backward branch: shuffles, barriers, shared-memory accesses, ex2) are summarised, so the
table says what was timed. For BM = 16, ``loop_within_warp``, ``rowmax_within_warp`` and
``softmax_step_within_warp`` run the same with num_warps=1, so a row sits inside one warp: at BN = 16 and 32 each
thread holds the elements a thread of the 4-warp 16 x 64 and 16 x 128 tiles holds (the difference is the cross-warp
part: shared memory and barriers), at BN = 64 and 128 the same tile on one warp.
``loop_w8``, ``rowmax_w8`` and ``blocktest_w8`` run the 128-row tiles (BN 64 and 128) with the prefill kernels'
8 warps (two warp groups, each row inside one warp): ``blocktest`` is VSA's block test as ``harness/kernels.py``
``_visit_one`` runs it, a rowmax, then the maximum over the rows (across the 8 warps) between two barriers, so
``blocktest_w8`` less ``rowmax_w8`` is what the cross-warp part adds.

Output (``--out DIR``): ``micro.csv`` (name, value, unit, notes; value = median cycles per iteration, the loop's
overhead not subtracted: the ``loop_*`` rows are there to subtract) with its sidecar ``micro.yaml`` (provenance),
``log.txt``, ``command.txt``, ``clocks_trace.txt``, ``ir_summary.txt`` and the TTGIR plus PTX loop body of two
kernels (``ir_softmax_step_bm16_bn64.txt``, ``ir_softmax_step_bm128_bn128.txt``). ``--sass`` adds the opcode counts
of each kernel's SASS loop (nvdisasm or cuobjdump on its cubin) and ``sass_loops.txt``, the SASS loop bodies of four
rowmax kernels; ``--only`` measures the named rows alone.

``--group decode`` (``python3 -m harness.oplatency --out DIR --group decode [--sass]``) measures instead the whole
key-block iteration of the Triton decode tile (``harness/kernels.py`` ``DECODE_CONFIG``: BLOCK_M 16, BLOCK_N 64,
4 warps, 3 stages) with no memory traffic in its loop: one program alone on the GPU loads q [16, D], K^T [D, 64] and
V [64, D] (fp16) once before the loop; the loop (STEPS iterations, a run-time count) computes, per head dim D in
64, 128, 256 (fp32 accumulators, the ops and order of ``kernels._visit``):

- ``loop_resident``: ``m = m * 0.999 + 0.001`` (the loop's own cost, as ``loop`` above);
- ``fa2_resident``: ``qk = tl.dot(q, kT, c_i)``, ``m_new = max(m, rowmax(qk) * scale)``, ``alpha = exp2(m - m_new)``,
  ``p = exp2(qk * scale - m_new)``, ``l = l * alpha + rowsum(p)``, ``acc = acc * alpha``, ``m = m_new``,
  ``acc = tl.dot(p.to(fp16), v, acc)``. ``c_i = i * 2^-14`` (a splat on the dot's accumulator input) makes the
  scores depend on the iteration, so the QK dot cannot leave the loop, without touching q's operand layout; the
  next iteration's scores do not wait for this iteration's results, as in the real kernel;
- ``fa2_resident_qpert``: the same with the perturbation on q instead (``q + (i & 7) * 2^-10`` in fp16, then
  ``tl.dot(q_i, kT)``), to show what that placement costs;
- ``vfa_resident``: VFA's frozen-max body: m fixed before the loop, ``p = exp2(qk * scale - m)``,
  ``l = l + rowsum(p)``, ``acc = tl.dot(p.to(fp16), v, acc)`` (no rowmax, no alpha, no rescale);
- ``dots_resident``: the body without softmax (``kernels._visit`` with DOTS): ``acc = tl.dot((qk * scale).to(fp16),
  v, acc)``;
- ``qk_resident``: the QK dot alone, chained through its accumulator: ``s = tl.dot(q, kT, s * 0.5)``;
- ``pv_resident``: the PV dot alone, chained through the output accumulator: ``acc = tl.dot(p16, v, acc)`` with
  ``p16`` computed and converted to fp16 once before the loop.

Rows ``{variant}_bm16_bn64_d{D}_cycles`` (cycles per iteration, as above) and ``{variant}_bm16_bn64_d{D}_ns``
(those cycles over the median SM clock nvidia-smi reported during the group's run). The notes say what the
TTGIR loop holds (dots, reductions, layout conversions, shared-memory allocations and loads) and what the PTX loop
holds (``mma.sync``, ``bar.sync``, shuffles, shared-memory and global accesses, ``ldmatrix``, ``ex2``); each result is
checked against the same recurrence in float64. It writes ``ir_summary.txt`` and the TTGIR plus PTX loop of
``fa2_resident``, ``qk_resident`` and ``pv_resident`` at D = 64 (``ir_{variant}_d64.txt``); with ``--sass``, ``sass_loops.txt`` holds the SASS loops
of ``fa2_resident`` and ``vfa_resident`` at D = 64.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import triton
import triton.language as tl

from harness.micro import _clock

BK = 64  # the K dimension of the score product (head dim 64)
EPS = 2.0 ** -20  # softmax_step: the bias l * EPS that ties the next scores to the last l
TILES = ((16, 64), (16, 128), (64, 64), (64, 128), (128, 64), (128, 128))
QUICK_TILES = ((16, 64), (128, 128))
#: (name, OP) in the order they run and are written
VARIANTS = (("loop", 0), ("rowmax", 1), ("rowsum", 2), ("exp2", 3), ("softmax_step", 4))
#: the 128-row prefill tiles with their 8 warps (two warp groups): VSA's block test against a rowmax alone
EIGHT_WARPS = (("loop_w8", 0), ("rowmax_w8", 1), ("blocktest_w8", 5))
EIGHT_WARPS_TILES = ((128, 64), (128, 128))
WHAT = {
    0: "m = m*0.999 + 0.001 on the row vector (one FFMA): the loop overhead",
    1: "m = rowmax(s + m[:, None])",
    2: "l = rowsum(s * l[:, None]), rows of s summing to 1",
    3: "x = exp2(x * -0.5) over the whole tile, x starting as s (one FMUL + one MUFU.EX2 per element)",
    4: "FA2 online-softmax update without matmul or accumulator rescale: bias = l*2^-20, m_new = max(m, "
       "rowmax(s + bias)), alpha = exp2(m - m_new), p = exp2(s + bias - m_new), l = l*alpha + rowsum(p)",
    5: "VSA's block test (harness/kernels.py _visit_one): t = rowmax(s + m[:, None]), a barrier, t_top = max over "
       "the rows of t (across the warps), a barrier, m = 0.5*m + 0.5*t_top",
}
WITHIN_WARP = (("loop_within_warp", 0), ("rowmax_within_warp", 1), ("softmax_step_within_warp", 4))
WITHIN_WARP_BN = (16, 32, 64, 128)
IR_DUMPS = (("softmax_step", 16, 64, 4), ("softmax_step", 128, 128, 4))
#: with --sass, the kernels whose SASS loop body is written out whole (every kernel gets its loop's opcode counts)
SASS_DUMPS = (("rowmax", 16, 64, 4), ("rowmax_within_warp", 16, 16, 1), ("rowmax_within_warp", 16, 64, 1),
              ("rowmax", 64, 64, 4))


@triton.jit(do_not_specialize=["STEPS"])
def _op_kernel(A, B, OUT, T, STEPS, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, OP: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = tl.load(A + rm[:, None] * BK + rk[None, :])
    b = tl.load(B + rk[:, None] * BN + rn[None, :])
    s = tl.dot(a, b)  # fp32 [BM, BN] in the MMA layout
    s = s * (1.0 / tl.sum(s, axis=1))[:, None]  # every row sums to 1, every entry > 0
    m = tl.max(s, axis=1)
    l = tl.sum(s, axis=1)
    x = s
    t0 = _clock()
    for _ in range(STEPS):
        if OP == 0:
            m = m * 0.999 + 0.001
        elif OP == 1:
            m = tl.max(s + m[:, None], axis=1)
        elif OP == 2:
            l = tl.sum(s * l[:, None], axis=1)
        elif OP == 3:
            x = tl.exp2(x * -0.5)
        elif OP == 4:
            bias = l * 9.5367431640625e-07  # 2^-20, as EPS
            m_new = tl.maximum(m, tl.max(s + bias[:, None], axis=1))
            alpha = tl.exp2(m - m_new)
            p = tl.exp2(s - (m_new - bias)[:, None])
            l = l * alpha + tl.sum(p, axis=1)
            m = m_new
        elif OP == 5:
            t = tl.max(s + m[:, None], axis=1)
            tl.debug_barrier()
            t_top = tl.max(t, 0)
            tl.debug_barrier()
            m = m * 0.5 + t_top * 0.5
    t1 = _clock()
    tl.store(T, t1 - t0)
    tl.store(OUT + rm, m)
    tl.store(OUT + BM + rm, l)
    tl.store(OUT + 2 * BM + rm, tl.sum(x, axis=1))


def reference(op: int, a: np.ndarray, b: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kernel's recurrence in float64: (m, l, rowsum(x)) after ``steps`` iterations."""
    s = a.astype(np.float64) @ b.astype(np.float64)
    s = s / s.sum(axis=1, keepdims=True)
    m, l, x = s.max(axis=1), s.sum(axis=1), s.copy()
    for _ in range(steps):
        if op == 0:
            m = m * 0.999 + 0.001
        elif op == 1:
            m = (s + m[:, None]).max(axis=1)
        elif op == 2:
            l = (s * l[:, None]).sum(axis=1)
        elif op == 3:
            x = np.exp2(x * -0.5)
        elif op == 4:
            bias = l * EPS
            m_new = np.maximum(m, (s + bias[:, None]).max(axis=1))
            alpha = np.exp2(m - m_new)
            p = np.exp2(s - (m_new - bias)[:, None])
            l = l * alpha + p.sum(axis=1)
            m = m_new
        elif op == 5:
            m = m * 0.5 + (s + m[:, None]).max() * 0.5
    return m, l, x.sum(axis=1)


# ---- what was compiled -------------------------------------------------------------------------------------------
def mma_layouts(ttgir: str) -> str:
    """The MMA layout attributes of a TTGIR module, short: 'v3 warpsPerCTA [4, 1] instrShape [16, 64, 16]'."""
    out = []
    for name, body in re.findall(r"#(mma\w*) = #[\w.]+\.nvidia_mma<\{(.*?)\}>", ttgir):
        ver = re.search(r"versionMajor = (\d+)", body)
        warps = re.search(r"warpsPerCTA = \[([^\]]*)\]", body)
        instr = re.search(r"instrShape = \[([^\]]*)\]", body)
        v, w, i = (x.group(1) if x else "?" for x in (ver, warps, instr))
        out.append(f"#{name} nvidia_mma v{v} warpsPerCTA [{w}] instrShape [{i}]")
    return "; ".join(out) or "no nvidia_mma layout"


def ttgir_loop(ttgir: str) -> str:
    """The body of the first scf.for of the TTGIR (by brace depth), or '' when there is none."""
    lines = ttgir.splitlines()
    for i, line in enumerate(lines):
        if "scf.for" in line:
            depth, body = 0, []
            for ln in lines[i:]:
                body.append(ln)
                depth += ln.count("{") - ln.count("}")
                if depth <= 0 and len(body) > 1:
                    break
            return "\n".join(body)
    return ""


def ttgir_loop_counts(loop: str) -> str:
    reduces = len(re.findall(r"tt\.reduce\"?\(", loop))
    converts = loop.count("convert_layout")
    exps = loop.count("math.exp2")
    blocked = len(re.findall(r"#blocked\d*\b", loop))
    return f"reduce {reduces}, convert_layout {converts}, exp2 {exps}, #blocked uses {blocked}"


def ptx_loops(ptx: str) -> list[tuple[int, int]]:
    """(first, last) line index of every region between a label and a later branch back to it."""
    lines = ptx.splitlines()
    labels: dict[str, int] = {}
    loops = []
    for i, line in enumerate(lines):
        s = line.strip()
        lab = re.match(r"^(\$L__\w+):", s)
        if lab:
            labels[lab.group(1)] = i
            continue
        br = re.search(r"\bbra(?:\.uni)?\s+(\$L__\w+);", s)
        if br and br.group(1) in labels:
            loops.append((labels[br.group(1)], i))
    return loops


PTX_OPS = (("instr", None), ("shfl", r"\bshfl\.sync"), ("bar", r"\b(?:bar|barrier)\.sync\b"),
           ("st.shared", r"\bst\.shared"), ("ld.shared", r"\bld\.shared"), ("ex2", r"\bex2\.approx"),
           ("max", r"\bmax(?:\.\w+)*\.f32"), ("fma", r"\bfma\.rn(?:\.\w+)*\.f32"), ("add", r"\badd(?:\.\w+)*\.f32"),
           ("mul", r"\bmul(?:\.\w+)*\.f32"), ("mma", r"\b(?:mma\.sync|wgmma)"), ("clock", r"%clock64"))


def ptx_loop_counts(ptx: str) -> tuple[str, str]:
    """A summary of each PTX loop body's instructions, and the bodies' text."""
    lines = ptx.splitlines()
    parts, texts = [], []
    for k, (first, last) in enumerate(ptx_loops(ptx)):
        body = [ln.strip() for ln in lines[first:last + 1]]
        instrs = [ln for ln in body if ln.endswith(";") and not ln.startswith(("//", "."))]
        counts = []
        for name, pat in PTX_OPS:
            n = len(instrs) if pat is None else sum(1 for ln in instrs if re.search(pat, ln))
            if n or name in ("instr", "shfl", "bar", "ex2"):
                counts.append(f"{name} {n}")
        parts.append(f"loop {k + 1} ({', '.join(counts)})")
        texts.append(f"// PTX loop {k + 1}: lines {first + 1}-{last + 1}\n" + "\n".join(lines[first:last + 1]))
    return ("; ".join(parts) or "no loop found in the PTX"), "\n\n".join(texts)


def scrub_paths(text: str) -> str:
    """Source locations made relative: the repository's files from its root, Triton's from its package."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    text = text.replace(root, "")
    return re.sub(r'"/[^"\s]*?/(?:site|dist)-packages/', '"', text)


def _disassembler() -> list[str] | None:
    """nvdisasm (or cuobjdump) from Triton's NVIDIA backend, the PATH or the CUDA toolkit."""
    dirs = [os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin"), "/usr/local/cuda/bin"]
    for tool, args in (("nvdisasm", ["-c"]), ("cuobjdump", ["-sass"])):
        for d in dirs:
            if os.access(os.path.join(d, tool), os.X_OK):
                return [os.path.join(d, tool), *args]
        if shutil.which(tool):
            return [tool, *args]
    return None


def sass_of(cubin: bytes) -> str:
    """The SASS of a cubin ('' when no disassembler answers)."""
    cmd = _disassembler()
    if cmd is None or not cubin:
        return ""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        try:
            r = subprocess.run([*cmd, path], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            return ""
    return r.stdout if r.returncode == 0 else ""


_SASS_OP = re.compile(r"^/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Z0-9_]+)*)")


def sass_loop_counts(sass: str) -> tuple[str, str]:
    """Opcode counts of each SASS loop body (a label or address, then a later BRA back to it) and the bodies' text."""
    lines = [ln.strip() for ln in sass.splitlines()]
    labels: dict[str, int] = {}
    addrs: dict[int, int] = {}
    loops = []
    for i, s in enumerate(lines):
        lab = re.match(r"^(\.L_x_\d+):", s)
        if lab:
            labels[lab.group(1)] = i
            continue
        op = _SASS_OP.match(s)
        if op:
            addrs[int(op.group(1), 16)] = i
        br = re.search(r"\bBRA(?:\.\w+)*\s+(?:`\((\.L_x_\d+)\)|(0x[0-9a-f]+))", s)
        if br:
            tgt = labels.get(br.group(1)) if br.group(1) else addrs.get(int(br.group(2), 16))
            if tgt is not None and tgt < i:
                loops.append((tgt, i))
    parts, texts = [], []
    for k, (first, last) in enumerate(loops):
        counts: dict[str, int] = {}
        n = 0
        for s in lines[first:last + 1]:
            op = _SASS_OP.match(s)
            if op:
                n += 1
                counts[op.group(2)] = counts.get(op.group(2), 0) + 1
        top = ", ".join(f"{o} {c}" for o, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        parts.append(f"loop {k + 1} ({n} instr: {top})")
        body = [s for s in lines[first:last + 1] if not s.startswith("/* 0x")]
        texts.append(f"// SASS loop {k + 1}\n" + "\n".join(body))
    return ("; ".join(parts) or "no loop found in the SASS"), "\n\n".join(texts)


# ---- measuring -----------------------------------------------------------------------------------------------------
def _timed(launch, steps: int, reps: int) -> tuple[object, list[int], list[int]]:
    """(compiled kernel, spans of ``reps`` launches of ``steps`` iterations, of ``steps // 2``): compiled first."""
    kern, _ = launch(4)  # compile and load
    full, half = [], []
    for _ in range(reps):
        full.append(launch(steps)[1])
        half.append(launch(steps // 2)[1])
    return kern, full, half


def _summary(kern, full: list[int], half: list[int], steps: int, err: float, sass: bool, ttgir_counts, ptx_counts,
             mma_note: str) -> dict:
    """A kernel's row: median cycles per iteration, spread, slope, the float64 check, registers, and its loop's IR
    counts (``ttgir_counts``, ``ptx_counts``: the group's own counters)."""
    med_full, med_half = statistics.median(full), statistics.median(half)
    res = {"cycles": med_full / steps, "lo": min(full) / steps, "hi": max(full) / steps,
           "spread_pct": (max(full) - min(full)) / med_full * 100 if med_full else float("nan"),
           "slope": (med_full - med_half) / (steps - steps // 2), "err": err,
           "regs": getattr(kern, "n_regs", "?"), "spills": getattr(kern, "n_spills", "?"),
           "layout": "?", "ttgir_loop": "?", "ptx_loop": "?", "ttgir": "", "ptx_text": "", "mma": "?",
           "sass_loop": "", "sass_text": ""}
    asm = getattr(kern, "asm", None)
    if asm is not None:
        ttgir, ptx = str(asm.get("ttgir", "")), str(asm.get("ptx", ""))
        res["layout"] = mma_layouts(ttgir)
        res["ttgir_loop"] = ttgir_counts(ttgir_loop(ttgir))
        res["ptx_loop"], loop_text = ptx_counts(ptx)
        res["ttgir"], res["ptx_text"] = ttgir, loop_text
        n_wgmma = len(re.findall(r"\bwgmma\.mma_async", ptx))
        n_mma = len(re.findall(r"\bmma\.sync", ptx))
        res["mma"] = f"PTX: {n_wgmma} wgmma.mma_async, {n_mma} mma.sync{mma_note}"
        if sass:
            res["sass_loop"], res["sass_text"] = sass_loop_counts(sass_of(asm.get("cubin", b"")))
    return res


def measure(op: int, bm: int, bn: int, warps: int, steps: int, reps: int, seed: int, sass: bool = False) -> dict:
    g = torch.Generator().manual_seed(seed)
    a_cpu = (torch.rand(bm, BK, generator=g) * 0.5 + 0.5).to(torch.float16)
    b_cpu = (torch.rand(BK, bn, generator=g) * 0.5 + 0.5).to(torch.float16)
    a, b = a_cpu.cuda(), b_cpu.cuda()
    out = torch.full((3 * bm,), float("nan"), device="cuda", dtype=torch.float32)
    t = torch.zeros(1, device="cuda", dtype=torch.int64)

    def launch(n: int):
        k = _op_kernel[(1,)](a, b, out, t, n, BM=bm, BN=bn, BK=BK, OP=op, num_warps=warps)
        torch.cuda.synchronize()
        return k, int(t.item())

    kern, full, half = _timed(launch, steps, reps)
    launch(steps)  # the result checked below is of a STEPS launch
    got = out.cpu().double().numpy()
    ref = reference(op, a_cpu.numpy(), b_cpu.numpy(), steps)
    if op in (0, 1, 5):
        pairs = [(got[:bm], ref[0])]
    elif op == 2:
        pairs = [(got[bm:2 * bm], ref[1])]
    elif op == 3:
        pairs = [(got[2 * bm:], ref[2])]
    else:
        pairs = [(got[:bm], ref[0]), (got[bm:2 * bm], ref[1])]
    err = max(float(np.max(np.abs(k - r)) / max(float(np.max(np.abs(r))), 1e-30)) for k, r in pairs)
    if not np.all(np.isfinite(got)):
        err = float("inf")
    return _summary(kern, full, half, steps, err, sass, ttgir_loop_counts, ptx_loop_counts, "")


# ---- the decode tile's whole iteration, operands resident (--group decode) ----------------------------------------
DECODE_BM, DECODE_BN, DECODE_WARPS, DECODE_STAGES = 16, 64, 4, 3  # harness/kernels.py DECODE_CONFIG
DECODE_D = (64, 128, 256)
QUICK_DECODE_D = (64, 256)
PERTURB = 2.0 ** -14  # c_i = i * PERTURB on the QK dot's accumulator input
QPERT = 2.0 ** -10  # fa2_resident_qpert: q + (i & 7) * QPERT
#: (name, OP) in the order they run and are written
DECODE_VARIANTS = (("loop_resident", 0), ("fa2_resident", 1), ("fa2_resident_qpert", 2), ("vfa_resident", 3),
                   ("dots_resident", 4), ("qk_resident", 5), ("pv_resident", 6))
DECODE_WHAT = {
    0: "m = m*0.999 + 0.001 on the row vector (one FFMA): the loop overhead",
    1: "FA2 key-block iteration of the decode tile, K^T and V resident (loaded before the loop): qk = dot(q, kT, c_i) "
       "(c_i = i*2^-14 splat, so the dot stays in the loop), m_new = max(m, rowmax(qk)*scale), alpha = exp2(m - "
       "m_new), p = exp2(qk*scale - m_new), l = l*alpha + rowsum(p), acc = acc*alpha, m = m_new, "
       "acc = dot(p.to(fp16), v, acc)",
    2: "as fa2_resident with the perturbation on q: qk = dot(q + (i&7)*2^-10 in fp16, kT)",
    3: "VFA frozen-max iteration, K^T and V resident: qk = dot(q, kT, c_i), p = exp2(qk*scale - m) with m fixed "
       "before the loop, l = l + rowsum(p), acc = dot(p.to(fp16), v, acc)",
    4: "the iteration without softmax, K^T and V resident: qk = dot(q, kT, c_i), acc = dot((qk*scale).to(fp16), v, "
       "acc)",
    5: "the QK dot alone chained through its accumulator: s = dot(q, kT, s*0.5)",
    6: "the PV dot alone chained through the output accumulator: acc = dot(p16, v, acc), p16 fp16 [16, 64] made "
       "once before the loop",
}
#: kernels whose TTGIR + PTX loop is written out whole, and (with --sass) whose SASS loop body is
DECODE_IR_DUMPS = (("fa2_resident", 64), ("qk_resident", 64), ("pv_resident", 64))
DECODE_SASS_DUMPS = (("fa2_resident", 64), ("vfa_resident", 64))


@triton.jit(do_not_specialize=["STEPS"])
def _decode_kernel(Q, KT, V, OUT, T, qk_scale, STEPS, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr,
                   OP: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rd = tl.arange(0, D)
    q = tl.load(Q + rm[:, None] * D + rd[None, :])  # fp16 [BM, D]
    kt = tl.load(KT + rd[:, None] * BN + rn[None, :])  # fp16 [D, BN]
    v = tl.load(V + rn[:, None] * D + rd[None, :])  # fp16 [BN, D]
    s = tl.dot(q, kt)  # fp32 [BM, BN]
    m_i = tl.max(s, 1) * qk_scale
    if OP == 3:
        m_i = m_i + 0.5  # VFA's frozen max: above every score the loop makes (c_i stays under 0.125)
    l_i = tl.zeros([BM], dtype=tl.float32)
    acc = tl.zeros([BM, D], dtype=tl.float32)
    p16 = tl.math.exp2(s * qk_scale - m_i[:, None]).to(tl.float16)
    t0 = _clock()
    for it in range(STEPS):
        if OP == 0:
            m_i = m_i * 0.999 + 0.001
        elif OP == 5:
            s = tl.dot(q, kt, s * 0.5)
        elif OP == 6:
            acc = tl.dot(p16, v, acc)
        else:
            if OP == 2:
                dq = ((it & 7).to(tl.float32) * 0.0009765625).to(tl.float16)  # QPERT
                qk = tl.dot(q + dq, kt)
            else:
                c = tl.full([BM, BN], 0.0, tl.float32) + it.to(tl.float32) * 6.103515625e-05  # PERTURB
                qk = tl.dot(q, kt, c)
            if OP == 4:
                p = qk * qk_scale
                acc = tl.dot(p.to(tl.float16), v, acc)
            elif OP == 3:
                p = tl.math.exp2(qk * qk_scale - m_i[:, None])
                l_i = l_i + tl.sum(p, 1)
                acc = tl.dot(p.to(tl.float16), v, acc)
            else:
                m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
                alpha = tl.math.exp2(m_i - m_new)
                p = tl.math.exp2(qk * qk_scale - m_new[:, None])
                l_i = l_i * alpha + tl.sum(p, 1)
                acc = acc * alpha[:, None]
                m_i = m_new
                acc = tl.dot(p.to(tl.float16), v, acc)
    t1 = _clock()
    tl.store(T, t1 - t0)
    tl.store(OUT + rm[:, None] * D + rd[None, :], acc)
    tl.store(OUT + BM * D + rm, l_i)
    tl.store(OUT + BM * D + BM + rm, m_i)
    tl.store(OUT + BM * D + 2 * BM + rm, tl.sum(s, 1))


def decode_reference(op: int, q: np.ndarray, kt: np.ndarray, v: np.ndarray, scale: float,
                     steps: int) -> dict[str, np.ndarray]:
    """The decode kernel's recurrence in float64 (P rounded to fp16 before the PV product, as the kernel)."""
    q64, kt64, v64 = (x.astype(np.float64) for x in (q, kt, v))
    f16 = lambda x: x.astype(np.float16).astype(np.float64)  # noqa: E731
    s = q64 @ kt64
    m = s.max(axis=1) * scale
    if op == 3:
        m = m + 0.5
    l = np.zeros(q.shape[0])
    acc = np.zeros((q.shape[0], v.shape[1]))
    p16 = f16(np.exp2(s * scale - m[:, None]))
    for i in range(steps):
        if op == 0:
            m = m * 0.999 + 0.001
        elif op == 5:
            s = q64 @ kt64 + s * 0.5
        elif op == 6:
            acc = acc + p16 @ v64
        else:
            if op == 2:
                qk = f16(q64 + (i & 7) * QPERT) @ kt64
            else:
                qk = q64 @ kt64 + i * PERTURB
            if op == 4:
                acc = acc + f16(qk * scale) @ v64
            elif op == 3:
                p = np.exp2(qk * scale - m[:, None])
                l = l + p.sum(axis=1)
                acc = acc + f16(p) @ v64
            else:
                m_new = np.maximum(m, qk.max(axis=1) * scale)
                alpha = np.exp2(m - m_new)
                p = np.exp2(qk * scale - m_new[:, None])
                l = l * alpha + p.sum(axis=1)
                acc = acc * alpha[:, None] + f16(p) @ v64
                m = m_new
    return {"acc": acc, "l": l, "m": m, "s": s.sum(axis=1)}


#: what each variant's check compares
DECODE_CHECKED = {0: ("m",), 1: ("acc", "l", "m"), 2: ("acc", "l", "m"), 3: ("acc", "l"), 4: ("acc",), 5: ("s",),
                  6: ("acc",)}
DECODE_PTX_OPS = (("instr", None), ("mma.sync", r"\bmma\.sync"), ("wgmma", r"\bwgmma"),
                  ("bar.sync", r"\b(?:bar|barrier)\.sync\b"), ("shfl", r"\bshfl\.sync"),
                  ("st.shared", r"\bst\.shared"), ("ld.shared", r"\bld\.shared"), ("ldmatrix", r"\bldmatrix"),
                  ("stmatrix", r"\bstmatrix"), ("ld.global", r"\bld\.global"), ("st.global", r"\bst\.global"),
                  ("cp.async", r"\bcp\.async"), ("ld.local", r"\bld\.local"), ("st.local", r"\bst\.local"),
                  ("ex2", r"\bex2\.approx"), ("cvt.f16", r"\bcvt\.rn\.f16"), ("clock", r"%clock64"))


def decode_ptx_loop_counts(ptx: str) -> tuple[str, str]:
    """As ``ptx_loop_counts``, with the counts that tell where the decode iteration's operands come from."""
    lines = ptx.splitlines()
    parts, texts = [], []
    for k, (first, last) in enumerate(ptx_loops(ptx)):
        body = [ln.strip() for ln in lines[first:last + 1]]
        instrs = [ln for ln in body if ln.endswith(";") and not ln.startswith(("//", "."))]
        counts = []
        for name, pat in DECODE_PTX_OPS:
            n = len(instrs) if pat is None else sum(1 for ln in instrs if re.search(pat, ln))
            if n or name in ("instr", "mma.sync", "bar.sync", "shfl", "ld.shared", "st.shared", "ldmatrix",
                             "ld.global", "cp.async", "ex2"):
                counts.append(f"{name} {n}")
        parts.append(f"loop {k + 1} ({', '.join(counts)})")
        texts.append(f"// PTX loop {k + 1}: lines {first + 1}-{last + 1}\n" + "\n".join(lines[first:last + 1]))
    return ("; ".join(parts) or "no loop found in the PTX"), "\n\n".join(texts)


def decode_ttgir_loop_counts(loop: str) -> str:
    def n(pat: str) -> int:
        return len(re.findall(pat, loop))

    loads = [ln for ln in loop.splitlines() if "ttg.local_load" in ln]
    a_op = sum(1 for ln in loads if "opIdx = 0" in ln)
    b_op = sum(1 for ln in loads if "opIdx = 1" in ln)
    return (f"dot {n(r'tt[.]dot ')}, reduce {n(r'tt[.]reduce.?[(]')}, convert_layout {n(r'convert_layout')}, "
            f"local_alloc {n(r'local_alloc')}, local_load {len(loads)} (to dot operand A {a_op}, B {b_op}), "
            f"local_store {n(r'local_store')}, load {n(r'tt[.]load ')}, exp2 {n(r'math[.]exp2')}")


def measure_decode(op: int, d: int, steps: int, reps: int, seed: int, sass: bool = False) -> dict:
    bm, bn = DECODE_BM, DECODE_BN
    g = torch.Generator().manual_seed(seed)
    q_cpu = (torch.rand(bm, d, generator=g) * 2 - 1).to(torch.float16)
    kt_cpu = (torch.rand(d, bn, generator=g) * 2 - 1).to(torch.float16)
    v_cpu = (torch.rand(bn, d, generator=g) * 2 - 1).to(torch.float16)
    scale = float(d ** -0.5 * 1.4426950408889634)  # softmax scale times log2(e), as the attention kernels
    q, kt, v = q_cpu.cuda(), kt_cpu.cuda(), v_cpu.cuda()
    out = torch.full((bm * d + 3 * bm,), float("nan"), device="cuda", dtype=torch.float32)
    t = torch.zeros(1, device="cuda", dtype=torch.int64)

    def launch(n: int):
        k = _decode_kernel[(1,)](q, kt, v, out, t, scale, n, BM=bm, BN=bn, D=d, OP=op, num_warps=DECODE_WARPS,
                                 num_stages=DECODE_STAGES)
        torch.cuda.synchronize()
        return k, int(t.item())

    kern, full, half = _timed(launch, steps, reps)
    out.fill_(float("nan"))
    launch(steps)  # the result checked below is of a STEPS launch
    got_all = out.cpu().double().numpy()
    got = {"acc": got_all[:bm * d].reshape(bm, d), "l": got_all[bm * d:bm * d + bm],
           "m": got_all[bm * d + bm:bm * d + 2 * bm], "s": got_all[bm * d + 2 * bm:]}
    ref = decode_reference(op, q_cpu.numpy(), kt_cpu.numpy(), v_cpu.numpy(), scale, steps)
    errs = []
    for key in DECODE_CHECKED[op]:
        k, r = got[key], ref[key]
        errs.append(float(np.max(np.abs(k - r)) / max(float(np.max(np.abs(r))), 1e-30)) if np.all(np.isfinite(k))
                    else float("inf"))
    res = _summary(kern, full, half, steps, max(errs), sass, decode_ttgir_loop_counts, decode_ptx_loop_counts,
                   " in all")
    res["checked"] = "+".join(DECODE_CHECKED[op])
    return res


def _only(cases: list, only: str, name) -> list:
    """The cases ``--only`` names (comma-separated; all if empty); a name that is no case of the group is an error."""
    if not only:
        return cases
    keep = set(only.split(","))
    unknown = keep - {name(c) for c in cases}
    if unknown:
        raise SystemExit(f"error: --only: {sorted(unknown)[0]!r} is no row of this group (names without _cycles, "
                         f"e.g. {name(cases[0])})")
    return [c for c in cases if name(c) in keep]


def softmax_cases(quick: bool, only: str = "") -> list[tuple[str, int, int, int, int]]:
    """(variant, op, BM, BN, warps) of the softmax group."""
    cases = [(name, op, bm, bn, 4) for bm, bn in (QUICK_TILES if quick else TILES) for name, op in VARIANTS]
    # one warp with BM = 16: the row inside one warp; BN = 16 and 32 give each thread the elements a thread of the
    # 4-warp 16x64 and 16x128 tiles holds, so the difference is the cross-warp part alone
    for bn in ((16, 64) if quick else WITHIN_WARP_BN):
        cases += [(name, op, 16, bn, 1) for name, op in WITHIN_WARP]
    cases += [(name, op, bm, bn, 8) for bm, bn in EIGHT_WARPS_TILES for name, op in EIGHT_WARPS]
    return _only(cases, only, lambda c: f"{c[0]}_bm{c[2]}_bn{c[3]}")


def decode_cases(quick: bool, only: str = "") -> list[tuple[str, int, int]]:
    """(variant, op, D) of the decode group."""
    cases = [(name, op, d) for d in (QUICK_DECODE_D if quick else DECODE_D) for name, op in DECODE_VARIANTS]
    return _only(cases, only, lambda c: f"{c[0]}_bm{DECODE_BM}_bn{DECODE_BN}_d{c[2]}")


def run_decode(a, out: str, table, log, sidecar, clocks, steps: int, reps: int) -> dict:
    """The --group decode cases; returns {(name, d): result}."""
    cases = decode_cases(a.quick, a.only)
    results: dict[tuple[str, int], dict] = {}
    summary, sass_dumps = [], []
    t_start = time.time()
    for i, (name, op, d) in enumerate(cases):
        if time.time() - t_start > a.budget_s:
            log(f"budget {a.budget_s:.0f} s spent: skipped {name} d{d} and {len(cases) - i - 1} more")
            break
        try:
            r = measure_decode(op, d, steps, reps, seed=20261127 + d, sass=a.sass)
        except Exception as e:  # noqa: BLE001 - a failed kernel is logged, the run goes on
            log(f"{name} d{d} failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
            continue
        results[(name, d)] = r
        check = "ok" if r["err"] < 1e-2 else "CHECK FAILED"
        row = f"{name}_bm{DECODE_BM}_bn{DECODE_BN}_d{d}"
        notes = (f"{DECODE_WHAT[op]}; BM {DECODE_BM}, BN {DECODE_BN}, D {d}, fp16 operands, fp32 accumulators; "
                 f"{DECODE_WARPS} warps, num_stages {DECODE_STAGES}, 1 program; TTGIR {r['layout']} ({r['mma']}); "
                 f"{steps} steps, %clock64 span / steps (warp 0), median of {reps} launches ({r['lo']:.2f}-"
                 f"{r['hi']:.2f}, spread {r['spread_pct']:.2f}%); slope {r['slope']:.2f} cycles/iter from "
                 f"span({steps}) - span({steps // 2}); {r['regs']} regs, {r['spills']} spills; TTGIR loop: "
                 f"{r['ttgir_loop']}; PTX {r['ptx_loop']}; "
                 + (f"SASS {r['sass_loop']}; " if r["sass_loop"] else "")
                 + f"{r['checked']} vs float64 recurrence max rel err {r['err']:.1e} ({check})")
        table.add({"name": f"{row}_cycles", "value": r["cycles"], "unit": "cycles/iter", "notes": notes})
        sidecar(False)
        log(f"{name:20s} d{d:<4d}: {r['cycles']:8.2f} cycles/iter (spread {r['spread_pct']:.2f}%, slope "
            f"{r['slope']:.2f}) {r['layout']}; regs {r['regs']} spills {r['spills']}; err {r['err']:.1e} {check}")
        log(f"    TTGIR loop: {r['ttgir_loop']}; PTX {r['ptx_loop']}")
        if r["sass_loop"]:
            log(f"    SASS {r['sass_loop']}")
        summary.append(f"{row} (num_warps={DECODE_WARPS}, num_stages={DECODE_STAGES})\n  layout: {r['layout']}\n"
                       f"  {r['mma']}\n  registers {r['regs']}, spills {r['spills']}\n  TTGIR loop: {r['ttgir_loop']}\n"
                       f"  PTX {r['ptx_loop']}\n" + (f"  SASS {r['sass_loop']}\n" if r["sass_loop"] else ""))
        if (name, d) in DECODE_SASS_DUMPS and r["sass_text"]:
            sass_dumps.append(f"// {row}: {r['cycles']:.2f} cycles/iter\n// {r['sass_loop']}\n{r['sass_text']}\n")
        if (name, d) in DECODE_IR_DUMPS and r["ttgir"]:
            with open(os.path.join(out, f"ir_{name}_d{d}.txt"), "w") as f:
                f.write(f"// {row}, num_warps={DECODE_WARPS}: TTGIR, then the PTX loop bodies\n\n")
                f.write(scrub_paths(r["ttgir"] + "\n\n" + r["ptx_text"]) + "\n")
    t_end = time.time()
    mhz = clocks.sm_clocks(t_start, t_end)
    if mhz and results:
        clk = statistics.median(mhz)
        log(f"SM clock during the group (nvidia-smi): median {clk:.0f} MHz over {len(mhz)} samples "
            f"({min(mhz):.0f}-{max(mhz):.0f})")
        for (name, d), r in results.items():
            table.add({"name": f"{name}_bm{DECODE_BM}_bn{DECODE_BN}_d{d}_ns", "value": r["cycles"] / clk * 1e3,
                       "unit": "ns/iter",
                       "notes": f"{name}_bm{DECODE_BM}_bn{DECODE_BN}_d{d}_cycles over the median SM clock nvidia-smi "
                                f"reported during the group's run: {clk:.0f} MHz ({len(mhz)} samples, "
                                f"{min(mhz):.0f}-{max(mhz):.0f} MHz)"})
        sidecar(False)
    else:
        log("no nvidia-smi SM clock sample during the group: no ns rows")
    with open(os.path.join(out, "ir_summary.txt"), "w") as f:
        f.write("".join(summary))
    if sass_dumps:
        with open(os.path.join(out, "sass_loops.txt"), "w") as f:
            f.write("\n".join(sass_dumps))
    names = [n for n, _ in DECODE_VARIANTS]
    log("cycles per iteration, decode tile 16 x 64, 4 warps (median; loop overhead not subtracted):")
    log("D    " + "".join(f"{n.replace('_resident', ''):>12s}" for n in names))
    for d in dict.fromkeys(d for _, _, d in cases):  # the head dims measured, in order
        cells = "".join(f"{results[(n, d)]['cycles']:12.1f}" if (n, d) in results else f"{'-':>12s}" for n in names)
        log(f"{d:<4d} {cells}")
    return results


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m harness.oplatency", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for micro.csv and the rest (created)")
    ap.add_argument("--group", choices=("softmax", "decode"), default="softmax",
                    help="softmax: the row operations on six tiles (default); decode: the decode tile's whole "
                         "key-block iteration (both dots and the softmax) with K^T and V resident, D 64/128/256")
    ap.add_argument("--quick", action="store_true", help="two tiles (decode: D 64 and 256), 256 steps, 3 launches "
                    "(smoke run)")
    ap.add_argument("--steps", type=int, default=0, help="loop iterations per launch (default 2048; quick 256)")
    ap.add_argument("--reps", type=int, default=0, help="launches per kernel (default 5; quick 3)")
    ap.add_argument("--sass", action="store_true", help="also disassemble each kernel (nvidia nvdisasm/cuobjdump): "
                    "opcode counts of its SASS loop, and sass_loops.txt with the loop bodies of a few")
    ap.add_argument("--only", default="", help="comma-separated row names without _cycles (e.g. rowmax_bm64_bn64, "
                    "fa2_resident_bm16_bn64_d64): measure only these")
    ap.add_argument("--budget-s", type=float, default=200.0, help="wall-clock budget: kernels not started by then "
                    "are skipped (and logged)")
    a = ap.parse_args(argv[1:])
    steps = a.steps or (256 if a.quick else 2048)
    reps = a.reps or (3 if a.quick else 5)
    if steps < 2 or reps < 1:
        ap.error("--steps must be at least 2 and --reps at least 1")
    (decode_cases if a.group == "decode" else softmax_cases)(a.quick, a.only)  # a bad --only: before anything is written
    from harness.bench import ClockSampler, provenance
    from harness.rows import MICRO, CampaignLog, Table, chip_name, write_sidecar

    out = a.out
    log = CampaignLog(out, "harness.oplatency", argv)
    t_start = log.start
    if not torch.cuda.is_available():
        log("no CUDA device")
        return 1
    clocks = ClockSampler(os.path.join(out, "clocks_trace.txt"))
    timing_note = {"method": "%clock64 read by the kernel before and after its loop (harness.micro._clock); span "
                             "stored by the CTA's first thread; cycles per iteration = span / steps",
                   "steps": steps, "launches_per_kernel": reps,
                   "statistic": "median over launches; spread_pct = (max - min) / median * 100; slope = "
                                "(median span(steps) - median span(steps/2)) / (steps/2)",
                   "grid": "1 program alone on the GPU", "inputs": "a, b uniform in [0.5, 1) fp16 (seeded); s = a@b "
                   "(fp32 accumulator), rows scaled to sum to 1"}
    if a.group == "decode":
        timing_note["inputs"] = ("q [16, D], K^T [D, 64], V [64, D] uniform in [-1, 1) fp16 (seeded), loaded once "
                                 "before the loop; scale = D^-0.5 * log2(e)")
        timing_note["tile"] = (f"BLOCK_M {DECODE_BM}, BLOCK_N {DECODE_BN}, num_warps {DECODE_WARPS}, num_stages "
                               f"{DECODE_STAGES} (harness/kernels.py DECODE_CONFIG)")
    dev = torch.cuda.get_device_name(0)
    base = provenance(argv, timing_note, {"quick": a.quick, "chip": chip_name(dev), "group": a.group})
    base["command"] = log.command
    log(f"device {dev}, {base['sm_count']} SMs; driver {base['driver']}, cuda {base['cuda']}, torch {base['torch']}, "
        f"triton {base['triton']}; clocks at start {base['clocks']['read_at_start']}; clocks_locked false")
    table = Table(os.path.join(out, "micro.csv"), MICRO)
    about = {"about": "one row per (variant, tile): value = median SM cycles per loop iteration (loop overhead "
                      "included; subtract the loop_* row of the same tile and warps); notes: what the iteration "
                      "does, the MMA layout from the TTGIR, launches, spread, slope, registers, the PTX loop body's "
                      "instruction counts and the float64 check"}
    if a.group == "decode":
        about = {"about": "one row per (variant, head dim) of the decode tile's key-block iteration with K^T and V "
                          "resident: _cycles = median SM cycles per loop iteration (loop overhead included: "
                          "loop_resident is there to subtract), _ns = those cycles over the median nvidia-smi SM "
                          "clock of the run; notes: what the iteration does, the MMA layouts from the TTGIR, "
                          "launches, spread, slope, registers, the TTGIR and PTX loop bodies' counts and the float64 "
                          "check"}

    def sidecar(finished: bool) -> None:
        table.flush()
        write_sidecar(table.path, {"table": "micro.csv", **base, "finished": finished, "rows": len(table.rows),
                                   "elapsed_s": round(log.elapsed(), 1), "about": about})

    sidecar(False)
    if a.group == "decode":
        run_decode(a, out, table, log, sidecar, clocks, steps, reps)
        clocks.stop()
        sidecar(True)
        log(f"done in {time.time() - t_start:.0f} s, {len(table.rows)} rows")
        log.close()
        return 0
    cases = softmax_cases(a.quick, a.only)
    results: dict[tuple[str, int, int], dict] = {}
    summary = []
    sass_dumps = []
    for i, (name, op, bm, bn, warps) in enumerate(cases):
        if time.time() - t_start > a.budget_s:
            log(f"budget {a.budget_s:.0f} s spent: skipped {name} bm{bm} bn{bn} and {len(cases) - i - 1} more")
            break
        try:
            r = measure(op, bm, bn, warps, steps, reps, seed=20261126 + 1000 * bm + bn, sass=a.sass)
        except Exception as e:  # noqa: BLE001 - a failed kernel is logged, the run goes on
            log(f"{name} bm{bm} bn{bn} w{warps} failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
            continue
        results[(name, bm, bn)] = r
        path = "mma.sync" if "v2" in r["layout"] else ("wgmma" if "v3" in r["layout"] else "?")
        check = "ok" if r["err"] < 1e-2 else "CHECK FAILED"
        notes = (f"{WHAT[op]}; {warps} warp{'s' if warps > 1 else ''}, 1 program; {path}: TTGIR {r['layout']} "
                 f"({r['mma']}); {steps} steps, %clock64 span / steps (warp 0), median of {reps} launches "
                 f"({r['lo']:.2f}-{r['hi']:.2f}, spread {r['spread_pct']:.2f}%); slope {r['slope']:.2f} cycles/iter "
                 f"from span({steps}) - span({steps // 2}); {r['regs']} regs, {r['spills']} spills; TTGIR loop: "
                 f"{r['ttgir_loop']}; PTX {r['ptx_loop']}; "
                 + (f"SASS {r['sass_loop']}; " if r["sass_loop"] else "")
                 + f"vs float64 recurrence max rel err {r['err']:.1e} ({check})")
        table.add({"name": f"{name}_bm{bm}_bn{bn}_cycles", "value": r["cycles"], "unit": "cycles/iter",
                   "notes": notes})
        sidecar(False)
        log(f"{name:24s} bm{bm:<3d} bn{bn:<3d} w{warps}: {r['cycles']:8.2f} cycles/iter "
            f"(spread {r['spread_pct']:.2f}%, slope {r['slope']:.2f}) {path} {r['layout']}; regs {r['regs']} "
            f"spills {r['spills']}; err {r['err']:.1e} {check}")
        log(f"    TTGIR loop: {r['ttgir_loop']}; PTX {r['ptx_loop']}")
        if r["sass_loop"]:
            log(f"    SASS {r['sass_loop']}")
        summary.append(f"{name}_bm{bm}_bn{bn} (num_warps={warps})\n  layout: {r['layout']}\n  {r['mma']}\n"
                       f"  registers {r['regs']}, spills {r['spills']}\n  TTGIR loop: {r['ttgir_loop']}\n"
                       f"  PTX {r['ptx_loop']}\n" + (f"  SASS {r['sass_loop']}\n" if r["sass_loop"] else ""))
        if (name, bm, bn, warps) in SASS_DUMPS and r["sass_text"]:
            sass_dumps.append(f"// {name} bm{bm} bn{bn}, num_warps={warps}: {r['cycles']:.2f} cycles/iter\n"
                              f"// {r['sass_loop']}\n{r['sass_text']}\n")
        if (name, bm, bn, warps) in IR_DUMPS and r["ttgir"]:
            with open(os.path.join(out, f"ir_{name}_bm{bm}_bn{bn}.txt"), "w") as f:
                f.write(f"// {name} bm{bm} bn{bn}, num_warps={warps}: TTGIR, then the PTX loop bodies\n\n")
                f.write(scrub_paths(r["ttgir"] + "\n\n" + r["ptx_text"]) + "\n")
    with open(os.path.join(out, "ir_summary.txt"), "w") as f:
        f.write("".join(summary))
    if sass_dumps:
        with open(os.path.join(out, "sass_loops.txt"), "w") as f:
            f.write("\n".join(sass_dumps))
    clocks.stop()
    sidecar(True)

    tiles = QUICK_TILES if a.quick else TILES
    names = [n for n, _ in VARIANTS]
    log("cycles per iteration (median; loop overhead not subtracted):")
    log("tile      " + "".join(f"{n:>14s}" for n in names))
    for bm, bn in tiles:
        cells = "".join(f"{results[(n, bm, bn)]['cycles']:14.1f}" if (n, bm, bn) in results else f"{'-':>14s}"
                        for n in names)
        log(f"{bm:>3d}x{bn:<5d} {cells}")
    for bn in ((16, 64) if a.quick else WITHIN_WARP_BN):
        cells = ", ".join(f"{n} {results[(n, 16, bn)]['cycles']:.1f}" for n, _ in WITHIN_WARP
                          if (n, 16, bn) in results)
        log(f"num_warps=1 16x{bn}: {cells or 'not measured'}")
    for bm, bn in EIGHT_WARPS_TILES:
        cells = ", ".join(f"{n} {results[(n, bm, bn)]['cycles']:.1f}" for n, _ in EIGHT_WARPS if (n, bm, bn) in results)
        log(f"num_warps=8 {bm}x{bn}: {cells or 'not measured'}")
    log(f"done in {time.time() - t_start:.0f} s, {len(table.rows)} rows")
    log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
