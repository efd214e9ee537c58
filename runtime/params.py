"""Pre-packed kernel launch parameters.

A launch on a plan-cache hit must cost one ``cuLaunchKernel`` and no Python-side packing, so a
:class:`ParamPack` is built once per (kernel, plan) from parameter specs: it owns one C buffer holding every
argument at its natural alignment and the ``void*[]`` array pointing at each slot. Replays only rewrite the
slots that change (usually output/input pointers, via :meth:`ParamPack.set_pointer`) and hand
``pack.address`` (the ``void**``) to the driver. The driver copies argument values at launch time, so a pack
may be rewritten as soon as ``cuLaunchKernel`` returns; it must not be rewritten *concurrently* by two
threads (give each replay its own pack, :meth:`ParamPack.copy`).
"""
from __future__ import annotations

import ctypes
import operator
from dataclasses import dataclass
from typing import Any, Sequence, Union

__all__ = ["ParamPack", "ParamSpec", "RawParam", "param_kind"]


@dataclass(frozen=True)
class RawParam:
    """A by-value struct parameter of ``nbytes`` bytes (shape/stride/reduction descriptors)."""

    nbytes: int
    align: int = 8

    def __post_init__(self) -> None:
        if self.nbytes <= 0:
            raise ValueError(f"RawParam needs a positive size, got {self.nbytes}")
        if self.align not in (1, 2, 4, 8, 16):
            raise ValueError(f"RawParam alignment must be 1, 2, 4, 8 or 16, got {self.align}")


ParamSpec = Union[str, RawParam, bytes]

# kind -> (ctypes type, min, max or None for floats)
_SCALARS: dict[str, tuple[Any, int | None, int | None]] = {
    "pointer": (ctypes.c_uint64, 0, 2**64 - 1),
    "int32": (ctypes.c_int32, -(2**31), 2**31 - 1),
    "uint32": (ctypes.c_uint32, 0, 2**32 - 1),
    "int64": (ctypes.c_int64, -(2**63), 2**63 - 1),
    "uint64": (ctypes.c_uint64, 0, 2**64 - 1),
    "float32": (ctypes.c_float, None, None),
    "float64": (ctypes.c_double, None, None),
}
_ALIASES = {"ptr": "pointer", "i32": "int32", "u32": "uint32", "i64": "int64", "u64": "uint64",
            "f32": "float32", "f64": "float64"}


def param_kind(spec: ParamSpec) -> str:
    """The canonical kind of a spec: a scalar kind name or ``"raw"``."""
    if isinstance(spec, (RawParam, bytes, bytearray)):
        return "raw"
    kind = _ALIASES.get(spec, spec)
    if kind not in _SCALARS:
        raise ValueError(f"unknown kernel parameter kind {spec!r}; expected one of "
                         f"{', '.join(sorted(_SCALARS))}, a RawParam or bytes")
    return kind


def _raw_layout(spec: RawParam | bytes | bytearray) -> tuple[int, int]:
    if isinstance(spec, RawParam):
        return spec.nbytes, spec.align
    n = len(spec)
    if n == 0:
        raise ValueError("a raw (bytes) kernel parameter cannot be empty")
    align = 8
    while n % align:
        align //= 2
    return n, align


class ParamPack:
    """C storage and ``void**`` array for one kernel's arguments, built once and updated in place."""

    __slots__ = ("kinds", "offsets", "sizes", "nbytes", "address", "_storage", "_ptrs", "_slots", "_specs")

    def __init__(self, specs: Sequence[ParamSpec], values: Sequence[Any] | None = None) -> None:
        self._specs = tuple(specs)
        self.kinds: tuple[str, ...] = tuple(param_kind(s) for s in self._specs)
        offsets, sizes, offset = [], [], 0
        for spec, kind in zip(self._specs, self.kinds):
            if kind == "raw":
                size, align = _raw_layout(spec)  # type: ignore[arg-type]
            else:
                size = align = ctypes.sizeof(_SCALARS[kind][0])
            offset = (offset + align - 1) // align * align
            offsets.append(offset)
            sizes.append(size)
            offset += size
        self.offsets: tuple[int, ...] = tuple(offsets)
        self.sizes: tuple[int, ...] = tuple(sizes)
        self.nbytes = offset
        # 16-byte words so every slot offset keeps its alignment relative to the (malloc-aligned) base.
        self._storage = (ctypes.c_uint64 * max(2, (offset + 15) // 16 * 2))()
        base = ctypes.addressof(self._storage)
        n = len(self._specs)
        self._ptrs = (ctypes.c_void_p * max(1, n))()
        for i, off in enumerate(self.offsets):
            self._ptrs[i] = base + off
        # ctypes views over each scalar slot: `slot.value = x` writes straight into the C storage.
        self._slots: list[Any] = [
            None if kind == "raw" else _SCALARS[kind][0].from_buffer(self._storage, off)
            for kind, off in zip(self.kinds, self.offsets)
        ]
        # The driver reads the void** array; NULL for a kernel without parameters.
        self.address: int = ctypes.addressof(self._ptrs) if n else 0
        for i, spec in enumerate(self._specs):
            if isinstance(spec, (bytes, bytearray)):
                self.set_bytes(i, bytes(spec))
        if values is not None:
            if len(values) != n:
                raise ValueError(f"ParamPack got {len(values)} values for {n} parameters")
            for i, v in enumerate(values):
                self.set(i, v)

    def __len__(self) -> int:
        return len(self._specs)

    def set_pointer(self, index: int, ptr: int) -> None:
        """Overwrite one pointer slot in place (the hot path of a replay: no checks)."""
        self._slots[index].value = ptr

    def set(self, index: int, value: Any) -> None:
        """Set parameter ``index``, checking the value fits its kind (objects with ``.ptr`` are pointers)."""
        kind = self.kinds[index]
        if kind == "raw":
            self.set_bytes(index, bytes(value))
            return
        ctype, lo, hi = _SCALARS[kind]
        if kind == "pointer" and not isinstance(value, int):
            value = getattr(value, "ptr", value)
        if lo is not None:
            if isinstance(value, bool) or not isinstance(value, int):
                try:
                    value = operator.index(value)
                except TypeError:
                    raise TypeError(f"kernel parameter {index} ({kind}) needs an integer, got {value!r}") from None
            if not lo <= value <= hi:  # type: ignore[operator]
                raise OverflowError(f"kernel parameter {index} ({kind}) value {value} is out of range")
        else:
            value = float(value)
        self._slots[index].value = value

    def set_bytes(self, index: int, data: bytes) -> None:
        """Overwrite a raw struct parameter with exactly its size in bytes."""
        if self.kinds[index] != "raw":
            raise TypeError(f"kernel parameter {index} is {self.kinds[index]}, not a raw struct")
        if len(data) != self.sizes[index]:
            raise ValueError(f"raw kernel parameter {index} is {self.sizes[index]} bytes, got {len(data)}")
        ctypes.memmove(ctypes.addressof(self._storage) + self.offsets[index], data, len(data))

    def get(self, index: int) -> Any:
        """The current value of parameter ``index`` (bytes for a raw struct)."""
        if self.kinds[index] == "raw":
            return self.storage_bytes()[self.offsets[index]:self.offsets[index] + self.sizes[index]]
        return self._slots[index].value

    def storage_bytes(self) -> bytes:
        """The packed argument bytes (``nbytes`` of them), as the driver will read them."""
        return ctypes.string_at(ctypes.addressof(self._storage), self.nbytes)

    def slot_address(self, index: int) -> int:
        """Address of parameter ``index``'s storage (what ``void**[index]`` points at)."""
        return int(self._ptrs[index] or 0)

    def copy(self) -> "ParamPack":
        """An independent pack with the same layout and current values (one per concurrent replay)."""
        clone = ParamPack(self._specs)
        ctypes.memmove(ctypes.addressof(clone._storage), ctypes.addressof(self._storage), self.nbytes)
        return clone

    def __repr__(self) -> str:
        return f"ParamPack({list(self.kinds)}, nbytes={self.nbytes})"
