"""Where independent tasks run (a sweep's points, validate's rows and fits, the figure's search): in this process,
in a pool of local processes, or on a Dask cluster.

The executors are generic: a task is a function and its arguments, and each result comes back
with its task's index as soon as it is done, in whatever order the tasks finish.

Assumptions:
- Tasks are independent and deterministic, so the executor and the order of completion never
  change a result.
- The local pool's workers ignore Ctrl-C (the parent handles it and stops them), end when the
  parent dies, and share the cores: each worker's engine gets cpu_count // jobs threads.
- Dask workers import vfasim themselves; the function and its arguments must pickle. A client
  made here from an address is closed when the results are consumed or abandoned. Results
  come back pickled: a scheduler is trusted like code run here (use only your own cluster).
- A cluster that has no worker ``DASK_WORKER_WAIT_S`` seconds after connecting is an error.
- A task the cluster gives up on (``KilledWorker``: its worker died, as often as the scheduler's
  ``allowed-failures`` allows) ends the work with one line (``WorkLost``); the results that came
  back before it are the caller's to keep. Each result is released on the cluster once it is
  read, so a worker lost later has nothing finished to recompute.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import TYPE_CHECKING, Any, TypeVar

from vfasim.errors import VfasimError
from vfasim.functional import engine

if TYPE_CHECKING:
    from dask import distributed

EXECUTORS = ("local", "dask")
PARENT_POLL_S = 0.5
DASK_WORKER_WAIT_S = 60.0  # a scheduler with no worker after this long is an error, not a silent wait
R = TypeVar("R")


class WorkLost(VfasimError):
    """The cluster gave up on a task (its workers died); the results yielded before it are whole."""


def compute(fn: Callable[..., R], tasks: Sequence[tuple[Any, ...]], names: Sequence[str], executor: str,
            jobs: int | None, scheduler: str | distributed.Client | None) -> Iterator[tuple[int, R]]:
    """(index, ``fn(*tasks[index])``) as each task ends; ``names`` label the tasks on Dask.

    ``executor`` is ``local`` (``jobs`` processes, default one per core; 1 runs in this process)
    or ``dask`` (``scheduler``: an address or a ``dask.distributed.Client``).
    """
    if not tasks:
        return iter(())
    if executor == "dask":
        return _on_dask(fn, tasks, names, scheduler)
    jobs = min(jobs or os.cpu_count() or 1, len(tasks))
    return ((i, fn(*args)) for i, args in enumerate(tasks)) if jobs == 1 else _on_pool(fn, tasks, jobs)


def _on_pool(fn: Callable[..., R], tasks: Sequence[tuple[Any, ...]], jobs: int) -> Iterator[tuple[int, R]]:
    """Results as they finish; if abandoned (Ctrl-C, max_points), the workers are stopped at once."""
    before = set(multiprocessing.active_children())
    pool = ProcessPoolExecutor(max_workers=jobs, initializer=_worker_start, initargs=(os.getpid(), jobs))
    futures = {pool.submit(fn, *args): i for i, args in enumerate(tasks)}
    workers = set(multiprocessing.active_children()) - before
    try:
        for fut in as_completed(futures):
            yield futures[fut], fut.result()
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        for worker in workers:
            worker.terminate()
        raise
    pool.shutdown()


def _worker_start(parent: int, jobs: int) -> None:
    """In each pool worker: Ctrl-C is the parent's to handle, and the worker ends when the parent does.

    A worker blocks reading its task pipe, whose other end it inherited, so it would never see
    the parent die (SIGKILL, OOM killer); a daemon thread checks the parent every half second.
    The workers share the cores: each engine gets its share of threads, not all of them.
    """
    engine.ENGINE_THREADS = max(1, (os.cpu_count() or 1) // jobs)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True, name="watch-parent").start()


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


def _on_dask(fn: Callable[..., R], tasks: Sequence[tuple[Any, ...]], names: Sequence[str],
             scheduler: str | distributed.Client | None) -> Iterator[tuple[int, R]]:
    from vfasim.io.extras import need

    need("dask", "--executor dask")
    from dask import distributed

    try:
        client = scheduler if isinstance(scheduler, distributed.Client) else distributed.Client(scheduler)
    except (OSError, ValueError, TypeError) as exc:  # unreachable, or not an address at all
        raise VfasimError(f"cannot reach the Dask scheduler {scheduler}: {str(exc).splitlines()[0]}") from None
    try:
        client.wait_for_workers(1, timeout=DASK_WORKER_WAIT_S)
    except (TimeoutError, OSError):
        if client is not scheduler:
            client.close()
        raise VfasimError(f"no Dask worker joined the scheduler {scheduler} within {DASK_WORKER_WAIT_S:g} s "
                          "(start workers with: dask worker ADDRESS)") from None
    futures = {client.submit(fn, *args, key=name): i for i, (args, name) in enumerate(zip(tasks, names))}
    client_log = logging.getLogger("distributed.client")
    level = client_log.level
    client_log.setLevel(logging.ERROR)  # a lost worker is one line (WorkLost), not many
    try:
        for fut in distributed.as_completed(futures):
            try:
                result = fut.result()
            except distributed.KilledWorker as exc:
                raise WorkLost(f"the Dask cluster lost the worker running {fut.key} and gave up on it "
                               f"({type(exc).__name__})") from None
            yield futures.pop(fut), result
            fut.release()  # read: nothing for the cluster to keep or recompute
    finally:
        client_log.setLevel(level)
        client.cancel(list(futures))
        if client is not scheduler:
            client.close()
