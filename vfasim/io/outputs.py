"""Safe outputs: every path vfasim writes is checked before any work and replaced atomically.

A target file may be absent or a regular file; a directory, symbolic link, FIFO, device or
socket under that name is refused, because replacing it would destroy what the name stands
for. A file is written to a temporary file in the same folder, flushed to disk, then renamed
over the target (``os.replace``): a reader sees the old file or the new one, never a torn one,
and a failed write (full disk, no permission) leaves the old file and no temporary behind.
A temporary is named ``.<target>.<random>.<pid>.tmp``: one left by a process killed mid-write
(SIGKILL, power loss) is removed by the next write of the same target once no process of that
id runs on this machine.

An output folder may be absent (it is created with its parents when written) or a directory;
the nearest existing ancestor must be a writable directory. ``folder_lock`` keeps a second
writer (another ``vfasim sweep`` on the same ``--out``) from working in a folder at once.
"""

from __future__ import annotations

import errno
import math
import os
import re
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from vfasim.errors import VfasimError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

LOCK_NAME = ".vfasim.lock"


def check_file_target(target: str | os.PathLike, what: str = "output file") -> Path:
    """``target`` may be written: absent or a regular file, in an existing writable folder."""
    if not str(target):
        raise VfasimError(f"{what}: an empty name; give a file path")
    target = Path(target)
    _check_kind(target, what)
    folder = target.parent
    if not folder.is_dir():
        missing = "does not exist" if not folder.exists() else "is not a directory"
        raise VfasimError(f"{what} {target}: folder {folder} {missing}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise VfasimError(f"{what} {target}: folder {folder} is not writable")
    _probe(target, what)
    return target


def check_folder_target(folder: str | os.PathLike, names: Iterable[str] = (), what: str = "output folder") -> Path:
    """``folder`` may hold outputs ``names``: a directory or absent under a writable directory."""
    if not str(folder):
        raise VfasimError(f"{what}: an empty name; give a folder path")
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise VfasimError(f"{what} {folder}: exists and is not a directory")
    ancestor = next(p for p in (folder, *folder.parents) if p.exists() or p == Path(p.anchor or "."))
    if not ancestor.is_dir():
        raise VfasimError(f"{what} {folder}: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise VfasimError(f"{what} {folder}: {ancestor} is not writable")
    if folder.is_dir():
        for name in names:
            _check_kind(folder / name, what.replace("folder", "file"))
    return folder


def _check_kind(target: Path, what: str) -> None:
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise VfasimError(f"{what} {target}: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise VfasimError(f"{what} {target}: exists and is {_kind_name(mode)}; only a regular file is "
                          "replaced (remove it or choose another name)")


def _kind_name(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


@contextmanager
def atomic_path(target: str | os.PathLike, what: str = "output file") -> Iterator[Path]:
    """A temporary path to write; on success it replaces ``target`` (checked again just before)."""
    target = check_file_target(target, what)
    fd, tmp = _mkstemp(target, what)
    os.close(fd)
    try:
        yield Path(tmp)
        _sync(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        _check_kind(target, what)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise VfasimError(f"cannot write {what} {target}: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _sync_folder(target.parent)


def write_text(target: str | os.PathLike, content: str, what: str = "output file") -> Path:
    with atomic_path(target, what) as tmp:
        tmp.write_text(content, encoding="utf-8")
    return Path(target)


def write_with(target: str | os.PathLike, writer: Callable[[Path], object], what: str = "output file") -> Path:
    """``writer(temporary path)`` writes the content (e.g. ``frame.to_parquet``); then it replaces."""
    with atomic_path(target, what) as tmp:
        writer(tmp)
    return Path(target)


def save_figure(fig: Figure, paths: Iterable[Path], dpi: int) -> list[Path]:
    """PNG/SVG by suffix, atomically and deterministically (fixed SVG ids, no date stamp)."""
    import matplotlib

    out = []
    with matplotlib.rc_context({"svg.hashsalt": "vfasim"}):
        for p in paths:
            fmt = Path(p).suffix.lstrip(".")
            with atomic_path(p) as tmp:
                fig.savefig(tmp, format=fmt, dpi=dpi, metadata=_no_date(fmt))
            out.append(Path(p))
    return out


def _no_date(fmt: str) -> dict:
    return {"Date": None} if fmt in ("svg", "pdf") else {}


@contextmanager
def folder_lock(folder: Path, purpose: str) -> Iterator[None]:
    """Hold ``folder``'s lock file while working; a second holder is refused at once, naming the first.

    The lock is an ``flock`` on ``folder/.vfasim.lock`` (a ``msvcrt`` byte lock on Windows): the
    operating system drops it when its holder ends, however it ends, so a killed run never leaves
    the folder locked.
    """
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            _lock(fd)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES, errno.EDEADLK):
                raise
            holder = _read_at_start(fd).decode(errors="replace").strip() or "another process"
            raise VfasimError(f"{folder} is in use by {holder} ({purpose}); wait for it to end or choose "
                              "another folder") from None
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, f"pid {os.getpid()}".encode())
        yield
    finally:
        os.close(fd)


def _lock(fd: int) -> None:
    """An exclusive lock on ``fd``, without waiting (imported here: ``fcntl`` does not exist on Windows)."""
    if sys.platform == "win32":
        import msvcrt

        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    else:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _read_at_start(fd: int) -> bytes:
    """What the holder wrote (nothing where its lock keeps others from reading, as on Windows)."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        return os.read(fd, 32)
    except OSError:
        return b""


def stdout_error(exc: OSError, what: str) -> VfasimError:
    """The one-line error for ``what`` that standard output did not take (full, or a pipe whose reader left); what
    is still buffered is dropped, so that nothing more is reported when the process exits."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return VfasimError(f"cannot write {what} to standard output ({exc.strerror or exc})")


def _probe(target: Path, what: str) -> None:
    """The folder of ``target`` really takes a new file (not /proc, not a read-only mount)."""
    fd, probe = _mkstemp(target, what)
    os.close(fd)
    os.unlink(probe)


def _mkstemp(target: Path, what: str) -> tuple[int, str]:
    try:
        return new_temporary(target)
    except OSError as exc:
        raise VfasimError(f"cannot write {what} {target}: {exc.strerror or exc}") from None


def new_temporary(target: Path) -> tuple[int, str]:
    """(open descriptor, path) of a new temporary beside ``target``, named for it and this process; the
    temporaries of ``target`` left by processes that no longer run are removed first."""
    for stale in stale_temporaries(target):
        stale.unlink(missing_ok=True)
    return tempfile.mkstemp(prefix=f".{target.name}.", suffix=f".{os.getpid()}.tmp", dir=target.parent)


def stale_temporaries(target: Path) -> list[Path]:
    """Temporaries of ``target`` (``.<name>.<random>.<pid>.tmp``) whose process no longer runs."""
    pattern = re.compile(re.escape(f".{target.name}.") + r"[a-z0-9_]+\.(\d+)\.tmp")
    try:
        names = os.listdir(target.parent)
    except OSError:
        return []
    found = ((name, pattern.fullmatch(name)) for name in names)
    return [target.parent / name for name, m in found if m is not None and not _running(int(m.group(1)))]


def _running(pid: int) -> bool:
    """A process ``pid`` runs on this machine, or may (another user's answers EPERM; Windows is not asked: its
    ``os.kill`` would end the process)."""
    if sys.platform == "win32":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True
    return True


def _sync(path: str) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _sync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def finite(x: object) -> object:
    """``x`` with every non-finite float (in nested dicts, lists and tuples) replaced by None: strict JSON."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x
