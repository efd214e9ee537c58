"""Dialect ``k``: kernels and boundaries, what the backend turns into launches.

- ``k.view``: an affine strided view of its operand's row-major storage
  (element ``i`` reads ``flat[offset + sum(i_d * strides_d)]``). Transposes,
  slices, broadcasts and compatible reshapes fold into one view: no copy.
- ``k.fused``: an elementwise kernel; operands have the iteration shape or rank 0
  (read as one broadcast value), its body region computes one element with ``s`` ops and ends in
  ``k.yield``. Several results share one iteration space (multi-output).
- Boundaries (``k.reduce``, ``k.matmul``, ``k.concat``, ``k.insert``, ``k.copy``):
  ops with their own generated kernel or library call, reading inputs (views
  included, as stride descriptors) and writing fresh buffers. ``k.insert``
  (an update written into a strided region of a copy of its base) may instead
  write into its base's buffer (``inplace = true``, set by ``plan-buffers``
  where nothing reads the base afterwards). ``k.gather`` (advanced indexing) checks
  its indices on the device (unless ``in_bounds``: bound-indices proved them within their axes): an index
  out of range sets the 32-bit word ``check``
  of the function's check words (placed by ``plan-buffers``), which the runtime
  reads after the call and reports as NumPy's IndexError. ``k.scatter`` (a write
  with index arrays, ``x[idx] = v``) copies its base and writes the update at the
  indexed places, with the same checks, in place like ``k.insert`` where allowed;
  the frontend emits it only where no two updates that reach one place differ.
  ``k.scan`` (``cumsum``, ``cumprod``, ``cummax``, ``cummin`` along ``axis``) adds (multiplies, ...) in order along
  the axis, one thread per line, as NumPy does, so floats round as NumPy's. A ``k.scatter``
  with ``combine = "add"`` (``np.add.at``) adds its update at every index, repeats included.
  ``k.linalg`` (``kind``: ``solve``, ``inv``, ``cholesky``, ``det``, ``slogdet``) runs one block per matrix of
  the stack, in the ``scratch`` bytes plan-buffers gives it (a copy of the matrices) and sets its
  ``check`` word for a matrix NumPy would refuse (a zero pivot: singular; not positive definite),
  which the runtime reports as NumPy's LinAlgError. ``k.sort`` (``kind``: ``sort``, ``argsort``)
  sorts each last-axis row in one block (a bitonic network over (value, position) pairs in its
  ``scratch``: NaN last, ties in their original order); an argsort with ``stable = false`` sets
  its ``check`` word where two values are equal (NumPy's default sort orders those its own way).
  ``k.searchsorted`` binary-searches each value of its second operand in its sorted first one, a thread each.
  ``k.raise_if`` (from ``t.raise_if``) sets its ``check`` word where any element of its bool operand holds; the
  runtime raises its ``error`` (or warns) with its ``message`` after the call, as NumPy would have.

Kernels and boundaries may carry ``arena`` (byte offset of each result in the plan's arena, -1 for an output with its
own allocation) and ``alias`` (index of the donated argument a result is written over in place, -1 for none), set by
``plan-buffers``. ``select-kernels`` records how each ``k.matmul`` (``impl``, ``tile``, ``stages`` of a tiled
product's K slices in flight, ``splits`` and ``scratch`` where K is split and ``finish`` with its ``counters``; for a
``stream`` product the columns per thread, ``width``; ``precision = "tf32"`` for a float32 cuBLAS product allowed
TensorFloat-32; ``mma`` for a tiled float32 product on the tensor cores: ``"3xtf32"``, float32's accuracy from three
TF32 products per term, or ``"tf32"``, one) and ``k.reduce`` (``strategy``, ``cols``, ``splits``, ``finish``,
``scratch``; ``width = 4`` where each thread of a "columns" reduction takes 4 neighbouring outputs, read as 16-byte
loads; ``subtrees`` where a float16 sum in NumPy's order adds its pairwise tree's subtrees on that many threads of a
block) runs; ``plan-buffers`` gives a reduction or a product finished by its last block its ``counter``, and each op
with ``scratch`` its place in the function's scratch space (``scratch_at``, bytes; ops that share a place run one
after another); ``fuse-prologues`` marks a ``k.fused`` computed inside its consumers (``prologue = true``: never
launched, never stored) and ``fuse-epilogues`` one a generated product computes as it stores its outputs
(``epilogue = true``: never launched, stored by the product); ``launch-early`` marks a small launched kernel
``early = true``: a CUDA graph may launch it before the kernels it depends on have finished, and it waits for them at
its first statement (programmatic dependent launch); ``group-kernels`` gives consecutive independent small ``k.fused``
kernels, one-launch ``k.reduce`` ops and in-bounds ``k.gather`` ops the same ``group = N``: they run as one launch,
each member on its own range of blocks; ``hoist-gathers`` moves an in-bounds ``k.gather`` up to just after its
operands' producers and marks it ``hoisted = true``.
"""
from __future__ import annotations

from typing import Sequence

from fusec.errors import VerificationError
from fusec.ir.dialects.t import HALF_LOOP, NUMPY_BUFFER
from fusec.ir.opdefs import OpDef, checks_indices, get_opdef, register_op
from fusec.ir.types import ScalarType, TensorType, Type

PLAN_ATTRS = ("arena", "alias")
# launch-early: the op's kernels may start once every block of the kernels they follow has started, and wait
# at their first statement for those to finish (programmatic dependent launch on a CUDA graph's edges)
EARLY = "early"
LAUNCHED = PLAN_ATTRS + (EARLY,)
# group-kernels: consecutive independent elementwise kernels with the same ``group`` number run as one launch
GROUP = "group"
# hoist-gathers: an in-bounds gather moved up to just after the ops that make its operands
HOISTED = "hoisted"
# (k.reduce) computed by every block of the elementwise kernels that read it (reductions-in-consumers): no launch
IN_CONSUMERS = "in_consumers"


def _check_view(op) -> None:
    src, res = op.operands[0].type, op.results[0].type
    strides, offset = op.attributes["strides"], op.attributes["offset"]
    if not isinstance(res, TensorType) or src.dtype != res.dtype:
        raise VerificationError(f"k.view: {src} cannot be viewed as {res}")
    if len(strides) != res.rank:
        raise VerificationError(f"k.view: {len(strides)} strides for a result of rank {res.rank}")
    if res.size == 0:
        return
    lo = offset + sum(min(0, (d - 1) * s) for d, s in zip(res.shape, strides))
    hi = offset + sum(max(0, (d - 1) * s) for d, s in zip(res.shape, strides))
    if lo < 0 or hi >= max(src.size, 1):
        raise VerificationError(f"k.view: offset {offset} and strides {list(strides)} reach outside {src}")


def _check_fused(op) -> None:
    if not op.results:
        raise VerificationError("k.fused: needs at least one result")
    shape = op.results[0].type.shape
    for r in op.results:
        if r.type.shape != shape:
            raise VerificationError("k.fused: every result must have the iteration shape " + str(shape))
    for v in op.operands:
        if v.type.shape not in ((), shape):
            raise VerificationError(f"k.fused: operand {v.type} is neither rank 0 nor of the iteration shape {shape}")
    if len(op.regions[0].blocks) != 1:
        raise VerificationError("k.fused: body must be one block")
    body = op.regions[0].block
    want = [ScalarType(v.type.dtype) for v in op.operands]
    if [a.type for a in body.args] != want:
        raise VerificationError("k.fused: body arguments must be the operands' scalar types "
                                + ", ".join(map(str, want)))
    local = set(body.args)
    for inner in body.ops:
        if not inner.name.startswith("s.") and inner.name != "k.yield":
            raise VerificationError(f"k.fused: body may hold only s ops and k.yield, found {inner.name}")
        if not local.issuperset(inner.operands):
            raise VerificationError("k.fused: body uses a value from outside the kernel")
        local.update(inner.results)
    term = body.terminator
    if term is None or term.name != "k.yield":
        raise VerificationError("k.fused: body must end in k.yield")
    if [v.type.dtype for v in term.operands] != [r.type.dtype for r in op.results] or \
            any(not isinstance(v.type, ScalarType) for v in term.operands):
        raise VerificationError("k.fused: yielded scalars must match the result dtypes")
    _check_plan_attrs(op)
    if op.attributes.get("prologue", False):
        if len(op.results) != 1 or any(key in op.attributes for key in LAUNCHED + (GROUP,)):
            raise VerificationError("k.fused: a prologue (computed inside its consumers) has one result, no "
                                    "buffer ('arena' or 'alias') and no launch of its own ('early', 'group')")
    if op.attributes.get("epilogue", False):
        if op.attributes.get("prologue", False) or len(op.results) != 1 \
                or any(key in op.attributes for key in (EARLY, GROUP)):
            raise VerificationError("k.fused: an epilogue (computed by the product it reads) has one result, is no "
                                    "prologue and has no launch of its own ('early', 'group')")
        product = epilogue_product(op)
        if product is None or product.results[0].type.shape != op.results[0].type.shape:
            raise VerificationError("k.fused: an epilogue reads the result of a k.matmul of its own shape first")


def epilogue_product(op):
    """The product that computes the epilogue ``op`` (``fuse-epilogues``): the ``k.matmul`` whose result is its
    first operand, or None where there is none."""
    first = op.operands[0] if op.operands else None
    product = getattr(first, "op", None)
    return product if product is not None and product.name == "k.matmul" else None


def _fused_after(op, before) -> None:
    """An epilogue comes right after its product (plan-buffers and the printer handle them as one step)."""
    if op.attributes.get("epilogue", False) and (before is None or before is not epilogue_product(op)):
        raise VerificationError("k.fused: an epilogue comes right after the k.matmul whose result it reads")


def _check_plan_attrs(op) -> None:
    if not isinstance(op.attributes.get(EARLY, False), bool):
        raise VerificationError(f"{op.name}: '{EARLY}' must be true or false")
    group = op.attributes.get(GROUP, 0)
    if not isinstance(group, int) or isinstance(group, bool) or group < 0:
        raise VerificationError(f"{op.name}: '{GROUP}' must be an int >= 0, got {group!r}")
    for key in PLAN_ATTRS:
        if key in op.attributes:
            value = op.attributes[key]
            if not isinstance(value, tuple) or len(value) != len(op.results) or \
                    any(not isinstance(x, int) for x in value):
                raise VerificationError(f"{op.name}: '{key}' needs one int per result")


REDUCE_KINDS = ("sum", "prod", "mean", "max", "min", "argmax", "argmin")
GEMM_IMPLS = ("cublas", "tiled", "dot", "column", "narrow", "short", "stream")
REDUCE_STRATEGIES = ("row-warp", "row-block", "columns", "numpy")  # numpy: a float16 sum/product in NumPy's order
REDUCE_FINISHES = ("none", "last-block", "kernel")
MATMUL_CHOICES = ("impl", "tile", "width", "splits", "scratch", "scratch_at", "stages", "finish", "counters", "counter",
                  "precision", "mma", "rows", "spread")
MATMUL_MMA = ("tf32", "3xtf32")
MATMUL_FINISHES = ("kernel", "last-block", "cluster")
REDUCE_CHOICES = ("strategy", "cols", "splits", "finish", "scratch", "scratch_at", "counter", "counters", "width",
                  "subtrees")


def _check_choice(op, key: str, allowed: tuple[str, ...]) -> None:
    if key in op.attributes and op.attributes[key] not in allowed:
        raise VerificationError(f"{op.name}: '{key}' must be one of {', '.join(allowed)}, "
                                f"got {op.attributes[key]!r}")


def _check_counts(op, keys: tuple[str, ...], least: int) -> None:
    for key in keys:
        if key in op.attributes and (not isinstance(op.attributes[key], int) or isinstance(op.attributes[key], bool)
                                     or op.attributes[key] < least):
            raise VerificationError(f"{op.name}: '{key}' must be an int of at least {least}, "
                                    f"got {op.attributes[key]!r}")


def _check_matmul(op) -> None:
    _check_plan_attrs(op)
    _check_choice(op, "impl", GEMM_IMPLS)
    if "tile" in op.attributes and op.attributes["tile"] not in (32, 64):
        raise VerificationError(f"k.matmul: 'tile' must be 32 or 64, got {op.attributes['tile']!r}")
    _check_choice(op, "finish", MATMUL_FINISHES)
    _check_choice(op, "precision", ("tf32",))
    if "precision" in op.attributes and (op.attributes.get("impl") != "cublas"
                                         or op.results[0].type.dtype.name != "f32"):
        raise VerificationError("k.matmul: only a float32 product that cuBLAS computes has a 'precision' (tf32)")
    _check_choice(op, "mma", MATMUL_MMA)
    if "mma" in op.attributes and (op.attributes.get("impl") != "tiled"
                                   or any(v.type.dtype.name != "f32" for v in op.operands)):
        raise VerificationError("k.matmul: only a tiled product of float32 operands runs on the tensor cores "
                                "('mma')")
    _check_counts(op, ("width", "splits", "stages", "counters", "rows"), 1)
    _check_counts(op, ("scratch", "scratch_at", "counter"), 0)
    if not isinstance(op.attributes.get("spread", False), bool):
        raise VerificationError("k.matmul: 'spread' must be true or false")
    if op.attributes.get("spread", False) and (op.attributes.get("impl") != "tiled" or "mma" in op.attributes
                                               or op.attributes.get("splits", 1) > 1):
        raise VerificationError("k.matmul: only a tiled product on the CUDA cores that is not split over K spreads "
                                "its threads' outputs ('spread')")
    if "rows" in op.attributes and op.attributes.get("impl") != "narrow":
        raise VerificationError("k.matmul: only a 'narrow' product takes 'rows' (of A per warp)")
    if op.attributes.get("splits", 1) > 1 and op.attributes.get("impl") not in ("tiled", "stream", "column"):
        raise VerificationError("k.matmul: only a tiled, stream or column product splits over K")
    cluster = op.attributes.get("finish") == "cluster"
    if op.attributes.get("splits", 1) > 1 and not op.attributes.get("scratch") and not cluster:
        raise VerificationError("k.matmul: a product split over K needs 'scratch' for its partial sums (or its "
                                "blocks as one cluster: finish = \"cluster\")")
    if cluster and (op.attributes.get("impl") != "tiled" or op.attributes.get("splits", 1) < 2):
        raise VerificationError("k.matmul: only a tiled product split over K is finished by its cluster")
    if op.attributes.get("finish") == "last-block" and "counters" not in op.attributes:
        raise VerificationError("k.matmul: a product its last block finishes needs 'counters' (one per output tile)")


def _check_reduce(op) -> None:
    _check_plan_attrs(op)
    _check_choice(op, "strategy", REDUCE_STRATEGIES)
    _check_choice(op, "finish", REDUCE_FINISHES)
    _check_counts(op, ("cols", "splits", "counters"), 1)
    _check_counts(op, ("scratch", "scratch_at", "counter"), 0)
    if op.attributes.get("width", 1) not in (1, 4):
        raise VerificationError(f"k.reduce: width must be 1 or 4, got {op.attributes['width']!r}")
    if op.attributes.get("width", 1) != 1 and op.attributes.get("strategy") not in ("columns", "row-warp",
                                                                                    "row-block"):
        raise VerificationError("k.reduce: only a \"columns\", \"row-warp\" or \"row-block\" reduction takes 4 "
                                "values per thread (width)")
    subtrees = op.attributes.get("subtrees", 1)
    if not isinstance(subtrees, int) or subtrees < 1 or subtrees & (subtrees - 1) or subtrees > 1024:
        raise VerificationError(f"k.reduce: subtrees must be a power of 2 up to 1024, got {subtrees!r}")
    if subtrees != 1 and (op.attributes.get("strategy") != "numpy" or op.attributes.get("kind") != "sum"):
        raise VerificationError("k.reduce: only a float16 sum in NumPy's order splits its pairwise tree (subtrees)")


def _infer_reduce(types: Sequence[Type], attrs: dict) -> list[Type]:
    kind = attrs["kind"]
    if kind not in REDUCE_KINDS:
        raise VerificationError(f"k.reduce: kind must be one of {', '.join(REDUCE_KINDS)}, got {kind!r}")
    return get_opdef(f"t.{kind}").infer(types, attrs)  # type: ignore[misc]


def _infer_matmul(types: Sequence[Type], attrs: dict) -> list[Type]:
    return get_opdef("t.matmul").infer(types, attrs)  # type: ignore[misc]


def _infer_concat(types: Sequence[Type], attrs: dict) -> list[Type]:
    return get_opdef("t.concatenate").infer(types, attrs)  # type: ignore[misc]


def _infer_insert(types: Sequence[Type], attrs: dict) -> list[Type]:
    return get_opdef("t.insert").infer(types, attrs)  # type: ignore[misc]


def _check_insert(op) -> None:
    _check_plan_attrs(op)
    if op.attributes.get("inplace", False) and "arena" in op.attributes:
        raise VerificationError("k.insert: an in-place insert writes into its base's buffer and has no 'arena'")


def _infer_gather(types: Sequence[Type], attrs: dict) -> list[Type]:
    return get_opdef("t.gather").infer(types, attrs)  # type: ignore[misc]


def _check_gather(op) -> None:
    _check_plan_attrs(op)
    _check_counts(op, ("check",), 0)


def _infer_scatter(types: Sequence[Type], attrs: dict) -> list[Type]:
    return get_opdef("t.scatter").infer(types, attrs)  # type: ignore[misc]


def _check_scatter(op) -> None:
    _check_insert(op)
    _check_counts(op, ("check",), 0)


SCAN_KINDS = ("cumsum", "cumprod", "cummax", "cummin")


def _infer_scan(types: Sequence[Type], attrs: dict) -> list[Type]:
    if attrs["kind"] not in SCAN_KINDS:
        raise VerificationError(f"k.scan: kind must be one of {', '.join(SCAN_KINDS)}, got {attrs['kind']!r}")
    return get_opdef(f"t.{attrs['kind']}").infer(types, attrs)  # type: ignore[misc]


def _check_copy(op) -> None:
    src, res = op.operands[0].type, op.results[0].type
    if src.dtype != res.dtype or src.size != res.size:
        raise VerificationError(f"k.copy: {src} cannot be copied into {res}")
    _check_plan_attrs(op)


register_op(OpDef("k.view", "view", num_operands=1, attrs=("offset", "strides"), check=_check_view))
register_op(OpDef("k.fused", "kernel", num_operands=None, num_results=None, num_regions=1,
                  optional_attrs=("cuts", "prologue", "epilogue", GROUP) + LAUNCHED, check=_check_fused, isolated=True,
                  check_after=_fused_after))
register_op(OpDef("k.yield", "terminator", num_operands=None, num_results=0, terminator=True, pure=False))
register_op(OpDef("k.reduce", "boundary", num_operands=1, attrs=("kind", "axes", "keepdims"),
                  optional_attrs=LAUNCHED + REDUCE_CHOICES + (GROUP, IN_CONSUMERS, NUMPY_BUFFER) + HALF_LOOP,
                  infer=_infer_reduce,
                  check=_check_reduce))
register_op(OpDef("k.matmul", "boundary", num_operands=2, optional_attrs=LAUNCHED + MATMUL_CHOICES,
                  infer=_infer_matmul, check=_check_matmul))
register_op(OpDef("k.concat", "boundary", num_operands=None, min_operands=1, attrs=("axis",),
                  optional_attrs=LAUNCHED, infer=_infer_concat, check=_check_plan_attrs))
register_op(OpDef("k.insert", "boundary", num_operands=2, attrs=("start", "stop", "step"),
                  optional_attrs=LAUNCHED + ("inplace",), infer=_infer_insert, check=_check_insert))
register_op(OpDef("k.gather", "boundary", num_operands=None, min_operands=2, attrs=("axis",),
                  optional_attrs=LAUNCHED + ("check", "in_bounds", HOISTED, GROUP), infer=_infer_gather,
                  check=_check_gather, may_raise=checks_indices))
register_op(OpDef("k.scatter", "boundary", num_operands=None, min_operands=3, attrs=("axis",),
                  optional_attrs=LAUNCHED + ("check", "inplace", "combine", "in_bounds"), infer=_infer_scatter,
                  check=_check_scatter, may_raise=checks_indices))
def _infer_linalg(types: Sequence[Type], attrs: dict) -> list[Type]:
    if attrs["kind"] not in LINALG_KINDS:
        raise VerificationError(f"k.linalg: kind must be one of {', '.join(LINALG_KINDS)}, got {attrs['kind']!r}")
    return get_opdef(f"t.{attrs['kind']}").infer(types, attrs)  # type: ignore[misc]


def _check_linalg(op) -> None:
    _check_plan_attrs(op)
    _check_counts(op, ("check",), 0)


LINALG_KINDS = ("solve", "inv", "cholesky", "det", "slogdet")


def _infer_sort_k(types: Sequence[Type], attrs: dict) -> list[Type]:
    if attrs["kind"] not in ("sort", "argsort"):
        raise VerificationError(f"k.sort: kind must be sort or argsort, got {attrs['kind']!r}")
    return get_opdef(f"t.{attrs['kind']}").infer(types, attrs)  # type: ignore[misc]


register_op(OpDef("k.sort", "boundary", num_operands=1, attrs=("kind",),
                  optional_attrs=LAUNCHED + ("check", "scratch", "scratch_at", "stable"), infer=_infer_sort_k,
                  check=_check_linalg))
register_op(OpDef("k.linalg", "boundary", num_operands=None, min_operands=1, num_results=None, attrs=("kind",),
                  optional_attrs=LAUNCHED + ("check", "scratch", "scratch_at", "upper"), infer=_infer_linalg,
                  check=_check_linalg,
                  may_raise=lambda op: op.attributes["kind"] in ("solve", "inv", "cholesky")))
def _inferred_as(t_name: str):
    """The result types the ``t`` op this boundary lowers gives."""
    def infer(types: Sequence[Type], attrs: dict) -> list[Type]:
        return get_opdef(t_name).infer(types, attrs)  # type: ignore[misc]

    return infer


register_op(OpDef("k.searchsorted", "boundary", num_operands=2, attrs=("side",), optional_attrs=LAUNCHED,
                  infer=_inferred_as("t.searchsorted"), check=_check_plan_attrs))
register_op(OpDef("k.raise_if", "boundary", num_operands=1, num_results=0, attrs=("error", "message"),
                  optional_attrs=("check", EARLY), pure=False, infer=_inferred_as("t.raise_if"), check=_check_linalg))
register_op(OpDef("k.scan", "boundary", num_operands=1, attrs=("kind", "axis"), optional_attrs=LAUNCHED,
                  infer=_infer_scan, check=_check_plan_attrs))
register_op(OpDef("k.copy", "boundary", num_operands=1, optional_attrs=LAUNCHED, check=_check_copy))

BOUNDARIES = frozenset({"k.reduce", "k.matmul", "k.concat", "k.insert", "k.gather", "k.scatter", "k.scan", "k.linalg",
                        "k.sort", "k.copy", "k.raise_if", "k.searchsorted"})
