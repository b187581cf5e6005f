"""Work reused inside one scope: ``vfasim validate`` and its fit make the same traces, unit layouts and unit timings
many times over (two tiers of every row, rows that differ only in batch or heads, the fit's trials).

``cached(key, make)`` is ``make()``. Inside ``reuse()`` the value is kept under the key until the scope closes, and
a later call with an equal key gets the kept value. Each key is a tuple that starts with the name of what it keeps
and holds everything that value depends on (each caller's docstring says what); kept values are never changed in
place. A result therefore never depends on whether a scope was open (``tests/test_validate.py`` compares runs with
and without one). Nothing is kept outside a scope, and nothing is shared between processes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")
_STORE: ContextVar[dict[Hashable, object] | None] = ContextVar("vfasim_reuse", default=None)


@contextmanager
def reuse() -> Iterator[None]:
    """A scope whose ``cached`` values are kept until it closes (a scope opened inside another shares its values)."""
    token = _STORE.set(_STORE.get() if _STORE.get() is not None else {})
    try:
        yield
    finally:
        _STORE.reset(token)


def reusing() -> bool:
    """Whether a scope is open (a caller whose key costs something to make skips it outside one)."""
    return _STORE.get() is not None


def cached(key: Hashable, make: Callable[[], T]) -> T:
    """``make()``, or inside a scope the value kept under ``key`` (made and kept on the first call)."""
    store = _STORE.get()
    if store is None:
        return make()
    if key not in store:
        store[key] = make()
    return store[key]  # type: ignore[return-value]  # the key's first element names the value's type
