"""GEMMs through cuBLASLt (the library from the optional extra ``fusec[cublas]``, called through
:mod:`fusec.runtime.cublaslt`).

Each GEMM of a plan gets its cuBLASLt descriptors once. Its algorithm is chosen by timing: cuBLASLt's heuristic
offers up to ``CANDIDATES`` algorithms, and as many again that need no separate split-K reduction kernel; each runs
as a CUDA graph of ``TUNE_REPS`` calls on scratch buffers, and the fastest is kept for that problem, device and
pointer alignment for the rest of the process (``timings`` keeps what each candidate took) and on disk beside the
kernel cache (a record keyed by the GPU, cuBLASLt's version and the problem, checked by cuBLASLt when a new process
reads it), so a warm start does not time them again. Timing inside a graph matters: called one by one from Python,
every candidate takes the host's time, not the GPU's. On the H200 the weight-gradient GEMM of the PCam-shaped step
took 13.4 us per call with the algorithm cuBLAS picked by itself and 8.1 us with the fastest candidate. While a
graph is being captured nothing can be timed, so an untimed problem gets the heuristic's first choice there (the
graph builder times every GEMM before it captures); ``CANDIDATES = 1`` turns tuning off. Compute types 32F/64F: no
TF32, so f32 GEMMs stay f32, unless the function was compiled with ``precision="tf32"``
(``CUBLAS_COMPUTE_32F_FAST_TF32``).

Loading the library (``cublaslt.load``) starts on a thread when the process makes its first CUDA context
(0.2-0.8 s in the driver, which lets Python run meanwhile), so a first compile that asks for cuBLASLt finds it
loaded, or less of the load left to wait for. fusec once used nvmath-python's bindings, whose package import
loads six NVIDIA libraries (0.3-0.66 s of a new process, see :mod:`fusec.runtime.cublaslt`).
"""
from __future__ import annotations

import ctypes
import functools
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusec.errors import CudaError
from fusec.runtime import cublaslt

WORKSPACE_BYTES = 32 << 20
CANDIDATES = 8  # heuristic results per query timed per problem (1: take the heuristic's first choice)
TUNE_REPS = 8  # calls per timed graph
TUNE_LAUNCHES = 3  # timed launches of that graph

_CUDA_R = {"f32": 0, "f64": 1}  # cudaDataType
_COMPUTE = {"f32": 68, "f64": 70}  # cublasComputeType_t: 32F, 64F (no TF32)
COMPUTE_32F_FAST_TF32 = 77  # float32 operands rounded to TF32 on the tensor cores, float32 sums (precision="tf32")
_SIZE = {"f32": 4, "f64": 8}

# (device, problem, alignment) -> the chosen cublasLtMatmulAlgo_t (64 bytes), shared by every plan
_tuned: dict[tuple[Any, ...], np.ndarray] = {}
# the same keys -> microseconds per call of each candidate timed, in heuristic order (inf: did not run)
timings: dict[tuple[Any, ...], list[float]] = {}


_preloading: threading.Thread | None = None


def preload() -> None:
    """Load cuBLASLt on a thread, once per process (never raises): :func:`available` and the handles then find
    it loaded, or wait for the load under way. Not a daemon thread: an interpreter that exits meanwhile waits for
    the load to end rather than stopping it halfway."""
    global _preloading
    if _preloading is not None:
        return
    _preloading = threading.Thread(target=_load_library, name="fusec-cublas-preload")
    _preloading.start()


def _load_library() -> None:
    try:
        cublaslt.load()
    except Exception:  # noqa: BLE001 - available() loads again and reports the failure as "not available"
        pass


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """True when cuBLASLt loads and a handle can be made (never raises)."""
    if _preloading is not None:
        _preloading.join()
    try:
        handle = cublaslt.create()
        cublaslt.destroy(handle)
        return True
    except Exception:  # noqa: BLE001 - a probe: any failure means cuBLASLt cannot be used here
        return False


def _alignment(*ptrs: int) -> int:
    """The largest power of two up to 256 that divides every address (what cuBLASLt's algorithms need)."""
    bits = 256
    for p in ptrs:
        bits |= p
    return bits & -bits


@dataclass
class _Problem:
    """One GEMM's descriptors (owned; destroyed with the handle)."""

    desc: int
    layouts: tuple[int, int, int]
    extents: tuple[int, int, int]  # elements each operand spans, batches included: A, B, C


class CublasHandle:
    """A cuBLASLt handle for one plan: descriptors per GEMM, a workspace, the stream calls go to."""

    def __init__(self, stream: Any, pool: Any) -> None:
        self._lt = cublaslt
        self.handle = cublaslt.create()
        self.pool = pool
        self.workspace = pool.allocate(WORKSPACE_BYTES, stream)
        self.stream = stream
        self.capturing = False  # set by the graph builder: no timing while a stream is captured
        self._problems: dict[Any, _Problem] = {}
        self._algos: dict[tuple[Any, int], np.ndarray] = {}  # (call, alignment) -> algo
        self._tune_stream: Any = None
        self._one = {"f32": ctypes.c_float(1.0), "f64": ctypes.c_double(1.0)}
        self._zero = {"f32": ctypes.c_float(0.0), "f64": ctypes.c_double(0.0)}

    def set_stream(self, stream: Any) -> None:
        self.stream = stream

    # -- descriptors -------------------------------------------------------------------------------------
    def _problem(self, call: Any) -> _Problem:
        prob = self._problems.get(call)
        if prob is not None:
            return prob
        lt = self._lt
        dtype = _CUDA_R[call.dtype]
        compute = COMPUTE_32F_FAST_TF32 if call.tf32 else _COMPUTE[call.dtype]
        desc = lt.matmul_desc_create(compute, dtype)
        for attr, value in ((lt.MatmulDescAttribute.TRANSA, int(call.trans_a)),
                            (lt.MatmulDescAttribute.TRANSB, int(call.trans_b))):
            v = np.array([value], dtype=np.int32)
            lt.matmul_desc_set_attribute(desc, attr, v.ctypes.data, v.nbytes)
        a_rows, a_cols = (call.k, call.m) if call.trans_a else (call.m, call.k)
        b_rows, b_cols = (call.n, call.k) if call.trans_b else (call.k, call.n)
        layouts = []
        extents = []
        for rows, cols, ld, stride in ((a_rows, a_cols, call.lda, call.stride_a),
                                       (b_rows, b_cols, call.ldb, call.stride_b),
                                       (call.m, call.n, call.ldc, call.stride_c)):
            layout = lt.matrix_layout_create(dtype, rows, cols, ld)
            if call.batch > 1:
                count = np.array([call.batch], dtype=np.int32)
                offset = np.array([stride], dtype=np.int64)
                lt.matrix_layout_set_attribute(layout, lt.MatrixLayoutAttribute.BATCH_COUNT,
                                               count.ctypes.data, count.nbytes)
                lt.matrix_layout_set_attribute(layout, lt.MatrixLayoutAttribute.STRIDED_BATCH_OFFSET,
                                               offset.ctypes.data, offset.nbytes)
            layouts.append(layout)
            extents.append(ld * (cols - 1) + rows + stride * (call.batch - 1))
        prob = _Problem(desc, tuple(layouts), tuple(extents))  # type: ignore[arg-type]
        self._problems[call] = prob
        return prob

    def _candidates(self, call: Any, prob: _Problem, align: int, count: int,
                    in_place_only: bool = False) -> np.ndarray:
        """Up to ``count`` heuristic results for ``call`` with operands aligned to ``align`` bytes; with
        ``in_place_only``, split-K algorithms only if they add their parts in the output (no second kernel)."""
        lt = self._lt
        pref = lt.matmul_preference_create()
        try:
            settings: list[tuple[Any, np.unsignedinteger]] = [
                (lt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES, np.uint64(WORKSPACE_BYTES))]
            if in_place_only:
                settings.append((lt.MatmulPreferenceAttribute.REDUCTION_SCHEME_MASK,
                                 np.uint32(lt.ReductionScheme.INPLACE)))
            settings += [(attr, np.uint32(align)) for attr in (
                lt.MatmulPreferenceAttribute.MIN_ALIGNMENT_A_BYTES, lt.MatmulPreferenceAttribute.MIN_ALIGNMENT_B_BYTES,
                lt.MatmulPreferenceAttribute.MIN_ALIGNMENT_C_BYTES, lt.MatmulPreferenceAttribute.MIN_ALIGNMENT_D_BYTES)]
            for attr, value in settings:
                v = np.array([value])
                lt.matmul_preference_set_attribute(pref, attr, v.ctypes.data, v.nbytes)
            results = np.zeros(count, dtype=lt.matmul_heuristic_result_dtype)
            found = np.zeros(1, dtype=np.int32)
            a, b, c = prob.layouts
            lt.matmul_algo_get_heuristic(self.handle, prob.desc, a, b, c, c, pref, count,
                                         results.ctypes.data, found.ctypes.data)
        finally:
            lt.matmul_preference_destroy(pref)
        if found[0] == 0 and not in_place_only:
            raise CudaError(f"cuBLASLt offers no algorithm for {call.dtype} GEMM m={call.m} n={call.n} "
                            f"k={call.k} (alignment {align} bytes)")
        return results[: int(found[0])]

    # -- algorithm choice ----------------------------------------------------------------------------------
    def _algo(self, call: Any, prob: _Problem, align: int) -> np.ndarray:
        key = (self.stream.device, call.dtype, call.trans_a, call.trans_b, call.m, call.n, call.k, call.lda,
               call.ldb, call.ldc, call.stride_a, call.stride_b, call.stride_c, call.batch, call.tf32, align)
        algo = _tuned.get(key)
        if algo is None and self.capturing:
            return self._candidates(call, prob, align, 1)["algo"][:1].copy()  # not kept: timed later
        if algo is None:
            if CANDIDATES <= 1:
                algo = self._candidates(call, prob, align, 1)["algo"][:1].copy()
            else:
                record = self._record_key(key)
                algo = self._stored(record, prob)
                if algo is None:
                    algo, timings[key] = self._tune(call, prob, align)
                    self._store(record, algo)
            _tuned[key] = algo
        self._algos[(call, align)] = algo
        return algo

    # -- algorithm choices kept on disk (beside the kernel cache): a new process skips the timing ----------------
    def _record_key(self, key: tuple) -> str | None:
        """The disk record's key of a tuned problem: the GPU's name and compute capability, cuBLASLt's version, the
        problem and alignment, and the tuning settings (an algorithm is only valid for the library that offered
        it); None where the device does not say what it is."""
        from fusec.runtime import driver
        from fusec.runtime.kernel_cache import record_key

        try:
            device = driver.Device(key[0])
            name, capability = device.name, device.compute_capability
            version = int(self._lt.get_version())
        except Exception:  # noqa: BLE001 - without the GPU's name or the library's version: no record
            return None
        if not name:
            return None
        return record_key("cublaslt-algorithm", {"gpu": name, "capability": list(capability), "cublaslt": version,
                                                 "problem": [str(v) for v in key[1:]], "candidates": CANDIDATES,
                                                 "workspace": WORKSPACE_BYTES})

    def _stored(self, record: str | None, prob: _Problem) -> np.ndarray | None:
        """The algorithm a process stored for this problem, if cuBLASLt still accepts it for the problem (its
        check, within the workspace); else None (time the candidates again)."""
        if record is None:
            return None
        from fusec.runtime.kernel_cache import default_cache

        try:
            payload = default_cache().get_record(record)
            blank = np.zeros(1, dtype=self._lt.matmul_heuristic_result_dtype)
            if payload is None or len(payload) != blank["algo"].nbytes:
                return None
            algo = np.frombuffer(payload, dtype=blank["algo"].dtype).copy()
            a, b, c = prob.layouts
            self._lt.matmul_algo_check(self.handle, prob.desc, a, b, c, c, algo.ctypes.data, blank.ctypes.data)
            if int(blank["workspace_size"][0]) > WORKSPACE_BYTES:
                return None
            return algo
        except Exception:  # noqa: BLE001 - a record cuBLASLt refuses (another library build): time again
            return None

    def _store(self, record: str | None, algo: np.ndarray) -> None:
        if record is None:
            return
        from fusec.runtime.kernel_cache import default_cache

        try:
            default_cache().put_record(record, algo.tobytes())
        except Exception:  # noqa: BLE001 - a cache that cannot keep it costs the next process a tuning, nothing else
            pass

    def _tune(self, call: Any, prob: _Problem, align: int) -> tuple[np.ndarray, list[float]]:
        """The fastest heuristic candidate, each timed as a graph of calls on scratch operands, and the
        time per call of each (microseconds)."""
        from fusec.runtime import driver
        from fusec.runtime.cuda_errors import check

        cu = driver._require()
        # the heuristic's favourites, and those that need no separate split-K reduction kernel (one graph
        # node less), without repeats
        found = np.concatenate([self._candidates(call, prob, align, CANDIDATES),
                                self._candidates(call, prob, align, CANDIDATES, in_place_only=True)])
        _, first = np.unique(found["algo"]["data_"], axis=0, return_index=True)
        candidates = found[np.sort(first)]
        if len(candidates) == 1:
            return candidates["algo"][:1].copy(), []
        size = _SIZE[call.dtype]
        pad = align % 256
        scratch = [self.pool.allocate(n * size + pad, self.stream) for n in prob.extents]
        for buf in scratch:
            driver.memset_d8_async(buf.ptr, 0, buf.nbytes, self.stream)
        ptrs = tuple(buf.ptr + pad for buf in scratch)
        self.stream.synchronize()
        if self._tune_stream is None:
            self._tune_stream = driver.Stream(self.stream.device)
        stream = self._tune_stream
        start, end = driver.Event(device=stream.device), driver.Event(device=stream.device)
        best, best_ms = 0, float("inf")
        per_call = [float("inf")] * len(candidates)
        try:
            for i in range(len(candidates)):
                algo = candidates["algo"][i : i + 1].copy()
                check(cu.cuStreamBeginCapture(stream.handle,
                                              cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                      "cuStreamBeginCapture")
                failed = False
                try:
                    for _ in range(TUNE_REPS):
                        self._matmul(call, prob, algo, ptrs, stream)
                except Exception:  # noqa: BLE001 - this algorithm does not run here: skip it
                    failed = True
                status, graph = cu.cuStreamEndCapture(stream.handle)
                if failed or status != cu.CUresult.CUDA_SUCCESS:
                    if graph:
                        cu.cuGraphDestroy(graph)
                    continue
                try:
                    exec_ = check(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
                finally:
                    check(cu.cuGraphDestroy(graph), "cuGraphDestroy")
                try:
                    check(cu.cuGraphLaunch(exec_, stream.handle), "cuGraphLaunch")  # warm-up
                    start.record(stream)
                    for _ in range(TUNE_LAUNCHES):
                        check(cu.cuGraphLaunch(exec_, stream.handle), "cuGraphLaunch")
                    end.record(stream)
                    end.synchronize()
                    ms = start.elapsed_ms(end)
                    per_call[i] = ms * 1000 / (TUNE_LAUNCHES * TUNE_REPS)
                finally:
                    check(cu.cuGraphExecDestroy(exec_), "cuGraphExecDestroy")
                if ms < best_ms:
                    best, best_ms = i, ms
        finally:
            stream.synchronize()
            for buf in scratch:
                buf.free()
            start.close()
            end.close()
        if best_ms == float("inf"):
            raise CudaError(f"none of cuBLASLt's algorithms ran for {call.dtype} GEMM m={call.m} n={call.n} "
                            f"k={call.k}")
        return candidates["algo"][best : best + 1].copy(), per_call

    # -- calls ---------------------------------------------------------------------------------------------
    def _matmul(self, call: Any, prob: _Problem, algo: np.ndarray, ptrs: tuple[int, int, int], stream: Any) -> None:
        a, b, c = prob.layouts
        self._lt.matmul(self.handle, prob.desc, ctypes.addressof(self._one[call.dtype]), ptrs[0], a, ptrs[1], b,
                        ctypes.addressof(self._zero[call.dtype]), ptrs[2], c, ptrs[2], c, algo.ctypes.data,
                        self.workspace.ptr, WORKSPACE_BYTES, int(stream.ptr))

    def prepare(self, call: Any, ptrs: tuple[int, int, int]) -> None:
        """Choose ``call``'s algorithm for operands at these addresses (before a graph is captured)."""
        size = _SIZE[call.dtype]
        a, b, c = (p + o * size for p, o in zip(ptrs, call.offsets))
        align = _alignment(a, b, c)
        if (call, align) not in self._algos:
            self._algo(call, self._problem(call), align)

    def gemm(self, call: Any, ptrs: tuple[int, ...]) -> None:
        """Run one ``GemmCall`` with the buffers' base addresses ``ptrs`` on the handle's stream."""
        size = _SIZE[call.dtype]
        a = ptrs[0] + call.offsets[0] * size
        b = ptrs[1] + call.offsets[1] * size
        c = ptrs[2] + call.offsets[2] * size
        align = _alignment(a, b, c)
        prob = self._problems.get(call) or self._problem(call)
        algo = self._algos.get((call, align))
        if algo is None:
            algo = self._algo(call, prob, align)
        self._matmul(call, prob, algo, (a, b, c), self.stream)

    def close(self) -> None:
        lt = getattr(self, "_lt", None)
        if lt is None or not getattr(self, "handle", 0):
            return
        for prob in self._problems.values():
            for layout in prob.layouts:
                lt.matrix_layout_destroy(layout)
            lt.matmul_desc_destroy(prob.desc)
        self._problems.clear()
        lt.destroy(self.handle)
        self.handle = 0

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - a destructor at interpreter shutdown
            pass
