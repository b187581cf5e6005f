"""The reference cache: a second run reads the oracle and the fa2 baseline instead of computing them, with the
same results bit for bit; entries are whole files, bounded in total, and a broken cache is only slower."""

from __future__ import annotations

import os
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import vfasim
from vfasim.io import refcache
from vfasim.cli import main
from vfasim.io.refcache import ReferenceCache, cache_folder, reference_cache

SMALL = dict(seq_len=512, head_dim=32, block_q=64, block_k=64, heads=2, seed=3)


def entries() -> list[Path]:
    return sorted(cache_folder().glob("*.npy"))


@pytest.mark.parametrize("numerics", ["full", "sample"])
def test_a_second_run_reads_the_references_and_gives_the_same_result(numerics, monkeypatch):
    first = vfasim.run("C4V16", "vfa", numerics=numerics, **SMALL).to_dict()
    assert len(entries()) == 2  # the oracle and the fa2 baseline
    computed = []
    monkeypatch.setattr("vfasim.runner.prepare.reference_attention", lambda *a: computed.append(a))
    again = vfasim.run("C4V16", "vfa", numerics=numerics, **SMALL).to_dict()
    assert again == first and computed == []
    other = vfasim.run("C4V16-2xexp", "vsa", numerics=numerics, **SMALL)  # same inputs and formats: same entries
    assert len(entries()) == 2 and other.numerics["rel_err_vs_fp64"] is not None


def test_without_the_cache_nothing_is_read_or_written(monkeypatch, tmp_path):
    cached = vfasim.run("C16V32", "vfa", **SMALL).to_dict()
    monkeypatch.setenv("VFASIM_CACHE_DIR", str(tmp_path / "unused"))
    assert vfasim.run("C16V32", "vfa", cache=False, **SMALL).to_dict() == cached
    assert main(["run", "--hw", "C16V32", "--seq-len", "256", "--head-dim", "32", "--no-cache", "--quiet"]) == 0
    assert not (tmp_path / "unused").exists()


def test_the_default_folder_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("VFASIM_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_folder() == tmp_path / "vfasim" / "references"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_folder() == Path.home() / ".cache" / "vfasim" / "references"


def test_entries_keep_every_bit_of_every_format(tmp_path):
    cache = ReferenceCache(tmp_path)
    for dtype in (np.float64, np.float32, np.float16, ml_dtypes.bfloat16):
        value = np.array([1.5, -0.0, np.inf, np.nan, 6e-8], np.float64).astype(dtype)
        cache.put(f"e{np.dtype(dtype).name}", value)
        back = cache.get(f"e{np.dtype(dtype).name}", np.dtype(dtype))
        assert back is not None and back.dtype == value.dtype and back.tobytes() == value.tobytes()
    assert not list(tmp_path.glob("*.tmp"))


def test_the_folder_is_bounded_least_recently_used_first(tmp_path):
    cache = ReferenceCache(tmp_path, max_bytes=4000)
    for i in range(4):
        cache.put(f"e{i}", np.zeros(100))  # 928 bytes each with the header
        os.utime(tmp_path / f"e{i}.npy", (i, i))
    assert cache.get("e0", np.dtype(np.float64)) is not None  # read: now the most recent
    cache.put("e4", np.zeros(100))
    assert sorted(p.stem for p in tmp_path.glob("*.npy")) == ["e0", "e2", "e3", "e4"]


def test_a_broken_or_unwritable_cache_is_only_slower(tmp_path, monkeypatch):
    cache = ReferenceCache(tmp_path)
    (tmp_path / "torn.npy").write_bytes(b"\x93NUMPY garbage")
    assert cache.get("torn", np.dtype(np.float64)) is None
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("VFASIM_CACHE_DIR", str(blocked / "below"))  # a folder that cannot be made
    assert vfasim.run("C4V16", "fa2", **SMALL).numerics["verdict"] != "unchecked"


def test_code_version_names_the_engine_source():
    assert refcache.code_version() == refcache.code_version() and len(refcache.code_version()) == 64


def test_a_bad_size_limit_is_refused(monkeypatch):
    monkeypatch.setenv("VFASIM_CACHE_MAX_BYTES", "2GB")
    with pytest.raises(vfasim.errors.VfasimError, match="VFASIM_CACHE_MAX_BYTES"):
        reference_cache()


def test_concurrent_writers_and_readers_see_whole_entries(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    value = np.arange(200_000, dtype=np.float64)
    cache = ReferenceCache(tmp_path)

    def write_then_read(_: int) -> bool:
        cache.put("shared", value)
        got = cache.get("shared", np.dtype(np.float64))
        return got is not None and np.array_equal(got, value)

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(write_then_read, range(32)))
    assert [p.name for p in tmp_path.iterdir()] == ["shared.npy"]  # no temporary left behind
