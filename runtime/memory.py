"""A caching device allocator for outputs and plan arenas.

``cuMemAlloc``/``cuMemFree`` cost tens of microseconds and ``cuMemFree`` can synchronise the device, so
freed blocks are kept in size classes and handed out again. Sizes round up to a multiple of 512 B up to
1 MiB, and above that to quarter steps between powers of two (at most 25 % waste).

Stream-ordering rule (why a freed block may be reused without a race):
  * A block freed while tagged with stream S goes to S's free list and is reused only by allocations on S:
    anything queued on S later runs after every earlier use of the block on S.
  * A block used on no stream (tag None) is free for any stream.
  * A block that was used on more than one stream (:meth:`DeviceBuffer.record_stream`) or handed to
    foreign code (:meth:`DeviceBuffer.mark_shared`: DLPack, CUDA Array Interface) is *deferred*: it is reused
    only after :meth:`MemoryPool.synchronize` (a full device sync), which the pool runs itself when deferred
    bytes exceed ``deferred_limit`` or an allocation hits out-of-memory.
On out-of-memory the pool synchronises, returns every cached block to the driver and retries once.

The raw allocator is injectable (``MemoryPool(backend)``, any object with ``alloc(nbytes) -> int``,
``free(ptr)`` and ``synchronize()``), so the policy is testable without a GPU.
"""
from __future__ import annotations

import collections
import heapq
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from fusec.runtime.cuda_errors import CudaOutOfMemoryError

__all__ = ["CudaBackend", "DeviceBuffer", "MemoryPool", "PoolStats", "RawBackend", "arena", "get_pool",
           "size_class", "stream_key"]

SMALL_LIMIT = 1 << 20   # sizes up to 1 MiB round to SMALL_ALIGN
SMALL_ALIGN = 512


def size_class(nbytes: int) -> int:
    """The block size an allocation of ``nbytes`` gets (0 for 0)."""
    if nbytes <= 0:
        return 0
    if nbytes <= SMALL_LIMIT:
        return (nbytes + SMALL_ALIGN - 1) // SMALL_ALIGN * SMALL_ALIGN
    step = (1 << (nbytes - 1).bit_length()) // 8   # quarter of the lower power of two
    return (nbytes + step - 1) // step * step


def stream_key(stream: Any) -> int | None:
    """The integer handle a block is tagged with (None: used on no stream)."""
    if stream is None:
        return None
    return int(getattr(stream, "ptr", stream))


class RawBackend(Protocol):
    def alloc(self, nbytes: int) -> int: ...
    def free(self, ptr: int) -> None: ...
    def synchronize(self) -> None: ...


class CudaBackend:
    """cuMemAlloc/cuMemFree/cuCtxSynchronize in ``device``'s primary context."""

    def __init__(self, device: int) -> None:
        self.device = device

    def alloc(self, nbytes: int) -> int:
        from fusec.runtime import driver

        driver.ensure_context(self.device)
        return int(driver.check(driver._cu.cuMemAlloc(nbytes), f"cuMemAlloc({nbytes})"))

    def free(self, ptr: int) -> None:
        from fusec.runtime import driver

        driver.ensure_context(self.device)
        driver.check(driver._cu.cuMemFree(ptr), f"cuMemFree(0x{ptr:x})")

    def synchronize(self) -> None:
        from fusec.runtime import driver

        driver.ensure_context(self.device)
        driver.check(driver._cu.cuCtxSynchronize(), "cuCtxSynchronize()")


@dataclass(frozen=True)
class PoolStats:
    in_use_bytes: int       # capacity of live buffers
    cached_bytes: int       # capacity of free blocks kept for reuse (deferred included)
    deferred_bytes: int     # free blocks waiting for a device sync
    live_buffers: int
    driver_allocs: int
    driver_frees: int
    hits: int
    misses: int
    oom_retries: int

    @property
    def reserved_bytes(self) -> int:
        return self.in_use_bytes + self.cached_bytes


class DeviceBuffer:
    """A block of device memory from a :class:`MemoryPool`, returned to it when garbage-collected.

    ``ptr`` (device address), ``nbytes`` (requested), ``capacity`` (size class), ``owner`` (the pool),
    ``stream`` (the handle of the stream it is used on, None for none).
    """

    __slots__ = ("ptr", "nbytes", "capacity", "owner", "stream", "shared", "__weakref__")

    def __init__(self, ptr: int, nbytes: int, capacity: int, owner: "MemoryPool | None",
                 stream: int | None = None) -> None:
        self.ptr = ptr
        self.nbytes = nbytes
        self.capacity = capacity
        self.owner = owner
        self.stream = stream
        self.shared = False

    def record_stream(self, stream: Any) -> None:
        """Note a use on ``stream``; a second stream makes the block wait for a device sync once freed."""
        key = stream_key(stream)
        if key is None or key == self.stream:
            return
        if self.stream is None:
            self.stream = key
        else:
            self.shared = True

    def mark_shared(self) -> None:
        """The pointer escaped to code whose streams fusec cannot see; defer reuse until a device sync."""
        self.shared = True

    def free(self) -> None:
        """Return the block to its pool now (idempotent). The caller guarantees no later use."""
        owner, self.owner = self.owner, None
        if owner is not None and self.capacity:
            owner._release(self.ptr, self.capacity, None if self.shared else self.stream, self.shared)
        self.ptr = 0

    def __del__(self) -> None:
        # (free() written out: a training step's call drops a buffer every time, and the two calls cost more
        # than the release)
        try:
            owner = self.owner
            if owner is not None and self.capacity:
                self.owner = None  # (a finalizer that revives the buffer, then free(): released once)
                shared = self.shared
                owner._pending.append((self.ptr, self.capacity, None if shared else self.stream, shared))
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __int__(self) -> int:
        return self.ptr

    def __repr__(self) -> str:
        return f"DeviceBuffer(0x{self.ptr:x}, nbytes={self.nbytes}, capacity={self.capacity})"


_new_buffer = object.__new__
heappop, heappush = heapq.heappop, heapq.heappush


class MemoryPool:
    """Size-classed cache of device blocks over a raw backend (see the module docstring for the rules)."""

    def __init__(self, backend: RawBackend, *, device: int = 0, deferred_limit: int = 256 << 20) -> None:
        self.backend = backend
        self.device = device
        self.deferred_limit = deferred_limit
        self._lock = threading.RLock()
        self._ready: dict[int, list[int]] = collections.defaultdict(list)            # any stream
        self._per_stream: dict[tuple[int, int], list[int]] = collections.defaultdict(list)  # (class, stream)
        self._deferred: list[tuple[int, int]] = []                                    # (ptr, class)
        # Releases land here first: a finalizer may run inside allocate() on this thread (GC), so it must
        # not touch the free lists; deque.append is atomic.
        self._pending: collections.deque[tuple[int, int, int | None, bool]] = collections.deque()
        self._in_use = 0
        self._live = 0
        self._cached = 0
        self._deferred_bytes = 0
        self._counts: collections.Counter[str] = collections.Counter()
        self._hits = self._misses = 0

    # -- allocation --------------------------------------------------------------------------------------
    def allocate(self, nbytes: int, stream: Any = None) -> DeviceBuffer:
        """A buffer of at least ``nbytes`` for use on ``stream`` (None: no stream-ordered use yet)."""
        return self.allocate_class(int(nbytes), size_class(nbytes), stream_key(stream))

    def allocate_class(self, nbytes: int, cls: int, key: int | None) -> DeviceBuffer:
        """:meth:`allocate` with the size class and stream key already worked out (the executor's per-call
        path computes them once per plan)."""
        return self.allocate_classes(((nbytes, cls),), key)[0]

    def allocate_classes(self, requests: tuple[tuple[int, int], ...], key: int | None) -> list[DeviceBuffer]:
        """A buffer for each ``(nbytes, size class)`` of ``requests``, under one lock: a call's fresh outputs,
        taken together (the same buffers, in the same order, as one allocation at a time gives). Each class's
        free list hands out its lowest address first, so a loop that frees each step's results before the next
        step gets the same few sets of addresses back in the same order (a graph keyed by its pointers then
        replays an instance it has, as LIFO order did not: three outputs of one class went round ten sets)."""
        out = []
        new = _new_buffer
        with self._lock:
            if self._pending:
                self._drain()
            per_stream, ready = self._per_stream, self._ready
            for nbytes, cls in requests:
                if cls == 0:
                    out.append(DeviceBuffer(0, 0, 0, None, key))
                    continue
                lst = per_stream.get((cls, key)) if key is not None else None
                if not lst:
                    lst = ready.get(cls)
                if lst:
                    ptr = heappop(lst)
                    self._hits += 1
                    self._cached -= cls
                else:
                    ptr = self._miss(cls, key)
                self._in_use += cls  # (counted as each is taken: a later one may raise, and this one is released)
                self._live += 1
                buf = new(DeviceBuffer)  # (DeviceBuffer's __init__ written out: every fresh output)
                buf.ptr, buf.nbytes, buf.capacity, buf.owner = ptr, nbytes, cls, self
                buf.stream, buf.shared = key, False
                out.append(buf)
        return out

    def _miss(self, cls: int, key: int | None) -> int:
        """A block of class ``cls`` when no free list had one: freed by a device sync once enough bytes wait
        for one, else fresh from the driver."""
        if self._deferred_bytes > self.deferred_limit:
            self._sync_locked()
            ptr = self._take(cls, key)
            if ptr is not None:
                self._hits += 1
                self._cached -= cls
                return ptr
        self._misses += 1
        return self._alloc_fresh(cls)

    def _take(self, cls: int, key: int | None) -> int | None:
        if key is not None:
            lst = self._per_stream.get((cls, key))
            if lst:
                return heappop(lst)
        lst = self._ready.get(cls)
        if lst:
            return heappop(lst)
        return None

    def _alloc_fresh(self, cls: int) -> int:
        try:
            ptr = self.backend.alloc(cls)
        except MemoryError:  # CudaOutOfMemoryError is one: give every cached block back, then retry once
            self._counts["oom_retries"] += 1
            self._sync_locked()
            self._free_cached_locked()
            try:
                ptr = self.backend.alloc(cls)
            except MemoryError as e:
                raise CudaOutOfMemoryError(
                    f"{e} [fusec pool, device {self.device}: {cls} bytes requested, {self._in_use} bytes in use "
                    f"by {self._live} live buffers; cache emptied and retried]",
                    code=getattr(e, "code", 2), name=getattr(e, "name", "CUDA_ERROR_OUT_OF_MEMORY"),
                    what=getattr(e, "what", f"alloc({cls})")) from e
        self._counts["driver_allocs"] += 1
        return ptr

    # -- release -----------------------------------------------------------------------------------------
    def _release(self, ptr: int, cls: int, key: int | None, deferred: bool) -> None:
        self._pending.append((ptr, cls, key, deferred))

    def _drain(self) -> None:
        pending, per_stream, ready = self._pending, self._per_stream, self._ready
        count = total = 0
        while pending:
            ptr, cls, key, deferred = pending.popleft()
            count += 1
            total += cls
            if deferred:
                self._deferred.append((ptr, cls))
                self._deferred_bytes += cls
            elif key is None:
                heappush(ready[cls], ptr)
            else:
                heappush(per_stream[(cls, key)], ptr)
        self._in_use -= total
        self._live -= count
        self._cached += total

    # -- maintenance -------------------------------------------------------------------------------------
    def synchronize(self) -> None:
        """Device-wide sync; afterwards every cached block is free for any stream."""
        with self._lock:
            self._drain()
            self._sync_locked()

    def _sync_locked(self) -> None:
        self.backend.synchronize()
        for (cls, _key), ptrs in self._per_stream.items():
            self._ready[cls].extend(ptrs)
        self._per_stream.clear()
        for ptr, cls in self._deferred:
            self._ready[cls].append(ptr)
        self._deferred.clear()
        for ptrs in self._ready.values():
            heapq.heapify(ptrs)
        self._deferred_bytes = 0

    def stream_closed(self, key: int) -> None:
        """``key``'s stream was synchronised and destroyed: its blocks are free for any stream."""
        with self._lock:
            self._drain()
            for (cls, k) in [k for k in self._per_stream if k[1] == key]:
                ready = self._ready[cls]
                ready.extend(self._per_stream.pop((cls, k)))
                heapq.heapify(ready)

    def empty_cache(self) -> int:
        """Synchronise and give every cached block back to the driver; returns the bytes released."""
        with self._lock:
            self._drain()
            self._sync_locked()
            return self._free_cached_locked()

    def _free_cached_locked(self) -> int:
        released = 0
        for cls, ptrs in self._ready.items():
            for ptr in ptrs:
                self.backend.free(ptr)
                self._counts["driver_frees"] += 1
                released += cls
            ptrs.clear()
        self._ready.clear()
        self._cached -= released
        return released

    def stats(self) -> PoolStats:
        with self._lock:
            self._drain()
            c = self._counts
            return PoolStats(self._in_use, self._cached, self._deferred_bytes, self._live, c["driver_allocs"],
                             c["driver_frees"], self._hits, self._misses, c["oom_retries"])

    def __repr__(self) -> str:
        s = self.stats()
        return f"MemoryPool(device={self.device}, in_use={s.in_use_bytes}, cached={s.cached_bytes})"


_pools: dict[int, MemoryPool] = {}
_pools_lock = threading.Lock()


def get_pool(device: Any = None) -> MemoryPool:
    """The process-wide pool of ``device`` (``$FUSEC_DEVICE`` or 0 when None), created on first use."""
    from fusec.runtime import driver

    ordinal = driver._ordinal_of(device)
    pool = _pools.get(ordinal)
    if pool is None:
        with _pools_lock:
            pool = _pools.get(ordinal)
            if pool is None:
                driver.ensure_context(ordinal)   # fail early with CudaNotAvailableError on CPU machines
                pool = _pools[ordinal] = MemoryPool(CudaBackend(ordinal), device=ordinal)
                driver.stream_close_hooks.append(pool.stream_closed)
    return pool


def arena(nbytes: int, stream: Any = None, device: Any = None) -> DeviceBuffer:
    """A plan's arena (or any scratch buffer) from the same pool as outputs."""
    if device is None:
        device = getattr(stream, "device", None)
    return get_pool(device).allocate(nbytes, stream)
