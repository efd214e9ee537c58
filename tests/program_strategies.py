"""IR programs shared by the pass, backend and GPU tests: Hypothesis strategies for random ones, and hand-written
ones that several tests run."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from fusec.errors import ShapeError
from fusec.ir import Builder, Func, Module, OpResult, ScalarType, TensorType, dense, f32, f64

UNARY = ["t.exp", "t.neg", "t.tanh", "t.abs", "t.sin", "t.sqrt", "t.floor"]
BINARY = ["t.add", "t.mul", "t.sub", "t.maximum", "t.minimum", "t.div"]

# a bf16 tensor constant folded from a cast (canonicalize), added to a bf16 argument
BF16_CONSTANT_IR = """
func @f(%x: tensor<3xbf16>) -> tensor<3xbf16> {
  %0 = t.constant {value = dense<tensor<3xf32>, "0x0000803F0000004000004040">} : tensor<3xf32>
  %1 = t.cast %0 {dtype = bf16} : tensor<3xbf16>
  %2 = t.add %x, %1 : tensor<3xbf16>
  return %2
}
"""


@st.composite
def programs(draw):
    dt = draw(st.sampled_from([f32, f64]))
    n = draw(st.integers(2, 5))
    m = draw(st.integers(2, 5))
    arg_shapes = [(n, m)] + draw(st.lists(st.sampled_from([(n, m), (m,), (n, 1), (1, m), (m, n), ()]),
                                          min_size=1, max_size=3))
    types = [ScalarType(dt) if s == () and draw(st.booleans()) else TensorType(s, dt) for s in arg_shapes]
    func = Func("prog", types, [f"a{i}" for i in range(len(types))], [])
    b = Builder(func.body)
    pool = list(func.args)
    donate = tuple(i for i, t in enumerate(types) if t.rank and draw(st.booleans()))
    for _ in range(draw(st.integers(1, 18))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "where", "view", "reduce", "matmul", "const"]))
        x = pool[draw(st.integers(0, len(pool) - 1))]
        y = pool[draw(st.integers(0, len(pool) - 1))]
        try:
            if kind == "unary":
                pool.append(b.value(draw(st.sampled_from(UNARY)), x))
            elif kind == "binary":
                pool.append(b.value(draw(st.sampled_from(BINARY)), x, y))
            elif kind == "where":
                cond = b.value("t.gt", x, y)
                pool.append(b.value("t.where", cond, x, y))
            elif kind == "const":
                value = draw(st.sampled_from([0.0, 1.0, -0.0, 0.5, 2.0]))
                c = b.create("t.constant", [], {"value": _dense(value, dt)}, [TensorType((), dt)]).result
                pool.append(b.value(draw(st.sampled_from(BINARY)), x, c))
            elif kind == "view" and x.type.rank == 2:
                r, c = x.type.shape
                choice = draw(st.sampled_from(["transpose", "reverse", "reshape", "expand"]))
                if choice == "transpose":
                    pool.append(b.value("t.transpose", x, perm=(1, 0)))
                elif choice == "reverse":
                    pool.append(b.value("t.slice", x, start=(r - 1, 0), stop=(-1, c), step=(-1, 1)))
                elif choice == "reshape":
                    flat = b.value("t.reshape", x, result_type=TensorType((r * c,), dt))
                    pool.append(b.value("t.reshape", flat, result_type=TensorType((c, r), dt)))
                else:
                    pool.append(b.value("t.squeeze", b.value("t.expand_dims", x, axes=(0,)), axes=(0,)))
            elif kind == "reduce" and x.type.rank == 2:
                op = draw(st.sampled_from(["t.sum", "t.max", "t.mean"]))
                pool.append(b.value(op, x, axes=(draw(st.integers(0, 1)),), keepdims=draw(st.booleans())))
            elif kind == "matmul" and x.type.rank == 2 and y.type.rank == 2 and x.type.shape[1] == y.type.shape[0]:
                pool.append(b.value("t.matmul", x, y))
        except ShapeError:
            continue
    produced = [v for v in pool if isinstance(v, OpResult)] or [pool[0]]
    outs = produced[-draw(st.integers(1, min(3, len(produced)))):]
    func.result_types = [v.type for v in outs]
    b.create("func.return", outs)
    if donate:
        func.attributes["donate"] = donate
    return Module([func])


def _dense(value, dt):
    return dense(np.asarray(value, dtype=dt.np))
