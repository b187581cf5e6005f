"""Text renderings of results: a compact table for people, one JSON object for scripts."""

from __future__ import annotations

import json

import yaml

from vfasim.functional.checks import CAUSES
from vfasim.hw.config import HardwareConfig
from vfasim.io.outputs import finite
from vfasim.kernel import Kernel


def to_json(doc: dict) -> str:
    """Strict JSON (non-finite floats become null), keys in a stable order."""
    return json.dumps(finite(doc), indent=2, sort_keys=False)


def format_run(doc: dict) -> str:
    """The compact table of ``vfasim run``."""
    if doc.get("chip"):
        from vfasim.report.chip_text import format_chip_run

        return format_chip_run(doc)
    shape, num = doc["shape"], doc["numerics"]
    lines = [
        f"{doc['algo']} on {doc['hw']} | workload {doc['workload']} | seq {shape['seq_len']} "
        f"kv {shape['kv_len']} d {shape['head_dim']} heads {shape['heads']} "
        f"blocks {shape['block_q']}x{shape['block_k']} {'causal' if shape['causal'] else 'non-causal'}",
        f"latency   {doc['latency_cycles']:,} cycles ({doc['latency_us']:.2f} us)   "
        f"bottleneck {doc['bottleneck']}",
        "shares    " + "  ".join(f"{k} {v:6.1%}" for k, v in doc["shares"].items()),
        "",
        f"{'pipeline':<10}{'busy cycles':>14}{'util':>8}",
        *(f"{n:<10}{p['busy_cycles']:>14,}{p['utilization']:>8.1%}" for n, p in doc["pipelines"].items()),
        "",
        f"{'op':<16}{'cycles':>12}",
        *(f"{k:<16}{v:>12,}" for k, v in sorted(doc["ops"].items(), key=lambda kv: -kv[1])),
        "",
        f"numerics ({num['matmul_dtype']} matmul inputs, {num['vector_dtype']} vector side)",
        *_checked_lines(num),
        *(_engine_lines(num) if num["nan_count"] is not None else
          ["  timing only: the engine's arithmetic did not run (no output, NaN/Inf, frozen-max or skip figures)"]),
        f"trace {doc['manifest']['trace_digest'][:16]}  hw {doc['manifest']['hw_digest']}  "
        f"seed {doc['manifest']['seed']}",
    ]
    return "\n".join(lines)


def _engine_lines(num: dict) -> list[str]:
    """What the engine's own run tells, over every row."""
    return [
        f"  NaN {num['nan_count']}  Inf {num['inf_count']}   rows with frozen max below true "
        f"{num['frozen_max_below_true_rows']:.2%} (largest gap {num['frozen_max_largest_gap']:.3g})",
        f"  skipped blocks {num['skipped_block_fraction']:.1%}   skipped rows "
        f"{num['skipped_row_fraction']:.1%}   rescale skipped {num['rescale_skip_fraction']:.1%}",
        f"  overflows {num['overflow_count']:,}   underflows {num['underflow_count']:,} "
        f"({', '.join(f'{k} {v:,}' for k, v in num['flows'].items() if v) or 'none'})",
    ]


def format_verdict(num: dict) -> list[str]:
    """The verdict line, then why rows failed and the worst of them (nothing when all is well)."""
    lines = [f"  verdict {num['verdict'].upper()}: {num['bad_rows']:,} bad rows ({num['bad_row_fraction']:.2%})"
             + (" — " + ", ".join(f"{k} {v:,}" for k, v in num["causes"].items()) if num["causes"] else "")]
    lines += [f"    {name}: {CAUSES[name]}" for name in num["causes"]]
    for w in num["worst_rows"]:
        lines.append(f"    head {w['head']} row {w['row']}: {w['cause']}, row err {w['row_err']:.3g}, "
                     f"true max − used max {w['max_gap']:+.3g}")
    return lines


def _finite_note(num: dict) -> str:
    if not num["nonfinite_fraction"]:
        return ""
    return (f"   non-finite {num['nonfinite_fraction']:.2%} of outputs "
            f"(rel err over the finite ones {num['rel_err_finite_only']:.3e})")


def _checked_lines(num: dict) -> list[str]:
    """The verdict and the comparisons with the oracle and fa2, and which query rows they cover."""
    mode = num.get("numerics_mode", "full")
    if mode == "off":
        return ["  not compared with the float64 oracle or fa2 (--numerics off): no verdict"]
    lines = [
        *format_verdict(num),
        f"  rel err vs fp64 {num['rel_err_vs_fp64']:.3e} (fa2 {num['fa2_rel_err_vs_fp64']:.3e})   "
        f"max abs err {num['max_abs_err_vs_fp64']:.3e}" + _finite_note(num),
        f"  bit-identical vs fa2 {num['bit_identical_vs_fa2']:.1%}   max ULP "
        + (f"{num['max_ulp_vs_fa2']:,}" if num["max_ulp_vs_fa2"] is not None else "n/a (non-finite)")]
    if mode == "sample":
        blocks = num["sampled_query_blocks"]
        lines.insert(0, f"  sampled: query blocks {', '.join(map(str, blocks))} ({num['sampled_rows']:,} rows "
                        "checked); NaN/Inf and frozen-max figures over every row")
    return lines


def format_hw(config: HardwareConfig, sources: dict[str, str] | None = None) -> str:
    """``vfasim hw show``: the validated config as YAML, each value with its source comment (``hw.sources``);
    a value no file sets is marked as the model's default."""
    if sources is None:
        return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
    return "\n".join(_commented(config.model_dump(mode="json"), sources, "", 0)) + "\n"


def _commented(doc: dict, sources: dict[str, str], prefix: str, depth: int) -> list[str]:
    lines = []
    for key, value in doc.items():
        path = f"{prefix}{key}"
        note = sources.get(path, "vfasim default, not set in the file")
        head = f"{'  ' * depth}{key}:"
        if isinstance(value, dict) and value:
            lines.append(head + (f"  # {note}" if note else ""))
            lines += _commented(value, sources, path + ".", depth + 1)
        else:
            text = yaml.safe_dump(value, default_flow_style=True, width=10**6).removesuffix("\n...\n").strip()
            lines.append(f"{head} {text}" + (f"  # {note}" if note else ""))
    return lines


def format_kernel(kernel: Kernel) -> str:
    """``vfasim kernel show``: the validated kernel description as YAML."""
    return yaml.safe_dump(kernel.model_dump(mode="json"), sort_keys=False)
