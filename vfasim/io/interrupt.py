"""Ctrl-C (and SIGTERM) on the command line: one line on stderr and exit status 130 (143) within a second.

The first SIGINT raises ``KeyboardInterrupt`` in the main thread as usual, so ``finally`` blocks
run (a half-written output's temporary file is removed, a sweep stops its workers), and starts
a deadline: a thread computing beside the main one (the float64 oracle) cannot be stopped, and
waiting for it could take as long as the run, so after ``GRACE_S`` the process ends anyway.
Further signals are ignored while it winds down. Outputs are replaced atomically and a sweep's
journal drops a torn last line, so ending early never leaves a half-written file. SIGTERM (a
job scheduler, ``kill``, a container stopping) is handled the same way and ends with 143.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

GRACE_S = 0.5
HANDLED = (signal.SIGINT, signal.SIGTERM)
_state: dict[str, int | None] = {"signal": None}
_once = threading.Lock()


@contextmanager
def handled() -> Iterator[None]:
    """SIGINT and SIGTERM handled as above while inside (main thread only; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _on_signal) for sig in HANDLED}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _on_signal(signum: int, frame: object) -> None:
    if _state["signal"] is not None:
        return
    _state["signal"] = signum
    threading.Thread(target=_deadline, daemon=True).start()
    raise KeyboardInterrupt


def _deadline() -> None:
    time.sleep(GRACE_S)
    finish(reason())


def reason() -> str:
    """What ended the run, for its last line: "interrupted" (SIGINT) or "terminated" (SIGTERM)."""
    return "terminated" if _state["signal"] == signal.SIGTERM else "interrupted"


def finish(message: str) -> NoReturn:
    """Print ``message`` once and end the process with 128 + the signal's number (130 for Ctrl-C).

    Other threads are not waited for."""
    if _once.acquire(blocking=False):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        try:
            os.write(2, f"{message}\n".encode())
        except OSError:
            pass
        os._exit(128 + int(_state["signal"] or signal.SIGINT))  # the shell's convention: 130 Ctrl-C, 143 SIGTERM
    while True:  # the other caller is ending the process
        time.sleep(1)
