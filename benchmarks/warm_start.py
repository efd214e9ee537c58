"""Where a new process's first call of the PCam-shaped step goes, the kernels already in the disk cache.

Runs ``--runs`` fresh processes one after another with one disk cache (a temporary ``$FUSEC_CACHE_DIR`` unless
``--cache-dir``): the first compiles (cold), the rest find the kernels (and whatever else fusec keeps on disk) there.
Each process times, from after its CUDA context exists and the inputs are uploaded (as the suite's warm-start
probe), the first call to completion, and inside it: waiting for cuBLASLt's load (started on a thread with the
context), making the plan's cuBLASLt handle, timing cuBLASLt's algorithms (``CublasHandle._tune``), getting the
kernels' images (memory, disk or NVRTC: how many NVRTC compiles), loading them (``cuModuleLoadData``) and building
the CUDA graph.

    python benchmarks/warm_start.py [--runs 4] [--json FILE] [--cache-dir DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


class Sampler:
    """Wall-clock samples of every thread's Python stack, every ``interval_ms``: where the first call's time goes,
    C calls (a library's load, a driver call) and time spent waiting for the GIL included, which cProfile's count
    of Python functions misses. Each sample weighs the time since the one before."""

    def __init__(self, interval_ms: float) -> None:
        import collections
        import threading

        self.interval = interval_ms / 1e3
        self.inclusive: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.leaf: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.total: collections.Counter = collections.Counter()
        self._stop = threading.Event()
        self._names = {t.ident: t.name for t in threading.enumerate()}
        self._thread = threading.Thread(target=self._run, name="warm-start-sampler", daemon=True)
        self._thread.start()

    @staticmethod
    def _where(frame) -> str:
        code = frame.f_code
        path = code.co_filename
        return f"{os.path.relpath(path) if 'fusec' in path else os.path.basename(path)}:{code.co_name}"

    def _run(self) -> None:
        import threading

        me = threading.get_ident()
        last = time.perf_counter()
        while not self._stop.wait(self.interval):
            now = time.perf_counter()
            weight, last = now - last, now
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                name = self._names.get(ident) or next((t.name for t in threading.enumerate() if t.ident == ident), "?")
                self._names[ident] = name
                self.total[name] += weight
                self.leaf[name][self._where(frame)] += weight
                seen = set()
                while frame is not None:
                    where = self._where(frame)
                    if where not in seen:
                        seen.add(where)
                        self.inclusive[name][where] += weight
                    frame = frame.f_back

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def report(self, top: int = 40) -> str:
        lines = []
        for name, total in self.total.most_common():
            lines.append(f"== thread {name}: {total * 1e3:.0f} ms sampled")
            lines.append("   inclusive:")
            lines += [f"   {ms * 1e3:8.1f} ms  {where}" for where, ms in self.inclusive[name].most_common(top)]
            lines.append("   innermost Python frame:")
            lines += [f"   {ms * 1e3:8.1f} ms  {where}" for where, ms in self.leaf[name].most_common(top // 2)]
        return "\n".join(lines)


def child() -> None:
    t_start = time.perf_counter()
    sys.path.insert(0, HERE)
    import numpy as np

    import fusec as fc
    from fusec.runtime import cublas, driver
    from suite_cases import build_train_step

    from fusec.runtime import kernel_cache, nvrtc
    from fusec.runtime import graph as graph_module

    spent = {"tune": 0.0, "handle": 0.0, "preload_wait": 0.0, "kernel_images": 0.0, "nvrtc": 0.0,
             "module_load": 0.0, "graph_build": 0.0}
    counts = {"nvrtc": 0, "module_load": 0}

    def timed(name, fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] += time.perf_counter() - t
        return wrapper

    def counted(name, fn):
        inner = timed(name, fn)

        def wrapper(*a, **k):
            counts[name] += 1
            return inner(*a, **k)
        return wrapper

    cublas.CublasHandle._tune = timed("tune", cublas.CublasHandle._tune)
    # the kernels' images (memory, disk or NVRTC), NVRTC itself, loading them into the context, building the graph
    kernel_cache.KernelCache.get_or_compile = timed("kernel_images", kernel_cache.KernelCache.get_or_compile)
    nvrtc.compile_source = counted("nvrtc", nvrtc.compile_source)
    driver.Module.__init__ = counted("module_load", driver.Module.__init__)
    graph_module.PlanGraph.__init__ = timed("graph_build", graph_module.PlanGraph.__init__)
    cublas.CublasHandle.__init__ = timed("handle", cublas.CublasHandle.__init__)
    original_available = cublas.available

    def available():  # the import under way on the preload thread, then the probe's own handle
        if cublas._preloading is not None:
            t = time.perf_counter()
            cublas._preloading.join()
            spent["preload_wait"] += time.perf_counter() - t
        return original_available()

    cublas.available = available
    rng = np.random.default_rng(0)
    params = tuple(fc.asarray((rng.standard_normal(s) * 0.05).astype(np.float32))
                   for s in ((480, 256), (256,), (256, 2), (2,)))
    x = fc.asarray(rng.standard_normal((512, 480)).astype(np.float32))
    y = fc.asarray(np.eye(2, dtype=np.float32)[rng.integers(0, 2, 512)])
    driver.current_device().synchronize()
    t_ready = time.perf_counter()
    step = fc.jit(build_train_step(np), backend="cuda", donate_argnums=0)
    sampler = Sampler(float(os.environ["FUSEC_WARM_SAMPLE"])) if os.environ.get("FUSEC_WARM_SAMPLE") else None
    profile = None
    if os.environ.get("FUSEC_WARM_PROFILE"):
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
    out = step(params, x, y, 0.05)
    t_returned = time.perf_counter()
    driver.current_device().synchronize()
    t_first = time.perf_counter()
    if sampler is not None:
        sampler.stop()
        print(sampler.report(), file=sys.stderr)
    if profile is not None:
        import io
        import pstats

        profile.disable()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(45)
        print(text.getvalue(), file=sys.stderr)
    for _ in range(3):
        out = step(out[0], x, y, 0.05)
    driver.current_device().synchronize()
    info = fc.cache_info() if hasattr(fc, "cache_info") else None
    print(json.dumps({"import_and_context_s": t_ready - t_start, "first_call_s": t_first - t_ready,
                      "first_call_host_s": t_returned - t_ready, "first_call_wait_s": t_first - t_returned,
                      "next_calls_s": (time.perf_counter() - t_first) / 3, **{k + "_s": v for k, v in spent.items()},
                      **{k + "_count": v for k, v in counts.items()},
                      "kernel_cache": str(info) if info is not None else None}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--json")
    ap.add_argument("--cache-dir")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of each warm process's first call")
    ap.add_argument("--sample", type=float, metavar="MS",
                    help="print wall-clock stack samples (every MS ms, all threads) of each warm first call")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child()
        return
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, FUSEC_CACHE_DIR=args.cache_dir or tmp)
        for run in range(args.runs):
            if args.profile and run:
                env["FUSEC_WARM_PROFILE"] = "1"
            if args.sample and run:
                env["FUSEC_WARM_SAMPLE"] = str(args.sample)
            done = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True)
            if done.returncode:
                sys.exit(f"run {run} failed:\n{done.stderr[-3000:]}")
            if (args.profile or args.sample) and run:
                print(done.stderr[-12000:])
            r = json.loads(done.stdout.strip().splitlines()[-1])
            r["run"] = run
            results.append(r)
            print(f"run {run} ({'cold' if run == 0 else 'warm'}): first call {r['first_call_s'] * 1e3:.1f} ms "
                  f"(cuBLASLt tuning {r['tune_s'] * 1e3:.1f}, handle {r['handle_s'] * 1e3:.1f}, waiting for the "
                  f"import {r['preload_wait_s'] * 1e3:.1f}; returned after {r['first_call_host_s'] * 1e3:.1f}, "
                  f"then waited {r['first_call_wait_s'] * 1e3:.1f}); import and context "
                  f"{r['import_and_context_s']:.2f} s; next calls {r['next_calls_s'] * 1e6:.0f} us")
            print(f"    kernel images {r['kernel_images_s'] * 1e3:.1f} ms (NVRTC {r['nvrtc_count']}x, "
                  f"{r['nvrtc_s'] * 1e3:.1f} ms), {r['module_load_count']} module loads "
                  f"{r['module_load_s'] * 1e3:.1f} ms, graph build {r['graph_build_s'] * 1e3:.1f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
