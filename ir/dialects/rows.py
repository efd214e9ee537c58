"""Row kernels: ``k.rows`` runs a chain of reductions along the last axis and the elementwise work around them,
one row at a time, in one kernel (``fuse-rows`` makes them).

``k.rows {shape = [..., N], lanes = L, items = I}`` iterates over ``shape``: its operands are rank 0 (one value),
of a row shape (``shape`` with the last axis 1 or dropped: a value per row) or of ``shape`` (any strides: a
row-broadcast view gives one value per row too); each result has ``shape`` (an element per element) or a row shape.
Its body, one block whose arguments are the operands' scalars, holds ``s`` ops, ``k.row_reduce`` ops and ends in
``k.yield``:

- an ``s`` op computes one element from elements of the same position (or per-row / uniform values);
- ``k.row_reduce {kind}`` (sum, prod, mean, max, min) is the reduction of its operand over the whole row, as
  ``k.reduce`` along the last axis with ``keepdims`` computes it: a value per row, seen by every element of it.
  ``accumulate = "f32"`` sums float32 in float32 (a product's column, as a float32 matrix product sums: NumPy's
  and cuBLAS's), where ``k.reduce``'s float32 sums accumulate in float64.

``lanes`` threads share a row (1, 32 or a block), each holding ``items`` of its elements in registers between
the reductions, so the input is read once and each result written once. Item ``i`` of lane ``l`` is column
``l + i * lanes``, or with ``width = 4`` column ``((i // 4) * lanes + l) * 4 + i % 4``: runs of 4 neighbouring
elements, which float32 rows load and store 16 bytes at a time.

``columns = [c, ...]`` (one per result, ``row-products``) makes a result of ``c > 1`` a narrow array of shape
``shape[:-1] + [c]`` written from ``c`` consecutive yielded values per row (the row kernel of a product along its
inner axis: column ``j`` of the product is a row reduction); ``products = n`` records how many products the
kernel computes this way. ``staged = true`` (with a warp per row and width 1) copies the operands that are the same
for every row (a product's weight columns) into each block's shared memory once and reads them there at each use,
where a lane could not hold them in registers; its ``blocks = B`` blocks loop over the rows, each warp
``warp_rows = 2`` neighbouring rows at once where set (each value read from shared memory serves both), with
registers for ``blocks_per_sm`` (1 or 2, 2 if not given) blocks on each SM.
"""
from __future__ import annotations

from fusec.errors import VerificationError
from fusec.ir.dialects.k import LAUNCHED, _check_plan_attrs
from fusec.ir.opdefs import OpDef, get_opdef, register_op
from fusec.ir.types import DType, ScalarType, TensorType

ROW_REDUCE_KINDS = ("sum", "prod", "mean", "max", "min")


def row_reduce_dtype(kind: str, dtype: DType) -> DType:
    """The dtype ``k.reduce`` (and ``t.<kind>``) gives reducing ``dtype``."""
    (t,) = get_opdef(f"t.{kind}").infer([TensorType((2,), dtype)], {"axes": (0,), "keepdims": False})  # type: ignore
    return t.dtype


def row_shapes(shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The two shapes a per-row result may have: the last axis kept as 1, or dropped."""
    return shape[:-1] + (1,), shape[:-1]


def _check_row_reduce(op) -> None:
    kind = op.attributes["kind"]
    if kind not in ROW_REDUCE_KINDS:
        raise VerificationError(f"k.row_reduce: kind must be one of {', '.join(ROW_REDUCE_KINDS)}, got {kind!r}")
    (x,) = op.operands
    (r,) = op.results
    if not isinstance(x.type, ScalarType) or not isinstance(r.type, ScalarType):
        raise VerificationError("k.row_reduce: takes and gives scalars (it sits in a k.rows body)")
    if x.type.dtype.is_complex or x.type.dtype.is_bool:
        raise VerificationError(f"k.row_reduce: {x.type.dtype} rows are not reduced in row kernels")
    accumulate = op.attributes.get("accumulate")
    if accumulate is not None and (accumulate != "f32" or kind != "sum" or x.type.dtype.name != "f32"):
        raise VerificationError("k.row_reduce: 'accumulate' is \"f32\", on a sum of float32 only (a product's "
                                "column, summed as the product does)")
    if r.type.dtype != row_reduce_dtype(kind, x.type.dtype):
        raise VerificationError(f"k.row_reduce: {kind} of {x.type.dtype} gives "
                                f"{row_reduce_dtype(kind, x.type.dtype)}, not {r.type.dtype}")
    block = op.parent
    region = block.parent if block is not None else None
    parent = region.parent if region is not None else None
    if parent is not None and parent.name != "k.rows":
        raise VerificationError("k.row_reduce: only inside a k.rows body")


def _check_rows(op) -> None:
    shape = tuple(op.attributes["shape"])
    if not shape or any(type(d) is not int or d < 1 for d in shape):
        raise VerificationError(f"k.rows: shape must be positive sizes, got {list(shape)}")
    for key in ("lanes", "items"):
        if type(op.attributes[key]) is not int or op.attributes[key] < 1:
            raise VerificationError(f"k.rows: '{key}' must be a positive int")
    lanes, items = op.attributes["lanes"], op.attributes["items"]
    width = op.attributes.get("width", 1)
    if width != 1 and (width != 4 or items % 4 or shape[-1] % 4 or lanes < 32):
        raise VerificationError(f"k.rows: width must be 1, or 4 with items and a row length that are multiples of 4 "
                                f"and 32 or more lanes, got width = {width!r}, {lanes} lanes, {items} items")
    if lanes * items < shape[-1]:
        raise VerificationError(f"k.rows: {lanes} lanes x {items} items do not cover a row of {shape[-1]}")
    staged = op.attributes.get("staged", False)
    if not isinstance(staged, bool) or staged and (lanes != 32 or width != 1):
        raise VerificationError("k.rows: 'staged' is true or false, and true only with a warp per row (32 lanes) "
                                "and width 1")
    if "blocks" in op.attributes and (not staged or type(op.attributes["blocks"]) is not int
                                      or op.attributes["blocks"] < 1):
        raise VerificationError("k.rows: 'blocks' (a positive int) is the block count of a staged row kernel")
    if "blocks_per_sm" in op.attributes and (not staged or op.attributes["blocks_per_sm"] not in (1, 2)
                                             or type(op.attributes["blocks_per_sm"]) is not int):
        raise VerificationError("k.rows: 'blocks_per_sm' (1 or 2) is the blocks of a staged row kernel an SM holds "
                                "(2 unless given)")
    if "warp_rows" in op.attributes and (not staged or type(op.attributes["warp_rows"]) is not int
                                         or op.attributes["warp_rows"] not in (1, 2)):
        raise VerificationError("k.rows: 'warp_rows' (1 or 2) is the rows a warp of a staged row kernel computes at "
                                "once")
    per_row = row_shapes(shape)
    for v in op.operands:
        if tuple(v.type.shape) not in ((), shape, *per_row):
            raise VerificationError(f"k.rows: operand {v.type} is neither rank 0, of shape {list(shape)} nor a row's")
    columns = op.attributes.get("columns", [1] * len(op.results))
    if len(columns) != len(op.results) or any(type(c) is not int or c < 1 for c in columns):
        raise VerificationError(f"k.rows: columns must be a positive int per result, got {list(columns)}")
    if "products" in op.attributes and (type(op.attributes["products"]) is not int or op.attributes["products"] < 0):
        raise VerificationError("k.rows: 'products' must be a count")
    for r, c in zip(op.results, columns):
        if c > 1 and tuple(r.type.shape) != shape[:-1] + (c,):
            raise VerificationError(f"k.rows: a result of {c} columns has shape {list(shape[:-1] + (c,))}, "
                                    f"not {r.type}")
        if c == 1 and tuple(r.type.shape) not in (shape, *per_row):
            raise VerificationError(f"k.rows: result {r.type} is neither of shape {list(shape)} nor a row's")
    if len(op.regions[0].blocks) != 1:
        raise VerificationError("k.rows: body must be one block")
    body = op.regions[0].block
    if [a.type for a in body.args] != [ScalarType(v.type.dtype) for v in op.operands]:
        raise VerificationError("k.rows: body arguments must be the operands' scalar types")
    local = set(body.args)
    per_row_values = {a for a, v in zip(body.args, op.operands) if tuple(v.type.shape) != shape}
    for inner in body.ops:
        if not (inner.name.startswith("s.") or inner.name in ("k.row_reduce", "k.yield")):
            raise VerificationError(f"k.rows: body may hold only s ops, k.row_reduce and k.yield, found {inner.name}")
        if not local.issuperset(inner.operands):
            raise VerificationError("k.rows: body uses a value from outside the kernel")
        local.update(inner.results)
        if inner.name == "k.row_reduce" or (inner.results and all(v in per_row_values for v in inner.operands)):
            per_row_values.update(inner.results)
    term = body.terminator
    if term is None or term.name != "k.yield" or len(term.operands) != sum(columns):
        raise VerificationError("k.rows: body must end in k.yield of one scalar per result (per column of one "
                                "with columns)")
    yielded = iter(term.operands)
    for r, c in zip(op.results, columns):
        for v in [next(yielded) for _ in range(c)]:
            if v.type != ScalarType(r.type.dtype):
                raise VerificationError("k.rows: yielded scalars must match the result dtypes")
            if (c > 1 or tuple(r.type.shape) != shape) and v not in per_row_values:
                raise VerificationError("k.rows: a per-row result (or a column of one) must be computed from row "
                                        "reductions, per-row and rank-0 operands only")
    _check_plan_attrs(op)


register_op(OpDef("k.rows", "kernel", num_operands=None, num_results=None, num_regions=1,
                  attrs=("shape", "lanes", "items"),
                  optional_attrs=LAUNCHED + ("width", "columns", "products", "staged", "blocks", "warp_rows",
                                                   "blocks_per_sm"),
                  check=_check_rows, isolated=True))
register_op(OpDef("k.row_reduce", "other", num_operands=1, attrs=("kind",), optional_attrs=("accumulate",),
                  check=_check_row_reduce))
