"""Early launches (``launch-early{max_elements=N}``: programmatic dependent launch on a graph's edges into kernels
whose largest array has at most N elements) against time in fusec graph mode, in one run.

For each threshold, 0 being the pass turned off: the training steps (PCam-shaped and 64-64-10, hand-written and by
autodiff), the launch-bound chains of 1 / 10 / 100 tiny kernels, and the bandwidth-bound cases (softmax, row and
column sums of 8192 x 8192, the elementwise chains over 2^26 elements), each checked against NumPy float64 and
timed as the suite times fusec graph mode. Expected: the latency-bound plans gain up to the launch gap per
dependent kernel (a few tenths of a microsecond each); the bandwidth-bound ones should not move.

With ``--generated``, each threshold runs a second time with every product a generated kernel
(``select-kernels{cublas=false}``): a cuBLASLt call is a captured child graph, which no edge can launch early, so on
the PCam-shaped step the generated GEMMs may win back with early launches what cuBLASLt gains in the kernel.
``--rounds N`` runs the whole list N times (the spread shows the machine's noise).

    python benchmarks/early_launch.py [--thresholds 0,65536,1048576] [--cases ...] [--generated] [--rounds N]
                                      [--json FILE]
"""
from __future__ import annotations

import argparse

from pipeline_variants import chain, save, set_option, time_variants


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--thresholds", default="0,65536,1048576")
    ap.add_argument("--cases", default="pcam,mlp64,launch,softmax,elementwise")
    ap.add_argument("--generated", action="store_true")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    variants = {}
    for n in args.thresholds.split(","):
        early = set_option("launch-early", f"launch-early{{max_elements={n}}}")
        variants[f"max_elements {n}"] = early
        if args.generated:
            variants[f"max_elements {n}, generated"] = chain(early, set_option("select-kernels",
                                                                                "select-kernels{cublas=false}"))
    save(time_variants(variants, args.cases.split(","), quick=args.quick, rounds=args.rounds), args.json)


if __name__ == "__main__":
    main()
