"""Ctrl-C on the command line: one line on stderr and exit status 130 within a second.

The first SIGINT raises ``KeyboardInterrupt`` in the main thread as usual, so ``finally`` blocks
run (a half-written output's temporary file is removed, a sweep stops its workers), and starts
a deadline: a thread computing beside the main one (the float64 oracle) cannot be stopped, and
waiting for it could take as long as the run, so after ``GRACE_S`` the process ends anyway.
Further SIGINTs are ignored while it winds down. Outputs are replaced atomically and a sweep's
journal drops a torn last line, so ending early never leaves a half-written file.
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

EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell's convention
GRACE_S = 0.5
_state = {"interrupted": False}
_once = threading.Lock()


@contextmanager
def handled() -> Iterator[None]:
    """SIGINT handled as above while inside (main thread only; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _on_sigint(signum: int, frame: object) -> None:
    if _state["interrupted"]:
        return
    _state["interrupted"] = True
    threading.Thread(target=_deadline, daemon=True).start()
    raise KeyboardInterrupt


def _deadline() -> None:
    time.sleep(GRACE_S)
    finish("interrupted")


def finish(message: str) -> NoReturn:
    """Print ``message`` once and end the process with status 130, not waiting for other threads."""
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
        os._exit(EXIT_INTERRUPTED)
    while True:  # the other caller is ending the process
        time.sleep(1)
