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
it is left as it is. On other C libraries nothing happens.
"""

from __future__ import annotations

import ctypes
import platform

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameter numbers, from glibc's malloc.h
MMAP_THRESHOLD = 16 << 20  # blocks up to this size come from the heap and are reused
TRIM_THRESHOLD = 32 << 20  # free memory kept at the heap's top before it is given back (above a step's ~18 MB of temporaries)


def tune_allocator() -> bool:
    """Fix glibc's mmap and trim thresholds for this process; False where the C library is not glibc."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
