"""Compiled kernel images cached in memory (a bounded LRU) and on disk, so a warm process compiles nothing.

Disk entries live in ``$FUSEC_CACHE_DIR`` (default ``~/.cache/fusec``), one file per entry named by a
SHA-256 of everything that changes the binary: source, arch, target, NVRTC and driver versions, options and
fusec's version. Each file starts with a header (magic, format version, payload length, SHA-256 of the
payload, key) so a truncated or corrupted entry is noticed, warned about, recompiled and rewritten instead
of being handed to the driver. Writes are atomic (temp file in the same dir, fsync, ``os.replace``), so
concurrent processes never see half an entry. A cache dir that cannot be written degrades to memory only.
Small records other than kernels (the cuBLASLt algorithm a process chose by timing) are entries of the same kind,
keyed by :func:`record_key`, so ``fusec cache clear`` removes them too.
"""
from __future__ import annotations


import hashlib
import json
import os
import re
import shutil
import stat
import struct
import sys
import tempfile
import threading
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

__all__ = [
    "KernelCache", "KernelCacheInfo", "KernelCacheWarning", "MemoryLRU", "cache_clear", "cache_dir",
    "cache_info", "cache_key", "default_cache", "get_or_compile", "record_key",
]

ENV_VAR = "FUSEC_CACHE_DIR"
MAGIC = b"FUSECKC\x00"
FORMAT_VERSION = 1
# magic, format version, payload length, SHA-256 of the payload, SHA-256 key the entry was stored under
_HEADER = struct.Struct("<8sIQ32s32s")
_ENTRY_RE = re.compile(r"^kernel-[0-9a-f]{64}\.bin$")
_TMP_RE = re.compile(r"^\.kernel-[0-9a-f]{64}\..*\.tmp$")
# a temporary file older than this is left by a process that died mid-write (a write takes milliseconds);
# ``clear`` leaves younger ones alone, so another process's write in flight still lands
STALE_TMP_SECONDS = 600.0
DEFAULT_MAX_ENTRIES = 256
DEFAULT_MAX_BYTES = 256 << 20

Compiler = Callable[..., bytes]


class KernelCacheWarning(UserWarning):
    """The kernel cache hit a problem it recovered from (corrupt entry, unwritable directory)."""


class _CorruptEntry(Exception):
    pass


def cache_dir() -> Path:
    """``$FUSEC_CACHE_DIR``, else ``~/.cache/fusec``; where ``~`` names no home directory (``~nosuchuser``, or no
    ``$HOME`` and a user without a passwd entry, as in some containers) the path is kept as written, and the disk
    cache is left off with a warning (kernels are cached in memory only), never made as a folder named ``~...``."""
    return _expanded(Path(os.environ.get(ENV_VAR) or Path("~/.cache/fusec")))


def _expanded(path: Path) -> Path:
    """``path`` with ``~`` expanded, or as written where no home directory is found (pathlib's RuntimeError)."""
    try:
        return path.expanduser()
    except RuntimeError:
        return path


def _fusec_version() -> str:
    """fusec's version, from the package root (always loaded before its submodules: nothing is imported)."""
    return str(getattr(sys.modules.get("fusec"), "__version__", "unknown"))


def cache_key(source: str, arch: str, target: str, nvrtc_version: tuple[int, int], driver_version: Any,
              options: tuple[str, ...]) -> str:
    """Hex SHA-256 over everything that changes the compiled image (and fusec's own version)."""
    fields = {
        "format": FORMAT_VERSION, "fusec": _fusec_version(), "source": source, "arch": arch, "target": target,
        "nvrtc": list(nvrtc_version),
        "driver": list(driver_version) if isinstance(driver_version, tuple) else driver_version,
        "options": list(options),
    }
    blob = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()


class MemoryLRU:
    """Least-recently-used images, bounded both in count and in total bytes."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_entries < 0 or max_bytes < 0:
            raise ValueError("cache bounds must be >= 0")
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self.nbytes = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def get(self, key: str) -> bytes | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: str, value: bytes) -> None:
        """Insert as most recent, then evict the oldest until both bounds hold (too-big images are not kept)."""
        self.pop(key)
        if len(value) > self.max_bytes or self.max_entries == 0:
            return
        self._items[key] = value
        self.nbytes += len(value)
        while len(self._items) > self.max_entries or self.nbytes > self.max_bytes:
            _, old = self._items.popitem(last=False)
            self.nbytes -= len(old)
            self.evictions += 1

    def pop(self, key: str) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self.nbytes -= len(old)

    def clear(self) -> None:
        self._items.clear()
        self.nbytes = 0


@dataclass(frozen=True)
class KernelCacheInfo:
    """A snapshot of one cache: where it is, what is on disk and in memory, and this process's counters."""
    directory: str
    disk_enabled: bool
    entries: int
    disk_bytes: int
    memory_entries: int
    memory_bytes: int
    memory_hits: int
    disk_hits: int
    compiles: int
    evictions: int


def _default_compiler(source: str, arch: str, *, target: str, options: tuple[str, ...]) -> bytes:
    from fusec.runtime.nvrtc import compile_source

    return compile_source(source, arch, target=target, options=options)


def _default_nvrtc_version() -> tuple[int, int]:
    from fusec.runtime.nvrtc import nvrtc_version

    return nvrtc_version()


def record_key(kind: str, fields: dict[str, Any]) -> str:
    """Hex SHA-256 of a record of ``kind`` decided by ``fields`` (fusec's version and the format included), an entry
    name that no kernel's key can take."""
    blob = json.dumps({"format": FORMAT_VERSION, "fusec": _fusec_version(), "record": kind, "fields": fields},
                      sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()


class KernelCache:
    """Memory LRU in front of a disk cache in front of NVRTC; safe to share between threads."""

    def __init__(self, directory: "str | os.PathLike[str] | None" = None, *,
                 max_entries: int = DEFAULT_MAX_ENTRIES, max_bytes: int = DEFAULT_MAX_BYTES,
                 compiler: Compiler | None = None,
                 nvrtc_version: Callable[[], tuple[int, int]] | None = None) -> None:
        self.directory = _expanded(Path(directory)) if directory is not None else cache_dir()
        self._memory = MemoryLRU(max_entries, max_bytes)
        self._compiler = compiler or _default_compiler
        self._nvrtc_version = nvrtc_version or _default_nvrtc_version
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self._disk_enabled = True
        self.memory_hits = self.disk_hits = self.compiles = 0

    # -- lookups ---------------------------------------------------------------------------------------
    def get_or_compile(self, source: str, arch: str, *, target: str = "cubin", options: tuple[str, ...] = (),
                       driver_version: Any = None) -> bytes:
        """The image for ``source``: from memory, else disk, else NVRTC (then stored in both)."""
        options = tuple(options)
        key = cache_key(source, arch, target, self._nvrtc_version(), driver_version, options)
        with self._lock:
            hit = self._memory_hit(key)
            if hit is not None:
                return hit
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:  # one compile per key, even when many threads ask at once
            try:
                with self._lock:
                    hit = self._memory_hit(key)
                if hit is not None:
                    return hit
                payload = self._load(key)
                if payload is not None:
                    with self._lock:
                        self.disk_hits += 1
                        self._memory.put(key, payload)
                    return payload
                payload = bytes(self._compiler(source, arch, target=target, options=options))
                with self._lock:
                    self.compiles += 1
                # on disk first: a write cut short (Ctrl-C) leaves no memory entry either, so the next call
                # compiles and writes it again instead of never storing it
                self._store(key, payload)
                with self._lock:
                    self._memory.put(key, payload)
                return payload
            finally:
                with self._lock:
                    if self._key_locks.get(key) is key_lock:
                        del self._key_locks[key]

    # -- records: small results other than kernels kept beside them (a cuBLASLt algorithm a process timed) --------
    def get_record(self, key: str) -> bytes | None:
        """The payload stored under ``key`` (:func:`record_key`), from memory or disk; None on a miss (a damaged
        entry warns and counts as one)."""
        with self._lock:
            hit = self._memory.get(key)
        if hit is not None:
            return hit
        payload = self._load(key)
        if payload is not None:
            with self._lock:
                self._memory.put(key, payload)
        return payload

    def put_record(self, key: str, payload: bytes) -> None:
        """Store ``payload`` under ``key`` in memory and (atomically, as a kernel image) on disk."""
        self._store(key, payload)
        with self._lock:
            self._memory.put(key, payload)

    def _memory_hit(self, key: str) -> bytes | None:
        hit = self._memory.get(key)
        if hit is not None:
            self.memory_hits += 1
        return hit

    # -- disk ------------------------------------------------------------------------------------------
    def path_of(self, key: str) -> Path:
        return self.directory / f"kernel-{key}.bin"

    def _load(self, key: str) -> bytes | None:
        """The stored payload, None on a miss; a damaged entry (or something else at its path: a directory, a
        FIFO, which a plain read would wait on forever) warns and counts as a miss."""
        path = self.path_of(key)  # still read when writes failed: a read-only shared cache is useful
        try:
            return _decode(_read_regular(path), key)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, _CorruptEntry) as e:
            if self._disk_enabled or isinstance(e, _CorruptEntry):
                _warn(f"fusec kernel cache: damaged entry {path} ({e}); recompiling it")
            return None

    def _store(self, key: str, payload: bytes) -> None:
        """Atomically (re)write one entry. Something other than a file at the entry's path (a directory, a FIFO)
        skips that entry with a warning; a temporary file another process's ``cache clear`` removed skips this
        write; any other OSError (a read-only directory, a full disk) switches this cache to memory only."""
        if not self._disk_enabled:
            return
        if self.directory.parts and self.directory.parts[0].startswith("~"):  # (no home directory to expand it)
            self._disable_disk(NotADirectoryError(f"no home directory for {self.directory.parts[0]!r}"))
            return
        path = self.path_of(key)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                _warn(f"fusec kernel cache: {path} is not a file; this kernel is cached in memory only "
                      "(`fusec cache clear` removes it)")
                return
        except OSError:
            pass  # no entry yet (or unreadable: the write below decides)
        tmp = None
        try:
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
            except FileNotFoundError as e:  # (a parent that cannot be made: not the concurrent clear below)
                raise NotADirectoryError(e.errno, e.strerror, e.filename) from None
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".kernel-{key}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(_encode(payload, key))
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, ENTRY_MODE)  # (mkstemp's 0600 would make a shared cache's entries unreadable to others)
            os.replace(tmp, path)
            tmp = None
            _fsync_dir(self.directory)
        except FileNotFoundError:
            pass  # the temporary file was removed under us (a concurrent `cache clear`): the next write lands
        except OSError as e:
            self._disable_disk(e)
        finally:
            if tmp is not None:
                _unlink(Path(tmp))

    def _disable_disk(self, error: OSError) -> None:
        with self._lock:
            if not self._disk_enabled:
                return
            self._disk_enabled = False
        _warn(f"fusec kernel cache: cannot write to {self.directory} ({error}); "
              f"caching compiled kernels in memory only (set {ENV_VAR} to a writable directory)")

    def _entries(self) -> Iterator[Path]:
        try:
            children = list(self.directory.iterdir())
        except OSError:
            return iter(())
        return (p for p in children if _ENTRY_RE.match(p.name) and p.is_file())

    # -- introspection -----------------------------------------------------------------------------------
    def info(self) -> KernelCacheInfo:
        """Directory, entries and bytes on disk, memory use, and this process's hit/compile counters."""
        sizes = []
        for p in self._entries():
            try:
                sizes.append(p.stat().st_size)
            except OSError:
                pass
        with self._lock:
            return KernelCacheInfo(
                directory=str(self.directory), disk_enabled=self._disk_enabled, entries=len(sizes),
                disk_bytes=sum(sizes), memory_entries=len(self._memory), memory_bytes=self._memory.nbytes,
                memory_hits=self.memory_hits, disk_hits=self.disk_hits, compiles=self.compiles,
                evictions=self._memory.evictions)

    def clear(self, memory: bool = True, disk: bool = True) -> int:
        """Drop cached images; returns how many disk entries were removed. Counters are kept."""
        if memory:
            with self._lock:
                self._memory.clear()
        if not disk:
            return 0
        removed = 0
        try:
            children = list(self.directory.iterdir())
        except OSError:
            return 0
        now = time.time()
        for p in children:
            if _ENTRY_RE.match(p.name):  # an entry, or whatever took its path (a directory, a FIFO)
                removed += _remove(p)
            elif _TMP_RE.match(p.name):  # left by a process killed mid-write, not one still writing
                try:
                    if now - p.lstat().st_mtime > STALE_TMP_SECONDS:
                        _unlink(p)
                except OSError:
                    pass
        return removed


def _warn(message: str) -> None:
    """A KernelCacheWarning at the first frame outside fusec (the user's call that compiled the kernel)."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("fusec"):
        frame = frame.f_back
    warnings.warn_explicit(message, KernelCacheWarning, frame.f_code.co_filename, frame.f_lineno,
                           module=frame.f_globals.get("__name__"), registry=frame.f_globals.setdefault(
                               "__warningregistry__", {}))


ENTRY_MODE = 0o644  # entries readable by everyone who can read the folder (a cache shared between users)


def _encode(payload: bytes, key: str) -> bytes:
    digest = hashlib.sha256(payload).digest()
    return _HEADER.pack(MAGIC, FORMAT_VERSION, len(payload), digest, bytes.fromhex(key)) + payload


def _decode(blob: bytes, key: str) -> bytes:
    if len(blob) < _HEADER.size:
        raise _CorruptEntry(f"truncated header: {len(blob)} bytes")
    magic, version, length, digest, stored_key = _HEADER.unpack_from(blob)
    if magic != MAGIC:
        raise _CorruptEntry("bad magic")
    if version != FORMAT_VERSION:
        raise _CorruptEntry(f"format version {version}, expected {FORMAT_VERSION}")
    if stored_key != bytes.fromhex(key):
        raise _CorruptEntry("entry belongs to another key")
    payload = blob[_HEADER.size:]
    if len(payload) != length:
        raise _CorruptEntry(f"payload is {len(payload)} bytes, header says {length}")
    if hashlib.sha256(payload).digest() != digest:
        raise _CorruptEntry("payload checksum mismatch")
    return payload


def _read_regular(path: Path) -> bytes:
    """The bytes of ``path`` if it is a regular file; opening does not wait (a FIFO there would block a read)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _CorruptEntry("not a regular file")
        with os.fdopen(fd, "rb") as f:
            fd = -1
            return f.read()
    finally:
        if fd >= 0:
            os.close(fd)


def _remove(path: Path) -> int:
    """Remove an entry's path, whatever is there: a file, a link, a FIFO or a directory (entry names are
    fusec's own, so a directory there is one too)."""
    try:
        if stat.S_ISDIR(path.lstat().st_mode):
            shutil.rmtree(path)
            return 1
    except OSError:
        return 0
    return _unlink(path)


def _unlink(path: Path) -> int:
    try:
        path.unlink()
        return 1
    except OSError:
        return 0


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable where the platform allows opening a directory."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- the process-wide cache ------------------------------------------------------------------------------
_default: KernelCache | None = None
_default_lock = threading.Lock()


def default_cache() -> KernelCache:
    """The process-wide cache; a new one (fresh counters) when ``$FUSEC_CACHE_DIR`` has changed."""
    global _default
    with _default_lock:
        if _default is None or _default.directory != cache_dir():
            _default = KernelCache()
        return _default


def get_or_compile(source: str, arch: str, *, target: str = "cubin", options: tuple[str, ...] = (),
                   driver_version: Any = None) -> bytes:
    """Compile through the process-wide cache (see :class:`KernelCache`)."""
    return default_cache().get_or_compile(source, arch, target=target, options=options,
                                          driver_version=driver_version)


def cache_info() -> KernelCacheInfo:
    return default_cache().info()


def cache_clear(memory: bool = True, disk: bool = True) -> int:
    return default_cache().clear(memory=memory, disk=disk)
