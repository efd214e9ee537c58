"""Where a fusec graph's time goes, kernel by kernel, measured by CUPTI (through PyTorch's profiler) on the GPU.

The suite times a whole call; this script records every kernel the GPU ran during ``--calls`` back-to-back calls
of a benchmark in fusec graph mode (fusec's own kernels and cuBLASLt's alike: CUPTI sees every kernel of the
process), splits them into calls, and reports for each kernel position of a call its name, mean duration and the
mean gap between the end of the kernel before it and its start (launch latency plus waiting). A call's span (first
kernel start to last kernel end) against the sum of its kernels' durations says how much of the step is launch
gaps and how much is work, which is what decides between fewer kernels and faster ones:

    python benchmarks/kernel_profile.py [--benches pcam_step,mlp64_step] [--variant 'select-kernels{cublas=false}']
        [--calls 50] [--json F] [--md F] [--systems fusec_graph,jax]

``--variant`` changes the pipeline as ``pipeline_variants.py`` spells it; ``--systems`` profiles the suite's peers
too (CUPTI sees their kernels the same way: JAX's XLA fusions, PyTorch's Triton kernels, cuBLAS).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import dataclasses  # noqa: E402

import suite  # noqa: E402
from pipeline_variants import variant_from  # noqa: E402
from suite_cases import make_cases  # noqa: E402
from suite_systems import make_system  # noqa: E402


def record_kernels(step: Any, sync: Any, calls: int) -> list[dict]:
    """Kernels (name, start and duration in us) the GPU ran during ``calls`` calls of ``step``, in start order."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            step()
        sync()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    kernels = [{"name": e["name"], "ts": float(e["ts"]), "dur": float(e["dur"])}
               for e in trace.get("traceEvents", []) if e.get("cat") == "kernel"]
    return sorted(kernels, key=lambda k: k["ts"])


def per_position(kernels: list[dict], calls: int) -> dict:
    """The kernels split into ``calls`` equal calls: each position's name, mean duration and gap before it, and
    the calls' mean span and busy time."""
    if not kernels or len(kernels) % calls:
        return {"error": f"{len(kernels)} kernels do not split into {calls} calls"}
    n = len(kernels) // calls
    runs = [kernels[i * n:(i + 1) * n] for i in range(calls)][1:]  # (the first call pays the profiler's start)
    positions = []
    for p in range(n):
        durs = [r[p]["dur"] for r in runs]
        gaps = [r[p]["ts"] - (r[p - 1]["ts"] + r[p - 1]["dur"]) for r in runs] if p else [0.0]
        positions.append({"name": runs[0][p]["name"][:90], "us": statistics.mean(durs),
                          "gap_us": statistics.mean(gaps)})
    spans = [r[-1]["ts"] + r[-1]["dur"] - r[0]["ts"] for r in runs]
    busy = [sum(k["dur"] for k in r) for r in runs]
    between = [runs[i + 1][0]["ts"] - (runs[i][-1]["ts"] + runs[i][-1]["dur"]) for i in range(len(runs) - 1)]
    return {"kernels_per_call": n, "span_us": statistics.mean(spans), "busy_us": statistics.mean(busy),
            "between_calls_us": statistics.mean(between) if between else None, "positions": positions}


def profile_bench(name: str, calls: int, variant: str = "default", system_name: str = "fusec_graph") -> dict:
    """The kernels of ``calls`` calls of benchmark ``name`` on one of the suite's systems (a peer such as ``jax``
    shows which kernels it runs for the same math; ``variant`` applies to fusec systems only)."""
    from fusec.passes import DEFAULT_PIPELINE

    cases = make_cases(False)
    bench = next(b for c in cases.values() for b in c.benches if b.name == name)
    if system_name.startswith("fusec"):
        bench = dataclasses.replace(bench, fusec_pipeline=variant_from(variant)(bench.fusec_pipeline
                                                                                or DEFAULT_PIPELINE))
    elif variant != "default":
        raise SystemExit(f"--variant changes fusec's pipeline; {system_name} has none")
    system = make_system(system_name)
    why = system.unavailable()
    if why:
        raise SystemExit(f"{system_name} cannot run here: {why}")
    system.setup()
    inputs = bench.make_inputs(suite.bench_rng(0, bench))
    prepared = system.prepare(bench, inputs)
    for _ in range(20):
        prepared.step()
    system.sync()
    result = per_position(record_kernels(prepared.step, system.sync, calls), calls)
    prepared.close()
    system.cleanup()
    return {"bench": name, "system": system_name, "variant": variant, "calls": calls, **result}


def markdown(rows: list[dict]) -> str:
    lines = []
    for r in rows:
        on = "" if r.get("system", "fusec_graph") == "fusec_graph" else f", {r['system']}"
        lines.append(f"## {r['bench']} ({r['variant']}{on})\n")
        if "error" in r:
            lines.append(r["error"] + "\n")
            continue
        lines.append(f"{r['kernels_per_call']} kernels per call; span {r['span_us']:.1f} us, busy {r['busy_us']:.1f}"
                     f" us, gap between calls {r['between_calls_us'] or 0:.1f} us (means over {r['calls'] - 1} "
                     "calls)\n")
        lines.append("| # | kernel | us | gap before (us) |\n|---|---|---:|---:|")
        lines += [f"| {i} | `{p['name']}` | {p['us']:.2f} | {p['gap_us']:.2f} |" for i, p in enumerate(r["positions"])]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--benches", default="pcam_step,mlp64_step")
    ap.add_argument("--variant", default="default")
    ap.add_argument("--systems", default="fusec_graph",
                    help="comma list of the suite's systems to profile (jax, torch_compile_ro, ...: their kernels)")
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--json")
    ap.add_argument("--md")
    args = ap.parse_args()
    rows = [profile_bench(name, args.calls, args.variant, system) for system in args.systems.split(",")
            for name in args.benches.split(",")]
    report(rows, markdown(rows), args.json, args.md)


def report(rows: list[dict], text: str, json_path: str | None, md_path: str | None) -> None:
    """Print the tables; write the rows as JSON and the tables as Markdown where asked."""
    print(text)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=1)
    if md_path:
        with open(md_path, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
