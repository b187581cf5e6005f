"""Deeply frozen results: read-only mappings and tuples all the way down, and back to plain JSON types.

``FrozenDict`` is a ``dict`` (so ``json.dumps``, ``pickle`` and ``isinstance(x, dict)`` keep
working) whose mutators raise ``TypeError``; ``freeze`` turns nested dicts into it, lists into
tuples and makes NumPy arrays read-only; ``thaw`` returns plain dicts and lists.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class FrozenDict(dict):
    """A dict that refuses changes after construction."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("this result is read-only (use .to_dict() for a mutable copy)")

    # A dict whose mutators refuse: their signatures differ from dict's on purpose.
    __setitem__ = __delitem__ = __ior__ = _refuse  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[type[FrozenDict], tuple[dict[Any, Any]]]:
        return (FrozenDict, (dict(self),))

    def __hash__(self) -> int:  # type: ignore[override]  # dict declares itself unhashable; this one is
        return hash(tuple(sorted(self.items(), key=repr)))


def freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return FrozenDict((k, freeze(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    if isinstance(value, np.ndarray):
        out = value.copy()
        out.flags.writeable = False
        return out
    return value


def thaw(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value
