"""Algorithm options beyond the algorithm's name: one table of their rules and bounds.

``Options`` holds them (None keeps the algorithm's own default); ``OPTION_RULES`` checks and
normalises each, so the API, the command line and sweeps refuse the same values.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

from vfasim.errors import VfasimError
from vfasim.functional.policy import ALGORITHMS, OPTION_SCOPE
from vfasim.runner.rules import flag, integer, number, optional, text

DEFAULT_TOPK = 8

OPTION_RULES: dict[str, Callable[[str, object], object]] = {
    "lam": lambda n, v: number(n, v, 0.0, 1.0), "topk": optional(lambda n, v: integer(n, v, 0)),
    "key_summary": optional(text), "q_summary": optional(text), "minit": optional(flag),
    "reorder": optional(flag), "rescale_threshold": optional(lambda n, v: number(n, v, 0.0)),
    "exp_emulation": optional(lambda n, v: number(n, v, 0.0, 1.0)),
    "protect_special": optional(flag), "minit_clamp": optional(flag), "fp32_state": optional(flag),
    "p_bf16": optional(flag), "minit_margin": optional(lambda n, v: number(n, v)),
}


def check_options(options: object) -> None:
    """Each field of a (frozen) ``Options`` checked and normalised in place (``np.int64(2)`` -> ``2``)."""
    for name, rule in OPTION_RULES.items():
        if hasattr(options, name):
            object.__setattr__(options, name, rule(name, getattr(options, name)))


@dataclass(frozen=True)
class Options:
    """Algorithm options beyond the name (None keeps the algorithm's default); checked on creation."""

    lam: float = 1e-3
    topk: int | None = None  # bsfa: DEFAULT_TOPK, capped at the key blocks beside the diagonal (topk_for)
    key_summary: str | None = None
    minit: bool | None = None
    reorder: bool | None = None
    q_summary: str | None = None
    rescale_threshold: float | None = None
    exp_emulation: float | None = None
    protect_special: bool | None = None
    minit_clamp: bool | None = None
    minit_margin: float | None = None
    fp32_state: bool | None = None
    p_bf16: bool | None = None

    def __post_init__(self) -> None:
        check_options(self)
        if not 0.0 < self.lam < 1.0:
            raise VfasimError(f"lam must lie in (0, 1), got {self.lam}")
        if self.topk is not None and (isinstance(self.topk, bool) or not isinstance(self.topk, int) or self.topk < 0):
            raise VfasimError(f"topk must be an integer >= 0, got {self.topk!r}")

    def policy_options(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("lam", "topk")}


def applies_to(option: str, algo: str) -> bool:
    """Whether ``option`` (a field of ``Options``) means something for ``algo`` (the policy's ``OPTION_SCOPE``;
    ``lam`` for the skipping algorithms, ``topk`` for bsfa); an unknown algorithm is left to ``policy_for``."""
    if algo not in ALGORITHMS:
        return True
    if option == "lam":
        return ALGORITHMS[algo].skip in ("block", "row")
    if option == "topk":
        return ALGORITHMS[algo].skip == "topk"
    return algo in OPTION_SCOPE.get(option, (algo,))


def topk_for(topk: int | None, n_kblocks: int) -> int:
    """bsfa's off-diagonal blocks kept per query block: ``topk`` as given, else ``DEFAULT_TOPK`` capped at the
    ``n_kblocks - 1`` blocks beside the diagonal (so the default works at every length)."""
    return min(DEFAULT_TOPK, max(n_kblocks - 1, 0)) if topk is None else topk


def merged_options(options: Options, option_kwargs: dict) -> Options:
    """``options`` with keyword options (``lam=0.01``) on top; an unknown keyword, or one ``options`` sets too, is
    refused."""
    unknown = set(option_kwargs) - set(Options.__dataclass_fields__)
    if unknown:
        raise VfasimError(f"unknown option(s) {', '.join(sorted(unknown))}")
    both = [k for k in option_kwargs if getattr(options, k) != getattr(Options, k)]
    if both:
        raise VfasimError(f"{', '.join(both)} given both in options=Options(...) and as a keyword: give it once")
    return Options(**{**asdict(options), **option_kwargs})
