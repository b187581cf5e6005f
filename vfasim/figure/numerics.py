"""The numerics verdict of every bar's kernel, so the figure never shows a fast kernel that is wrong.

Each (paper config, FA or VFA) is run through ``vfasim.run`` on the figure's sequence
workload (one causal llm-like head of ``seq_len`` tokens, 128×128 blocks) and keeps the
verdict against fa2 at the same precision (``functional.checks``).
"""

from __future__ import annotations

from vfasim.runner.api import run
from vfasim.figure.study import BLOCK, PAPER_CONFIGS, SEQUENCE_VARIANTS


def verdicts(seq_len: int, head_dim: int) -> dict[tuple[str, str], str]:
    """(config, algorithm) -> ok / degraded / broken."""
    return {(hw, algo): str(run(hw, algo, seq_len=seq_len, head_dim=head_dim, block_q=BLOCK,
                                block_k=BLOCK).numerics["verdict"])
            for hw in PAPER_CONFIGS for algo in SEQUENCE_VARIANTS}


def verdict_line(found: dict[tuple[str, str], str], seq_len: int, head_dim: int) -> str:
    cells = ", ".join(f"{hw} {algo} {v}" for (hw, algo), v in found.items())
    return f"numerics verdicts (vfasim run, {seq_len} tokens causal, head dim {head_dim}): {cells}"
