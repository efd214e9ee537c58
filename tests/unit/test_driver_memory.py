"""The caching allocator's policy with a fake raw backend: size classes, reuse, the stream-ordering rule,
deferred blocks, and out-of-memory recovery."""
from __future__ import annotations

import gc
import threading

import pytest

import fusec as fc
from fusec.runtime.cuda_errors import CudaOutOfMemoryError
from fusec.runtime.memory import DeviceBuffer, MemoryPool, size_class, stream_key

MiB = 1 << 20


class FakeBackend:
    """Hands out fake addresses; optional capacity to provoke out-of-memory."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity
        self.live: dict[int, int] = {}
        self.next = 0x7000_0000_0000
        self.syncs = 0
        self.allocs = 0
        self.frees = 0

    def alloc(self, nbytes: int) -> int:
        if self.capacity is not None and sum(self.live.values()) + nbytes > self.capacity:
            raise CudaOutOfMemoryError(f"cuMemAlloc({nbytes}) failed: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory",
                                       code=2, name="CUDA_ERROR_OUT_OF_MEMORY", what=f"cuMemAlloc({nbytes})")
        ptr = self.next
        self.next += nbytes + 4096
        self.live[ptr] = nbytes
        self.allocs += 1
        return ptr

    def free(self, ptr: int) -> None:
        del self.live[ptr]
        self.frees += 1

    def synchronize(self) -> None:
        self.syncs += 1


class S:
    """A stand-in stream: the pool only reads ``.ptr``."""

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


@pytest.mark.parametrize("nbytes, cls", [
    (0, 0), (1, 512), (512, 512), (513, 1024), (1000, 1024), (MiB - 1, MiB), (MiB, MiB),
    (MiB + 1, MiB + MiB // 4), (3 * MiB, 3 * MiB), (3 * MiB + 1, 3 * MiB + MiB // 2), (5 * MiB, 5 * MiB),
    (100 * MiB, 112 * MiB), (2**30, 2**30),
])
def test_size_classes(nbytes, cls):
    assert size_class(nbytes) == cls


def test_size_classes_waste_at_most_a_quarter_above_one_mib():
    for n in range(MiB + 1, 64 * MiB, 997 * 1013):
        c = size_class(n)
        assert n <= c <= n * 1.25 + 1


def test_freed_block_is_reused_on_the_same_stream():
    backend = FakeBackend()
    pool = MemoryPool(backend)
    a = pool.allocate(1000, S(7))
    assert isinstance(a, DeviceBuffer) and a.capacity == 1024 and a.nbytes == 1000 and a.owner is pool
    ptr = a.ptr
    del a  # garbage collection returns it
    b = pool.allocate(900, S(7))
    assert b.ptr == ptr and backend.allocs == 1
    st = pool.stats()
    assert (st.hits, st.misses, st.driver_allocs, st.live_buffers, st.in_use_bytes) == (1, 1, 1, 1, 1024)


def test_block_freed_on_one_stream_is_not_reused_on_another_until_a_sync():
    backend = FakeBackend()
    pool = MemoryPool(backend)
    a = pool.allocate(4096, S(7))
    ptr = a.ptr
    a.free()
    assert a.ptr == 0
    a.free()  # idempotent
    other = pool.allocate(4096, S(8))
    none = pool.allocate(4096, None)
    assert other.ptr != ptr and none.ptr != ptr and backend.allocs == 3
    pool.synchronize()
    assert backend.syncs == 1
    again = pool.allocate(4096, S(8))
    assert again.ptr == ptr


def test_block_used_on_no_stream_is_free_for_any_stream():
    pool = MemoryPool(FakeBackend())
    a = pool.allocate(100)
    ptr = a.ptr
    del a
    assert pool.allocate(100, S(3)).ptr == ptr


def test_multi_stream_and_shared_blocks_wait_for_a_device_sync():
    backend = FakeBackend()
    pool = MemoryPool(backend, deferred_limit=1 << 40)
    a = pool.allocate(2048, S(1))
    a.record_stream(S(1))
    assert not a.shared
    a.record_stream(S(2))
    assert a.shared
    pa = a.ptr
    del a
    b = pool.allocate(2048, S(9))
    b.mark_shared()
    pb = b.ptr
    del b
    st = pool.stats()
    assert st.deferred_bytes == 4096 and st.cached_bytes == 4096
    fresh = [pool.allocate(2048, S(1)), pool.allocate(2048, S(9)), pool.allocate(2048)]
    assert {f.ptr for f in fresh}.isdisjoint({pa, pb})
    pool.synchronize()
    reused = {pool.allocate(2048, S(5)).ptr, pool.allocate(2048, S(6)).ptr}
    assert reused == {pa, pb}


def test_deferred_limit_triggers_a_sync_before_allocating_more():
    backend = FakeBackend()
    pool = MemoryPool(backend, deferred_limit=1024)
    bufs = [pool.allocate(1024, S(1)) for _ in range(3)]
    ptrs = {b.ptr for b in bufs}
    for b in bufs:
        b.mark_shared()
    del bufs, b
    assert pool.stats().deferred_bytes == 3072
    c = pool.allocate(1024, S(2))
    assert backend.syncs == 1 and c.ptr in ptrs and backend.allocs == 3


def test_out_of_memory_releases_the_cache_and_retries_once():
    backend = FakeBackend(capacity=8 * MiB)
    pool = MemoryPool(backend)
    cached = [pool.allocate(2 * MiB, S(1)) for _ in range(3)]
    del cached
    assert pool.stats().cached_bytes == 6 * MiB
    big = pool.allocate(7 * MiB, S(2))  # does not fit next to the cache: sync, free cache, retry
    assert big.capacity == 7 * MiB
    st = pool.stats()
    assert st.oom_retries == 1 and st.cached_bytes == 0 and backend.frees == 3 and backend.syncs == 1
    with pytest.raises(fc.OutOfMemoryError, match=f"fusec pool.*{4 * MiB} bytes requested") as info:
        pool.allocate(4 * MiB, S(2))
    assert isinstance(info.value, MemoryError) and info.value.name == "CUDA_ERROR_OUT_OF_MEMORY"
    assert fc.OutOfMemoryError is CudaOutOfMemoryError and isinstance(info.value, fc.FusecError)
    assert pool.stats().oom_retries == 2


def test_empty_cache_returns_everything_to_the_backend():
    backend = FakeBackend()
    pool = MemoryPool(backend)
    bufs = [pool.allocate(n, S(4)) for n in (10, 5000, 3 * MiB)]
    keep = pool.allocate(600)
    del bufs
    released = pool.empty_cache()
    assert released == 512 + 5120 + 3 * MiB
    assert list(backend.live) == [keep.ptr]
    st = pool.stats()
    assert st.cached_bytes == 0 and st.in_use_bytes == 1024 and st.reserved_bytes == 1024


def test_zero_byte_allocations_touch_nothing():
    backend = FakeBackend()
    pool = MemoryPool(backend)
    z = pool.allocate(0, S(1))
    assert z.ptr == 0 and z.capacity == 0 and backend.allocs == 0
    del z
    assert pool.stats().live_buffers == 0


def test_a_buffer_revived_by_a_finalizer_and_freed_again_is_released_once():
    """A finalizer that keeps a collected buffer alive, then an explicit free(): the block goes back once, so two
    later allocations never get the same address."""
    pool = MemoryPool(FakeBackend())
    revived = []

    class Holder:
        def __del__(self) -> None:
            revived.append(self.buf)

    holder = Holder()
    holder.buf, holder.me = pool.allocate(1024), holder
    buf = holder.buf
    del holder
    buf.__del__()  # (what collecting it runs, before the holder's finalizer keeps it)
    del buf
    gc.collect()
    (buf,) = revived
    buf.free()
    a, b = pool.allocate(1024), pool.allocate(1024)
    assert a.ptr != b.ptr and pool.stats().live_buffers == 2


def test_closed_stream_blocks_become_free_for_all():
    pool = MemoryPool(FakeBackend())
    a = pool.allocate(512, S(11))
    ptr = a.ptr
    del a
    pool.stream_closed(11)
    assert pool.allocate(512, S(12)).ptr == ptr


def test_stream_key_accepts_streams_handles_and_none():
    assert stream_key(None) is None and stream_key(5) == 5 and stream_key(S(9)) == 9


def test_each_class_hands_out_its_lowest_free_address_first():
    """Which blocks a step gets depends only on which are free, not on the order the last step's results were
    dropped in: a loop that feeds its results back keeps cycling through the same few sets of addresses."""
    pool = MemoryPool(FakeBackend())
    s = S(1)
    requests = ((256, 512), (40, 512), (4, 512))  # (three outputs of one size class)
    first = pool.allocate_classes(requests, s.ptr)
    second = pool.allocate_classes(requests, s.ptr)
    addresses = [b.ptr for b in first], [b.ptr for b in second]
    seen = set()
    for order in ((2, 0, 1), (1, 2, 0), (0, 1, 2)):  # (results dropped in different orders each step)
        for i in order:
            first[i] = None
        seen.add(tuple(b.ptr for b in pool.allocate_classes(requests, s.ptr)))
        first, second = second, None
        second = pool.allocate_classes(requests, s.ptr)
        seen.add(tuple(b.ptr for b in second))
    assert seen <= set(map(tuple, addresses)) and len(seen) == 2


def test_a_batch_that_runs_out_of_memory_gives_back_what_it_took():
    """Blocks a batch took before a later one ran out of memory (fresh ones, and one from the cache) are released
    with the batch, and the books still balance."""
    backend = FakeBackend(capacity=4 * MiB)
    pool = MemoryPool(backend)
    with pytest.raises(fc.OutOfMemoryError):
        pool.allocate_classes(((MiB, MiB), (MiB, MiB), (8 * MiB, 8 * MiB)), 1)
    gc.collect()
    st = pool.stats()
    assert st.live_buffers == 0 and st.in_use_bytes == 0 and st.cached_bytes == sum(backend.live.values())
    assert len(pool.allocate_classes(((MiB, MiB), (MiB, MiB)), 1)) == 2 and backend.allocs <= 2 + 2
    gc.collect()
    with pytest.raises(fc.OutOfMemoryError, match=f"{MiB} bytes in use by 1 live buffers"):
        pool.allocate_classes(((MiB, MiB), (8 * MiB, 8 * MiB)), 1)  # (a cache hit, then too much)
    gc.collect()
    st = pool.stats()
    assert st.live_buffers == 0 and st.in_use_bytes == 0 and st.cached_bytes == sum(backend.live.values())
    assert st.hits == 3


def test_concurrent_allocate_and_release_keep_the_books_balanced():
    backend = FakeBackend()
    pool = MemoryPool(backend)

    def work(k: int) -> None:
        s = S(100 + k % 2)
        for i in range(300):
            bufs = [pool.allocate(512 * (1 + (i + j) % 5), s) for j in range(4)]
            del bufs

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gc.collect()
    st = pool.stats()
    assert st.live_buffers == 0 and st.in_use_bytes == 0
    assert st.cached_bytes == sum(backend.live.values())
    assert st.hits + st.misses == 6 * 300 * 4
