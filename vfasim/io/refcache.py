"""The references on disk: the float64 oracle and the fa2 baseline of a workload, computed once and reused.

A run with numerics compares its output with two references that depend only on the inputs:
the float64 oracle of Q, K and V, and fa2 at the kernel's precision. Both are kept here,
content-addressed: an entry's name is the SHA-256 of what decides it (the Q/K/V digest, the
tiling, the formats, the rows computed) and of the code version (vfasim's and NumPy's versions
and the source of ``vfasim.functional``, so a change to the engine starts afresh). A second run
of the same workload — on another config of the same precision, another algorithm, a sweep
point, the figure — reads them instead of computing them.

Location: ``$VFASIM_CACHE_DIR`` if set, else ``vfasim/references`` in the user's cache folder
(``$XDG_CACHE_HOME``, by default ``~/.cache``). ``vfasim run --no-cache`` (``run(cache=False)``)
neither reads nor writes it. The folder is bounded (``MAX_BYTES``, or ``$VFASIM_CACHE_MAX_BYTES``):
after a write, the least recently used entries go until it fits.

Safety: an entry is one ``.npy`` file (``np.save`` without pickle, the array's bits as unsigned
integers), written to a temporary file beside it and renamed into place, so concurrent writers of
one entry each put a whole file and a reader sees a whole file or none; a temporary that a killed
writer left is removed by the next write of that entry (``io.outputs.new_temporary``). An entry that cannot be
read counts as absent; a cache that cannot be written is skipped. The
cache never changes a result: a test compares runs with and without it bit for bit.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from vfasim import __version__
from vfasim.errors import VfasimError
from vfasim.io.outputs import new_temporary

MAX_BYTES = 4 * 2**30
SUFFIX = ".npy"


def cache_folder() -> Path:
    """Where entries live (see the module notes)."""
    given = os.environ.get("VFASIM_CACHE_DIR")
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "vfasim" / "references"


@functools.cache
def code_version() -> str:
    """What the references' bits depend on besides their inputs: vfasim, NumPy and the engine's source."""
    return _sources_digest(Path(__file__).parents[1] / "functional", "*.py")


@functools.cache
def model_version() -> str:
    """What a chip run's figures depend on besides their inputs (the config and kernel, by digest): vfasim, NumPy
    and every source file of the package."""
    return _sources_digest(Path(__file__).parents[1], "**/*.py")


def _sources_digest(root: Path, pattern: str) -> str:
    """SHA-256 of vfasim's and NumPy's versions and of each file under ``root`` matching ``pattern``: its path
    there and its bytes."""
    h = hashlib.sha256(f"vfasim {__version__} numpy {np.__version__}".encode())
    for source in sorted(root.glob(pattern)):
        h.update(str(source.relative_to(root)).encode() + source.read_bytes())
    return h.hexdigest()


def entry_name(*parts: object) -> str:
    """The name of the entry ``parts`` (plain values whose ``repr`` says all that decides it) stand for."""
    return hashlib.sha256(repr((code_version(), *parts)).encode()).hexdigest()


class ReferenceCache:
    """Entries of one folder, at most ``max_bytes`` together."""

    def __init__(self, folder: Path, max_bytes: int = MAX_BYTES) -> None:
        self.folder, self.max_bytes = folder, max_bytes

    def cached(self, name: str, dtype: np.dtype, compute: Callable[[], np.ndarray]) -> np.ndarray:
        """The entry ``name`` (an array of ``dtype``), or ``compute()`` kept under that name."""
        found = self.get(name, dtype)
        if found is not None:
            return found
        value = compute()
        self.put(name, value)
        return value

    def get(self, name: str, dtype: np.dtype) -> np.ndarray | None:
        path = self.folder / (name + SUFFIX)
        try:
            bits = np.load(path, allow_pickle=False)
            os.utime(path)  # recently used: pruned last
        except (OSError, ValueError, EOFError):
            return None
        if bits.dtype != _bits(dtype):
            return None
        return bits.view(dtype)

    def put(self, name: str, value: np.ndarray, prune: bool = True) -> None:
        """Keep ``value`` under ``name``; ``prune``: then bring the folder within its bound (a writer of many small
        entries prunes once, after the last)."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = new_temporary(self.folder / (name + SUFFIX))
            try:
                with os.fdopen(fd, "wb") as f:
                    np.save(f, np.ascontiguousarray(value).view(_bits(value.dtype)), allow_pickle=False)
                os.replace(tmp, self.folder / (name + SUFFIX))
            finally:
                Path(tmp).unlink(missing_ok=True)
            if prune:
                self.prune()
        except OSError:
            return  # a cache that cannot be written is only slower

    def prune(self) -> None:
        """Remove least recently used entries until the folder holds at most ``max_bytes``."""
        entries = []
        for path in self.folder.glob("*" + SUFFIX):
            try:
                info = path.stat()
            except OSError:  # removed by another process meanwhile
                continue
            entries.append((info.st_mtime, info.st_size, path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size


def reference_cache(enabled: bool = True) -> ReferenceCache | None:
    """The cache runs use (None when disabled)."""
    if not enabled:
        return None
    return ReferenceCache(cache_folder(), _limit())


def run_store(enabled: bool = True) -> ReferenceCache | None:
    """Where ``vfasim validate`` keeps the chip runs it made (a ``runs`` folder in the cache folder, bounded as
    the references are): a run's figures, named by its config's and kernel's digests, its inputs and
    ``model_version``; None when disabled."""
    if not enabled:
        return None
    return ReferenceCache(cache_folder() / "runs", _limit())


def _limit() -> int:
    limit = os.environ.get("VFASIM_CACHE_MAX_BYTES") or str(MAX_BYTES)
    if not limit.isdigit():
        raise VfasimError(f"VFASIM_CACHE_MAX_BYTES must be a whole number of bytes, got {limit!r}")
    return int(limit)


def _bits(dtype: np.dtype) -> np.dtype:
    """The unsigned integer type of ``dtype``'s width: every format (bfloat16 too) saved without pickle."""
    return np.dtype(f"u{np.dtype(dtype).itemsize}")
