"""A sweep's journal: one JSON line per finished point, appended as it ends, read back on resume.

Assumptions:
- Only the last line can be torn (a crash mid-write): reading skips any line that does not parse,
  and a writer drops a torn tail before appending, so the points before it are kept.
- Every line is flushed and fsync'd before the next point is counted as done.
- One writer per folder: the writer holds the folder's lock for as long as it is open.
- Values JSON cannot hold are written as plain numbers (NumPy scalars) or as their text.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from vfasim.errors import VfasimError
from vfasim.io.outputs import folder_lock

JOURNAL = "points.jsonl"


def read_journal(path: Path) -> dict[str, dict]:
    """key -> record of every complete line; a torn last line (a crash mid-write) is ignored."""
    if not path.exists():
        return {}
    records = {}
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        records[record["key"]] = record
    return records


@contextmanager
def journal_writer(path: Path | None) -> Iterator[Callable[[dict], dict]]:
    """``append(record)``: one JSON line, flushed and fsync'd, after dropping a torn tail.

    Returns the record as a reader of the journal would see it (JSON types), journal or not.
    """
    if path is None:
        yield lambda record: json.loads(json.dumps(record, default=_plain))
        return
    with folder_lock(path.parent, "a sweep writing its journal"):
        yield from _appending(path)


def _appending(path: Path) -> Iterator[Callable[[dict], dict]]:
    data = path.read_bytes() if path.exists() else b""
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as torn:
            torn.truncate(data.rfind(b"\n") + 1)
    with open(path, "a") as f:
        def append(record: dict) -> dict:
            line = json.dumps(record, default=_plain)
            try:
                f.write(line + "\n")
                f.flush()
                os.fsync(f.fileno())
            except OSError as exc:  # a torn line is dropped on the next run
                raise VfasimError(f"cannot write {path}: {exc.strerror or exc}; the points before are kept") from None
            return json.loads(line)

        yield append


def _plain(value: object) -> object:
    return value.item() if hasattr(value, "item") else str(value)
