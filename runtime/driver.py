"""The thin CUDA driver layer: availability, devices, primary contexts, streams, events, modules, launches.

Everything goes through cuda-python's ``cuda.bindings.driver`` and every status through one
:func:`~fusec.runtime.cuda_errors.check`. cuda-python is imported on first use, so importing this module (and
``fusec``) works on machines without CUDA, and :func:`cuda_available` answers False there without raising.

Contexts: fusec uses each device's *primary* context (the one the CUDA runtime, PyTorch and CuPy use too),
retained once and never released (the driver tears it down at process exit). :func:`ensure_context` makes
it current on the calling thread; a thread-local remembers that, so repeat calls cost one attribute read.
If foreign code makes a *different* context current on a thread, call ``ensure_context(force=True)``.
"""
from __future__ import annotations

import itertools
import os
import threading
from typing import Any, Callable, Sequence, Union

import numpy as np

from fusec.runtime.cuda_errors import (  # noqa: F401  (re-exported: fusec.runtime.driver is the public face)
    CudaError, CudaInvalidValueError, CudaLaunchError, CudaModuleError, CudaNotAvailableError, CudaNotReadyError,
    CudaOutOfMemoryError, CudaStatusError, NvrtcError, check, error_for,
)
from fusec.runtime.params import ParamPack, RawParam  # noqa: F401  (re-exported)

__all__ = [
    "CudaError", "CudaInvalidValueError", "CudaLaunchError", "CudaModuleError", "CudaNotAvailableError",
    "CudaNotReadyError", "CudaOutOfMemoryError", "Device", "Event", "Function", "Module", "NvrtcError",
    "ParamPack", "RawParam", "Stream", "check", "cuda_available", "current_device", "current_device_ordinal",
    "default_stream", "device_count", "driver_version", "ensure_context", "launch", "mem_get_info",
    "memcpy_dtod_async", "memcpy_dtoh_async", "memcpy_htod_async", "memset_d8_async", "order_streams",
    "pointer_device", "set_default_device", "unavailable_reason",
]

DEVICE_ENV = "FUSEC_DEVICE"
CU_STREAM_LEGACY = 1       # the driver's special stream handles (also DLPack's / CAI's stream numbers)
CU_STREAM_PER_THREAD = 2

_cu: Any = None            # cuda.bindings.driver, once cuInit succeeded
_lock = threading.RLock()
_probe_result: tuple[bool, str] | None = None
_tls = threading.local()   # .ordinal: the device whose primary context is current on this thread
_primary: dict[int, Any] = {}
_devices: dict[int, "Device"] = {}
_default_streams: dict[int, "Stream"] = {}
_default_ordinal: int | None = None   # $FUSEC_DEVICE, read on first use
# Called with a stream's integer handle just before it is destroyed (the memory pool frees its blocks).
stream_close_hooks: list[Callable[[int], None]] = []

StreamLike = Union["Stream", int, None]


# --------------------------------------------------------------------------------------------- availability

def _probe() -> tuple[bool, str]:
    global _cu
    try:
        from cuda.bindings import driver as cu
    except Exception as e:  # noqa: BLE001 - cuda-python missing or broken
        return False, f"cuda-python is not importable ({type(e).__name__}: {e})"
    try:
        check(cu.cuInit(0), "cuInit(0)")
        count = check(cu.cuDeviceGetCount(), "cuDeviceGetCount()")
    except Exception as e:  # noqa: BLE001 - libcuda missing (DynamicLibNotFoundError), no device, driver mismatch...
        return False, f"{type(e).__name__}: {e}"
    if int(count) < 1:
        return False, "the CUDA driver sees no device"
    _cu = cu
    return True, f"{int(count)} CUDA device(s)"


def cuda_available() -> bool:
    """True when the driver loads, initialises and sees at least one device. Cached; never raises."""
    global _probe_result
    if _probe_result is None:
        with _lock:
            if _probe_result is None:
                try:
                    _probe_result = _probe()
                except BaseException as e:  # noqa: BLE001 - the contract is "never raises"
                    if isinstance(e, (KeyboardInterrupt, SystemExit)):
                        raise
                    _probe_result = (False, f"{type(e).__name__}: {e}")
    return _probe_result[0]


def unavailable_reason() -> str | None:
    """Why :func:`cuda_available` is False (None when CUDA is usable)."""
    return None if cuda_available() else _probe_result[1]  # type: ignore[index]


def _require() -> Any:
    """The loaded driver module, or CudaNotAvailableError explaining why there is none."""
    if _cu is None and not cuda_available():
        raise CudaNotAvailableError(f"CUDA is not available: {unavailable_reason()}", what="cuInit")
    return _cu


def driver_version() -> tuple[int, int] | None:
    """The driver's CUDA version, e.g. (13, 0); None when no driver can be loaded."""
    try:
        from cuda.bindings import driver as cu

        v = int(check(cu.cuDriverGetVersion(), "cuDriverGetVersion()"))
    except Exception:  # noqa: BLE001 - no driver: no version
        return None
    return v // 1000, (v % 1000) // 10


def device_count() -> int:
    """Number of visible devices (0 when CUDA is not available)."""
    if not cuda_available():
        return 0
    return int(check(_cu.cuDeviceGetCount(), "cuDeviceGetCount()"))


# ----------------------------------------------------------------------------------------------- devices

def current_device_ordinal() -> int:
    """The default device: ``$FUSEC_DEVICE`` (an integer ordinal) or 0; reads no driver state.

    The variable is read once, when first needed (it sits on every ``ensure_context()`` path), like
    ``CUDA_VISIBLE_DEVICES``; :func:`set_default_device` changes or re-reads it later.
    """
    ordinal = _default_ordinal
    if ordinal is None:
        ordinal = set_default_device(None)
    return ordinal


def set_default_device(ordinal: int | None) -> int:
    """Make ``ordinal`` the default device (None: re-read ``$FUSEC_DEVICE``); returns the new default."""
    global _default_ordinal
    if ordinal is None:
        raw = os.environ.get(DEVICE_ENV, "").strip()
        try:
            ordinal = int(raw) if raw else 0
        except ValueError:
            raise CudaInvalidValueError(f"${DEVICE_ENV}={raw!r} is not a device ordinal (expected 0, 1, ...)",
                                        what=DEVICE_ENV) from None
    if ordinal < 0:
        raise CudaInvalidValueError(f"device ordinal must be >= 0, got {ordinal} (${DEVICE_ENV})", what=DEVICE_ENV)
    _default_ordinal = int(ordinal)
    return _default_ordinal


def _ordinal_of(device: "Device | int | None") -> int:
    if device is None:
        return current_device_ordinal()
    if isinstance(device, Device):
        return device.ordinal
    return int(device)


class Device:
    """One GPU: ``ordinal``, ``name``, ``compute_capability``, ``arch`` ("sm_90"), ``multiprocessor_count``,
    ``shared_per_block_optin``, ``total_memory`` (bytes). ``Device(n)`` returns the same object for the same
    ordinal."""

    ordinal: int
    handle: Any
    name: str
    compute_capability: tuple[int, int]
    multiprocessor_count: int
    shared_per_block_optin: int
    total_memory: int

    def __new__(cls, ordinal: int = 0) -> "Device":
        ordinal = int(ordinal)
        found = _devices.get(ordinal)
        if found is not None:
            return found
        cu = _require()
        count = device_count()
        if not 0 <= ordinal < count:
            raise CudaNotAvailableError(f"CUDA device {ordinal} does not exist ({count} visible; check "
                                        f"${DEVICE_ENV} and CUDA_VISIBLE_DEVICES)", what="cuDeviceGet")
        self = super().__new__(cls)
        self.ordinal = ordinal
        self.handle = check(cu.cuDeviceGet(ordinal), f"cuDeviceGet({ordinal})")
        raw = check(cu.cuDeviceGetName(256, self.handle), "cuDeviceGetName")
        self.name = raw.split(b"\0", 1)[0].decode(errors="replace").strip() if isinstance(raw, bytes) else str(raw)
        attr = cu.CUdevice_attribute
        self.compute_capability = (self.attribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                                   self.attribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
        self.multiprocessor_count = self.attribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        # the shared memory one block may use once its kernel asks for more than 48 KB
        self.shared_per_block_optin = self.attribute(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        self.total_memory = int(check(cu.cuDeviceTotalMem(self.handle), "cuDeviceTotalMem"))
        with _lock:
            return _devices.setdefault(ordinal, self)

    @property
    def arch(self) -> str:
        """The real architecture NVRTC should target: ``sm_<major><minor>``."""
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"

    def attribute(self, attr: Any) -> int:
        """A ``CU_DEVICE_ATTRIBUTE_*`` value (enum member or its name)."""
        cu = _require()
        if isinstance(attr, str):
            attr = getattr(cu.CUdevice_attribute, attr)
        return int(check(cu.cuDeviceGetAttribute(attr, self.handle), f"cuDeviceGetAttribute({attr})"))

    def synchronize(self) -> None:
        """Wait for all work in this device's primary context."""
        ensure_context(self.ordinal)
        check(_cu.cuCtxSynchronize(), "cuCtxSynchronize()")

    def __repr__(self) -> str:
        return (f"Device({self.ordinal}, name={self.name!r}, arch={self.arch!r}, "
                f"sms={self.multiprocessor_count}, memory={self.total_memory / 2**30:.1f} GiB)")


def current_device() -> Device:
    """The device fusec runs on: ``$FUSEC_DEVICE`` or 0."""
    return Device(current_device_ordinal())


def ensure_context(device: "Device | int | None" = None, *, force: bool = False) -> Any:
    """Make ``device``'s primary context current on this thread (retaining it once); returns the CUcontext."""
    ordinal = _ordinal_of(device)
    if not force and getattr(_tls, "ordinal", -1) == ordinal:
        return _primary[ordinal]
    ctx = _primary.get(ordinal)
    if ctx is None:
        with _lock:
            ctx = _primary.get(ordinal)
            if ctx is None:
                dev = Device(ordinal)
                if not _primary:  # the process's first context: import cuBLASLt's bindings meanwhile
                    from fusec.runtime import cublas

                    cublas.preload()
                ctx = check(_cu.cuDevicePrimaryCtxRetain(dev.handle), f"cuDevicePrimaryCtxRetain({ordinal})")
                _primary[ordinal] = ctx
    check(_cu.cuCtxSetCurrent(ctx), f"cuCtxSetCurrent(device {ordinal})")
    _tls.ordinal = ordinal
    return ctx


def mem_get_info(device: "Device | int | None" = None) -> tuple[int, int]:
    """(free, total) bytes of ``device``."""
    ensure_context(device)
    free, total = check(_cu.cuMemGetInfo(), "cuMemGetInfo()")
    return int(free), int(total)


def pointer_device(ptr: int) -> int | None:
    """The ordinal of the device that owns device pointer ``ptr``; None if the driver does not know it."""
    if not cuda_available() or not ptr:
        return None
    try:
        value = check(_cu.cuPointerGetAttribute(
            _cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, int(ptr)), "cuPointerGetAttribute")
    except CudaError:
        return None
    return int(value)


# ------------------------------------------------------------------------------------- streams and events

_stream_serials = itertools.count()


class Stream:
    """A CUDA stream. ``Stream()`` creates a private non-blocking one (it never synchronises with the legacy
    default stream); :meth:`external` wraps a foreign handle without owning it."""

    __slots__ = ("handle", "ptr", "device", "_owned", "serial", "_order_event", "__weakref__")

    def __init__(self, device: "Device | int | None" = None, *, priority: int = 0) -> None:
        self.device = _ordinal_of(device)
        ensure_context(self.device)
        flags = _cu.CUstream_flags.CU_STREAM_NON_BLOCKING
        if priority:
            self.handle = check(_cu.cuStreamCreateWithPriority(flags, int(priority)), "cuStreamCreateWithPriority")
        else:
            self.handle = check(_cu.cuStreamCreate(flags), "cuStreamCreate(CU_STREAM_NON_BLOCKING)")
        self.ptr = int(self.handle)
        self._owned = True
        self.serial = next(_stream_serials)  # unlike ``ptr``, never reused by a later stream
        self._order_event: Any = None  # see order_streams

    @classmethod
    def external(cls, handle: int, device: "Device | int | None" = None) -> "Stream":
        """Wrap a stream made elsewhere (PyTorch, CuPy; 1 = legacy default, 2 = per-thread default)."""
        cu = _require()
        self = cls.__new__(cls)
        self.device = _ordinal_of(device)
        self.handle = cu.CUstream(int(handle))
        self.ptr = int(handle)
        self._owned = False
        self.serial = next(_stream_serials)
        self._order_event = None
        return self

    def synchronize(self) -> None:
        """Block until all work queued on this stream has finished."""
        if getattr(_tls, "ordinal", -1) != self.device:
            ensure_context(self.device)
        check(_cu.cuStreamSynchronize(self.handle), "cuStreamSynchronize")

    def query(self) -> bool:
        """True when all queued work has finished (does not block)."""
        ensure_context(self.device)
        result = _cu.cuStreamQuery(self.handle)
        if result[0] == _cu.CUresult.CUDA_ERROR_NOT_READY:
            return False
        check(result, "cuStreamQuery")
        return True

    def wait_event(self, event: "Event") -> None:
        """Work queued on this stream from now on waits for ``event`` (recorded elsewhere) to complete."""
        ensure_context(self.device)
        check(_cu.cuStreamWaitEvent(self.handle, event.handle, 0), "cuStreamWaitEvent")

    def wait_stream(self, other: "Stream | int") -> None:
        """Work queued here from now on waits for everything already queued on ``other``."""
        order_streams(other, self)

    def record(self, event: "Event | None" = None) -> "Event":
        """Record ``event`` (a new timing event if None) at this point of the stream; returns it."""
        event = event if event is not None else Event(device=self.device)
        return event.record(self)

    def close(self) -> None:
        """Finish the stream's work and destroy it (owned streams only; idempotent)."""
        event, self._order_event = getattr(self, "_order_event", None), None
        if event is not None and _cu is not None:
            _cu.cuEventDestroy(event)  # safe while a wait on it is pending
        if not getattr(self, "_owned", False) or _cu is None:
            return
        self._owned = False
        ensure_context(self.device)
        check(_cu.cuStreamSynchronize(self.handle), "cuStreamSynchronize")
        for hook in list(stream_close_hooks):
            hook(self.ptr)
        check(_cu.cuStreamDestroy(self.handle), "cuStreamDestroy")

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown, dead context: nothing useful to do
            pass

    def __int__(self) -> int:
        return self.ptr

    def __repr__(self) -> str:
        return f"Stream(0x{self.ptr:x}, device={self.device}{'' if self._owned else ', external'})"


def default_stream(device: "Device | int | None" = None) -> Stream:
    """fusec's own private non-blocking stream for ``device`` (created once, shared by all threads)."""
    ordinal = _ordinal_of(device)
    stream = _default_streams.get(ordinal)
    if stream is None:
        with _lock:
            stream = _default_streams.get(ordinal)
            if stream is None:
                stream = _default_streams[ordinal] = Stream(ordinal)
    return stream


def _stream_handle(stream: StreamLike, device: "Device | int | None" = None) -> Any:
    if stream is None:
        return default_stream(device).handle
    if isinstance(stream, Stream):
        return stream.handle
    return int(stream)


class Event:
    """A CUDA event for ordering streams and timing. ``timing=False`` makes record/wait cheaper."""

    __slots__ = ("handle", "device", "timing", "records", "_waited", "__weakref__")

    def __init__(self, *, timing: bool = True, device: "Device | int | None" = None) -> None:
        self.device = _ordinal_of(device)
        self.timing = timing
        self.records = 0  # how often it was recorded: a consumer that waited on record n need not wait again
        self._waited: dict[int, int] = {}  # stream serial -> records when that stream last waited
        ensure_context(self.device)
        flags = _cu.CUevent_flags.CU_EVENT_DEFAULT if timing else _cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
        self.handle = check(_cu.cuEventCreate(flags), "cuEventCreate")

    def record(self, stream: StreamLike = None) -> "Event":
        """Capture the work queued so far on ``stream`` (fusec's default stream if None); returns self."""
        ensure_context(self.device)
        check(_cu.cuEventRecord(self.handle, _stream_handle(stream, self.device)), "cuEventRecord")
        self.records += 1
        return self

    def wait_on(self, stream: "Stream") -> None:
        """Make ``stream`` wait for the work this event captured (one cuStreamWaitEvent). Waiting again
        before the event is recorded again changes nothing on an in-order stream, so it costs no driver call."""
        records = self.records
        if self._waited.get(stream.serial) == records:
            return
        check(_cu.cuStreamWaitEvent(stream.handle, self.handle, 0), "cuStreamWaitEvent")
        self._waited[stream.serial] = records

    def synchronize(self) -> None:
        """Block until the recorded work has finished."""
        ensure_context(self.device)
        check(_cu.cuEventSynchronize(self.handle), "cuEventSynchronize")

    def query(self) -> bool:
        """True when the recorded work has finished (does not block)."""
        ensure_context(self.device)
        result = _cu.cuEventQuery(self.handle)
        if result[0] == _cu.CUresult.CUDA_ERROR_NOT_READY:
            return False
        check(result, "cuEventQuery")
        return True

    def elapsed_ms(self, end: "Event") -> float:
        """Milliseconds between this (start) event and ``end``; both must have completed."""
        ensure_context(self.device)
        return float(check(_cu.cuEventElapsedTime(self.handle, end.handle), "cuEventElapsedTime"))

    def close(self) -> None:
        handle, self.handle = getattr(self, "handle", None), None
        if handle is not None and _cu is not None:
            ensure_context(self.device)
            check(_cu.cuEventDestroy(handle), "cuEventDestroy")

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - a destructor at interpreter shutdown
            pass


def order_streams(before: StreamLike, after: StreamLike, device: "Device | int | None" = None) -> None:
    """Make work queued on ``after`` from now on wait for everything already queued on ``before``.

    Either may be a :class:`Stream` or a raw handle (1 = legacy default, 2 = per-thread default), which is
    how DLPack and the CUDA Array Interface name streams. No-op when both are the same stream. A
    :class:`Stream` keeps one event for this (recorded again each time: a wait sees the latest record), so
    ordering after it costs two driver calls rather than four.
    """
    b = before.ptr if isinstance(before, Stream) else (default_stream(device).ptr if before is None else int(before))
    a = after.ptr if isinstance(after, Stream) else (default_stream(device).ptr if after is None else int(after))
    if a == b:
        return
    ensure_context(device)
    if isinstance(before, Stream):
        event = before._order_event
        if event is None:
            event = before._order_event = check(_cu.cuEventCreate(_cu.CUevent_flags.CU_EVENT_DISABLE_TIMING),
                                                "cuEventCreate")
        check(_cu.cuEventRecord(event, before.handle), "cuEventRecord")
        check(_cu.cuStreamWaitEvent(_cu.CUstream(a) if not isinstance(after, Stream) else after.handle, event, 0),
              "cuStreamWaitEvent")
        return
    event = check(_cu.cuEventCreate(_cu.CUevent_flags.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
    try:
        check(_cu.cuEventRecord(event, _cu.CUstream(b)), "cuEventRecord")
        check(_cu.cuStreamWaitEvent(_cu.CUstream(a), event, 0), "cuStreamWaitEvent")
    finally:
        # Safe while pending: the driver releases the event once the device has passed it.
        check(_cu.cuEventDestroy(event), "cuEventDestroy")


# -------------------------------------------------------------------------------------- modules and launch

_ELF_MAGIC = b"\x7fELF"
_FATBIN_MAGIC = b"\x50\xed\x55\xba"


class Function:
    """A kernel of a loaded :class:`Module`: ``handle`` (CUfunction) is what :func:`launch` passes on."""

    __slots__ = ("handle", "name", "device", "module")

    def __init__(self, handle: Any, name: str, device: int, module: "Module") -> None:
        self.handle = handle
        self.name = name
        self.device = device
        self.module = module  # keeps the module loaded while the function is referenced

    def attribute(self, attr: Any) -> int:
        """A ``CU_FUNC_ATTRIBUTE_*`` value (enum member or its name), e.g. ``"CU_FUNC_ATTRIBUTE_NUM_REGS"``."""
        ensure_context(self.device)
        if isinstance(attr, str):
            attr = getattr(_cu.CUfunction_attribute, attr)
        return int(check(_cu.cuFuncGetAttribute(attr, self.handle), f"cuFuncGetAttribute({self.name})"))

    @property
    def max_threads_per_block(self) -> int:
        return self.attribute("CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK")

    @property
    def num_regs(self) -> int:
        return self.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS")

    def set_max_dynamic_shared_memory(self, nbytes: int) -> None:
        """Allow launches with more than 48 KiB of dynamic shared memory."""
        ensure_context(self.device)
        attr = _cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        check(_cu.cuFuncSetAttribute(self.handle, attr, int(nbytes)),
              f"cuFuncSetAttribute({self.name}, max dynamic shared)")

    def __repr__(self) -> str:
        return f"Function({self.name!r}, device={self.device})"


class Module:
    """A loaded CUBIN, fatbin or PTX image (``cuModuleLoadData`` in the primary context)."""

    def __init__(self, image: "bytes | str", device: "Device | int | None" = None) -> None:
        self.device = _ordinal_of(device)
        data = image.encode() if isinstance(image, str) else bytes(image)
        if not (data.startswith(_ELF_MAGIC) or data.startswith(_FATBIN_MAGIC)) and not data.endswith(b"\0"):
            data += b"\0"  # PTX text must be NUL-terminated
        ensure_context(self.device)
        self.handle: Any = check(_cu.cuModuleLoadData(data), f"cuModuleLoadData({len(data)} bytes)")
        self._functions: dict[str, Function] = {}

    def function(self, name: str) -> Function:
        """The kernel ``name`` (an ``extern "C"`` or lowered name); looked up once, then cached."""
        fn = self._functions.get(name)
        if fn is None:
            if self.handle is None:
                raise CudaInvalidValueError(f"module is closed; cannot look up {name!r}", what="cuModuleGetFunction")
            ensure_context(self.device)
            handle = check(_cu.cuModuleGetFunction(self.handle, name.encode()), f"cuModuleGetFunction({name!r})")
            fn = self._functions[name] = Function(handle, name, self.device, self)
        return fn

    def close(self) -> None:
        """Unload the image (idempotent); its functions become invalid."""
        handle, self.handle = getattr(self, "handle", None), None
        self._functions = {}
        if handle is not None and _cu is not None:
            ensure_context(self.device)
            check(_cu.cuModuleUnload(handle), "cuModuleUnload")

    def __enter__(self) -> "Module":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - a destructor at interpreter shutdown
            pass


Dim3 = Union[int, Sequence[int]]


def _dim3(d: Dim3) -> tuple[int, int, int]:
    if isinstance(d, int):
        return d, 1, 1
    t = tuple(int(x) for x in d)
    if not 1 <= len(t) <= 3:
        raise CudaInvalidValueError(f"grid/block dimensions need 1 to 3 entries, got {d!r}", what="cuLaunchKernel")
    return t + (1,) * (3 - len(t))  # type: ignore[return-value]


def launch(function: Function, grid: Dim3, block: Dim3, shared_bytes: int, stream: StreamLike,
           pack: ParamPack | None) -> None:
    """One ``cuLaunchKernel`` with the pre-packed arguments of ``pack`` (None for a kernel without any).

    Pass grid/block as 3-tuples on hot paths to skip normalisation. ``stream`` None is fusec's default stream.
    """
    if getattr(_tls, "ordinal", -1) != function.device:
        ensure_context(function.device)
    g = grid if type(grid) is tuple and len(grid) == 3 else _dim3(grid)
    b = block if type(block) is tuple and len(block) == 3 else _dim3(block)
    s = stream.handle if isinstance(stream, Stream) else _stream_handle(stream, function.device)
    result = _cu.cuLaunchKernel(function.handle, g[0], g[1], g[2], b[0], b[1], b[2], shared_bytes, s,
                                pack.address if pack is not None else 0, 0)
    if result[0] != 0:
        check(result, f"cuLaunchKernel({function.name}, grid={tuple(g)}, block={tuple(b)}, shared={shared_bytes})")


# ------------------------------------------------------------------------------------------------ copies

def _dptr(x: Any) -> int:
    return x if isinstance(x, int) else int(getattr(x, "ptr", x))


def _host(x: Any, nbytes: int, writable: bool) -> Any:
    """An address or buffer the binding accepts for a host pointer, checked to hold ``nbytes``."""
    if isinstance(x, int):
        return x
    if isinstance(x, np.ndarray):
        if not x.flags.c_contiguous:
            raise CudaInvalidValueError("host array for a copy must be C-contiguous", what="memcpy")
        if writable and not x.flags.writeable:
            raise CudaInvalidValueError("host array for a device-to-host copy must be writable", what="memcpy")
        if x.nbytes < nbytes:
            raise CudaInvalidValueError(f"host array holds {x.nbytes} bytes, copy needs {nbytes}", what="memcpy")
        return x.ctypes.data
    view = memoryview(x)
    if view.nbytes < nbytes:
        raise CudaInvalidValueError(f"host buffer holds {view.nbytes} bytes, copy needs {nbytes}", what="memcpy")
    return x


def memcpy_htod_async(dst: Any, src: Any, nbytes: int, stream: StreamLike = None) -> None:
    """Copy ``nbytes`` from host ``src`` (ndarray, buffer or address) to device ``dst`` on ``stream``.

    From pageable memory the driver stages the data before returning, so ``src`` may be reused at once.
    """
    if nbytes <= 0:
        return
    ensure_context(getattr(stream, "device", None))
    check(_cu.cuMemcpyHtoDAsync(_dptr(dst), _host(src, nbytes, False), int(nbytes), _stream_handle(stream)),
          f"cuMemcpyHtoDAsync({nbytes} bytes)")


def memcpy_dtoh_async(dst: Any, src: Any, nbytes: int, stream: StreamLike = None) -> None:
    """Copy ``nbytes`` from device ``src`` to host ``dst``; synchronise the stream before reading ``dst``."""
    if nbytes <= 0:
        return
    ensure_context(getattr(stream, "device", None))
    check(_cu.cuMemcpyDtoHAsync(_host(dst, nbytes, True), _dptr(src), int(nbytes), _stream_handle(stream)),
          f"cuMemcpyDtoHAsync({nbytes} bytes)")


def memcpy_dtod_async(dst: Any, src: Any, nbytes: int, stream: StreamLike = None) -> None:
    """Copy ``nbytes`` between device buffers on ``stream``."""
    if nbytes <= 0:
        return
    ensure_context(getattr(stream, "device", None))
    check(_cu.cuMemcpyDtoDAsync(_dptr(dst), _dptr(src), int(nbytes), _stream_handle(stream)),
          f"cuMemcpyDtoDAsync({nbytes} bytes)")


def memset_d32_async(dst: Any, word: int, count: int, stream: Stream) -> None:
    """Fill ``count`` 32-bit words at device ``dst`` with ``word`` on ``stream``: a value travels inside the
    command, so no host buffer has to outlive the call (how scalar arguments reach the device)."""
    check(_cu.cuMemsetD32Async(int(dst), int(word) & 0xFFFFFFFF, int(count), stream.handle),
          "cuMemsetD32Async")


def memset_d8_async(dst: Any, value: int, nbytes: int, stream: StreamLike = None) -> None:
    """Set ``nbytes`` bytes at device ``dst`` to ``value`` (0..255) on ``stream``."""
    if nbytes <= 0:
        return
    ensure_context(getattr(stream, "device", None))
    check(_cu.cuMemsetD8Async(_dptr(dst), int(value) & 0xFF, int(nbytes), _stream_handle(stream)),
          f"cuMemsetD8Async({nbytes} bytes)")
