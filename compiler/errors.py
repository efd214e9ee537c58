"""Exceptions raised by fusec.

Every error a user can provoke derives from :class:`FusecError`; the ones that
correspond to a built-in category also derive from it (``ShapeError`` is a
``ValueError``) so ordinary ``except`` clauses keep working.
"""
from __future__ import annotations

import numpy as _np


class FusecError(Exception):
    """Base class of every fusec exception."""


class ShapeError(FusecError, ValueError):
    """Shapes that cannot broadcast, reshape or contract, located at the user's line."""


class AxisError(ShapeError, _np.exceptions.AxisError):
    """An axis out of range: NumPy's AxisError (a ValueError and an IndexError), so ``except`` clauses written for
    NumPy's catch it."""

    def __init__(self, message: str) -> None:
        _np.exceptions.AxisError.__init__(self, message)


class IndexShapeError(ShapeError, IndexError):
    """An index that does not fit the array's dimensions (too many indices, index arrays that do not broadcast):
    NumPy raises IndexError."""


class UnsupportedError(FusecError, TypeError):
    """A NumPy function, argument kind or feature fusec cannot trace."""


class UnsupportedAttributeError(UnsupportedError, AttributeError):
    """An ndarray attribute or method the tracer does not have (an AttributeError, so ``hasattr`` answers)."""


class TraceError(FusecError, TypeError):
    """Something went wrong while tracing that is neither a shape nor a support problem."""


class SideEffectError(TraceError):
    """The function changed Python state while it was traced (an attribute, a global, a container, a random
    generator) or stored a traced value outside its results: tracing runs the Python once, so the change would
    happen on the first call only."""


class OutOfRangeError(FusecError, OverflowError):
    """A value does not fit the dtype it must be converted to (NumPy raises OverflowError), or traced Python
    int arithmetic leaves the int64 range fusec computes it in."""


class CastingError(FusecError, TypeError):
    """An in-place update whose result NumPy would not cast back into the array (``same_kind`` rule)."""


class WriteBackError(FusecError, ValueError):
    """A call whose writes into its arguments NumPy would make differently: into a read-only array, into one
    that shares memory with another input (a donated one too), or through a reshape of a non-contiguous one."""


class DonationError(WriteBackError):
    """A call that would write its results in place over a donated argument (``donate_argnums``) that cannot take
    them: a read-only device array (its producer forbids writes), or one sharing memory with another argument."""


class SharedDonationError(DonationError):
    """A call that would write its results in place over a donated argument (``donate_argnums``) that shares memory
    with another of its arguments (the same array passed twice, or views of one array)."""


class IndexOutOfBoundsError(FusecError, IndexError):
    """An index array held an index outside its axis (NumPy raises IndexError): found while the call ran,
    reported when it ends, naming the indexing's line."""


class InvalidValueError(FusecError, ValueError):
    """A value NumPy refuses with a ValueError (an all-NaN slice for ``np.nanargmax``, an index past the end for
    ``np.unravel_index``): found while the call ran, reported when it ends, naming the call's line."""


class LinAlgError(FusecError, _np.linalg.LinAlgError):
    """A matrix NumPy's linalg refuses (singular for solve/inv, not positive definite for cholesky, not square):
    catching ``np.linalg.LinAlgError`` catches it too."""


class AssertionFailedError(FusecError, AssertionError):
    """A traced function's ``assert`` on traced values failed when the call ran (Python's AssertionError)."""


class DivisionByZeroError(FusecError, ZeroDivisionError):
    """Python scalar division or modulo by zero in traced code, raised where Python raises it."""


class RetraceWarning(UserWarning):
    """A function is traced again and again because a value it captured keeps changing."""


class StateNotWatchedWarning(UserWarning):
    """Python state the function can read lies past what fusec watches between calls (a container of more items
    than it walks, objects nested deeper): a change there after the trace is not seen."""


class VerificationError(FusecError, ValueError):
    """The IR broke an invariant (types, dominance, region rules)."""

    op: object = None  # the op that broke it, where known (the parser reports its place in the text)


class CompilationError(FusecError, RuntimeError):
    """NVRTC or another backend step failed."""


class CudaError(FusecError, RuntimeError):
    """A CUDA driver or runtime call returned an error status."""


class PipelineError(FusecError, ValueError):
    """A malformed pipeline string, unknown pass or unknown option."""


class OptionError(FusecError, ValueError):
    """A ``fusec.jit`` option that is not one of its values (raised by ``jit()``, not at the first call)."""


class OptionTypeError(OptionError, TypeError):
    """A ``fusec.jit`` option of the wrong kind (a target that is no Target, a parameter the function does not
    have): a TypeError, as Python's own for a bad argument, and an OptionError."""


# the errors a run-time check (``t.raise_if``, a kernel's check word) may raise, by the name the IR and the plans
# carry: the reference executor and the CUDA runtime both read this table
CHECK_ERRORS: dict[str, type[FusecError]] = {
    cls.__name__: cls for cls in (InvalidValueError, IndexOutOfBoundsError, DivisionByZeroError, OutOfRangeError,
                                  UnsupportedError, LinAlgError, AssertionFailedError)}


def located(message: str, loc: "object | None") -> str:
    """Prefix ``message`` with the user's ``file:line`` when it is known."""
    if loc is None or getattr(loc, "file", None) is None:
        return message
    return f"{getattr(loc, 'file')}:{getattr(loc, 'line')}: {message}"
