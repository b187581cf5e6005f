"""Measurement campaign on one CUDA GPU: ``python -m harness.run --out DIR [--quick] [--budget-s N]``.

Phases, in order (each case asks the budget first; what does not fit is recorded in skipped.csv):
pick tile configs (only with --pick-configs), compile + correctness checks (parallel workers),
microbenchmarks, FA3-regime attention, decode, numerics, prefill breadth grid (head dim 64/128),
interleaved 2:1 with extra head dims (SDPA 80/96/256, Triton 256). Every table is rewritten atomically after each case,
so a run stopped at any point leaves complete CSVs; sidecars say whether the run finished.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings

import torch

from harness import attention as A
from harness import kernels
from harness.bench import Budget, ClockSampler, Timer, provenance, time_pair
from harness.rows import (ATTENTION, BLIND2, BLIND3, BLIND4, BLIND5, BLIND6, BLIND7, BLIND8, CALLS, CHAIN, CHECKS, MICRO, NUMERICS, PAIRS, PROFILE, SKIPPED, Table, chip_name,
                          write_sidecar)
from harness.worker import format_configs, parse_configs

CANDIDATES = {64: [(128, 64, 4, 3), (128, 128, 8, 3), (128, 64, 8, 3)],
              128: [(128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 4, 3)],
              256: [(64, 64, 4, 2), (128, 64, 8, 2), (64, 32, 4, 3)]}


PHASES = ("checks", "micro", "loop", "stages", "issue", "latency", "profile", "calls", "floor", "units", "units_decode",
          "pairs", "chain", "fa3", "decode", "numerics", "prefill", "blind", "blind2", "blind3",
          "blind4", "blind5", "blind6", "blind7", "blind8")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m harness.run", description=__doc__)
    ap.add_argument("--out", required=True, help="folder for the tables (created)")
    ap.add_argument("--quick", action="store_true", help="a small version of every phase (smoke run)")
    ap.add_argument("--budget-s", type=float, default=480.0, help="wall-clock budget of the whole run")
    ap.add_argument("--configs", default="", help="tile configs 'D=BM,BN,warps,stages;...' (default: built-in)")
    ap.add_argument("--vfa-loop", type=int, default=1, choices=(0, 1),
                    help="VFA/VSA loop form: 1 one pipelined loop over the visit order, 0 special blocks + 4 loops")
    ap.add_argument("--pick-configs", action="store_true", help="time candidate tile configs first, keep the best")
    ap.add_argument("--workers", type=int, default=8, help="parallel compile/check processes")
    ap.add_argument("--chain-against", default="triton_vfa_attn,triton_dots",
                    help="the kernels the chain phase times against Triton FA2, comma-separated (of triton_vfa_attn, "
                         "triton_vsa_attn, triton_dots)")
    ap.add_argument("--units-kernels", default="triton_fa2",
                    help="the kernels the units phase times, comma-separated (of triton_fa2, sdpa_flash, sdpa_cudnn, "
                         "sdpa_efficient; SDPA's in fp16 only)")
    ap.add_argument("--chain-rows", type=int, default=128, help="query rows per head in the chain phase (128: the "
                    "prefill tile; 16 or fewer: the decode tile)")
    ap.add_argument("--phases", default="checks,micro,fa3,decode,numerics,prefill",
                    help="comma-separated; also 'loop' (the loop without its softmax at every head dim and format, "
                         "into micro.csv), 'stages' (the loop without its softmax, Triton FA2 and VFA's kernel at "
                         "several K/V stage counts, query rows and key blocks per head dim, into micro.csv), 'latency' "
                         "(pointer-chase L2/HBM latency, into micro.csv), 'issue' (exp2/FFMA "
                         "overlap and dependent latencies, into micro.csv), 'floor' (Triton FA2, VFA's kernel and the loop "
                         "without its softmax on the FA3-regime grid), 'units' (Triton FA2, or the kernels --units-kernels names, "
                         "at a fixed CTA count, growing K/V), 'units_decode' (the same with one query per head: the "
                         "decode tile), "
                         "'pairs' (Triton FA2 and VFA's kernel timed in alternation on the FA3-regime grid, pairs.csv), 'chain' "
                         "(FA2 against VFA's kernel and against its loop without the softmax, with 1 CTA, one per SM and two per "
                         "SM at a growing K/V length, chain.csv), 'blind' (shapes no other grid holds: other lengths, batches, head "
                         "configs and head dims, and 2- and 8-query decode; SDPA in fp16 and bf16, Triton in fp16 and "
                         "fp8), 'blind2' (a second such grid, rows.BLIND2: other lengths, batches 1-24, GQA 8:1 and "
                         "4:1, head dim 256 at two shapes, 1- and 4-query decode), 'blind3' (a third, rows.BLIND3: "
                         "batches 3-40, GQA 7:1, 6:1 and 3:1, 1- and 3-query decode), 'blind4' (a fourth, rows.BLIND4: batches 2-16, "
                         "GQA 16:1 and 7:1, 1- and 2-query decode), 'blind5' (a fifth, rows.BLIND5: chunked prefill, "
                         "8- and 16-query decode, head dims 80 and 96, one sequence of 32K and 64K), 'blind6' (a "
                         "sixth, rows.BLIND6: lengths mostly off the key blocks, batches 3-24, GQA 8:1 and 11:1, 1- and "
                         "6-query decode), 'blind7' (a seventh, rows.BLIND7: batches 1-20, GQA 8:1, 3:1 and 16:1, 1- and "
                         "5-query decode), 'blind8' (an eighth, rows.BLIND8: batches 2-28, GQA 4:1, 8:1 and 5:1, 1- and "
                         "3-query decode), "
                         "'profile' (the CUDA kernels of a few SDPA calls, profile.csv) and 'calls' (every SDPA "
                         "backend's decode call of the decode grid, each kernel's start and duration as a timed call "
                         "runs it, calls.csv; --quick: its first 6 cases)")
    a = ap.parse_args(argv[1:])
    phases = set(a.phases.split(","))
    unknown = phases - set(PHASES)
    if unknown:
        ap.error(f"unknown phase(s) {', '.join(sorted(unknown))} (valid: {', '.join(PHASES)})")
    if not 1 <= a.chain_rows <= 128:
        ap.error(f"--chain-rows must be 1 to 128, got {a.chain_rows}")
    against = tuple(a.chain_against.split(","))
    if a.units_kernels != "triton_fa2" and not phases & {"units", "units_decode"}:
        ap.error("--units-kernels applies to the units and units_decode phases; --phases names neither")
    unknown_units = set(a.units_kernels.split(",")) - {"triton_fa2", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient"}
    if unknown_units or not a.units_kernels:
        ap.error(f"--units-kernels: unknown kernel(s) {', '.join(sorted(unknown_units)) or '(none given)'} "
                 "(valid: triton_fa2, sdpa_flash, sdpa_cudnn, sdpa_efficient)")
    bad = set(against) - {"triton_vfa_attn", "triton_vsa_attn", "triton_dots"}
    if bad or not a.chain_against:
        ap.error(f"--chain-against: unknown kernel(s) {', '.join(sorted(bad)) or '(none given)'} "
                 "(valid: triton_vfa_attn, triton_vsa_attn, triton_dots)")
    budget = Budget(a.budget_s)
    out = a.out
    os.makedirs(out, exist_ok=True)
    if a.configs:
        kernels.CONFIGS.update(parse_configs(a.configs))
    kernels.VFA_LOOP = a.vfa_loop
    os.environ["HARNESS_VFA_LOOP"] = str(a.vfa_loop)  # the workers compile the same form

    def log(msg: str) -> None:
        print(f"[{budget.elapsed():7.1f}s] {msg}", flush=True)

    dev = torch.cuda.get_device_name(0)
    chip = chip_name(dev)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    clocks = ClockSampler(os.path.join(out, "clocks_trace.txt"))
    timer = Timer(flush=True)
    timing_note = {
        "method": "CUDA events around each call (torch.cuda.Event), own loop (harness/bench.py Timer)",
        "warmups": timer.warmups,
        "reps": "30 below 1 ms a call, 20 below 5 ms, else max(5, min(20, 100 ms / call)); micro: as noted per row",
        "statistic": "median; spread_pct = (p80 - p20) / median * 100",
        "l2_state": "flushed before every timed call (a 4 x L2 int32 buffer zeroed), then the GPU is held ~60 us "
                    "by torch.cuda._sleep so the host has queued the call; micro L2/launch/CTA rows: warm, no flush",
        "inputs": "random normal (torch.randn, fixed seed per case, same values for every kernel of a case); "
                  "fresh tensors per case; no input rotation (L2 flushed instead)",
    }
    base = provenance(argv, timing_note, {"configs": format_configs(kernels.CONFIGS), "vfa_loop": kernels.VFA_LOOP,
                                          "budget_s": a.budget_s,
                                          "quick": a.quick, "chip": chip})
    log(f"device {dev} ({chip}), {sms} SMs; torch {base['torch']}, triton {base['triton']}, cuda {base['cuda']}, "
        f"driver {base['driver']}; clocks at start {base['clocks']['read_at_start']}")

    tables = {"attention": Table(os.path.join(out, "attention.csv"), ATTENTION),
              "micro": Table(os.path.join(out, "micro.csv"), MICRO),
              "numerics": Table(os.path.join(out, "numerics.csv"), NUMERICS),
              "checks": Table(os.path.join(out, "checks.csv"), CHECKS),
              "skipped": Table(os.path.join(out, "skipped.csv"), SKIPPED)}
    if "profile" in phases:
        tables["profile"] = Table(os.path.join(out, "profile.csv"), PROFILE)
    if "calls" in phases:
        tables["calls"] = Table(os.path.join(out, "calls.csv"), CALLS)
    if "pairs" in phases:
        tables["pairs"] = Table(os.path.join(out, "pairs.csv"), PAIRS)
    if "chain" in phases:
        tables["chain"] = Table(os.path.join(out, "chain.csv"), CHAIN)
    notes = table_notes()

    def sidecars(finished: bool) -> None:
        for name, t in tables.items():
            t.flush()
            prov = {"table": f"{name}.csv", **base, "configs": format_configs(kernels.CONFIGS),
                    "finished": finished, "rows": len(t.rows), "elapsed_s": round(budget.elapsed(), 1),
                    "about": notes[name]}
            write_sidecar(t.path, prov)

    sidecars(False)

    def skip(case: A.Case, kernel: str, dtype: str, reason: str, table: str = "attention") -> None:
        tables["skipped"].add({"table": table, "kernel": kernel, "dtype": dtype, "head_dim": case.head_dim,
                               "causal": case.causal, "seq_len": case.seq_k, "seq_len_q": case.seq_q,
                               "batch": case.batch, "heads": case.heads, "kv_heads": case.kv_heads,
                               "mode": case.mode, "reason": reason.replace("\n", " ")[:300] or "?"})

    try:
        # ---- tile configs -------------------------------------------------------------------
        if a.pick_configs:
            pick_configs(a, budget, timer, log)
            base["configs"] = format_configs(kernels.CONFIGS)
            log(f"configs picked: --configs '{format_configs(kernels.CONFIGS)}'")

        # ---- compile + correctness -----------------------------------------------------------
        bad: set = set()
        if "checks" in phases:
            rows = run_workers([["check", *v] for v in A.variants()], a, budget, log)
            done = set()
            for r in rows:
                tables["checks"].add(r)
                key = (r["kernel"].removeprefix("triton_"), r["dtype"], r["head_dim"], r["seq_len_q"] <= 16)
                done.add(key)
                if not r["passed"]:
                    bad.add(key)
            for v in A.variants():
                if tuple(v) not in done:
                    bad.add(tuple(v))
                    log(f"variant {v} was not checked (worker failed or budget): it will not be timed")
            tables["checks"].flush()
            log(f"checks: {len(rows)} rows, failing variants: {sorted(bad) or 'none'}")

        # ---- micro ------------------------------------------------------------------------------
        def add_micro(name, value, unit, note):
            if isinstance(value, float) and not math.isfinite(value):
                log(f"micro {name}: not finite, left out")
                return
            tables["micro"].add({"name": name, "value": value, "unit": unit, "notes": note}, flush=True)

        def phase(name: str, table: str, body) -> None:
            """Run one microbenchmark phase; a failure is logged in one line and the other phases go on."""
            try:
                body()
            except Exception as e:  # noqa: BLE001
                log(f"{name} phase failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
            tables[table].flush()

        def micro() -> None:
            from harness.micro import run_micro
            run_micro(add_micro, sms, timer, clocks, a.quick, log)

        def loop() -> None:
            from harness.micro import run_loop
            run_loop(add_micro, timer, a.quick, log)

        def stages() -> None:
            from harness.micro import run_stages
            run_stages(add_micro, timer, a.quick, log)

        def issue() -> None:
            from harness.issue import run_issue
            run_issue(add_micro, sms, a.quick, log)

        def latency() -> None:
            from harness.latency import run_latency, run_stream
            run_latency(add_micro, a.quick, log)
            run_stream(add_micro, timer, log)

        def profile() -> None:
            from harness.latency import run_profile
            run_profile(lambda row: tables["profile"].add(row), log)

        if "micro" in phases and budget.left() > 60:
            phase("micro", "micro", micro)
        for name, body in (("loop", loop), ("stages", stages), ("issue", issue), ("latency", latency)):
            if name in phases:
                phase(name, "micro", body)
        if "profile" in phases:
            phase("profile", "profile", profile)

        def calls() -> None:
            from harness.latency import run_calls
            grid = A.decode_grid()[:6] if a.quick else A.decode_grid()
            run_calls(lambda row: tables["calls"].add(row), timer, log, grid, budget=budget)

        if "calls" in phases:
            phase("calls", "calls", calls)

        # ---- attention ----------------------------------------------------------------------------
        runner = CaseRunner(chip, timer, tables, skip, bad, budget, log)
        if "fa3" in phases:
            grid = A.fa3_regime((64, 128), (512, 4096)) if a.quick else A.fa3_regime()
            runner.run_all(grid, sdpa_dtypes=("fp16", "bf16"), triton_dtypes=("fp16", "bf16", "fp8_e4m3"))
        if "units" in phases:
            runner.run_units(A.units_grid(), ("fp16", "fp8_e4m3"), tuple(a.units_kernels.split(",")))
        if "units_decode" in phases:
            runner.run_units(A.units_decode_grid(), ("fp16",), tuple(a.units_kernels.split(",")))
        if "floor" in phases:
            grid = A.fa3_regime((64, 128), (512, 4096)) if a.quick else A.fa3_regime()
            runner.run_floor(grid, ("fp16", "bf16", "fp8_e4m3"))
        if "pairs" in phases:
            grid = A.fa3_regime((64, 128), (512, 4096)) if a.quick else A.fa3_regime()
            runner.run_pairs(grid, ("fp16", "bf16", "fp8_e4m3"))
        if "chain" in phases:
            grid = A.chain_grid(sms, (128,), (2048,), a.chain_rows) if a.quick else \
                A.chain_grid(sms, rows=a.chain_rows)
            dtypes = ("fp16",) if a.chain_rows <= 16 else ("fp16", "fp8_e4m3")  # the decode tile: checked in fp16 only
            runner.run_pairs(grid, dtypes, table="chain", against=against)
        if "decode" in phases:
            grid = A.decode_grid()[:6] if a.quick else A.decode_grid()
            runner.run_all(grid, sdpa_dtypes=("fp16", "bf16"), triton_dtypes=("fp16",), reserve_s=150)
        for phase, grid in (("blind", A.BLIND1), ("blind2", BLIND2), ("blind3", BLIND3), ("blind4", BLIND4),
                            ("blind5", BLIND5), ("blind6", BLIND6), ("blind7", BLIND7), ("blind8", BLIND8)):
            if phase in phases:
                cases = A.blind5_grid(grid, phase) if phase == "blind5" else A.blind_grid(grid, phase)
                runner.run_all(cases[:8] if a.quick else cases, sdpa_dtypes=("fp16", "bf16"),
                               triton_dtypes=("fp16", "fp8_e4m3"), reserve_s=10)
        if "numerics" in phases and budget.left() > 40:
            from harness.numerics import run_numerics

            def add_num(row):
                tables["numerics"].add(row)
            try:
                run_numerics(add_num, os.path.join(out, "numerics.npz"), a.quick, log, budget)
            except Exception as e:  # noqa: BLE001
                log(f"numerics phase failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
            tables["numerics"].flush()
        if "prefill" in phases:
            main_grid, extra = A.prefill_grid(), A.prefill_grid(head_dims=(80, 96, 256))
            grid = A.interleave(main_grid[:8], extra[:4]) if a.quick else A.interleave(main_grid, extra, 2)
            runner.run_all(grid, sdpa_dtypes=("fp16", "bf16"), triton_dtypes=("fp16", "bf16", "fp8_e4m3"),
                           reserve_s=10)
    finally:
        clocks.stop()
        sidecars(True)
        log(f"done: {len(tables['attention'].rows)} attention rows, {len(tables['micro'].rows)} micro, "
            f"{len(tables['numerics'].rows)} numerics, {len(tables['checks'].rows)} checks, "
            f"{len(tables['skipped'].rows)} skipped; {budget.elapsed():.0f} s of {a.budget_s:.0f}")
        summary(tables["attention"].rows, log)
    return 0


class CaseRunner:
    def __init__(self, chip, timer, tables, skip, bad, budget, log) -> None:
        self.chip, self.timer, self.tables, self.skip, self.bad = chip, timer, tables, skip, bad
        self.budget, self.log = budget, log

    def run_all(self, grid, sdpa_dtypes, triton_dtypes, reserve_s: float = 30) -> None:
        n_done = 0
        for i, case in enumerate(grid):
            # per case: SDPA 3 kernels x dtypes + Triton (fa2 1, vfa 3, vsa 2 timings) x dtypes
            if case.head_dim in (80, 96):
                n_t = 0
            elif case.mode == "decode":
                n_t = 6 if case.head_dim == 128 else 0
            else:
                n_t = 6 * len(triton_dtypes)
            n_time = 3 * len(sdpa_dtypes) + n_t
            est_s = n_time * (33 * (A.est_us(case) + 250)) * 1e-6 + 0.5
            if not self.budget.fits(est_s + reserve_s):
                for c in grid[i:]:
                    self.skip(c, "all", "fp16", f"budget: {self.budget.left():.0f} s left, case needs ~{est_s:.1f} s "
                              f"+ {reserve_s:.0f} s reserved for later phases")
                self.log(f"{case.tier}: budget reached after {n_done} of {len(grid)} cases; rest skipped")
                break
            try:
                self.run_case(case, sdpa_dtypes, triton_dtypes)
            except torch.cuda.OutOfMemoryError as e:
                self.skip(case, "all", "fp16", f"out of memory: {str(e).splitlines()[0][:200]}")
                torch.cuda.empty_cache()
            n_done += 1
            self.tables["attention"].flush()
            self.tables["skipped"].flush()
        else:
            self.log(f"{grid[0].tier if grid else '-'}: all {len(grid)} cases done")

    def add(self, case, kernel, dtype, t) -> None:
        self.tables["attention"].add({
            "chip": self.chip, "kernel": kernel, "dtype": dtype, "head_dim": case.head_dim, "causal": case.causal,
            "seq_len": case.seq_k, "batch": case.batch, "heads": case.heads, "kv_heads": case.kv_heads,
            "seq_len_q": case.seq_q, "mode": case.mode, "metric": "latency", "value": round(t.median_us, 3),
            "unit": "us", "spread_pct": round(t.spread_pct, 2), "reps": t.reps})

    def run_units(self, grid, dtypes, kernels=("triton_fa2",)) -> None:
        """``kernels`` (Triton FA2, SDPA's flash, cuDNN or efficient backend; SDPA in 16-bit formats only) on a units
        grid: a fixed number of CTAs, each walking more key blocks."""
        for case in grid:
            inp, parts = A.Inputs(case, seed=hash(case.key()) & 0xFFFF), []
            for dt in dtypes:
                q, k, v = inp.get(dt)
                for kernel in kernels:
                    if kernel != "triton_fa2" and dt not in ("fp16", "bf16"):
                        self.skip(case, kernel, dt, "SDPA's backends take 16-bit inputs only")
                        continue
                    try:
                        call = A.triton_calls("fa2", q, k, v, case.causal)["triton_fa2"] if kernel == "triton_fa2" \
                            else A.sdpa_call(kernel, q, k, v, case.causal)
                    except RuntimeError as e:
                        self.skip(case, kernel, dt, str(e))
                        continue
                    t = self.timer.time(call)
                    self.add(case, kernel, dt, t)
                    parts.append(f"{kernel}/{dt}={t.median_us:.1f}")
                inp.drop(dt)
            self.log(f"units H{case.heads} n{case.seq_k} d{case.head_dim}: " + " ".join(parts))

    def run_floor(self, grid, dtypes) -> None:
        """Per shape and format, the Triton FA2 kernel, VFA's attention kernel and the same loop with its softmax
        removed (``triton_dots``: the tensor-only floor), timed back to back: what each kernel's softmax adds."""
        for case in grid:
            if self.budget.left() < 20:
                self.skip(case, "triton_dots", dtypes[0], "over the run's budget")
                continue
            inp, parts = A.Inputs(case, seed=hash(case.key()) & 0xFFFF), []
            for dt in dtypes:
                q, k, v = inp.get(dt)
                calls = A.loop_calls(q, k, v, case.causal)
                for name in ("triton_fa2", "triton_vfa_attn", "triton_dots"):
                    t = self.timer.time(calls[name])
                    self.add(case, name, dt, t)
                    parts.append(f"{name.removeprefix('triton_')}/{dt}={t.median_us:.0f}")
                inp.drop(dt)
            self.log(f"floor B{case.batch} H{case.heads} n{case.seq_k} d{case.head_dim} "
                     f"{'causal' if case.causal else 'full'}: " + " ".join(parts))

    def run_pairs(self, grid, dtypes, table: str = "pairs", against=("triton_vfa_attn",)) -> None:
        """Per shape and format, the Triton FA2 kernel timed in alternation (``time_pair``) with each kernel of
        ``against`` (VFA's attention kernel; ``triton_dots``: the same loop without its softmax): their ratio measured
        within each rep, so that clock drift between the two cancels."""
        for case in grid:
            if self.budget.left() < 20:
                self.skip(case, against[0], dtypes[0], "over the run's budget", table=table)
                continue
            inp, parts = A.Inputs(case, seed=hash(case.key()) & 0xFFFF), []
            for dt in dtypes:
                q, k, v = inp.get(dt)
                calls = A.loop_calls(q, k, v, case.causal)
                for other in against:
                    t = time_pair(self.timer, calls["triton_fa2"], calls[other])
                    self.tables[table].add({
                        "chip": self.chip, "kernel_a": "triton_fa2", "kernel_b": other, "dtype": dt,
                        "head_dim": case.head_dim, "causal": case.causal, "seq_len": case.seq_k, "batch": case.batch,
                        "heads": case.heads, "kv_heads": case.kv_heads, "seq_len_q": case.seq_q, "mode": case.mode,
                        "a_us": round(t.a.median_us, 3), "b_us": round(t.b.median_us, 3), "ratio": round(t.ratio, 5),
                        "ratio_spread_pct": round(t.ratio_spread_pct, 2), "reps": t.a.reps})
                    parts.append(f"{other.removeprefix('triton_')}/{dt}={t.ratio:.3f}")
                inp.drop(dt)
            self.tables[table].flush()
            self.log(f"{table} B{case.batch} H{case.heads} n{case.seq_k} d{case.head_dim} "
                     f"{'causal' if case.causal else 'full'}: fa2 over " + " ".join(parts))

    def run_case(self, case: A.Case, sdpa_dtypes, triton_dtypes) -> None:
        t0 = time.time()
        inp = A.Inputs(case, seed=hash(case.key()) & 0xFFFF)
        parts = []
        top_left = case.causal and case.mode == "prefill" and case.seq_q < case.seq_k
        for dt in sdpa_dtypes:
            q, k, v = inp.get(dt)
            for kern in A.SDPA:
                if top_left:  # the Triton kernels' causal mask aligns the queries with the last keys, SDPA's the first
                    self.skip(case, kern, dt, "causal prefill of fewer queries than keys: SDPA's is_causal aligns the "
                              "queries with the first keys (top left), which no grid measures")
                    continue
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    try:
                        fn = A.sdpa_call(kern, q, k, v, case.causal)
                    except (RuntimeError, ValueError, NotImplementedError) as e:
                        why = " | ".join(str(w.message).splitlines()[0] for w in caught[:3])
                        self.skip(case, kern, dt, f"refused: {str(e).splitlines()[0][:120]} {why[:170]}")
                        continue
                t = self.timer.time(fn)
                self.add(case, kern, dt, t)
                parts.append(f"{kern.removeprefix('sdpa_')}/{dt}={t.median_us:.0f}")
                del fn
            inp.drop(dt)
        tri_dims = (64, 128, 256) if case.mode == "prefill" else (128,)
        t_dts = triton_dtypes if case.mode == "prefill" else ("fp16",)
        if case.head_dim in tri_dims:
            for dt in t_dts:
                q, k, v = inp.get(dt)
                for mode in ("fa2", "vfa", "vsa"):
                    key = (mode, dt, case.head_dim, case.mode == "decode")
                    if key in self.bad:
                        self.skip(case, f"triton_{mode}", dt, "variant failed or missed its correctness check")
                        continue
                    try:
                        calls = A.triton_calls(mode, q, k, v, case.causal)
                        for name, fn in calls.items():
                            t = self.timer.time(fn)
                            self.add(case, name, dt, t)
                            parts.append(f"{name.removeprefix('triton_')}/{dt}={t.median_us:.0f}")
                    except Exception as e:  # noqa: BLE001
                        if isinstance(e, torch.cuda.OutOfMemoryError):
                            raise
                        self.skip(case, f"triton_{mode}", dt, f"error: {type(e).__name__}: {str(e).splitlines()[0]}")
                inp.drop(dt)
        del inp
        self.log(f"{case.tier} B{case.batch} H{case.heads}/{case.kv_heads} q{case.seq_q} k{case.seq_k} "
                 f"d{case.head_dim} {'causal' if case.causal else 'full'} ({time.time() - t0:.1f}s): "
                 + " ".join(parts))


def run_workers(tasks: list, a, budget: Budget, log) -> list[dict]:
    """Run tasks in ``a.workers`` parallel worker processes; return their check rows (or results)."""
    n = max(1, min(a.workers, len(tasks)))
    shards = [tasks[i::n] for i in range(n)]
    tmp = tempfile.mkdtemp(prefix="harness_workers_")
    procs = []
    env = dict(os.environ)
    for i, shard in enumerate(shards):
        tf, of = os.path.join(tmp, f"tasks{i}.json"), os.path.join(tmp, f"out{i}.json")
        json.dump(shard, open(tf, "w"))
        cmd = [sys.executable, "-m", "harness.worker", "--tasks", tf, "--out", of,
               "--configs", format_configs(kernels.CONFIGS)]
        procs.append((subprocess.Popen(cmd, env=env), of))
    deadline = time.monotonic() + max(30.0, budget.left() - 120)
    for p, _ in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log(f"worker {p.pid} past its deadline: stopped")
            p.kill()
            p.wait()
    rows, results = [], []
    for p, of in procs:
        if p.returncode != 0:
            log(f"worker {p.pid} exited with {p.returncode}")
        if os.path.exists(of):
            for r in json.load(open(of)):
                results.append(r)
                rows.extend(r.get("rows", []))
    run_workers.results = results
    return rows


def pick_configs(a, budget: Budget, timer: Timer, log) -> None:
    tasks = [["warm", d, list(c)] for d, cs in CANDIDATES.items() for c in cs]
    run_workers(tasks, a, budget, log)
    ok = {(r["task"][1], tuple(r["task"][2])) for r in run_workers.results if r.get("ok")}
    for r in run_workers.results:
        if not r.get("ok"):
            log(f"config {r['task'][1:]} failed to build: {r.get('error', '?')[:200]}")
    for d, cs in CANDIDATES.items():
        best = None
        for cfg in cs:
            if (d, cfg) not in ok:
                continue
            total = 0.0
            for causal in (False, True):
                n = 4096
                q = torch.randn(16384 // n, 2048 // d, n, d, device="cuda", dtype=torch.float16)
                k, v = torch.randn_like(q), torch.randn_like(q)
                t = timer.time(lambda: kernels.attention(q, k, v, causal, "fa2", config=cfg), reps=10)
                total += t.median_us
                log(f"config d{d} {cfg} {'causal' if causal else 'full'}: {t.median_us:.0f} us")
            if best is None or total < best[0]:
                best = (total, cfg)
        if best:
            kernels.CONFIGS[d] = best[1]


def summary(rows, log) -> None:
    """VFA / FA2 speedups (fa2 time / vfa time) per dtype, causal, head dim, seq (FA3 regime rows)."""
    idx = {}
    for r in rows:
        key = (r["dtype"], r["causal"], int(r["head_dim"]), int(r["seq_len"]), int(r["batch"]), int(r["heads"]),
               int(r["kv_heads"]), int(r["seq_len_q"]))
        idx.setdefault(key, {})[r["kernel"]] = float(r["value"])
    lines = []
    for key, ks in sorted(idx.items()):
        if "triton_fa2" in ks and "triton_vfa" in ks and key[3] * key[4] == 16384 and key[5] * key[2] == 2048:
            sp = ks["triton_fa2"] / ks["triton_vfa"]
            spa = ks["triton_fa2"] / ks.get("triton_vfa_attn", float("nan"))
            sv = ks["triton_fa2"] / ks.get("triton_vsa", float("nan"))
            lines.append(f"  {key[0]:8s} causal={key[1]:5s} d{key[2]:<3} n{key[3]:<5}  fa2 {ks['triton_fa2']:8.0f} us  "
                         f"vfa/fa2 speedup total {sp:.3f} attn-only {spa:.3f}  vsa {sv:.3f}")
    if lines:
        log("FA3-regime speedups (fa2 time / other time):\n" + "\n".join(lines))


def table_notes() -> dict:
    cfg = {d: dict(zip(("block_m", "block_n", "num_warps", "num_stages"), c)) for d, c in kernels.CONFIGS.items()}
    return {
        "attention": {
            "value": "median kernel time per call in us (GPU time between CUDA events around the call)",
            "kernels": {
                "sdpa_flash|sdpa_cudnn|sdpa_efficient": "torch.nn.functional.scaled_dot_product_attention under "
                "torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION|CUDNN_ATTENTION|EFFICIENT_ATTENTION); "
                "enable_gqa=True when heads != kv_heads; decode rows: is_causal=False",
                "triton_fa2": "harness/kernels.py attn_fwd MODE 0 (FA2-style online softmax)",
                "triton_vfa": "k_repr pre-pass (krepr_kernel) + attention kernel MODE 1, timed together",
                "triton_vfa_attn": "attention kernel MODE 1 alone (k_repr ready); m-init fused in its prologue",
                "triton_vfa_minit": "k_repr pre-pass alone (signed absmax per dim per key block); the same kernel "
                                    "serves VSA",
                "triton_vsa": "k_repr pre-pass + attention kernel MODE 2 (VFA + BLASST block skip, lam=1e-3)",
                "triton_vsa_attn": "attention kernel MODE 2 alone",
                "note": "triton rows on random normal inputs: VSA skips few blocks (see numerics.csv / the log)",
            },
            "m_init": "k_repr [B, Hkv, n_kblocks, D] written by a Triton pre-pass; the per-row max over visible key "
                      "blocks of scale*q.k_repr is computed in the attention kernel's prologue (tl.dot over chunks "
                      "of 64 summaries)",
            "vfa_loop": "LOOP=1: the visit order (sink, local, rest) as one pipelined loop with run-time branches "
                        "for the rescale (sink/local) and the mask; LOOP=0: special blocks before 4 loops",
            "tile_configs": cfg,
            "decode_config": dict(zip(("block_m", "block_n", "num_warps", "num_stages"), kernels.DECODE_CONFIG)),
            "triton_decode": "the same kernels with 16-row query blocks, one program per (batch, head): no split-KV; "
                             "timed only at head dim 128, fp16",
            "fp8": "Q, K, V in float8_e4m3fn (cast of the same normals, no scaling); QK^T and PV on fp8 tensor "
                   "cores; P cast to e4m3 for PV (as FA3-fp8); V stored seq-contiguous (transposed, untimed), "
                   "output bf16",
            "causal": "query row r at position r + seq_len - seq_len_q (right-aligned); prefill rows have "
                      "seq_len_q = seq_len",
            "vfa_numerics_guard": "none: the paper (Algorithm 1) states no overflow/underflow guard; scores, m, l, O "
                                  "are fp32 in the kernel, P is cast to the input format for PV",
        },
        "micro": {"about": "one row per quantity; notes say how it was measured"},
        "calls": {"about": "each SDPA decode call's CUDA kernels in launch order (torch.profiler around 5 calls, each "
                           "after the L2 flush and a ~0.5 ms sleep): start after the sleep ends and duration, medians; "
                           "call_us: the call's CUDA-event time as the campaigns measure it (L2 flushed, ~60 us sleep), "
                           "without the profiler"},
        "profile": {"about": "torch.profiler around 5 calls of each SDPA case after 3 warm-ups (warm L2, no flush): "
                             "every CUDA kernel the call launched, launches and GPU microseconds per call"},
        "numerics": {"about": "rel. L2 error (vs float64 exact attention of the same rounded inputs) of each "
                              "kernel's output, non-finite output elements counted in `nonfinite` and left out of "
                              "the error's numerator; emul_vsa_fp64 = VSA's block skipping emulated in float64 (the "
                              "error due to skipping alone); inputs in harness/numerics.py (NumPy seeds)",
                     "npz_layout": "<set>__q|k|v float32 holding the format's values [1, H, N, D]; "
                                   "<set>_<full|causal>__<kernel>|ref arrays [1, H, N, D] float32"},
        "checks": {"about": "correctness gate before timing: each Triton variant on small shapes (odd lengths, "
                            "GQA, causal, decode) vs float64 (vsa: vs its float64 emulation); poisoned output; "
                            "compile_s = first call incl. compile (or disk-cache load)"},
        "skipped": {"about": "cases or kernels not measured, and why (backend refused, budget, failed check)"},
        "pairs": {"about": "two kernels of one shape timed in alternation (harness/bench.py time_pair: each rep one call "
                           "of each, order swapped every rep, L2 flushed before every call); a_us and b_us are each "
                           "one's median, ratio the median over reps of a's time / b's time in that rep, its spread "
                           "(p80 - p20) / median in %"},
        "chain": {"about": "the pairs measurement (see pairs), FA2 against the kernels of --chain-against (VFA's "
                           "kernel and triton_dots, the same loop with its softmax removed, unless told; "
                           "triton_vsa_attn: VSA's), at one query block of --chain-rows rows (128 unless told) "
                           "per head, every CTA on one "
                           "K/V head: 1 CTA on the GPU, one per SM and two per SM (harness/attention.py chain_grid), "
                           "K/V lengths 2048 and 16384"},
    }


if __name__ == "__main__":
    sys.exit(main())
