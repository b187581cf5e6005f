"""``vfasim run`` and ``vfasim sensitivity``: their options, and a run from them (or from ``--spec``).

The options name the same inputs as ``vfasim.run``'s keywords; ``run_command`` hands them to it by name (or
replays a spec's), prints the report or the JSON document, and gives the exit status (``EXIT_BROKEN`` with
``--check`` on a broken verdict). Modules load when the command runs, as everywhere in the command line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vfasim.errors import VfasimError

EXIT_BROKEN = 3  # vfasim run --check: the run's numerics verdict is broken


def add_run_command(run_p: argparse.ArgumentParser) -> None:
    from vfasim.functional.sampling import FULL_LIMIT, MODES

    _add_run(run_p)
    run_p.add_argument("--trace-out", default=None, metavar="FILE",
                       help="also write a Chrome/Perfetto trace (JSON) of the timeline to FILE ('-': standard "
                            "output, the report then goes to standard error)")
    run_p.add_argument("--roofline-out", default=None, metavar="FILE",
                       help="chip runs: also draw the run against the chip's rooflines to FILE (.png or .svg); the "
                            "numbers are in --json under chip.roofline")
    run_p.add_argument("--trace-window", default=None, type=_cycle_window, metavar="START:END",
                       help="with --trace-out: only the ops that overlap cycles [START, END)")
    run_p.add_argument("--trace-cores", default=None, type=_core_list, metavar="C1,C2,...",
                       help="chip runs, with --trace-out: the cores drawn, each unit with its ops on the core's "
                            "pipelines (default: the first 8 cores, units only)")
    run_p.add_argument("--spec", default=None, metavar="FILE",
                       help="repeat a run from its spec (the JSON of vfasim run --json, or its 'spec'); give no other "
                            "run options")
    run_p.add_argument("--no-cache", dest="cache", action="store_false",
                       help="neither read nor keep the references (float64 oracle, fa2 baseline) in the reference "
                            "cache: $VFASIM_CACHE_DIR, else vfasim/references in $XDG_CACHE_HOME or ~/.cache")
    run_p.add_argument("--check", action="store_true",
                       help=f"exit with status {EXIT_BROKEN} when the numerics verdict is broken (for scripts and CI)")
    run_p.add_argument("--matmul-format", default=None,
                       help="matmul format among those the chip supports: fp16, bf16, fp8_e4m3, fp8_e5m2, fp4 "
                            "(with the scaling a real kernel uses; default: the config's)")
    _add_chip(run_p)
    run_p.add_argument("--numerics", choices=MODES, default=None,
                       help="check the output against the float64 oracle and fa2 on every query row (full), "
                            "on a stated subset of query blocks (sample) or not at all (off); default: full "
                            f"up to {FULL_LIMIT:,} score entries (heads x seq x kv), else sample")


def add_sensitivity(sens: argparse.ArgumentParser) -> None:
    _add_run(sens)
    sens.add_argument("--factors", type=float, nargs="+", default=[2.0, 0.5],
                      help="multipliers applied to each parameter (default: 2 0.5)")


def _core_list(text: str) -> tuple[int, ...]:
    """``0,1,5`` -> (0, 1, 5); the run checks the cores exist."""
    try:
        return tuple(int(c) for c in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected core numbers separated by commas (e.g. 0,1), got {text!r}") from None


def _cycle_window(text: str) -> tuple[int, int]:
    """``START:END`` in cycles -> (start, end); the run checks start < end."""
    start, _, end = text.partition(":")
    try:
        return int(start), int(end)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected START:END in cycles (e.g. 0:100000), got {text!r}") from None


def _add_run(p: argparse.ArgumentParser) -> None:
    from vfasim.functional.policy import ALGORITHMS, KEY_SUMMARIES, Q_SUMMARIES
    from vfasim.sim import SCHEDULES
    from vfasim.workloads import WORKLOADS

    p.add_argument("--hw", default="C4V16", help="built-in config name or YAML path (default C4V16)")
    p.add_argument("--algo", default="vfa", help=f"one of {', '.join(ALGORITHMS)} (default vfa)")
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--block-q", type=int, default=None,
                   help="query rows of a tile (one tile stream's on a chip); default 128 on one core, the kernel's "
                        "own on a chip")
    p.add_argument("--block-k", type=int, default=None,
                   help="keys of a tile; default 128 on one core, the kernel's own on a chip")
    p.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--heads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workload", default="llm-like", help=f"one of {', '.join(WORKLOADS)}")
    p.add_argument("--qkv", default=None, help=".npz (q, k, v) or .npy [3, ...] file; overrides --workload")
    p.add_argument("--kv-heads", type=int, default=None, help="K/V heads (< heads: grouped-query attention)")
    p.add_argument("--decode", action="store_true", help="decode: the last --queries rows against the whole KV")
    p.add_argument("--queries", type=int, default=1, help="query rows in decode (default 1)")
    p.add_argument("--schedule", default="pipelined", help=f"one of {', '.join(SCHEDULES)}")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--quiet", action="store_true", help="no progress bar (none is shown off a terminal)")
    g = p.add_argument_group("algorithm options")
    g.add_argument("--lam", type=float, default=1e-3, help="BLASST/VSA skip threshold λ in (0, 1)")
    g.add_argument("--topk", type=int, default=None,
                   help="bsfa: off-diagonal blocks kept per query block (default: 8, at most the key blocks "
                        "beside the diagonal)")
    g.add_argument("--rescale-threshold", type=float, default=None,
                   help="fa4/blasst_fa4: max growth (natural log) that skips the rescale; default 8·ln2")
    g.add_argument("--exp-emulation", type=float, default=None,
                   help="fraction of exps computed by polynomial on the vector ALUs (FA4-style), in [0, 1)")
    g.add_argument("--key-summary", choices=KEY_SUMMARIES, default=None, help="vfa/vsa: key-block summary")
    g.add_argument("--q-summary", choices=Q_SUMMARIES, default=None,
                   help="vfa/vsa: block-wise m-init from one summary of Q_i")
    g.add_argument("--no-minit", dest="minit", action="store_false", default=None, help="vfa/vsa: m starts at -inf")
    g.add_argument("--no-reorder", dest="reorder", action="store_false", default=None,
                   help="vfa/vsa: visit key blocks in order 1, 2, 3, …")
    m = p.add_argument_group("mitigations (this project's, not the paper's; see README)")
    m.add_argument("--protect-special", action="store_true", default=None,
                   help="skipping algorithms never skip the sink and local blocks")
    m.add_argument("--minit-clamp", action="store_true", default=None,
                   help="vfa/vsa: clamp m-init to scale·|q|·max|k| (an upper bound of every score)")
    m.add_argument("--minit-margin", type=float, default=None, metavar="DELTA",
                   help="vfa/vsa: lower m-init by DELTA (natural log units)")
    m.add_argument("--fp32-state", action="store_true", default=None,
                   help="keep l and O in fp32 on a 16-bit vector side")
    m.add_argument("--p-bf16", action="store_true", default=None, help="cast P to bf16 (unscaled) for PV")


def _add_chip(p: argparse.ArgumentParser) -> None:
    from vfasim.chip.fluid import POLICIES
    from vfasim.kernel import builtin_kernel_names

    g = p.add_argument_group("chip (configs with a chip section, e.g. --hw H100-SXM)")
    g.add_argument("--batch", type=int, default=1, help="batch elements (on one core: more heads)")
    g.add_argument("--kernel", default=None, metavar="NAME|FILE",
                   help=f"the kernel run: {', '.join(builtin_kernel_names())} or a kernel YAML file (default fa2)")
    g.add_argument("--kernel-style", default=None, help="former name of --kernel (fa2, fa3, fa4), kept for a release")
    g.add_argument("--dispatch", default=None,
                   help=f"work distribution, one of {', '.join(POLICIES)} (default: the kernel's)")
    g.add_argument("--numerics-heads", type=_heads_arg, default=0, metavar="N|all",
                   help="check numerics on the first N heads (whole GQA groups), or all; default none on a chip")
    g.add_argument("--jobs", type=int, default=None,
                   help="processes (or Dask tasks) computing those heads' numerics, K/V heads apart (default one per "
                        "core; on Dask one a K/V head)")
    g.add_argument("--executor", choices=("local", "dask"), default="local",
                   help="where those heads' numerics run: local processes or a Dask cluster (--scheduler)")
    g.add_argument("--scheduler", default=None, help="the Dask scheduler's address, with --executor dask")


def run_command(args: argparse.Namespace) -> tuple[str, int]:
    """``vfasim run`` or ``vfasim sensitivity``: what to print, and the exit status."""
    from vfasim.runner.api import DEFAULT_BLOCK, Options, run
    from vfasim.functional.sampling import FULL_LIMIT
    from vfasim.report import format_run, to_json

    options = Options(**{name: getattr(args, name) for name in Options.__dataclass_fields__})
    shape = dict(seq_len=args.seq_len, head_dim=args.head_dim, block_q=args.block_q, block_k=args.block_k,
                 causal=args.causal, heads=args.heads, kv_heads=args.kv_heads, seed=args.seed,
                 workload=args.workload, qkv=args.qkv, decode=args.decode, queries=args.queries)
    if args.command == "sensitivity":
        from vfasim.sensitivity import format_sensitivity, sensitivity_table

        frame = sensitivity_table(args.hw, args.algo, schedule=args.schedule, factors=tuple(args.factors),
                                  options=options, **{**shape, "block_q": args.block_q or _core_block_q(args),
                                                      "block_k": args.block_k or DEFAULT_BLOCK})
        return (frame.to_json(orient="records", indent=2) if args.json else format_sensitivity(frame)), 0
    progress = not args.quiet and sys.stderr.isatty()
    if args.roofline_out is not None:
        _check_roofline_target(args)
    if args.check and args.spec is None and (args.numerics == "off" or (_is_chip(args.hw) and not args.numerics_heads)):
        raise VfasimError("--check needs a numerics verdict, and this run computes none (on a chip give "
                          "--numerics-heads N; on one core leave --numerics on)")
    if args.spec is not None:
        result = run(**_replayed(args), trace_out=args.trace_out, trace_window=args.trace_window,
                     trace_cores=args.trace_cores, progress=progress, cache=args.cache, jobs=args.jobs,
                     executor=args.executor, scheduler=args.scheduler)
    else:
        result = run(args.hw, args.algo, schedule=args.schedule, options=options, trace_out=args.trace_out,
                     trace_window=args.trace_window, trace_cores=args.trace_cores,
                     progress=progress, batch=args.batch, kernel=args.kernel, kernel_style=args.kernel_style,
                     dispatch=args.dispatch, numerics=args.numerics, matmul_format=args.matmul_format,
                     cache=args.cache, jobs=args.jobs, executor=args.executor, scheduler=args.scheduler, **shape,
                     numerics_heads=args.heads if args.numerics_heads == "all" else args.numerics_heads)
    doc = result.to_dict()
    if args.numerics is None and doc["numerics"].get("numerics_mode") == "sample":
        print(f"note: numerics checked on {len(doc['numerics']['sampled_query_blocks'])} sampled query blocks "
              f"(more than {FULL_LIMIT:,} score entries); --numerics full checks every row", file=sys.stderr)
    if doc["chip"]:  # a real chip: say whether measurements cover the run
        doc["validation"] = _coverage(doc)
        if not doc["validation"]["inside"] and not args.json:
            print(f"note: {doc['validation']['note']}", file=sys.stderr)
    if args.roofline_out is not None:
        from vfasim.report.roofline_plot import write_roofline

        write_roofline(args.roofline_out, doc["chip"]["roofline"], f"{doc['hw']}, kernel {doc['options']['kernel']}, "
                       f"algo {doc['algo']}")
    broken = args.check and doc["numerics"].get("verdict") == "broken"
    return (to_json({**doc, "row": result.to_row()}) if args.json else format_run(doc)), EXIT_BROKEN if broken else 0


def _check_roofline_target(args: argparse.Namespace) -> None:
    """--roofline-out: a .png or .svg file that may be written, on a config with a chip section."""
    from vfasim.hw import load_hw
    from vfasim.io.outputs import check_file_target

    if Path(args.roofline_out).suffix not in (".png", ".svg"):
        raise VfasimError(f"--roofline-out {args.roofline_out}: give a .png or .svg file")
    if args.spec is None and load_hw(args.hw).chip is None:
        raise VfasimError(f"--roofline-out applies to chip runs; {args.hw} has no chip section (e.g. --hw H100-SXM)")
    check_file_target(args.roofline_out, "roofline file")


def _is_chip(hw: str) -> bool:
    from vfasim.hw import load_hw

    return load_hw(hw).chip is not None


def _core_block_q(args: argparse.Namespace) -> int:
    """One core's default block_q: 128, or a decode step's rows when fewer (the tile is cut to them anyway)."""
    from vfasim.runner.api import DEFAULT_BLOCK

    return min(DEFAULT_BLOCK, args.queries) if args.decode else DEFAULT_BLOCK


def _coverage(doc: dict) -> dict:
    from vfasim.hw import load_hw
    from vfasim.validate import TABLE_FORMATS, coverage, run_mode

    shape = doc["shape"]
    fmt = doc["spec"]["matmul_format"] or TABLE_FORMATS.get(load_hw(doc["spec"]["hw"]).precision.matmul, "")
    mode = run_mode(shape["decode"], doc["spec"]["queries"])
    inside, note = coverage(doc["hw"], doc["options"]["kernel"], mode, shape["kv_len"], shape["head_dim"], fmt)
    return {"inside": inside, "note": note}


#: options of vfasim run that choose outputs, not the run: allowed beside --spec
OUTPUT_OPTIONS = ("spec", "trace_out", "trace_window", "trace_cores", "roofline_out", "json", "quiet", "check", "command",
                  "cache", "jobs", "executor", "scheduler")


def _heads_arg(value: str) -> int | str:
    """``--numerics-heads``: a count, or ``all`` (every head of the run)."""
    if value == "all":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of heads or all, got {value!r}") from None


def _replayed(args: argparse.Namespace) -> dict:
    """run()'s arguments from ``--spec``; any other run option given beside it is refused."""
    from vfasim.runner.spec import read_spec, replay_arguments

    parser = argparse.ArgumentParser()  # vfasim run's options alone, at their defaults
    add_run_command(parser)
    defaults = vars(parser.parse_args([]))
    given = [k for k, v in vars(args).items() if k not in OUTPUT_OPTIONS and v != defaults.get(k)]
    if given:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise VfasimError(f"--spec repeats a run as it was: give no other run options (got {flags})")
    return replay_arguments(read_spec(args.spec))
