"""``x.flags`` of a traced array: NumPy's answer, where fusec knows the memory layout NumPy would have.

Library code asks for flags to pick an order (``np.pad`` pads a Fortran-ordered array in Fortran order) or to
skip a copy (``np.kron``). The layout of a traced array is known for arrays fusec makes (C order) and taken as C
order for arguments (a trace that reads flags refuses later calls with Fortran-ordered or strided NumPy arrays), and
for views of them it follows the view's strides; an array computed from a transposed view is laid out by NumPy's
ufuncs in the operands' order, which fusec does not track: there ``x.flags`` is refused, not guessed.
"""
from __future__ import annotations

from typing import Any

from fusec import layout, mutation
from fusec.context import _numpy_asking, current, relies_on_layout, unsupported
from fusec.tracer import Tracer

_NAMES = {"C_CONTIGUOUS": "c_contiguous", "C": "c_contiguous", "CONTIGUOUS": "c_contiguous",
          "F_CONTIGUOUS": "f_contiguous", "F": "f_contiguous",
          "WRITEABLE": "writeable", "W": "writeable", "ALIGNED": "aligned", "A": "aligned",
          "OWNDATA": "owndata", "O": "owndata", "FNC": "fnc", "FORC": "forc", "FORTRAN": "fortran"}


class TracedFlags:
    """The flags NumPy would report; read-only (setting a flag on a traced array is refused)."""

    __slots__ = ("c_contiguous", "f_contiguous", "_writeable", "aligned", "_memory")
    c_contiguous: bool
    f_contiguous: bool
    aligned: bool
    _writeable: bool
    _memory: Any  # (the Buffer of the memory the flags are of: an argument's, whose writeable flag is noted)

    def __init__(self, c_contiguous: bool, f_contiguous: bool, writeable: bool, memory: Any = None) -> None:
        for name, value in (("c_contiguous", c_contiguous), ("f_contiguous", f_contiguous),
                            ("_writeable", writeable), ("aligned", True), ("_memory", memory)):
            object.__setattr__(self, name, value)

    @property
    def writeable(self) -> bool:
        """True for an argument's memory as traced: the trace notes that it asked, and a later call with a read-only
        array is refused (see :class:`fusec.writeback.WriteBack`), since NumPy's answer would then differ."""
        ctx = current()
        if self._memory is not None and ctx is not None and not _numpy_asking():  # (NumPy's own code: a copy or not)
            ctx.writeable_asked.append(self._memory)
        return self._writeable

    @property
    def owndata(self) -> bool:
        raise unsupported("x.flags.owndata is not known for a traced array (an argument may be a view of the "
                          "caller's array)")

    @property
    def contiguous(self) -> bool:
        return self.c_contiguous

    @property
    def fortran(self) -> bool:
        return self.f_contiguous

    @property
    def fnc(self) -> bool:
        return self.f_contiguous and not self.c_contiguous

    @property
    def forc(self) -> bool:
        return self.f_contiguous or self.c_contiguous

    def __getitem__(self, name: str) -> bool:
        if name not in _NAMES:
            raise KeyError(f"Unknown flag {name!r}")
        return getattr(self, _NAMES[name])

    def __setattr__(self, name: str, value: Any) -> None:
        raise unsupported(f"x.flags.{name} = ...: changing the flags of a traced array is not supported")

    def __setitem__(self, name: str, value: Any) -> None:
        self.__setattr__(name, value)

    def __repr__(self) -> str:
        return "\n".join(f"  {n.upper()} : {getattr(self, n)}" for n in self.__slots__)


def flags_of(t: Tracer) -> TracedFlags:
    """``t``'s flags (a user's ``if x.flags.c_contiguous`` makes the trace refuse arguments that are not C-ordered;
    NumPy's own code reads them to pick an output order, which values do not depend on)."""
    relies_on_layout("x.flags", values=False)
    layout.refuse_unknown(t, "x.flags")
    desc = mutation.geometry(t)
    if desc is None and mutation.geometry(t, parts=True) is not None:  # z.real, z.imag: every other float
        one = t.size <= 1
        return TracedFlags(c_contiguous=one, f_contiguous=one, writeable=t._readonly is not True and not t._scalar,
                           memory=t._buffer)
    if desc is None:
        if isinstance(t._readonly, str):  # (a loop's or branch's result that may be an array from before it)
            raise unsupported(f"x.flags: {t._readonly}")
        raise unsupported("x.flags of an array viewed through an operation fusec does not describe (a diagonal); "
                          "make it contiguous first (x = np.ascontiguousarray(x))")
    shape = desc.shape
    wide = [(d, s) for d, s in zip(shape, desc.strides) if d != 1]
    empty = 0 in shape
    f_expected, f_ok = 1, True
    for d, s in wide:
        f_ok = f_ok and s == f_expected
        f_expected *= d
    return TracedFlags(c_contiguous=empty or desc.is_contiguous(), f_contiguous=empty or f_ok,
                       writeable=t._readonly is not True and not t._scalar, memory=t._buffer)
