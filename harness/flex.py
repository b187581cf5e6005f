"""PyTorch FlexAttention's forward, timed as the other kernels are: ``python3 -m harness.flex --out DIR``.

FlexAttention (``torch.nn.attention.flex_attention``) is a Triton template that Inductor compiles per mask and
score function; it is what a user of ``torch.compile`` runs for custom masks. Each case calls
``torch.compile(flex_attention, dynamic=False)`` on fresh inputs: no score function, no mask (``block_mask=None``)
or a causal ``mask_mod`` made into a block mask by ``create_block_mask`` (built before the timing, as a model
layer builds it once per shape), ``enable_gqa`` where K/V heads are fewer; Inductor's default tile choice (no
autotuning, the out-of-the-box behaviour). One query per head (``seq_len_q`` 1) is decode: Inductor then lowers to
its flex-decoding template (split over keys).

Output, in ``--out``: ``attention.csv`` (the project's validation schema, kernel ``flex_attention``; the same timer as
``harness.run``: CUDA events, L2 flushed, median; ``--units``: ``units.csv`` and ``units_decode.csv`` instead),
``checks.csv`` (each case's output against SDPA's on the same inputs, its default backend choice: relative L2 error,
and the compile time), ``skipped.csv``, ``profile.csv`` (the CUDA kernels each call launches), sidecars with the
provenance, ``clocks_trace.txt``, ``kernels.csv`` (every compiled Triton kernel of the run: name, warps, stages,
shared memory, registers, spills), ``kernel_constants.csv`` (each template kernel's block sizes, split and stages as
its Inductor source names them) and ``flex_source.tar.gz`` (the installed torch's flex lowering, templates and tile
heuristics, so the kernel description can cite them).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import sys
import tarfile
import time

from harness.asm_dump import cache_kernels, write_summary
from harness.rows import (ATTENTION, BLIND_BATCHES, BLIND_DECODE, BLIND_DECODE_KEYS, BLIND_HEADS, BLIND_SEQS, CHECKS,
                          PROFILE, SKIPPED, Table, chip_name, write_rows, write_sidecar)

KERNEL = "flex_attention"
TOL = {"fp16": 3e-3, "bf16": 1e-2}


def grid(quick: bool = False) -> list[tuple[int, int, int, int, int, int, bool]]:
    """Cases as (batch, heads, kv_heads, seq_len_q, seq_len, head_dim, causal): the FlashAttention-3 regime (16K
    tokens in all) with and without GQA, batch-1 prefill, odd lengths, head dims 256 and 96 (Inductor's default tile
    for a head dim its table lacks), and one-query decode; the
    groups taken in turn, so a run cut short by its budget still has some of each."""
    seqs = (1024, 4096) if quick else (512, 1024, 2048, 4096, 8192, 16384)
    groups = [[(max(1, 16384 // n), h, hk, n, n, d, causal) for n in seqs]
              for d in (64, 128) for causal in (False, True) for h, hk in ((2048 // d, 2048 // d), (32, 8))]
    if not quick:
        groups.append([(1, 32, 8, n, n, 128, c) for n in (1000, 3000, 32768) for c in (False, True)]
                      + [(4, 28, 4, n, n, 128, True) for n in (257, 2048)])
        groups.append([(16384 // n, 8, 8, n, n, 256, c) for n in (1024, 4096, 16384) for c in (False, True)])
        groups.append([(16384 // n, 32, 8, n, n, 96, c) for n in (1024, 4096, 16384) for c in (False, True)])
        groups.append([(b, 32, hk, 1, n, 128, False) for b in (1, 8, 64) for hk in (8, 32) for n in (2048, 8192, 32768)
                       if b * hk * n * 128 * 4 <= 6 << 30])
    out = []
    for i in range(max(len(g) for g in groups)):
        out += [g[i] for g in groups if i < len(g)]
    return out


def blind_grid(quick: bool = False) -> list[tuple[int, int, int, int, int, int, bool]]:
    """Shapes no campaign but the blind ones holds (``rows.BLIND_*``, as ``attention.blind_grid``), as (batch, heads,
    kv_heads, seq_len_q, seq_len, head_dim, causal): prefill at head dims 64 and 128, two batch and head configs a
    length and mask (in turn, at most 2^21 query rows x heads), and one-query decode against 1,500, 6,000 and 24,000
    keys."""
    combos = [(b, h, hk) for b in BLIND_BATCHES for h, hk in BLIND_HEADS]
    out: list[tuple[int, int, int, int, int, int, bool]] = []
    turn = 0
    for d in (64, 128):
        for n in ((1536,) if quick else BLIND_SEQS):
            for c in (False, True):
                fits = [x for x in combos if x[0] * x[1] * n <= 1 << 21]
                for _ in range(2):
                    b, h, hk = fits[turn % len(fits)]
                    turn += 1
                    if (b, h, hk, n, n, d, c) not in out:
                        out.append((b, h, hk, n, n, d, c))
    for d in (128, 64):
        for sk in ((6000,) if quick else BLIND_DECODE_KEYS):
            out += [(b, h, hk, 1, sk, d, False) for b, h, hk in BLIND_DECODE]
    return out


#: lengths on a multiple of 128 and just off one (the lowering's IS_DIVISIBLE: both lengths multiples of 128), as pairs
EDGE_LENGTHS = ((1024, 1000), (2048, 2000), (4096, 4000), (4096, 4100))


def edges_grid(quick: bool = False) -> list[tuple[int, int, int, int, int, int, bool]]:
    """Pairs of lengths on and just off a multiple of 128 as (batch, heads, kv_heads, seq_len_q, seq_len, head_dim,
    causal), the pair's two lengths at the same batch and heads, so what the bounds check costs a launch off the
    multiple is read from the pair: head dims 64 and 128, causal and not, batch 8 x 16 heads, prefill (queries as many
    as keys); each pair in a row, so a budget cut keeps whole pairs."""
    pairs = EDGE_LENGTHS[:1] if quick else EDGE_LENGTHS
    return [(8, 16, 16, n, n, d, c) for d in (64, 128) for c in (False, True) for pair in pairs for n in pair]


def decode_grid(quick: bool = False) -> list[tuple[int, int, int, int, int, int, bool]]:
    """A one-query decode sweep as (batch, heads, kv_heads, seq_len_q, seq_len, head_dim, causal), head dim 128,
    8,192 keys, 8 K/V heads: the GQA group (1-8 query heads a K/V head) at batch 1 and 2, and the batch (1-16) at
    groups of 1, 4 and 5, so the programs (batch x K/V heads) and the group vary apart."""
    groups = (1, 4, 5) if quick else (1, 2, 3, 4, 5, 6, 8)
    batches = (1, 2) if quick else (1, 2, 4, 8, 16)
    cases = [(b, g * 8, 8, 1, 8192, 128, False) for b in (1, 2) for g in groups]
    cases += [(b, g * 8, 8, 1, 8192, 128, False) for g in (1, 4, 5) for b in batches]
    return list(dict.fromkeys(cases))


#: the off-multiple units sweep's lengths (each a whole number of 128-row query blocks short of a multiple: 1, 2, 6, 8,
#: 16, 24 and 32 blocks, 1,056 in all at 1,056, 528, 176, 132, 66, 44 and 33 heads)
OFF_LENGTHS = (120, 250, 700, 1000, 2000, 3000, 4000)


def units_grid(quick: bool = False, off_multiple: bool = False) -> list[tuple[int, int, int, int, int, int, bool]]:
    """The units sweeps of ``harness.run --phases units,units_decode`` as (batch, heads, kv_heads, seq_len_q, seq_len,
    head_dim, causal): 1,056 query blocks of 128 rows (prefill) and 528 one-query heads (decode) at a growing K/V
    length, so each CTA walks more key blocks while the CTA count stays (``experiments/real_chips/unit_cost.py``).
    ``off_multiple``: the prefill sweep alone, at ``OFF_LENGTHS`` (lengths off a multiple of 128: the kernel compiled
    without ``IS_DIVISIBLE``, its bounds checked in every key block)."""
    dims = (128,) if quick else (64, 128, 256)
    if off_multiple:
        return [(1, 1056 // -(-n // 128), 1056 // -(-n // 128), n, n, d, False) for d in dims
                for n in ((700, 1000) if quick else OFF_LENGTHS)]
    prefill = [(1, 1056 * 128 // n, 1056 * 128 // n, n, n, d, False) for d in dims
               for n in ((512, 1024) if quick else (128, 256, 512, 1024, 2048, 4096))]
    decode = [(1, 528, 528, 1, n, d, False) for d in dims
              for n in ((512, 1024) if quick else (512, 1024, 2048, 4096, 8192, 16384))]
    return prefill + decode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output folder (created)")
    ap.add_argument("--quick", action="store_true", help="a few cases (smoke test)")
    ap.add_argument("--dtypes", default="fp16", help="input formats, comma-separated (fp16, bf16)")
    ap.add_argument("--budget-s", type=float, default=480, help="stop starting cases after this many seconds")
    ap.add_argument("--units", action="store_true",
                    help="instead of the grid, the units sweeps (harness/attention.py units_grid and "
                         "units_decode_grid: a fixed number of query blocks, growing K/V) into units.csv and "
                         "units_decode.csv, non-causal, no mask")
    ap.add_argument("--off-multiple", action="store_true",
                    help="with --units: the prefill sweep alone, at lengths off a multiple of 128 (OFF_LENGTHS: the "
                         "kernel FlexAttention compiles where the lengths are not divisible), into units.csv")
    ap.add_argument("--grid", choices=("main", "blind", "decode", "edges"), default="main",
                    help="main: the campaign grid; blind: shapes no campaign but the blind ones holds (blind_grid); "
                         "decode: a one-query decode sweep over the GQA group and the batch (decode_grid); edges: "
                         "lengths on and just off a multiple of 128, in pairs (edges_grid)")
    ap.add_argument("--once", action="store_true",
                    help="call each case once after its check, untimed (a run to profile under Nsight Compute)")
    a = ap.parse_args(argv)
    if a.units and a.grid != "main":
        ap.error("--units runs the sweeps in place of a grid: give it without --grid")
    if a.off_multiple and not a.units:
        ap.error("--off-multiple chooses the units sweep's lengths: give it with --units")
    dtypes = a.dtypes.split(",")
    bad = [d for d in dtypes if d not in TOL]
    if bad:
        ap.error(f"--dtypes: {bad[0]!r} is not one of {', '.join(TOL)}")

    import torch
    import torch.nn.functional as F
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    from harness.bench import ClockSampler, Timer, provenance

    t0 = time.monotonic()
    os.makedirs(a.out, exist_ok=True)
    chip = chip_name(torch.cuda.get_device_name(0))
    timer = Timer(flush=True)
    timer.sleep_cycles = 2_000_000  # ~1 ms head start: a compiled graph's host side (guards, 1-5 launches) stays ahead
    clocks = ClockSampler(os.path.join(a.out, "clocks_trace.txt"))
    tables = {"attention": Table(os.path.join(a.out, "attention.csv"), ATTENTION),
              "checks": Table(os.path.join(a.out, "checks.csv"), CHECKS),
              "skipped": Table(os.path.join(a.out, "skipped.csv"), SKIPPED),
              "profile": Table(os.path.join(a.out, "profile.csv"), PROFILE)}
    note = {"method": "CUDA events around each call, harness/bench.py Timer (L2 flushed before every call, GPU held "
                      "~1 ms by torch.cuda._sleep(2e6) so the host has queued the whole compiled graph); median over "
                      "the reps; the block mask is built before the timing",
            "warmups": timer.warmups, "statistic": "median; spread_pct = (p80 - p20) / median * 100"}
    base = provenance(["harness.flex", *(argv if argv is not None else [])], note,
                      {"chip": chip, "compile": "torch.compile(flex_attention, dynamic=False), Inductor defaults"})
    base["command"] = "python3 -m harness.flex " + " ".join(argv if argv is not None else sys.argv[1:])
    about = {"attention": "flex_attention forward, median kernel time per call (us); no score_mod; causal: a "
                          "causal mask_mod as a block mask, else no mask (decode rows are all unmasked); GQA through "
                          "enable_gqa",
             "checks": "each case's output against SDPA (its default backend choice) on the same inputs: "
                       "relative L2 error; block_m and block_n are 1 (the tiles are in kernel_constants.csv); "
                       "compile_s: the first call's wall time",
             "skipped": "cases not run and why",
             "profile": "torch.profiler around 3 calls of each case after its timing (warm L2, no flush): every "
                        "CUDA kernel the call launched (the block-mask and output set-up kernels of the compiled "
                        "graph, the attention template, flex decoding's reduction), launches and GPU us per call"}

    def sidecars(finished: bool) -> None:
        for name, t in tables.items():
            t.flush()
            write_sidecar(t.path, {"table": f"{name}.csv", **base, "finished": finished, "rows": len(t.rows),
                                   "about": about[name]})

    for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, name):  # one compile per shape: never fall back to eager after a few
            setattr(torch._dynamo.config, name, 100_000)
    compiled = torch.compile(flex_attention, dynamic=False)

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f}s] {msg}", flush=True)

    if a.units:  # the sweeps' own tables in place of attention.csv
        del tables["attention"]
        for name in ("units", "units_decode"):
            tables[name] = Table(os.path.join(a.out, f"{name}.csv"), ATTENTION)
            about[name] = f"the {name} sweep: {about['attention']}"
        cases = units_grid(a.quick, a.off_multiple)
    else:
        cases = {"main": grid, "blind": blind_grid, "decode": decode_grid, "edges": edges_grid}[a.grid](a.quick)
    sidecars(False)
    log(f"{chip}: {len(cases)} cases x {len(dtypes)} formats; torch {torch.__version__}")
    try:
        for i, (b, h, hk, sq, sk, d, c) in enumerate(cases):
            mode = "decode" if sq == 1 else "prefill"
            for dt in dtypes:
                row = {"dtype": dt, "head_dim": d, "causal": c, "seq_len": sk, "batch": b, "heads": h,
                       "kv_heads": hk, "seq_len_q": sq}
                table = ("units" if mode == "prefill" else "units_decode") if a.units else "attention"
                if time.monotonic() - t0 > a.budget_s:
                    tables["skipped"].add({"table": table, "kernel": KERNEL, **row, "mode": mode,
                                           "reason": f"over the run's budget of {a.budget_s:.0f} s"})
                    continue
                g = torch.Generator(device="cuda")
                g.manual_seed(1000 + i)
                td = {"fp16": torch.float16, "bf16": torch.bfloat16}[dt]
                q, k, v = (torch.randn(s, device="cuda", generator=g, dtype=torch.float32).to(td)
                           for s in ((b, h, sq, d), (b, hk, sk, d), (b, hk, sk, d)))
                try:
                    mask = create_block_mask(causal, None, None, sq, sk, device="cuda") if c else None
                    kw = {"block_mask": mask, "enable_gqa": hk != h}
                    start = time.monotonic()
                    out = compiled(q, k, v, **kw)
                    torch.cuda.synchronize()
                    compile_s = time.monotonic() - start
                    ref = F.scaled_dot_product_attention(q, k, v, is_causal=c, enable_gqa=hk != h)
                    err = float((out.float() - ref.float()).norm() / ref.float().norm())
                    tables["checks"].add({"kernel": KERNEL, **row, "block_m": 1, "block_n": 1, "rel_l2": err,
                                          "tol": TOL[dt], "passed": err <= TOL[dt], "compile_s": round(compile_s, 2)})
                    if err > TOL[dt]:
                        raise RuntimeError(f"output differs from SDPA's: relative L2 error {err:.2e}")
                    if a.once:
                        compiled(q, k, v, **kw)
                        torch.cuda.synchronize()
                        log(f"case {i} b{b} h{h}/{hk} q{sq} k{sk} d{d} {dt}: called once")
                        continue
                    t = timer.time(lambda: compiled(q, k, v, **kw))
                except Exception as e:  # noqa: BLE001 (a refused shape is recorded, the run goes on)
                    tables["skipped"].add({"table": table, "kernel": KERNEL, **row, "mode": mode,
                                           "reason": f"{type(e).__name__}: {str(e).splitlines()[0][:250]}"})
                    log(f"case {i} {dt}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                    continue
                _profile(lambda: compiled(q, k, v, **kw), tables["profile"], row)
                tables[table].add({"chip": chip, "kernel": KERNEL, **row, "mode": mode, "metric": "latency",
                                         "value": round(t.median_us, 3), "unit": "us",
                                         "spread_pct": round(t.spread_pct, 2), "reps": t.reps})
                log(f"case {i} b{b} h{h}/{hk} q{sq} k{sk} d{d} {'causal' if c else 'full'} {dt}: "
                    f"{t.median_us:.1f} us (compile {compile_s:.1f} s, err {err:.1e})")
            for t in tables.values():
                t.flush()
    finally:
        clocks.stop()
        sidecars(True)
        _kernels(a.out, log)
        _sources(torch, a.out, log)
    return 0


def _profile(call, table: Table, row: dict) -> None:
    """One row of ``table`` per CUDA kernel that ``call`` launches: launches and GPU microseconds per call."""
    from harness.bench import cuda_kernels

    case = {k: row[k] for k in ("batch", "heads", "kv_heads", "head_dim", "seq_len_q", "seq_len", "causal")}
    for launched in cuda_kernels(call, calls=3):
        table.add({"kernel": KERNEL, **case, **launched})


def _kernels(out: str, log) -> None:
    """``kernels.csv``: every compiled Triton kernel in the Triton cache (``asm_dump.cache_kernels``);
    ``kernel_constants.csv``: the Inductor sources' constants of each template kernel where they name them."""
    rows = cache_kernels(os.environ.get("TRITON_CACHE_DIR", os.path.expanduser("~/.triton/cache")))
    sources = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")
    constants = []
    pattern = re.compile(r"\b(BLOCK_M|BLOCK_N|SPARSE_Q_BLOCK_SIZE|SPARSE_KV_BLOCK_SIZE|SPLIT_KV|QK_HEAD_DIM|V_HEAD_DIM|"
                         r"num_stages|num_warps)\b\s*[:=]\s*(?:tl\.constexpr\s*=\s*)?['\"]?(\w+)")
    for path in sorted(glob.glob(os.path.join(sources, "**", "*.py"), recursive=True)) if sources else ():
        with open(path, errors="replace") as f:
            text = f.read()
        if "flex" not in text:
            continue
        for chunk in re.split(r"\n(?=@triton_heuristics)", text)[1:]:  # each kernel: its decorators, then its body
            name = re.search(r"def (triton_\w+)\(", chunk)
            if name and "BLOCK_M" in chunk:
                constants.append({"name": name.group(1), "source": os.path.basename(path),
                                  **dict(pattern.findall(chunk))})
    if rows:
        write_summary(os.path.join(out, "kernels.csv"), rows)
    if constants:
        columns = sorted({k for r in constants for k in r}, key=lambda k: (k not in ("name", "source"), k))
        write_rows(os.path.join(out, "kernel_constants.csv"), constants, columns)
    log(f"{len(rows)} compiled kernels, {len(constants)} Inductor template kernels with constants")


def _sources(torch, out: str, log) -> None:
    """``flex_source.tar.gz``: the installed torch's flex lowering and templates, and the template heuristics."""
    root = os.path.dirname(torch.__file__)
    names = [p for p in glob.glob(os.path.join(root, "_inductor", "**", "*"), recursive=True)
             if os.path.isfile(p) and ("flex" in os.path.relpath(p, root).lower()
                                        or "template_heuristics" in p)]
    names += [p for p in glob.glob(os.path.join(root, "nn", "attention", "flex_attention.py"))]
    with tarfile.open(os.path.join(out, "flex_source.tar.gz"), "w:gz") as tar:
        for p in sorted(set(names)):
            tar.add(p, arcname=os.path.relpath(p, root))
    log(f"flex_source.tar.gz: {len(set(names))} files")


if __name__ == "__main__":
    raise SystemExit(main())
