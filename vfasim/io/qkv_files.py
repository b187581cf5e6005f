"""Q/K/V loaded from a file: .npz (arrays q, k, v) or .npy (one array stacked [3, ...]).

Checks a file before and after numpy reads it, so a bad file fails with one line naming it
and what is wrong; a good one becomes a float32 ``Workload``.

Assumptions:
- Only numeric arrays are read, never pickled objects: the first bytes must be .npy's magic
  string or a zip header, whatever the extension says.
- Nothing is read in full before the arrays' headers are: each array's declared shape and
  dtype (an .npz member's too, through the zip directory) must fit in the bytes the file (or
  the member) holds, and the memory the arrays with their float32 copies would need is given to
  the caller's check, so a truncated file or a zip bomb is refused in one line naming it.
- Each array is [heads, seq, dim] or [seq, dim] (one head), in any float or integer dtype, and
  is converted to float32; a value that is NaN/Inf in the file or beyond float32's range
  rejects the file rather than running on non-finite inputs.
- Files may be grouped-query (q heads a multiple of k heads) and Q may differ from K in length.
"""

from __future__ import annotations

import math
import zipfile
from collections.abc import Callable
from typing import IO
from pathlib import Path

import numpy as np

from vfasim.errors import VfasimError
from vfasim.workloads import QKV_NAMES, Workload, shape_problem

NUMERIC_KINDS = "fiu"  # float, signed and unsigned integer


def file_error(path: Path, what: str) -> VfasimError:
    """The one-line error for a bad workload file."""
    return VfasimError(f"workload file {path}: {what}")


def parse_problem(exc: Exception) -> str:
    """Say in one line why numpy/zipfile could not read the file."""
    lines = str(exc).splitlines()
    text = lines[0] if lines else type(exc).__name__
    if "Object arrays" in text:
        return "holds an object (non-numeric) array; only numeric arrays are loaded"
    if "pickled" in text:
        return "does not parse as .npy/.npz (numpy sees pickled data, which is never loaded)"
    return f"does not parse ({type(exc).__name__}: {text})"


def read_npz(path: Path) -> tuple[np.ndarray, ...]:
    """Arrays q, k, v of an .npz archive."""
    loaded = np.load(path, allow_pickle=False)
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        what = f"is a single .npy array of shape {loaded.shape}, not an .npz archive"
        raise file_error(path, what)
    with loaded as archive:
        missing = [name for name in QKV_NAMES if name not in archive.files]
        if missing:
            found = ", ".join(archive.files) or "none"
            raise file_error(path, f"missing array(s) {', '.join(missing)} (found: {found})")
        return tuple(archive[name] for name in QKV_NAMES)


def read_npy(path: Path) -> tuple[np.ndarray, ...]:
    """q, k, v from one .npy array stacked as [3, ...]."""
    loaded = np.load(path, allow_pickle=False)
    if not isinstance(loaded, np.ndarray):
        loaded.close()
        raise file_error(path, "is an .npz archive, not a single .npy array")
    if loaded.ndim not in (3, 4) or loaded.shape[0] != 3:
        what = f"expected one array stacked as [3, ...] (q, k, v), got shape {loaded.shape}"
        raise file_error(path, what)
    return loaded[0], loaded[1], loaded[2]


#: how each kind of file starts: .npy's magic string, and a zip archive's local or empty header
MAGIC = {".npy": (b"\x93NUMPY",), ".npz": (b"PK\x03\x04", b"PK\x05\x06")}


def magic_problem(path: Path) -> str | None:
    """Say what the file is, from its first bytes, unless it is .npy or .npz (numpy calls anything else
    "pickled data")."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError as exc:
        return f"cannot read ({exc.strerror})"
    if any(head.startswith(m) for ms in MAGIC.values() for m in ms):
        return None  # the readers name a .npy/.npz mix-up themselves
    suffix = path.suffix.lower()
    kind = "an empty file" if not head else "text" if head.isascii() else "unknown binary data"
    expected = "a NumPy .npy array" if suffix == ".npy" else "an .npz (zip) archive of arrays q, k, v"
    return f"does not parse: it is {kind}, not {expected}"


LOADERS: dict[str, Callable[[Path], tuple[np.ndarray, ...]]] = {".npz": read_npz, ".npy": read_npy}


MemoryCheck = Callable[[float, str], None]  # (bytes needed, what needs them) -> None, or a VfasimError


def read_arrays(path: Path, check_memory: MemoryCheck | None = None, per_element: float = 4.0) -> tuple[np.ndarray, ...]:
    """The raw q, k, v arrays of a file, or a VfasimError naming the file (``load_qkv`` says what is checked)."""
    if not path.is_file():
        raise file_error(path, "is a directory, not a file" if path.is_dir() else
                         "file not found" if not path.exists() else "is not a regular file")
    reader = LOADERS.get(path.suffix.lower())
    if reader is None:
        raise file_error(path, f"unknown extension {path.suffix!r} (expected .npz or .npy)")
    problem = magic_problem(path)
    if problem is not None:
        raise file_error(path, problem)
    try:
        if check_memory is not None:
            check_memory(arrays_bytes(path, per_element), f"workload file {path}: its arrays")
        return reader(path)
    except VfasimError:
        raise
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as exc:
        raise file_error(path, parse_problem(exc)) from exc


def finiteness_problem(name: str, raw: np.ndarray, converted: np.ndarray) -> str | None:
    """Count NaN/Inf in the file and values beyond float32 range, or None."""
    bad = converted.size - int(np.count_nonzero(np.isfinite(converted)))
    if bad == 0:
        return None
    in_file = raw.size - int(np.count_nonzero(np.isfinite(raw)))
    return (f"{name} has {bad} non-finite value(s) after conversion to float32 "
            f"({in_file} NaN/Inf in the file, {bad - in_file} beyond float32 range)")


def to_float32(path: Path, name: str, raw: np.ndarray) -> np.ndarray:
    """Checked float32 [heads, seq, dim] copy of one loaded array."""
    if raw.dtype.kind not in NUMERIC_KINDS:
        raise file_error(path, f"{name} has non-numeric dtype {raw.dtype}")
    arr = raw[np.newaxis] if raw.ndim == 2 else raw
    if arr.ndim != 3:
        expected = "2-D [seq, dim] or 3-D [heads, seq, dim]"
        raise file_error(path, f"{name} must be {expected}, got shape {raw.shape}")
    if arr.size == 0:
        raise file_error(path, f"{name} is empty (shape {raw.shape})")
    with np.errstate(over="ignore", invalid="ignore"):
        out = arr.astype(np.float32)
    problem = finiteness_problem(name, arr, out)
    if problem is not None:
        raise file_error(path, problem)
    return out


def _declared(stream: IO[bytes], where: str) -> tuple[tuple[int, ...], np.dtype, int]:
    """(shape, dtype, header bytes) of the .npy array ``stream`` starts with, from its header alone."""
    try:
        version = np.lib.format.read_magic(stream)
        reader = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        if reader is None:
            raise ValueError(f".npy format version {version[0]}.{version[1]} is not read")
        shape, _, dtype = reader(stream)
    except (ValueError, EOFError, OSError, SyntaxError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise VfasimError(f"{where}: the .npy header does not parse ({first})") from None
    return tuple(shape), dtype, stream.tell()  # a non-numeric dtype is refused by the readers, naming the array


def _plausible(where: str, shape: tuple[int, ...], dtype: np.dtype, holds: int) -> int:
    """The bytes an array header declares, refused when the file (or zip member) cannot hold them."""
    declared = math.prod(shape) * dtype.itemsize
    if declared > holds:
        raise VfasimError(f"{where}: the header declares shape {shape} of {dtype} ({_size(declared)}), but the file "
                          f"holds {_size(holds)} after it (truncated or corrupt)")
    return declared


def declared_arrays(path: Path) -> list[tuple[str, tuple[int, ...], np.dtype]]:
    """(name, shape, dtype) of the arrays a .npy or .npz file declares, each checked against the bytes it holds;
    nothing but the headers is read."""
    with open(path, "rb") as f:
        is_npy = f.read(len(MAGIC[".npy"][0])) == MAGIC[".npy"][0]  # by content: the readers name a mix-up
    if is_npy:
        with open(path, "rb") as f:
            shape, dtype, header = _declared(f, f"workload file {path}")
            _plausible(f"workload file {path}", shape, dtype, path.stat().st_size - header)
            return [("array", shape, dtype)]
    out = []
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            name = info.filename.removesuffix(".npy")
            if name not in QKV_NAMES:
                continue
            where = f"workload file {path}, member {info.filename}"
            with archive.open(info) as member:
                shape, dtype, header = _declared(member, where)
            _plausible(where, shape, dtype, info.file_size - header)
            out.append((name, shape, dtype))
    return out


def arrays_bytes(path: Path, per_element: float) -> float:
    """The memory a file's arrays would need, read and converted (``per_element`` bytes each beside their own);
    the headers alone are read."""
    return sum(math.prod(shape) * (dtype.itemsize + per_element) for _, shape, dtype in declared_arrays(path))


def _size(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{n:,.0f} bytes"


def load_qkv(path: str | Path, check_memory: MemoryCheck | None = None, per_element: float = 4.0) -> Workload:
    """Load Q, K, V from .npz (arrays q, k, v) or .npy (one array stacked [3, ...]).

    Each array is [heads, seq, dim] or [seq, dim]; K and V share a shape, Q and
    K share head_dim, Q heads are a multiple of K heads (grouped-query), and Q
    may be shorter or longer than K. Never unpickles anything. The arrays' headers are read
    first: the bytes its arrays would need (``per_element`` bytes per element beside their own)
    go to ``check_memory``, which refuses a file too large before it is read.
    """
    path = Path(path)
    raw = read_arrays(path, check_memory, per_element)
    q, k, v = (to_float32(path, name, arr) for name, arr in zip(QKV_NAMES, raw))
    problem = shape_problem(q, k, v)
    if problem is not None:
        raise file_error(path, problem)
    return Workload(f"file:{path.name}", q, k, v)
