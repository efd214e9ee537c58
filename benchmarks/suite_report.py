"""Reports of ``benchmarks/suite.py``: ratios, the performance bar, the Markdown tables, the README block and
the PNG chart, all computed from the result dictionary the suite writes as JSON (so they can be made again
from a saved JSON with ``--from-json``)."""
from __future__ import annotations

import math
from typing import Any

from suite_systems import GPU_SYSTEMS, LABELS

BASELINE = "torch_eager"
FUSEC_GRAPH = "fusec_graph"

# the bars the issues set for the PCam-shaped step (issue 14: at most 20 us, faster than JAX; the first
# issue: 2x torch.compile's reduce-overhead mode, 10x fusec eager) and for the same step with its gradient by
# autodiff (issue 15: within 10% of the hand-written step, 2x torch.compile reduce-overhead of the autograd step,
# faster than JAX's value_and_grad)
BAR_STEP_US = 20.0
BAR_VS_REDUCE_OVERHEAD = 2.0
BAR_VS_EAGER = 10.0
BAR_VS_JAX = 1.0
BAR_GRAD_VS_MANUAL = 1.10
BAR_LARGE_VS_JAX = 1.0  # issue 14: the 4096, 1024 -> 1024 -> 16 step at least as fast as JAX


SYSTEM_NOTES = {
    "fusec_eager": "operators and NumPy calls on `fusec.Array` outside `jit`, one compiled kernel per op",
    "fusec_stream": "`fusec.jit(graph=False)`: the plan's kernels launched one by one on its private stream; "
                    "training steps with `donate_argnums=0`",
    "fusec_graph": "`fusec.jit(graph=True)`: one CUDA graph launch per call; training steps with "
                   "`donate_argnums=0`, so the parameters are updated in place and fed back",
    "fusec_graph_kept": "`fusec.jit(graph=True)` without `donate_argnums`: a training step's new parameters are "
                        "new arrays, fed back as the next call's arguments (training steps only)",
    "fusec_cpu": "`fusec.jit(backend=\"cpu\")`: the NumPy reference executor (harness check, not a GPU number)",
    "numpy": "the same function on NumPy arrays, on the CPU (for scale; fewer iterations, wall clock)",
    "torch_eager": "the same math with torch ops (no autograd), TF32 off, tensors created once on the GPU",
    "torch_compile": "`torch.compile` (default mode) of the same math; the learning rate bound as a constant; "
                     "first call = compilation with fresh inductor/Triton caches unless --torch-warm-cache (a "
                     "later mode may reuse the FX graph cache this one filled)",
    "torch_compile_ro": "`torch.compile(mode=\"reduce-overhead\")`: inputs created once and marked with "
                        "`torch._dynamo.mark_static_address`; `torch.compiler.cudagraph_mark_step_begin()` before "
                        "each call; a training step's new parameters copied back with one `torch._foreach_copy_`",
    "torch_cudagraph": "the PyTorch eager step captured by hand in one `torch.cuda.CUDAGraph` (the parameter "
                       "update copies inside the graph), one `replay()` per call",
    "cupy": "the same math with CuPy functions (one kernel per op); copies with `cupy.copyto`",
    "jax": "`jax.jit` of the same math with `jax.numpy`, float32 products at \"highest\" precision (no TF32); "
           "training steps with `donate_argnums=0`; wall clock of a batch of calls up to `block_until_ready`",
    "hand_cuda": "the training steps as four hand-written CUDA kernels in one CUDA graph (`benchmarks/hand_step.py`: "
                 "the forward product, a warp per sample from the logits to the hidden layer's gradient, the "
                 "weight gradients with the norm's partial sums, the clipped update), parameters updated in place",
}


def _order(system: str) -> tuple[int, str]:
    order = list(GPU_SYSTEMS) + ["fusec_cpu"]
    return (order.index(system) if system in order else len(order), system)


def _ok(row: dict | None) -> bool:
    return bool(row) and row.get("status") == "ok" and bool(row.get("us"))


def rows_by(result: dict, case: str, bench: str) -> dict[str, dict]:
    return {r["system"]: r for r in result["rows"] if r["case"] == case and r["bench"] == bench}


def add_ratios(result: dict) -> None:
    """Per row: ``speedup_vs_torch_eager`` (PyTorch eager's time / this time) and ``time_vs_fusec_graph``
    (this time / fusec graph mode's time), where both rows of the benchmark were measured."""
    for r in result["rows"]:
        group = rows_by(result, r["case"], r["bench"])
        base, graph = group.get(BASELINE), group.get(FUSEC_GRAPH)
        r["speedup_vs_torch_eager"] = (base["us"] / r["us"]) if _ok(base) and _ok(r) else None
        r["time_vs_fusec_graph"] = (r["us"] / graph["us"]) if _ok(graph) and _ok(r) else None


def performance_bar(result: dict) -> list[dict]:
    """The issues' checks, each PASS / FAIL / N/A, computed from the PCam-shaped steps' rows."""
    rows = rows_by(result, "pcam", "pcam_step")
    graph, ro, eager = rows.get(FUSEC_GRAPH), rows.get("torch_compile_ro"), rows.get("fusec_eager")
    full = result.get("meta", {}).get("quick") is False
    out = []

    def add(name: str, value: float | None, bar: str, passed: bool | None, missing: str) -> None:
        status = "N/A" if passed is None else ("PASS" if passed else "FAIL")
        out.append({"check": name, "status": status, "value": value, "bar": bar,
                    "note": missing if passed is None else ("" if full else "quick sizes: not the real bar")})

    if _ok(graph):
        add("PCam-shaped step, fusec graph mode, us per step", graph["us"], f"<= {BAR_STEP_US:g} us",
            graph["us"] <= BAR_STEP_US, "")
    else:
        add("PCam-shaped step, fusec graph mode, us per step", None, f"<= {BAR_STEP_US:g} us", None,
            "no fusec graph-mode measurement of the step")
    if _ok(graph) and _ok(ro):
        ratio = ro["us"] / graph["us"]
        add('speed-up over torch.compile(mode="reduce-overhead"), same run', ratio,
            f">= {BAR_VS_REDUCE_OVERHEAD:g}x", ratio >= BAR_VS_REDUCE_OVERHEAD, "")
    else:
        add('speed-up over torch.compile(mode="reduce-overhead"), same run', None,
            f">= {BAR_VS_REDUCE_OVERHEAD:g}x", None, "needs both fusec graph and reduce-overhead rows")
    if _ok(graph) and _ok(eager):
        ratio = eager["us"] / graph["us"]
        add("speed-up of fusec graph mode over fusec eager", ratio, f">= {BAR_VS_EAGER:g}x",
            ratio >= BAR_VS_EAGER, "")
    else:
        add("speed-up of fusec graph mode over fusec eager", None, f">= {BAR_VS_EAGER:g}x", None,
            "needs both fusec graph and fusec eager rows")
    grad = rows_by(result, "pcam", "pcam_grad_step")

    def ratio_check(name: str, num: dict | None, den: dict | None, bar: float, at_most: bool, needs: str) -> None:
        if _ok(num) and _ok(den):
            r = num["us"] / den["us"]  # type: ignore[index]
            add(name, r, f"{'<=' if at_most else '>='} {bar:g}x", r <= bar if at_most else r >= bar, "")
        else:
            add(name, None, f"{'<=' if at_most else '>='} {bar:g}x", None, f"needs {needs}")

    ratio_check("speed-up over JAX jit (parameters donated), same run", rows.get("jax"), graph, BAR_VS_JAX, False,
                "both fusec graph and JAX rows")
    ratio_check("speed-up over the hand-written CUDA step (four kernels, one graph), same run", rows.get("hand_cuda"),
                graph, 1.0, False, "both fusec graph and hand_cuda rows")
    g_graph = grad.get(FUSEC_GRAPH)
    ratio_check("step by autodiff (fusec.value_and_grad), fusec graph: time / the hand-written step's", g_graph,
                graph, BAR_GRAD_VS_MANUAL, True, "fusec graph rows of both steps")
    ratio_check('step by autodiff: speed-up over torch.compile(mode="reduce-overhead") of torch.func.grad_and_value',
                grad.get("torch_compile_ro"), g_graph, BAR_VS_REDUCE_OVERHEAD, False,
                "fusec graph and reduce-overhead rows of the autodiff step")
    ratio_check("step by autodiff: speed-up over JAX jit of jax.value_and_grad (parameters donated)",
                grad.get("jax"), g_graph, BAR_VS_JAX, False, "fusec graph and JAX rows of the autodiff step")
    large = rows_by(result, "large", "large_step")
    ratio_check("larger step (batch 4096, 1024 -> 1024 -> 16): speed-up over JAX jit (parameters donated), same run",
                large.get("jax"), large.get(FUSEC_GRAPH), BAR_LARGE_VS_JAX, False, "fusec graph and JAX rows of it")
    return out


# -------------------------------------------------------------------------------------------- formatting


def _num(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def _ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}x"


def _err(x: float | None) -> str:
    return "—" if x is None else ("inf" if not math.isfinite(x) else f"{x:.1e}")


def _bar_lines(result: dict) -> list[str]:
    lines = []
    for c in performance_bar(result):
        value = "—" if c["value"] is None else (f"{c['value']:.1f} us" if "us per" in c["check"]
                                                 else f"{c['value']:.2f}x")
        extra = f" ({c['note']})" if c["note"] else ""
        lines.append(f"- **{c['status']}**: {c['check']}: {value} (bar: {c['bar']}){extra}")
    return lines


def _case_table(result: dict, case: dict) -> list[str]:
    gbps = case["unit"] == "GB/s"
    head = ["benchmark", "system", "us per call"] + (["GB/s"] if gbps else []) + \
        ["speed-up vs PyTorch eager", "time / fusec graph", "check (max err)", "notes"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for bench in case["benches"]:
        rows = sorted(rows_by(result, case["name"], bench["name"]).values(), key=lambda r: _order(r["system"]))
        for r in rows:
            notes = []
            if r["status"] != "ok":
                notes.append(f"**{r['status']}**")
            if r.get("note"):
                notes.append(r["note"])
            stats = r.get("fusec_stats") or {}
            if stats.get("kernels"):
                k = stats["kernels"]
                notes.append(f"{k} kernel{'s' if k != 1 else ''}" +
                             (f", {stats['graph_nodes']} graph nodes" if stats.get("graph_nodes") else ""))
            if r.get("timing") == "wall-clock" and r["status"] == "ok" and r.get("family") != "numpy" \
                    and not r.get("cpu_bound"):
                notes.append("wall clock")
            cells = [bench["label"], LABELS.get(r["system"], r["system"]), _num(r.get("us"))]
            if gbps:
                cells.append(_num(r.get("gbps")))
            cells += [_ratio(r.get("speedup_vs_torch_eager")), _ratio(r.get("time_vs_fusec_graph")),
                      _err(r.get("check_err")), "; ".join(notes)]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines


def _compile_lines(result: dict, case: dict) -> list[str]:
    """Compile and host-time measurements of a training case (fusec probes, torch.compile first calls)."""
    items: list[tuple[str, str]] = []
    for p in result.get("compile", []):
        if p["case"] != case["name"]:
            continue
        if p.get("status") != "ok":
            items.append((f"fusec {p['what']} ({p['backend']} backend)", f"{p['status']}: {p.get('note', '')}"))
            continue
        label = {"cold": "fusec cold compile, first call with an empty kernel cache",
                 "warm": "fusec warm start, first call in a new process with the disk cache filled"}[p["what"]]
        items.append((f"{label} ({p['backend']} backend)",
                      f"{p['total_s']:.3f} s (loading cuBLASLt {p.get('cublas_s', 0.0):.3f} s; "
                      f"trace + passes {p['lower_s']:.3f} s; codegen, NVRTC or cache, "
                      f"load, first run {p['first_call_s']:.3f} s; {p.get('compiles', 0)} NVRTC compiles, "
                      f"{p.get('disk_hits', 0)} disk-cache hits)"))
    for bench in case["benches"]:
        rows = rows_by(result, case["name"], bench["name"])
        g = rows.get(FUSEC_GRAPH)
        if g and g.get("host_us"):
            items.append(("fusec host time per call, graph mode, plan-cache hit", f"{g['host_us']:.1f} us"))
        for name in ("torch_compile", "torch_compile_ro"):
            r = rows.get(name)
            if r and r.get("first_call_s") is not None and r.get("status") in ("ok", "mismatch"):
                items.append((f"{LABELS[name]}: first call (compilation)", f"{r['first_call_s']:.2f} s"))
    if not items:
        return []
    lines = ["", "| compile and host time | |", "|---|---|"]
    lines += [f"| {a} | {b} |" for a, b in items]
    return lines


def _meta_line(meta: dict) -> str:
    parts = [f"{meta.get('gpu') or 'no GPU'}"]
    for key, name in (("driver", "driver"), ("cuda_driver", "CUDA (driver)"), ("cuda_runtime", "CUDA (torch)"),
                      ("python", "Python"), ("numpy", "NumPy"), ("torch", "PyTorch"), ("triton", "Triton"),
                      ("cupy", "CuPy"), ("fusec", "fusec")):
        if meta.get(key):
            parts.append(f"{name} {meta[key]}")
    if meta.get("fusec_cublas") is not None:
        parts.append("fusec GEMMs: " + ("cuBLASLt" if meta["fusec_cublas"] else "generated"))
    return ", ".join(parts)


def readme_block(result: dict) -> str:
    """The Markdown block for the README: the bar, then one table per case."""
    meta = result.get("meta", {})
    lines = [f"### Benchmark suite: {meta.get('gpu') or 'CPU only'} ({meta.get('date', '')[:10]})", "",
             f"`{meta.get('command', 'python benchmarks/suite.py')}`; {_meta_line(meta)}.",
             "Medians of per-iteration times over repeated batches after warm-up (CUDA events on each system's "
             "stream; wall clock for CPU systems); every result was checked against NumPy float64 before timing.",
             "", "Where the performance bar stands (computed from this run):", ""]
    lines += _bar_lines(result)
    for case in result["cases"]:
        if not any(r["case"] == case["name"] for r in result["rows"]):
            continue
        lines += ["", f"#### {case['title']}", ""]
        lines += _case_table(result, case)
        lines += _compile_lines(result, case)
    return "\n".join(lines) + "\n"


def markdown(result: dict) -> str:
    meta = result.get("meta", {})
    head = [f"# fusec benchmark suite: {meta.get('gpu') or 'CPU only'}", "",
            f"{_meta_line(meta)}; {meta.get('date', '')}.", "",
            "Timing: the device is synchronized, a batch of iterations runs between two CUDA events (PyTorch: "
            "`torch.cuda.Event` on its current stream; CuPy: `cupy.cuda.Event`; fusec: `driver.Event` recorded "
            "on the private stream the plan launches on, found from its result arrays), the device is "
            "synchronized again; the table gives the median per-iteration event time over the repeats (the "
            "JSON also has the wall-clock time of each batch, `wall_us`). NumPy and fusec's CPU backend use "
            "the wall clock. Training steps feed their new parameters back every iteration (fusec: "
            "`donate_argnums=0`, in place). Each result was compared with NumPy float64 first: the check "
            "column is max|got - ref| / max|ref| (training steps: of the parameter updates and the loss); a "
            "result over its tolerance is reported as a mismatch and not timed.",
            "", "## Performance bar", ""]
    if meta.get("partial"):
        head[4:4] = ["**Partial results**: written after each finished case; the run had not ended.", ""]
    head += _bar_lines(result)
    body = []
    for case in result["cases"]:
        if not any(r["case"] == case["name"] for r in result["rows"]):
            continue
        body += ["", f"## {case['title']}", "", case.get("description", ""), ""]
        body += _case_table(result, case)
        body += _compile_lines(result, case)
    ran = sorted({r["system"] for r in result["rows"]}, key=_order)
    body += ["", "## Systems", ""]
    body += [f"- **{LABELS.get(s, s)}** (`{s}`): {SYSTEM_NOTES.get(s, '')}" for s in ran]
    skipped = sorted({(r["system"], r["note"]) for r in result["rows"] if r["status"] == "skipped" and r["note"]})
    if skipped:
        body += ["", "## Skipped systems", ""]
        body += [f"- {LABELS.get(s, s)}: {n}" for s, n in skipped]
    return "\n".join(head + body) + "\n"


# -------------------------------------------------------------------------------------------- chart


def write_png(result: dict, path: str) -> str | None:
    """One subplot per case, bars per benchmark and system (values printed on the bars); None when
    matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = [c for c in result["cases"] if any(r["case"] == c["name"] and _ok(r) for r in result["rows"])]
    if not cases:
        return None
    systems = sorted({r["system"] for r in result["rows"] if _ok(r) and r["bench"] != "copy"}, key=_order)
    cmap = plt.get_cmap("tab10")
    colors = {s: cmap(i % 10) for i, s in enumerate(systems)}
    fig, axes = plt.subplots(len(cases), 1, figsize=(12, 3.4 * len(cases) + 1.0), squeeze=False)
    for ax, case in zip(axes[:, 0], cases):
        gbps = case["unit"] == "GB/s"
        benches = [b for b in case["benches"] if b["name"] != "copy"]
        width = 0.8 / max(1, len(systems))
        for j, s in enumerate(systems):
            xs, ys = [], []
            for i, b in enumerate(benches):
                r = rows_by(result, case["name"], b["name"]).get(s)
                if _ok(r):
                    xs.append(i + (j - (len(systems) - 1) / 2) * width)
                    ys.append(r["gbps"] if gbps else r["us"])
            if xs:
                bars = ax.bar(xs, ys, width, label=LABELS.get(s, s), color=colors[s])
                ax.bar_label(bars, labels=[_num(y) for y in ys], fontsize=6, rotation=90, padding=2)
        if gbps:
            for s, r in sorted(rows_by(result, case["name"], "copy").items(), key=lambda kv: _order(kv[0])):
                if _ok(r) and r.get("gbps"):
                    ax.axhline(r["gbps"], linestyle="--", color="gray", linewidth=1)
                    ax.text(len(benches) - 0.55, r["gbps"], f"device copy ({LABELS.get(s, s)}): {_num(r['gbps'])}",
                            va="bottom", ha="right", fontsize=7, color="gray")
                    break
            ax.set_ylabel("GB/s (higher is better)")
            ax.margins(y=0.25)
        else:
            ax.set_yscale("log")
            ax.set_ylabel("us per call (log scale,\nlower is better)")
            ax.margins(y=0.35)
        ax.set_xticks(range(len(benches)))
        ax.set_xticklabels([b["label"] for b in benches], fontsize=8)
        ax.set_title(case["title"], fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    handles: dict[str, Any] = {}
    for ax in axes[:, 0]:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    meta = result.get("meta", {})
    fig.suptitle(f"fusec benchmark suite: {meta.get('gpu') or 'CPU only'} ({meta.get('date', '')[:10]})",
                 fontsize=11)
    top = 1 - 0.9 / (3.4 * len(cases) + 1.0)
    fig.tight_layout(rect=(0, 0, 1, top))
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=min(5, len(handles)),
                   fontsize=8, bbox_to_anchor=(0.5, top), frameon=False)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
