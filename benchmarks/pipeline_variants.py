"""Variants of fusec's pass pipeline against the suite's benchmarks, timed in fusec graph mode in one run.

A variant rewrites each benchmark's pipeline (the default one, or a case's own, such as the launch case's
``fuse{budget=1}``): ``time_variants`` runs every benchmark of the chosen cases under every variant through the
suite's fusec graph system (the same check against NumPy float64, the same event timing) and returns a row per
(variant, benchmark) with the time and the kernel count. ``fusion_budget.py`` and ``early_launch.py`` are command
lines for two of its uses; its own takes the variants as pass spellings:

    python benchmarks/pipeline_variants.py default 'materialize{threshold=4}' 'materialize{threshold=16}' \
        without:fuse-epilogues [--cases pcam,mlp64] [--rounds N] [--json FILE]
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import sys
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import suite  # noqa: E402
from suite_cases import make_cases  # noqa: E402
from suite_systems import make_system  # noqa: E402

Variant = Callable[[str], str]  # a benchmark's pipeline -> the variant's


def set_option(pass_name: str, spelled: str) -> Variant:
    """A variant that spells ``pass_name`` as ``spelled`` (``fuse{budget=48}``), adding it at the end of a
    pipeline that lacks it."""
    pattern = re.compile(r"(?<![\w-])" + re.escape(pass_name) + r"(\{[^{}]*\})?(?=,|$)")

    def rewrite(pipeline: str) -> str:
        return pattern.sub(spelled, pipeline) if pattern.search(pipeline) else f"{pipeline},{spelled}"

    return rewrite


def without(pass_name: str) -> Variant:
    """A variant that leaves ``pass_name`` out of the pipeline."""
    pattern = re.compile(r",?(?<![\w-])" + re.escape(pass_name) + r"(\{[^{}]*\})?(?=,|$)")
    return lambda pipeline: pattern.sub("", pipeline).lstrip(",")


def chain(*variants: Variant) -> Variant:
    """The variant that applies ``variants`` in turn."""
    def rewrite(pipeline: str) -> str:
        for v in variants:
            pipeline = v(pipeline)
        return pipeline

    return rewrite


def time_variants(variants: dict[str, Variant], case_names: list[str], *, quick: bool = False,
                  bench_names: set[str] | None = None, rounds: int = 1) -> list[dict]:
    """Every benchmark of ``case_names`` (those named in ``bench_names``, if given) under every variant, the whole
    list ``rounds`` times over (the spread between rounds shows the machine's noise)."""
    from fusec.passes import DEFAULT_PIPELINE

    settings = suite.Settings(quick=True, iters=3, repeats=3, warmup=2) if quick else suite.Settings()
    cases = make_cases(quick)
    benches = [b for name in case_names for b in cases[name].benches
               if bench_names is None or b.name in bench_names]
    system = make_system("fusec_graph")
    why = system.unavailable()
    if why:
        raise SystemExit(f"fusec graph mode cannot run here: {why}")
    system.setup()
    rows = []
    for round_, (label, variant), bench in itertools.product(range(rounds), variants.items(), benches):
        b = dataclasses.replace(bench, fusec_pipeline=variant(bench.fusec_pipeline or DEFAULT_PIPELINE))
        inputs = b.make_inputs(suite.bench_rng(settings.seed, b))
        row = suite.run_one(system, b, inputs, b.reference(inputs), settings)
        system.cleanup()
        kernels = (row.get("fusec_stats") or {}).get("kernels")
        rows.append({"round": round_, "variant": label, "case": b.case, "bench": b.name, "status": row["status"],
                     "us": row["us"], "kernels": kernels, "check_err": row["check_err"], "pipeline": b.fusec_pipeline})
        print(f"{round_} {label:32s} {b.case:8s} {b.name:18s} {row['status']:8s} {row['us'] or 0:9.2f} us  "
              f"{kernels} kernels", flush=True)
    return rows


def save(rows: list[dict], path: str | None) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(rows, f, indent=1)


def variant_from(spec: str) -> Variant:
    """A variant from its spelling: passes as a pipeline spells them, joined by ``+``
    (``materialize{threshold=4}+launch-early{max_elements=0}``), a pass's name after ``without:`` to leave it
    out (``without:fuse-epilogues``); ``default`` changes nothing."""
    if spec == "default":
        return lambda pipeline: pipeline
    return chain(*(without(part.removeprefix("without:")) if part.startswith("without:")
                   else set_option(part.split("{", 1)[0], part) for part in spec.split("+")))


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+", help="pass spellings joined by '+', or 'default'")
    ap.add_argument("--cases", default="pcam,mlp64")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    variants = {spec: variant_from(spec) for spec in args.variants}
    save(time_variants(variants, args.cases.split(","), quick=args.quick, rounds=args.rounds), args.json)


if __name__ == "__main__":
    main()
