"""The C allocator's thresholds for a process that runs long engine loops (glibc only).

glibc's malloc serves blocks above ``M_MMAP_THRESHOLD`` with fresh mappings and gives the top
of its heap back to the system once more than ``M_TRIM_THRESHOLD`` is free there. Both start
small and adapt only to the first large blocks a process frees. The engine allocates and frees
a few arrays of a few MB at every key-block step; past ~32K tokens the inputs' own arrays are
too large to raise the thresholds, so each step grows the heap and faults its pages in again:
an engine run at 64K tokens (causal vfa on C4V16, one thread, no trace) took 78 s, 33 s of it
in the kernel, with 17M page faults. With the thresholds fixed (``MMAP_THRESHOLD``,
``TRIM_THRESHOLD``) it took 42 s with 33K page faults and the same peak memory
(``benchmarks/bench_allocator.py``); a 16K run with full checks is a few percent faster.

``tune_allocator`` sets them for the whole process. ``vfasim.run`` calls it when its engine
runs on one thread (full numerics checks, which share the cores with the references; sweep
workers given one core each; one-CPU machines): that engine allocates in the main arena, where
the churn is. An engine with row threads allocates in the threads' own arenas, where fixing the
thresholds measured neutral to ~5% slower (128K causal fa2: 117 s untuned, 122-124 s tuned), so
it is left as it is.

A one-core timing-only run (no engine: the trace made without arithmetic, then timed) allocates and frees arrays as
long as its trace, tens of MB each, pass after pass. glibc serves each with a fresh mapping whose every
page then faults in the kernel, and a freed one goes back to the system. ``keep_freed_memory`` serves every
block from the heap and never trims it, so the next pass reuses the pages the last one freed: a 128K causal
fa2 run on one core (``--numerics off``) spent 1.2 s of system time and now 0.4 s (medians of three), its peak
1052 MiB then, 1018 MiB now (``benchmarks/bench_timing_only.py``). The process keeps its peak heap until it
exits (what it frees is reused, not returned). On other C libraries nothing happens.

NumPy advises the kernel to back each array of 4 MiB or more with huge pages (2 MiB). On the 2-core machine these
figures come from (a virtual machine) a huge page's first touch costs more than its 512 small pages': where the
kernel took the advice (not in every process), the 128K fa2 run above spent 0.7-1.7 s of system time with it and 0.5
s without it (three pairs, the same user time and peak), and the 128K Llama-3-8B layer on H100-SXM 1.1-2.7 s against
1.1-1.3 s. ``small_pages`` drops the advice for the rest of the process; timing-only runs (one core and chips),
whose arrays are as long as their traces, call it. A 16K engine run with full numerics, whose arrays are a step's,
measured the same either way and keeps it.
"""

from __future__ import annotations

import ctypes
import importlib
import platform

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_MMAP_MAX = -1, -3, -4  # mallopt parameter numbers, from glibc's malloc.h
MMAP_THRESHOLD = 16 << 20  # blocks up to this size come from the heap and are reused
TRIM_THRESHOLD = 32 << 20  # free memory kept at the heap's top before it is given back (above a step's ~18 MB of temporaries)


NEVER_TRIM = (1 << 31) - 1  # the largest trim threshold mallopt takes (an int): the heap's top is kept


def tune_allocator() -> bool:
    """Fix glibc's mmap and trim thresholds for this process; False where the C library is not glibc."""
    return _mallopt((M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def keep_freed_memory() -> bool:
    """Serve every block from glibc's heap and never trim it, for this process; False where the C library is not
    glibc."""
    return _mallopt((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, NEVER_TRIM))


def small_pages() -> bool:
    """Stop NumPy advising huge pages for the arrays this process makes from now on (what ``NUMPY_MADVISE_HUGEPAGE=0``
    does at NumPy's import); whether it advised them until now."""
    try:
        multiarray = importlib.import_module("numpy._core.multiarray")
    except ImportError:  # NumPy 1.x
        multiarray = importlib.import_module("numpy.core.multiarray")
    return bool(multiarray._set_madvise_hugepage(False))


def _mallopt(*settings: tuple[int, int]) -> bool:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return all([bool(mallopt(name, value)) for name, value in settings])
