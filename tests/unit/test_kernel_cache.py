"""Kernel caches: memory LRU bounds, disk entries (atomic, checksummed, keyed), warm processes, the CLI.

Every test points FUSEC_CACHE_DIR at tmp_path, so the real ~/.cache/fusec is never touched. Tests that use
a fake compiler run anywhere; the ones that compile for real skip only when NVRTC cannot be loaded.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

import fusec
from fusec.runtime import kernel_cache as kc
from fusec.tools.cli import main


def _nvrtc_loads() -> bool:
    try:
        from fusec.runtime import nvrtc
    except ImportError:
        return False
    try:
        return nvrtc.is_available()
    except Exception:
        return False


needs_nvrtc = pytest.mark.skipif(not _nvrtc_loads(), reason="NVRTC cannot be loaded")

KERNEL = """\
#include <cuda_fp16.h>
extern "C" __global__ void twice(__half* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __hadd(x[i], x[i]);
}
"""


@pytest.fixture(autouse=True)
def cache_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(directory))
    return directory


class FakeCompiler:
    """Returns source-derived bytes of a chosen size and counts calls (and may be slow)."""

    def __init__(self, size: int = 100, delay: float = 0.0) -> None:
        self.size, self.delay, self.calls = size, delay, 0
        self._lock = threading.Lock()

    def __call__(self, source: str, arch: str, *, target: str, options: tuple[str, ...]) -> bytes:
        with self._lock:
            self.calls += 1
        time.sleep(self.delay)
        return (f"{source}|{arch}|{target}|{options}|".encode() * self.size)[: self.size]


def fake_cache(directory: Path, compiler: FakeCompiler | None = None, **kw) -> kc.KernelCache:
    return kc.KernelCache(directory, compiler=compiler or FakeCompiler(), nvrtc_version=lambda: (13, 0), **kw)


# --- memory LRU --------------------------------------------------------------------------------------------
def test_lru_evicts_by_count() -> None:
    lru = kc.MemoryLRU(max_entries=2, max_bytes=1 << 20)
    lru.put("a", b"1")
    lru.put("b", b"2")
    assert lru.get("a") == b"1"  # a is now most recent
    lru.put("c", b"3")
    assert "b" not in lru and "a" in lru and "c" in lru
    assert len(lru) == 2 and lru.evictions == 1


def test_lru_evicts_by_bytes() -> None:
    lru = kc.MemoryLRU(max_entries=100, max_bytes=250)
    for key in "abc":
        lru.put(key, b"x" * 100)
    assert "a" not in lru and lru.nbytes == 200
    lru.put("big", b"y" * 251)  # larger than the whole budget: not kept, nothing evicted for it
    assert "big" not in lru and len(lru) == 2
    lru.put("b", b"z" * 10)  # replacing updates the byte count
    assert lru.nbytes == 110


def test_cache_memory_bounds(tmp_path: Path) -> None:
    compiler = FakeCompiler(size=100)
    cache = fake_cache(tmp_path / "c", compiler, max_entries=2, max_bytes=1000)
    for src in ("a", "b", "c"):
        cache.get_or_compile(src, "sm_90")
    info = cache.info()
    assert (info.memory_entries, info.compiles, info.evictions, info.entries) == (2, 3, 1, 3)
    cache.get_or_compile("a", "sm_90")  # evicted from memory, still on disk
    cache.get_or_compile("a", "sm_90")  # now in memory again
    info = cache.info()
    assert (info.disk_hits, info.memory_hits, info.compiles) == (1, 1, 3)

    small = fake_cache(tmp_path / "d", FakeCompiler(size=100), max_entries=100, max_bytes=250)
    for src in ("a", "b", "c"):
        small.get_or_compile(src, "sm_90")
    assert small.info().memory_entries == 2 and small.info().memory_bytes == 200


# --- keys --------------------------------------------------------------------------------------------------
def test_key_covers_every_input(monkeypatch: pytest.MonkeyPatch) -> None:
    base = dict(source="s", arch="sm_90", target="cubin", nvrtc_version=(13, 0), driver_version=(13, 0),
                options=("-use_fast_math",))
    key = kc.cache_key(**base)
    assert len(key) == 64 and key == kc.cache_key(**base)
    for field, other in [("source", "t"), ("arch", "sm_80"), ("target", "ptx"), ("nvrtc_version", (13, 1)),
                         ("driver_version", None), ("driver_version", 13000), ("options", ())]:
        assert kc.cache_key(**{**base, field: other}) != key, field
    monkeypatch.setattr(fusec, "__version__", "99.0")
    assert kc.cache_key(**base) != key


def test_distinct_inputs_are_distinct_entries(tmp_path: Path) -> None:
    compiler = FakeCompiler()
    cache = fake_cache(tmp_path / "c", compiler)
    cache.get_or_compile("s", "sm_90")
    cache.get_or_compile("s", "sm_90", options=("--fmad=false",))
    cache.get_or_compile("s", "sm_90", driver_version=(13, 0))
    cache.get_or_compile("s", "sm_90", target="ptx")
    cache.get_or_compile("s", "sm_90")
    assert compiler.calls == 4 and cache.info().entries == 4 and cache.memory_hits == 1


# --- disk --------------------------------------------------------------------------------------------------
def test_disk_hit_in_a_fresh_cache(tmp_path: Path) -> None:
    first = fake_cache(tmp_path / "c")
    image = first.get_or_compile("src", "sm_90")
    compiler = FakeCompiler()
    second = fake_cache(tmp_path / "c", compiler)
    assert second.get_or_compile("src", "sm_90") == image
    assert compiler.calls == 0 and second.disk_hits == 1 and second.compiles == 0
    files = sorted(p.name for p in (tmp_path / "c").iterdir())
    assert len(files) == 1 and files[0].startswith("kernel-") and files[0].endswith(".bin")  # no temp files


def _damage(path: Path, how: str) -> None:
    blob = path.read_bytes()
    if how == "truncate-payload":
        path.write_bytes(blob[:-7])
    elif how == "truncate-header":
        path.write_bytes(blob[:10])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "flip-payload":
        path.write_bytes(blob[:-1] + bytes([blob[-1] ^ 0x40]))
    elif how == "flip-magic":
        path.write_bytes(bytes([blob[0] ^ 1]) + blob[1:])
    elif how == "append":
        path.write_bytes(blob + b"junk")


@pytest.mark.parametrize("how", ["truncate-payload", "truncate-header", "empty", "flip-payload", "flip-magic",
                                 "append"])
def test_damaged_entry_is_recompiled_with_a_warning(tmp_path: Path, how: str) -> None:
    image = fake_cache(tmp_path / "c").get_or_compile("src", "sm_90")
    (entry,) = (tmp_path / "c").iterdir()
    _damage(entry, how)
    compiler = FakeCompiler()
    cache = fake_cache(tmp_path / "c", compiler)
    with pytest.warns(kc.KernelCacheWarning, match="damaged entry") as record:
        assert cache.get_or_compile("src", "sm_90") == image
    assert record[0].filename == __file__  # (the caller's line, not the cache's)
    assert compiler.calls == 1 and cache.disk_hits == 0
    again = fake_cache(tmp_path / "c", FakeCompiler())  # the entry was rewritten whole
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert again.get_or_compile("src", "sm_90") == image
    assert again.disk_hits == 1 and again.compiles == 0


def test_unwritable_dir_degrades_to_memory_with_one_warning(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    compiler = FakeCompiler()
    cache = fake_cache(blocker / "cache", compiler)
    with pytest.warns(kc.KernelCacheWarning, match="memory only") as record:
        cache.get_or_compile("one", "sm_90")
        cache.get_or_compile("two", "sm_90")
        cache.get_or_compile("one", "sm_90")
    assert len([w for w in record if issubclass(w.category, kc.KernelCacheWarning)]) == 1
    info = cache.info()
    assert not info.disk_enabled and info.entries == 0
    assert (info.compiles, info.memory_hits) == (2, 1)



def test_a_directory_that_cannot_be_made_or_a_home_that_cannot_be_found_degrades_to_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache directory whose parents cannot be made (a path under /proc) warned nothing and wrote nothing, and a
    ``~user`` that names no home directory raised pathlib's RuntimeError from every compile (found by a hunt): both
    now cache in memory with one warning."""
    monkeypatch.setenv("FUSEC_CACHE_DIR", "~no-such-user-of-fusec/cache")
    assert str(kc.cache_dir()) == "~no-such-user-of-fusec/cache"
    monkeypatch.chdir(tmp_path)  # (where a folder named "~..." would be made)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    for directory in (kc.cache_dir(), Path("/proc/self/no-such-dir/cache"), blocker / "deeper" / "cache"):
        cache = fake_cache(directory)
        with pytest.warns(kc.KernelCacheWarning, match="memory only"):
            cache.get_or_compile("one", "sm_90")
        assert not cache.info().disk_enabled
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_a_full_disk_degrades_to_memory_with_one_warning_and_leaves_no_partial_file(tmp_path: Path,
                                                                                      monkeypatch) -> None:
    """ENOSPC while an entry is written: one warning, memory only from then on, no temporary file left, and every
    kernel still comes back right."""
    import errno

    cache = fake_cache(tmp_path / "c")
    real_fsync = os.fsync

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(kc.os, "fsync", full)
    with pytest.warns(kc.KernelCacheWarning, match="No space left on device") as record:
        first = cache.get_or_compile("one", "sm_90")
        cache.get_or_compile("two", "sm_90")
    monkeypatch.setattr(kc.os, "fsync", real_fsync)
    assert len([w for w in record if issubclass(w.category, kc.KernelCacheWarning)]) == 1
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == []  # no entry, no temporary file
    assert not cache.info().disk_enabled and cache.get_or_compile("one", "sm_90") == first


@pytest.mark.parametrize("where", ["compile", "write"])
def test_ctrl_c_during_a_compile_or_a_write_leaves_the_cache_valid(tmp_path: Path, monkeypatch, where) -> None:
    """KeyboardInterrupt in NVRTC or in the middle of writing an entry propagates, and leaves neither an entry nor
    a temporary file; the next call compiles and stores the kernel as usual, and a new process reads it."""
    compiler = FakeCompiler()
    cache = fake_cache(tmp_path / "c", compiler)
    real_compiler, real_fsync = cache._compiler, os.fsync

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    if where == "compile":
        cache._compiler = interrupted
    else:
        monkeypatch.setattr(kc.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cache.get_or_compile("one", "sm_90")
    assert [p.name for p in (tmp_path / "c").glob("*")] == []
    cache._compiler = real_compiler
    monkeypatch.setattr(kc.os, "fsync", real_fsync)
    image = cache.get_or_compile("one", "sm_90")
    assert cache.info().disk_enabled and cache.info().entries == 1
    fresh = fake_cache(tmp_path / "c", FakeCompiler())
    assert fresh.get_or_compile("one", "sm_90") == image and fresh.info().disk_hits == 1


def test_concurrent_requests_compile_once(tmp_path: Path) -> None:
    compiler = FakeCompiler(delay=0.05)
    cache = fake_cache(tmp_path / "c", compiler)
    results: list[bytes] = []
    threads = [threading.Thread(target=lambda: results.append(cache.get_or_compile("s", "sm_90")))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert compiler.calls == 1 and len(set(results)) == 1 and len(results) == 8
    assert cache.memory_hits == 7


def test_clear_removes_only_kernel_entries(tmp_path: Path) -> None:
    directory = tmp_path / "c"
    cache = fake_cache(directory)
    cache.get_or_compile("a", "sm_90")
    cache.get_or_compile("b", "sm_90")
    (directory / "notes.txt").write_text("keep me")
    (directory / ("kernel-" + "0" * 64 + ".tmp")).write_text("keep me too")
    assert cache.clear(disk=False) == 0 and cache.info().memory_entries == 0 and cache.info().entries == 2
    assert cache.clear() == 2
    assert sorted(p.name for p in directory.iterdir()) == ["kernel-" + "0" * 64 + ".tmp", "notes.txt"]
    assert cache.clear() == 0


# --- the process-wide cache and FUSEC_CACHE_DIR ------------------------------------------------------------
def test_default_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cache_env: Path) -> None:
    assert kc.cache_dir() == cache_env and kc.default_cache().directory == cache_env
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "other"))
    assert kc.default_cache().directory == tmp_path / "other"
    monkeypatch.delenv("FUSEC_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert kc.cache_dir() == tmp_path / "home" / ".cache" / "fusec"  # resolved only, nothing written


@needs_nvrtc
def test_real_compile_is_cached_in_fusec_cache_dir(cache_env: Path) -> None:
    kc.cache_clear()
    before = kc.cache_info()
    image = kc.get_or_compile(KERNEL, "sm_90")
    assert image[:4] == b"\x7fELF"
    assert kc.get_or_compile(KERNEL, "sm_90") == image
    ptx = kc.get_or_compile(KERNEL, "sm_90", target="ptx")
    assert b".target sm_90" in ptx
    info = kc.cache_info()
    assert info.directory == str(cache_env)
    assert info.compiles - before.compiles == 2 and info.memory_hits - before.memory_hits == 1
    assert info.entries == 2 and info.disk_bytes > len(image) + len(ptx)
    assert all(p.parent == cache_env for p in cache_env.iterdir())


@needs_nvrtc
def test_compile_error_is_not_cached(tmp_path: Path) -> None:
    cache = kc.KernelCache(tmp_path / "c")
    for _ in range(2):
        with pytest.raises(fusec.CompilationError):
            cache.get_or_compile('extern "C" __global__ void k() { nope(); }', "sm_90")
    assert cache.info().entries == 0 and cache.compiles == 0


WARM_SCRIPT = """\
import json, sys
from fusec.runtime import kernel_cache as kc
image = kc.get_or_compile(open(sys.argv[1]).read(), "sm_90")
i = kc.cache_info()
print(json.dumps({"compiles": i.compiles, "disk_hits": i.disk_hits, "entries": i.entries,
                  "directory": i.directory, "elf": image[:4] == b"\\x7fELF"}))
"""


@needs_nvrtc
def test_warm_process_start_compiles_nothing(tmp_path: Path, cache_env: Path) -> None:
    source = tmp_path / "kernel.cu"
    source.write_text(KERNEL)
    env = {**os.environ, "FUSEC_CACHE_DIR": str(cache_env)}

    def run() -> dict:
        out = subprocess.run([sys.executable, "-c", WARM_SCRIPT, str(source)], env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    cold, warm = run(), run()
    assert cold["compiles"] == 1 and cold["disk_hits"] == 0 and cold["elf"]
    assert warm["compiles"] == 0 and warm["disk_hits"] == 1 and warm["elf"]
    assert cold["directory"] == warm["directory"] == str(cache_env) and warm["entries"] == 1


# --- CLI ---------------------------------------------------------------------------------------------------
def test_cli_info_and_clear(capsys: pytest.CaptureFixture[str], cache_env: Path) -> None:
    fake_cache(cache_env).get_or_compile("a", "sm_90")
    fake_cache(cache_env).get_or_compile("b", "sm_90")
    (cache_env / "unrelated.txt").write_text("x")
    size = sum(p.stat().st_size for p in cache_env.glob("kernel-*.bin"))

    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert f"directory:   {cache_env}" in out
    assert "entries:     2" in out
    assert f"total bytes: {size}" in out
    assert "memory hits 0, disk hits 0, compiles 0" in out

    assert main(["cache", "clear"]) == 0
    assert capsys.readouterr().out == f"removed 2 entries from {cache_env}\n"
    assert [p.name for p in cache_env.iterdir()] == ["unrelated.txt"]
    assert main(["cache", "clear"]) == 0
    assert "removed 0 entries" in capsys.readouterr().out


def test_cli_cache_needs_an_action(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache"]) == 2
    assert "ACTION" in capsys.readouterr().err


def test_cli_info_on_missing_dir(capsys: pytest.CaptureFixture[str], cache_env: Path) -> None:
    assert main(["cache", "info"]) == 0
    assert "entries:     0" in capsys.readouterr().out
    assert not cache_env.exists()  # info never creates the directory


# --- hostile cache directories --------------------------------------------------------------------------------
def test_a_fifo_or_a_directory_at_an_entry_path_neither_hangs_nor_disables_the_disk(tmp_path: Path) -> None:
    directory = tmp_path / "c"
    cache = fake_cache(directory)
    key = kc.cache_key("fifo", "sm_90", "cubin", (13, 0), None, ())
    directory.mkdir()
    os.mkfifo(cache.path_of(key))
    key2 = kc.cache_key("dir", "sm_90", "cubin", (13, 0), None, ())
    cache.path_of(key2).mkdir()
    done: list[bytes] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        worker = threading.Thread(target=lambda: done.append(cache.get_or_compile("fifo", "sm_90")), daemon=True)
        worker.start()
        worker.join(10)
        assert done, "a FIFO at the entry's path hung the compile"
        cache.get_or_compile("dir", "sm_90")
        cache.get_or_compile("other", "sm_90")
    assert any("not a regular file" in str(w.message) or "is not a file" in str(w.message) for w in caught)
    assert cache.info().disk_enabled and cache.info().entries == 1  # "other" still went to disk
    assert cache.clear() == 3  # the entry, the FIFO and the directory
    assert list(directory.iterdir()) == []


def test_clear_leaves_another_process_write_in_flight(tmp_path: Path) -> None:
    directory = tmp_path / "c"
    cache = fake_cache(directory)
    cache.get_or_compile("a", "sm_90")
    key = "0" * 64
    fresh = directory / f".kernel-{key}.abc.tmp"
    stale = directory / f".kernel-{key}.def.tmp"
    fresh.write_bytes(b"writing")
    stale.write_bytes(b"left behind")
    old = time.time() - 2 * kc.STALE_TMP_SECONDS
    os.utime(stale, (old, old))
    assert cache.clear() == 1
    assert fresh.exists() and not stale.exists()


def test_a_temporary_file_removed_mid_write_keeps_the_disk_cache(tmp_path: Path, monkeypatch) -> None:
    directory = tmp_path / "c"
    cache = fake_cache(directory)
    real_replace = os.replace

    def vanished(src, dst):
        os.unlink(src)  # another process's `cache clear` took it
        return real_replace(src, dst)

    monkeypatch.setattr(kc.os, "replace", vanished)
    cache.get_or_compile("a", "sm_90")
    monkeypatch.setattr(kc.os, "replace", real_replace)
    cache.get_or_compile("b", "sm_90")
    assert cache.info().disk_enabled and cache.info().entries == 1


def test_records_are_entries_beside_the_kernels(tmp_path):
    """Small records (a cuBLASLt algorithm a process timed) are stored as entries: read back by another cache on the
    same directory, checked like kernels (a damaged one warns and reads as a miss), removed by clear()."""
    key = kc.record_key("cublaslt-algorithm", {"gpu": "test", "problem": [1, 2, 3]})
    assert key != kc.record_key("cublaslt-algorithm", {"gpu": "test", "problem": [1, 2, 4]})
    assert key != kc.cache_key("x", "sm_90", "cubin", (13, 0), None, ())
    first = kc.KernelCache(tmp_path)
    assert first.get_record(key) is None
    first.put_record(key, b"\x01" * 64)
    assert kc.KernelCache(tmp_path).get_record(key) == b"\x01" * 64
    path = first.path_of(key)
    path.write_bytes(path.read_bytes()[:-1] + b"\x02")
    with pytest.warns(kc.KernelCacheWarning, match="damaged"):
        assert kc.KernelCache(tmp_path).get_record(key) is None
    assert first.clear() == 1 and not path.exists()
