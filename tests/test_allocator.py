"""The allocator settings vfasim.run makes for one-thread engines and timing-only runs: applied on glibc, a no-op
elsewhere; NumPy's huge-page advice turned off."""

from __future__ import annotations

import platform

from vfasim.allocator import keep_freed_memory, small_pages, tune_allocator


def test_tune_allocator_applies_on_glibc_only():
    glibc = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert tune_allocator() is glibc


def test_keep_freed_memory_applies_on_glibc_only():
    glibc = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert keep_freed_memory() is glibc


def test_small_pages_turns_numpy_huge_page_advice_off():
    small_pages()
    assert small_pages() is False  # off already
