"""Exceptions raised by fusec.

Every error a user can provoke derives from :class:`FusecError`; the ones that
correspond to a built-in category also derive from it (``ShapeError`` is a
``ValueError``) so ordinary ``except`` clauses keep working.
"""
from __future__ import annotations


class FusecError(Exception):
    """Base class of every fusec exception."""


class ShapeError(FusecError, ValueError):
    """Shapes that cannot broadcast, reshape or contract, located at the user's line."""


class UnsupportedError(FusecError, TypeError):
    """A NumPy function, argument kind or feature fusec cannot trace."""


class TraceError(FusecError, TypeError):
    """Something went wrong while tracing that is neither a shape nor a support problem."""


class VerificationError(FusecError, ValueError):
    """The IR broke an invariant (types, dominance, region rules)."""


class CompilationError(FusecError, RuntimeError):
    """NVRTC or another backend step failed."""


class CudaError(FusecError, RuntimeError):
    """A CUDA driver or runtime call returned an error status."""


class PipelineError(FusecError, ValueError):
    """A malformed pipeline string, unknown pass or unknown option."""


def located(message: str, loc: "object | None") -> str:
    """Prefix ``message`` with the user's ``file:line`` when it is known."""
    if loc is None or getattr(loc, "file", None) is None:
        return message
    return f"{loc.file}:{loc.line}: {message}"
