"""The allocator thresholds vfasim.run fixes for one-thread engines: applied on glibc, a no-op elsewhere."""

from __future__ import annotations

import platform

from vfasim.allocator import tune_allocator


def test_tune_allocator_applies_on_glibc_only():
    glibc = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert tune_allocator() is glibc
