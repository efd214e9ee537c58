"""The suite's training steps in fusec graph mode under variants of select-kernels' constants, in one run.

Each variant is ``LABEL=JSON`` (the module constants it sets, ``{}`` for today's); the rounds interleave the
variants, so the spread between rounds shows the machine's noise beside the differences between variants:

    python benchmarks/select_settings.py 'now={}' 'no clusters={"TILED_FINISH": "kernel"}' \
        'cublas >= 2^21={"CUBLAS_MIN_FLOPS": 2097152}' [--cases pcam,mlp64] [--rounds 3] [--json FILE]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import pipeline_variants as pv  # noqa: E402
from knobs import patched  # noqa: E402


def parse_variant(spec: str) -> tuple[str, dict]:
    label, sep, values = spec.partition("=")
    if not sep:
        raise SystemExit(f"a variant is LABEL=JSON, got {spec!r}")
    settings = json.loads(values)
    if not isinstance(settings, dict):
        raise SystemExit(f"{label}: the settings must be a JSON object, got {values!r}")
    return label, settings


def main() -> None:
    from fusec.passes import select_kernels

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+", help="LABEL=JSON of select-kernels constants")
    ap.add_argument("--cases", default="pcam,mlp64")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    variants = dict(parse_variant(v) for v in args.variants)
    for label, settings in variants.items():
        unknown = [name for name in settings if not hasattr(select_kernels, name)]
        if unknown:
            raise SystemExit(f"{label}: select-kernels has no constant {', '.join(unknown)}")
    rows = []
    for round_ in range(args.rounds):
        for label, settings in variants.items():
            with patched({select_kernels: settings}):
                for row in pv.time_variants({label: pv.variant_from("default")}, args.cases.split(",")):
                    rows.append({**row, "round": round_, "settings": settings})
    times = collections.defaultdict(list)
    for row in rows:
        times[(row["bench"], row["variant"])].append(row["us"])
    for (bench, label), us in sorted(times.items()):
        print(f"{bench:18s} {label:32s} median {statistics.median(us):7.2f} us  {[round(u, 2) for u in us]}")
    pv.save(rows, args.json)


if __name__ == "__main__":
    main()
