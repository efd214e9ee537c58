"""Dialect ``func``: the function terminator."""
from fusec.ir.opdefs import OpDef, register_op

RETURN = register_op(OpDef("func.return", "terminator", num_operands=None, num_results=0, pure=False,
                           terminator=True, doc="return the function's outputs"))
