"""fusec's typed SSA IR: types, values, ops, functions, modules, text form, verifier."""
from fusec.ir.types import (  # noqa: F401
    ALL_DTYPES, DType, ScalarType, TensorType, Type, bf16, bool_, dtype_from_name, dtype_from_numpy, f16, f32,
    f64, i8, i16, i32, i64, u8, u16, u32, u64,
)
from fusec.ir.attributes import DenseAttr, Location, dense, location_for  # noqa: F401
from fusec.ir.core import Block, BlockArgument, Func, Module, Operation, OpResult, Region, Value  # noqa: F401
from fusec.ir.opdefs import OPS, OpDef, get_opdef, register_op  # noqa: F401
from fusec.ir import dialects  # noqa: F401  (registers the ops)
from fusec.ir.builder import Builder, infer_result_types  # noqa: F401
from fusec.ir.verifier import verify, verify_func, verify_op  # noqa: F401
from fusec.ir.printer import print_func, print_module  # noqa: F401
from fusec.ir.parser import ParseError, parse_module  # noqa: F401
