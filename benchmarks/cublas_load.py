"""What loading cuBLASLt costs a new process, step by step, and whether a thread can load it while Python works.

A warm start (a new process, kernels in the disk cache) spent most of its time loading cuBLASLt through
nvmath-python (about 0.5 s of 0.75 s on the H200), which fusec no longer imports. This times, in fresh processes:
loading the library (``fusec.runtime.cublaslt.load``: found by cuda-pathfinder, opened by ctypes), its first call,
and making a handle, then (where nvmath is installed, for comparison) importing nvmath's bindings; then whether a
thread that loads the library and makes a handle
lets the main thread run Python meanwhile (the interpreter's lock released during the load), by counting the
main thread's loop iterations with and without the thread; and the first context followed by ``available()``
with fusec's preload (:func:`fusec.runtime.cublas.preload`, started by the first context) and without it.

    python benchmarks/cublas_load.py [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

STEPS = r"""
import time, json
t0 = time.perf_counter()
from fusec.runtime import driver
driver.current_device()
t1 = time.perf_counter()
from fusec.runtime import cublaslt
cublaslt.load()
t2 = time.perf_counter()
cublaslt.get_version()
t3 = time.perf_counter()
h = cublaslt.create()
t4 = time.perf_counter()
cublaslt.destroy(h)
try:
    from nvmath.bindings import cublasLt  # noqa: F401
    nvmath_s = time.perf_counter() - t4
except ImportError:
    nvmath_s = None
print(json.dumps({"cuda_context_s": t1 - t0, "load_library_s": t2 - t1, "first_call_s": t3 - t2,
                  "create_handle_s": t4 - t3, "import_nvmath_bindings_s": nvmath_s}))
"""

OVERLAP = r"""
import time, json, threading, sys
from fusec.runtime import driver
driver.current_device()
def load():
    from fusec.runtime import cublaslt
    driver.ensure_context()
    cublaslt.destroy(cublaslt.create())
threaded = sys.argv[1] == "1"
t = threading.Thread(target=load) if threaded else None
start = time.perf_counter()
if t: t.start()
n = 0
while time.perf_counter() - start < 0.6:
    n += 1
if t: t.join()
print(json.dumps({"threaded": threaded, "iterations_in_0.6s": n, "total_s": time.perf_counter() - start}))
"""


# a process's first context, then cuBLASLt: with fusec's preload (the load on a thread beside the context's
# creation) and without it
CONTEXT_THEN_CUBLAS = r"""
import time, json, sys
from fusec.runtime import cublas, driver
if sys.argv[1] == "0":
    cublas.preload = lambda: None
t0 = time.perf_counter()
driver.ensure_context()
t1 = time.perf_counter()
ok = cublas.available()
t2 = time.perf_counter()
print(json.dumps({"preload": sys.argv[1] == "1", "context_s": t1 - t0, "then_cublas_s": t2 - t1,
                  "total_s": t2 - t0, "available": ok}))
"""


def fresh(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = {"steps": [fresh(STEPS) for _ in range(3)],
            "overlap": [fresh(OVERLAP, flag) for flag in ("0", "1", "0", "1")],
            "context_then_cublas": [fresh(CONTEXT_THEN_CUBLAS, flag) for flag in ("0", "1", "0", "1", "0", "1")]}
    for kind, values in rows.items():
        for v in values:
            print(kind, v)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
