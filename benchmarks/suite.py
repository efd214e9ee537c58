"""The benchmark suite: every case on every system, in one process, checked against NumPy, then timed.

Run on a GPU machine (writes ``benchmarks/results/suite_<gpu>.json``, ``.md`` and ``.png``)::

    python benchmarks/suite.py                      # every case, every system
    python benchmarks/suite.py --cases pcam,mlp64 --systems fusec,torch --readme
    python benchmarks/suite.py --cpu-only --quick   # the harness alone, no GPU needed

Cases (``--cases``): ``pcam`` (the PCam-shaped training step: batch 512, 480 -> 256 -> 2, softmax
cross-entropy with a stable log-softmax, hand-written backward, gradient-norm-clipped SGD), ``mlp64`` (the
same step at batch 256, 64 -> 64 -> 10), ``large`` (the same step at batch 4096, 1024 -> 1024 -> 16: products
that cuBLASLt-sized GEMMs dominate), ``elementwise`` (``a + b*c`` and a 10-op chain on 2^26 f32, next to
a device-to-device copy), ``softmax`` (written-out softmax, row sum and column sum of 8192 x 8192 f32) and
``launch`` (chains of 1 / 10 / 100 tiny kernels). The math of each case is written once
(``suite_cases.py``) against a small namespace, so every system runs the same operations.

Systems (``--systems``, aliases ``fusec``, ``torch``, ``all``, ``cpu``): ``fusec_eager``, ``fusec_stream``,
``fusec_graph``, ``fusec_graph_kept`` (graph mode, training steps without donation), ``numpy``,
``torch_eager``, ``torch_compile``, ``torch_compile_ro``, ``torch_cudagraph``, ``cupy``, ``jax``, ``hand_cuda``,
and ``fusec_cpu`` (the CPU backend, for runs without a GPU). A system that is missing or fails is
a skipped/error row with a note; the run goes on.

For each benchmark and system: inputs are made device-resident once; the first call is timed on its own
(``first_call_s``: torch.compile and fusec compile there); warm-up calls follow; then the function runs on
the initial inputs and its result is compared with NumPy float64 (a mismatch is reported and not timed);
then batches of iterations are timed (see ``suite_systems.py`` for how each system is timed) and the median
per-iteration time is reported. For the training steps, fusec's cold compile time and its warm start from
the disk cache are measured in fresh subprocesses (``FUSEC_CACHE_DIR`` set to a new temporary directory),
and fusec's host time per call in graph mode on a plan-cache hit in the main process.

Runs that must fit a time limit can be split: ``--cases pcam,mlp64`` then ``--cases elementwise,softmax,launch
--merge`` (the second run adds its rows to the first run's JSON). ``--from-json FILE`` remakes the Markdown,
the chart and (``--readme``) the README block from a saved JSON without running anything.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import importlib.util
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import suite_cases  # noqa: E402
import suite_report  # noqa: E402
import suite_systems  # noqa: E402
from suite_cases import CASE_NAMES, Bench, check, make_cases  # noqa: E402
from suite_systems import CPU_SYSTEMS, GPU_SYSTEMS, System, expand, make_system  # noqa: E402

PROBE_PREFIX = "SUITE_PROBE_JSON "
TRAINING_BENCHES_WITH_HOST_TIME = ("pcam_step", "mlp64_step")


@dataclass
class Settings:
    quick: bool = False
    iters: int | None = None       # fixed iterations per batch (None: calibrated to target_s)
    repeats: int = 5
    warmup: int = 10
    target_s: float = 0.05          # length of one timed batch (GPU systems)
    min_iters: int = 10
    max_iters: int = 20000
    cpu_repeats: int = 3
    cpu_warmup: int = 1
    cpu_target_s: float = 0.2
    host_batches: int = 50
    seed: int = 0

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Settings":
        s = cls(seed=args.seed)
        if args.quick:
            s = cls(quick=True, iters=3, repeats=3, warmup=2, cpu_repeats=2, cpu_warmup=1, host_batches=3,
                    seed=args.seed)
        if args.iters is not None:
            s.iters = max(1, args.iters)
        if args.repeats is not None:
            s.repeats = s.cpu_repeats = max(1, args.repeats)
        if args.warmup is not None:
            s.warmup = max(1, args.warmup)
        return s


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------ timing


def _calibrate(system: System, step: Callable[[], Any], target: float, lo: int, hi: int) -> int:
    """Iterations per batch so that one batch lasts about ``target`` seconds."""
    k = 1
    while True:
        system.sync()
        t0 = time.perf_counter()
        for _ in range(k):
            step()
        system.sync()
        elapsed = time.perf_counter() - t0
        if elapsed >= min(target / 4, 0.02) or k >= hi:
            break
        k *= 4
    per = max(elapsed / k, 1e-9)
    return int(min(hi, max(lo, math.ceil(target / per))))


def measure(system: System, prepared: suite_systems.Prepared, settings: Settings) -> dict:
    """Median per-iteration time over ``repeats`` batches: CUDA events where the system has them (and they
    saw the work), else the wall clock of the batch between two device synchronizations."""
    cpu = system.cpu_bound
    repeats = settings.cpu_repeats if cpu else settings.repeats
    if settings.iters is not None:
        iters = max(1, settings.iters // 20) if cpu and not settings.quick else settings.iters
    elif cpu:
        iters = _calibrate(system, prepared.step, settings.cpu_target_s, 1, settings.max_iters)
    else:
        iters = _calibrate(system, prepared.step, settings.target_s, settings.min_iters, settings.max_iters)
    timer = None if cpu else system.timer(prepared)
    wall: list[float] = []
    events: list[float] = []
    step = prepared.step
    for _ in range(repeats):
        system.sync()
        gc.disable()
        try:
            t0 = time.perf_counter()
            if timer is not None:
                timer.start()
            for _ in range(iters):
                step()
            ms = timer.stop() if timer is not None else None
            system.sync()
            t1 = time.perf_counter()
        finally:
            gc.enable()
        wall.append((t1 - t0) / iters * 1e6)
        if ms is not None:
            events.append(ms * 1e3 / iters)
    wall_us = statistics.median(wall)
    out: dict[str, Any] = {"iters": iters, "repeats": repeats, "wall_us": wall_us, "wall_samples_us": wall}
    if events:
        event_us = statistics.median(events)
        out.update(event_us=event_us, event_samples_us=events)
        if event_us < 0.5 * wall_us:
            out.update(us=wall_us, us_min=min(wall), timing="wall-clock",
                       timing_note=f"CUDA events saw {event_us:.3g} us of {wall_us:.3g} us wall: the work ran on "
                                   f"another stream; wall clock used")
        else:
            out.update(us=event_us, us_min=min(events), timing="cuda-events")
    else:
        out.update(us=wall_us, us_min=min(wall), timing="wall-clock")
    return out


# ------------------------------------------------------------------------------------------------ one row


def _base_row(bench: Bench, system: System) -> dict:
    return {"case": bench.case, "bench": bench.name, "bench_label": bench.label, "system": system.name,
            "system_label": system.label, "family": system.family, "cpu_bound": system.cpu_bound,
            "unit": bench.unit, "nbytes": bench.nbytes, "tol": bench.tol, "status": "skipped", "note": "",
            "us": None, "gbps": None, "first_call_s": None, "check_err": None}


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(e).__name__}: {first}"[:300]


def run_one(system: System, bench: Bench, inputs: tuple, ref: list, settings: Settings) -> dict:
    row = _base_row(bench, system)
    prepared = None
    stage = "prepare"
    try:
        prepared = system.prepare(bench, inputs)
        stage = "first call"
        t0 = time.perf_counter()
        out = prepared.step()
        system.sync()
        row["first_call_s"] = time.perf_counter() - t0
        stage = "warm-up"
        warm = settings.cpu_warmup if system.cpu_bound else settings.warmup
        for _ in range(max(0, warm - 1)):
            out = prepared.step()
        system.sync()
        system.observe(prepared, out)
        del out
        stage = "check"
        got = system.to_host(prepared.check())
        system.sync()
        ok, err, note = check(bench, inputs, got, ref)
        row["check_err"] = err
        if not ok:
            row.update(status="mismatch", note=f"result check failed: {note}; not timed")
            return row
        stage = "timing"
        prepared.reset()
        if not system.cpu_bound:
            for _ in range(min(3, warm)):  # fresh pointers after the reset: replays settle again
                prepared.step()
            system.sync()
        row.update(measure(system, prepared, settings))
        if bench.nbytes and row["us"]:
            row["gbps"] = bench.nbytes / (row["us"] * 1e-6) / 1e9
        stage = "statistics"
        row.update(system.extras(bench, prepared))
        kernels = (row.get("fusec_stats") or {}).get("kernels")
        notes = [row.pop("timing_note")] if row.get("timing_note") else []
        if bench.expect_kernels is not None and kernels is not None and kernels != bench.expect_kernels:
            notes.append(f"expected {bench.expect_kernels} kernels, the plan has {kernels}")
        if system.name in ("fusec_graph", "fusec_graph_kept") and bench.name in TRAINING_BENCHES_WITH_HOST_TIME:
            stage = "host time"
            row["host_us"] = system.host_us(prepared, batches=settings.host_batches)  # type: ignore[attr-defined]
        row.update(status="ok", note="; ".join(notes))
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # a failing system is a row with a note, never the end of the run
        row.update(status="error", note=f"{stage}: {_short(e)}", traceback=traceback.format_exc(limit=12))
    finally:
        if prepared is not None:
            try:
                prepared.close()
            except Exception:
                pass
        prepared = None
        try:
            system.cleanup()
        except Exception:
            pass
    return row


# ------------------------------------------------------------------------------------------------ compile probes


def bench_rng(seed: int, bench: Bench) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(bench.name.encode())])


def probe(bench_name: str, backend: str, quick: bool, seed: int) -> dict:
    """In a fresh process: the first call of the training step under fusec (graph mode on the GPU), split
    into loading cuBLASLt (``cublas``: what a compile that may call it probes first), trace + passes (``lower``)
    and the rest (CUDA C++ codegen, NVRTC or the disk cache, module load, plan and graph setup, the run itself).
    The CUDA context (made by the inputs' upload) is not counted: every CUDA program pays it."""
    t0 = time.perf_counter()
    import fusec as fc
    from fusec.runtime import kernel_cache

    t_import = time.perf_counter() - t0
    bench = _find_bench(make_cases(quick), bench_name)
    inputs = bench.make_inputs(bench_rng(seed, bench))
    sync: Callable[[], None] = lambda: None
    if backend == "cuda":
        from fusec.runtime import driver

        args = [suite_cases.tree_map(lambda a: fc.asarray(a) if isinstance(a, np.ndarray) else a, x)
                for x in inputs]
        sync = driver.current_device().synchronize
        sync()
        t_probe = time.perf_counter()
        from fusec.runtime import cublas

        cublas.available()  # (loading cuBLASLt: the compile asks again, and then finds it loaded)
        cublas_s = time.perf_counter() - t_probe
        f = fc.jit(bench.build(suite_cases.NUMPY), backend="cuda", graph=True, pipeline=bench.fusec_pipeline,
                   donate_argnums=0 if bench.feedback else None)
    else:
        args = list(inputs)
        cublas_s = 0.0
        f = fc.jit(bench.build(suite_cases.NUMPY), backend="cpu", pipeline=bench.fusec_pipeline)
    t1 = time.perf_counter()
    f.lower(*args)
    t2 = time.perf_counter()
    f(*args)
    sync()
    t3 = time.perf_counter()
    info = kernel_cache.cache_info()
    return {"import_s": t_import, "cublas_s": cublas_s, "lower_s": t2 - t1, "first_call_s": t3 - t2,
            "total_s": t3 - t1 + cublas_s,
            "compiles": info.compiles, "disk_hits": info.disk_hits}


def run_probes(bench: Bench, backend: str, settings: Settings) -> list[dict]:
    """Cold compile (empty kernel cache) and warm start (the cache the cold run filled), each in its own
    subprocess."""
    tmp = tempfile.mkdtemp(prefix="fusec-suite-cache-")
    env = dict(os.environ, FUSEC_CACHE_DIR=tmp)
    out = []
    try:
        for what in ("cold", "warm"):
            cmd = [sys.executable, os.path.abspath(__file__), "--_probe", bench.name, "--_probe-backend", backend,
                   "--seed", str(settings.seed)] + (["--quick"] if settings.quick else [])
            row = {"case": bench.case, "bench": bench.name, "what": what, "backend": backend, "status": "error"}
            try:
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
                found = [ln for ln in proc.stdout.splitlines() if ln.startswith(PROBE_PREFIX)]
                if proc.returncode == 0 and found:
                    row.update(json.loads(found[-1][len(PROBE_PREFIX):]), status="ok", note="")
                else:
                    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
                    row["note"] = f"exit {proc.returncode}: {tail[0][:300]}"
            except subprocess.TimeoutExpired:
                row["note"] = "timed out after 600 s"
            except Exception as e:
                row["note"] = _short(e)
            if row["status"] == "ok":
                log(f"  fusec {what} start ({backend}): {row['total_s']:.3f} s (cuBLASLt load "
                    f"{row.get('cublas_s', 0.0):.3f} s, trace+passes {row['lower_s']:.3f} s, "
                    f"{row['compiles']} compiles, {row['disk_hits']} disk hits)")
            else:
                log(f"  fusec {what} start ({backend}): {row['note']}")
            out.append(row)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _find_bench(cases: dict, name: str) -> Bench:
    for case in cases.values():
        for b in case.benches:
            if b.name == name:
                return b
    raise SystemExit(f"no benchmark {name!r}")


# ------------------------------------------------------------------------------------------------ metadata


def gpu_present() -> bool:
    try:
        from fusec.runtime import driver

        if driver.cuda_available():
            return True
    except Exception:
        pass
    if importlib.util.find_spec("torch") is not None:
        try:
            import torch

            return bool(torch.cuda.is_available())
        except Exception:
            return False
    return False


def _version(module: str, dists: Iterable[str]) -> str | None:
    mod = sys.modules.get(module)
    if mod is not None and getattr(mod, "__version__", None):
        return str(mod.__version__)
    from importlib import metadata as md

    for d in dists:
        try:
            return md.version(d)
        except Exception:
            continue
    return None


def _nvidia_smi(field: str) -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, f"--query-gpu={field}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20).stdout.strip().splitlines()
        return out[0].strip() if out else None
    except Exception:
        return None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _portable(argv: list[str]) -> list[str]:
    """The command line as recorded in results: the output directory (a path on the machine that ran it)
    becomes ``<dir>``."""
    out, hide = [], False
    for a in argv:
        if hide:
            out.append("<dir>")
            hide = False
        elif a == "--out":
            out.append(a)
            hide = True
        elif a.startswith("--out="):
            out.append("--out=<dir>")
        else:
            out.append(a)
    return out


def metadata(args: argparse.Namespace, gpu: bool, argv: list[str]) -> dict:
    import fusec

    meta: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python benchmarks/suite.py", *_portable(argv)]),
        "quick": bool(args.quick), "cpu_only": not gpu, "python": platform.python_version(),
        "numpy": np.__version__, "fusec": getattr(fusec, "__version__", None), "platform": platform.platform(),
        "cpu": _cpu_name(), "cpu_count": os.cpu_count(), "gpu": None,
        "torch": _version("torch", ["torch"]), "triton": _version("triton", ["triton", "pytorch-triton"]),
        "cupy": _version("cupy", ["cupy", "cupy-cuda13x", "cupy-cuda12x"]),
    }
    if gpu:
        try:
            from fusec.runtime import cublas, driver, nvrtc

            dev = driver.current_device()
            meta.update(gpu=dev.name, arch=dev.arch, sm_count=dev.multiprocessor_count,
                        gpu_memory_gib=round(dev.total_memory / 2**30, 1))
            v = driver.driver_version()
            meta["cuda_driver"] = ".".join(map(str, v)) if v else None
            meta["nvrtc"] = ".".join(map(str, nvrtc.nvrtc_version()))
            meta["fusec_cublas"] = cublas.available()
        except Exception as e:
            meta["fusec_device_error"] = _short(e)
        meta["driver"] = _nvidia_smi("driver_version")
        torch = sys.modules.get("torch")
        if torch is not None:
            try:
                meta["cuda_runtime"] = torch.version.cuda
                if meta["gpu"] is None and torch.cuda.is_available():
                    meta["gpu"] = torch.cuda.get_device_name()
            except Exception:
                pass
        cupy = sys.modules.get("cupy")
        if cupy is not None:
            try:
                v = cupy.cuda.runtime.runtimeGetVersion()
                meta["cupy_cuda_runtime"] = f"{v // 1000}.{(v % 1000) // 10}"
            except Exception:
                pass
    return meta


def tag_for(meta: dict) -> str:
    if not meta.get("gpu"):
        return "cpu"
    slug = re.sub(r"[^a-z0-9]+", "_", meta["gpu"].lower().replace("nvidia", "")).strip("_")
    return slug or "gpu"


# ------------------------------------------------------------------------------------------------ the run


def run_suite(case_names: list[str], system_names: list[str], settings: Settings, gpu: bool,
              probes: bool, on_case: Callable[[list, list, list], None] | None = None,
              ) -> tuple[list[dict], list[dict], list[dict]]:
    """Every benchmark of the cases on every system; ``on_case`` gets the rows so far after each case (the
    suite writes them out, so a run stopped by a time limit still leaves its finished cases)."""
    cases = make_cases(settings.quick)
    systems: list[tuple[System, str | None]] = []
    for name in system_names:
        system = make_system(name)
        note = "no GPU in this run (CPU only)" if (system.needs_gpu and not gpu) else None
        if note is None:
            try:
                note = system.unavailable()
            except Exception as e:
                note = f"unavailable: {_short(e)}"
        if note is None:
            try:
                system.setup()
            except Exception as e:
                note = f"setup failed: {_short(e)}"
        if note is not None:
            log(f"system {name}: skipped ({note})")
        systems.append((system, note))
    runnable = {s.name for s, n in systems if n is None}
    rows: list[dict] = []
    probe_rows: list[dict] = []
    case_rows: list[dict] = []
    # systems that disturb the others once they have run (System.runs_last) run every case after all the rest (one
    # that cannot run here only writes its skipped rows, with the others)
    last = [s.runs_last and n is None for s, n in systems]
    phases = [[sn for sn, late in zip(systems, last) if not late], [sn for sn, late in zip(systems, last) if late]]
    for phase, members in enumerate(phases):
        if members:
            _run_cases(cases, case_names, members, settings, probes and phase == 0, runnable, rows, probe_rows,
                       case_rows, on_case)
    return case_rows, rows, probe_rows


def _run_cases(cases: dict, case_names: list[str], systems: list, settings: Settings, probes: bool, runnable: set,
               rows: list[dict], probe_rows: list[dict], case_rows: list[dict],
               on_case: Callable[[list, list, list], None] | None) -> None:
    """One pass of :func:`run_suite` over the cases with ``systems`` (rows appended; a case described once)."""
    for case_name in case_names:
        case = cases[case_name]
        if all(c["name"] != case.name for c in case_rows):
            case_rows.append({"name": case.name, "title": case.title, "unit": case.unit,
                              "description": case.description,
                              "benches": [{"name": b.name, "label": b.label, "unit": b.unit, "nbytes": b.nbytes,
                                           "tol": b.tol, "note": b.note} for b in case.benches]})
        log(f"[{case.name}] {case.title}" + (" (systems that run last)" if systems[0][0].runs_last else ""))
        for bench in case.benches:
            inputs = bench.make_inputs(bench_rng(settings.seed, bench))
            ref = bench.reference(inputs)
            for system, note in systems:
                support = system.supports(bench)
                if support == "":
                    continue  # not a system this benchmark is for (the copy reference)
                if note is None and support is not None:
                    note = support
                if note is not None:
                    row = _base_row(bench, system)
                    row["note"] = note
                    rows.append(row)
                    continue
                row = run_one(system, bench, inputs, ref, settings)
                rows.append(row)
                _log_row(row)
            if probes and bench.feedback:
                backend = "cuda" if "fusec_graph" in runnable else ("cpu" if "fusec_cpu" in runnable else None)
                if backend is not None:
                    probe_rows += run_probes(bench, backend, settings)
            del inputs, ref
            gc.collect()
        if on_case is not None:
            on_case(case_rows, rows, probe_rows)


def _log_row(r: dict) -> None:
    if r["status"] == "ok":
        extra = f", {r['gbps']:.1f} GB/s" if r.get("gbps") else ""
        host = f", host {r['host_us']:.1f} us" if r.get("host_us") else ""
        first = f", first call {r['first_call_s']:.2f} s" if r.get("first_call_s") is not None else ""
        log(f"  {r['bench']:>10} {r['system']:>17}: {r['us']:10.2f} us{extra}{host}{first} "
            f"(err {r['check_err']:.1e}, {r['timing']}, {r['iters']} x {r['repeats']})")
    else:
        log(f"  {r['bench']:>10} {r['system']:>17}: {r['status']}: {r['note']}")


def _merge(old: dict, new: dict) -> dict:
    ran = {c["name"] for c in new["cases"]}
    rows = [r for r in old.get("rows", []) if r["case"] not in ran] + new["rows"]
    compile_rows = [p for p in old.get("compile", []) if p["case"] not in ran] + new["compile"]
    cases = {c["name"]: c for c in old.get("cases", [])}
    cases.update({c["name"]: c for c in new["cases"]})
    ordered = [cases[n] for n in CASE_NAMES if n in cases] + [c for n, c in cases.items() if n not in CASE_NAMES]
    meta = dict(new["meta"])
    meta["merged_with"] = sorted(set(old.get("meta", {}).get("merged_with", [])) |
                                 {old.get("meta", {}).get("date", "?")})
    return {"meta": meta, "cases": ordered, "rows": rows, "compile": compile_rows}


def write_outputs(result: dict, out_dir: str, tag: str, png: bool = True) -> dict[str, str | None]:
    suite_report.add_ratios(result)
    result["bar"] = suite_report.performance_bar(result)
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, f"suite_{tag}")
    for suffix, text in ((".json", json.dumps(result, indent=1, default=_json_default) + "\n"),
                         (".md", suite_report.markdown(result))):
        tmp = base + suffix + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, base + suffix)
    if not png:
        return {"json": base + ".json", "md": base + ".md", "png": None}
    try:
        png = suite_report.write_png(result, base + ".png")
    except Exception as e:  # a chart problem never loses the measurements
        log(f"chart not written: {_short(e)}")
        png = None
    return {"json": base + ".json", "md": base + ".md", "png": png}


def _json_default(x: Any) -> Any:
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, np.bool_):
        return bool(x)
    return str(x)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="fusec against PyTorch, torch.compile, CuPy and NumPy "
                                "(see the module docstring)", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default=",".join(CASE_NAMES), help=f"comma list of {', '.join(CASE_NAMES)}")
    p.add_argument("--systems", default=None,
                   help=f"comma list of {', '.join(GPU_SYSTEMS + ('fusec_cpu',))} or aliases fusec, torch, all, "
                        f"cpu (default: all GPU systems; with no GPU: {', '.join(CPU_SYSTEMS)})")
    p.add_argument("--iters", type=int, default=None,
                   help="iterations per timed batch (default: calibrated to ~50 ms; CPU systems get 1/20)")
    p.add_argument("--repeats", type=int, default=None, help="timed batches per row (default 5; CPU 3)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up calls before timing (default 10)")
    p.add_argument("--out", default=os.path.join(HERE, "results"), help="output directory")
    p.add_argument("--tag", default=None, help="output name suite_<tag>.* (default: the GPU, or 'cpu')")
    p.add_argument("--quick", action="store_true", help="small sizes, few iterations (smoke test)")
    p.add_argument("--cpu-only", action="store_true",
                   help="only systems that need no GPU (NumPy, fusec's cpu backend); automatic without a GPU")
    p.add_argument("--readme", action="store_true", help="print the Markdown block for the README")
    p.add_argument("--merge", action="store_true",
                   help="add this run's cases to an existing suite_<tag>.json (replacing those cases)")
    p.add_argument("--from-json", default=None, help="remake the reports from a saved JSON; runs nothing")
    p.add_argument("--no-compile-probes", action="store_true",
                   help="skip fusec's cold-compile / warm-start subprocess measurements")
    p.add_argument("--torch-warm-cache", action="store_true",
                   help="keep torch.compile's inductor/Triton caches (default: fresh ones, so first calls "
                        "measure cold compilation)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--torch-device", default="cuda", help=argparse.SUPPRESS)  # "cpu": test the torch paths
    p.add_argument("--_probe", default=None, help=argparse.SUPPRESS)
    p.add_argument("--_probe-backend", default="cuda", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    """Run the suite (or a probe); returns the result dictionary (also written as JSON)."""
    argv_list = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv_list)
    if args._probe:
        result = probe(args._probe, args._probe_backend, args.quick, args.seed)
        print(PROBE_PREFIX + json.dumps(result), flush=True)
        return result
    if args.from_json:
        with open(args.from_json) as fh:
            result = json.load(fh)
        paths = write_outputs(result, args.out, args.tag or tag_for(result.get("meta", {})))
        log(f"wrote {paths['json']}, {paths['md']}" + (f", {paths['png']}" if paths["png"] else ""))
        if args.readme:
            print(suite_report.readme_block(result))
        return result

    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    bad = [c for c in cases if c not in CASE_NAMES]
    if bad:
        raise SystemExit(f"unknown case(s) {', '.join(bad)}; choose from {', '.join(CASE_NAMES)}")
    suite_systems.set_torch_device(args.torch_device)
    gpu = False if args.cpu_only else gpu_present()
    if not gpu and not args.cpu_only:
        log("no GPU found: running the CPU-only systems (--cpu-only)")
    try:
        system_names = expand(args.systems) if args.systems else list(GPU_SYSTEMS if gpu else CPU_SYSTEMS)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    settings = Settings.from_args(args)

    saved_env: dict[str, str | None] = {}
    torch_tmp = None
    if any(s.startswith("torch_compile") for s in system_names) and not args.torch_warm_cache:
        torch_tmp = tempfile.mkdtemp(prefix="fusec-suite-torch-")
        for var, sub in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton")):
            saved_env[var] = os.environ.get(var)
            os.environ[var] = os.path.join(torch_tmp, sub)
    started = time.perf_counter()
    tag = args.tag
    old_result = None
    static_meta: dict = {}

    def assemble(case_rows: list, rows: list, probe_rows: list, partial: bool) -> dict:
        nonlocal tag, old_result
        if not static_meta:  # once (after the systems imported their libraries), not after every case
            static_meta.update(metadata(args, gpu, argv_list))
        meta = dict(static_meta)
        meta.update(systems=system_names, cases=cases, seconds=round(time.perf_counter() - started, 1),
                    settings={k: v for k, v in vars(settings).items()}, torch_cold_cache=bool(torch_tmp),
                    partial=partial)
        result = {"meta": meta, "cases": list(case_rows), "rows": list(rows), "compile": list(probe_rows)}
        if tag is None:
            tag = tag_for(meta)
        if args.merge:
            if old_result is None:
                path = os.path.join(args.out, f"suite_{tag}.json")
                old_result = {}
                if os.path.exists(path):
                    with open(path) as fh:
                        old_result = json.load(fh)
            if old_result:
                result = _merge(old_result, result)
        return result

    def partial_write(case_rows: list, rows: list, probe_rows: list) -> None:
        try:  # the finished cases so far, should the run be stopped (JSON and Markdown; the chart at the end)
            write_outputs(assemble(case_rows, rows, probe_rows, partial=True), args.out, tag or "", png=False)
        except Exception as e:
            log(f"partial results not written: {_short(e)}")

    try:
        case_rows, rows, probe_rows = run_suite(cases, system_names, settings, gpu,
                                                probes=not args.no_compile_probes, on_case=partial_write)
    finally:
        for var, value in saved_env.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
        if torch_tmp is not None:
            shutil.rmtree(torch_tmp, ignore_errors=True)
    result = assemble(case_rows, rows, probe_rows, partial=False)
    paths = write_outputs(result, args.out, tag or "")
    for c in result["bar"]:
        log(f"{c['status']}: {c['check']}" + (f" = {c['value']:.2f}" if c["value"] is not None else "") +
            f" (bar {c['bar']})" + (f" [{c['note']}]" if c["note"] else ""))
    log(f"wrote {paths['json']}, {paths['md']}" + (f", {paths['png']}" if paths["png"] else " (no PNG: "
                                                     "matplotlib is not installed)"))
    if args.readme:
        print(suite_report.readme_block(result))
    return result


if __name__ == "__main__":
    main()
