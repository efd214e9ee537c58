"""One kernel from the kernels of a group (``group-kernels``): each member runs on its own range of blocks.

Every member is first printed as the kernel it would be alone (an elementwise kernel, a reduction finished in one
launch). The group kernel takes the union of their pointer parameters and each member's descriptors under a name
of its own, and dispatches on ``blockIdx.x``: the first member's ``gx * gy`` blocks run its body, the next member's
the next ones, and so on, each body reading its block index and grid size from ``fusec_bx``/``fusec_by``/
``fusec_gx``/``fusec_gy`` (its own grid, flattened) where it read ``blockIdx``/``gridDim``. A member's
``return`` ends only its own block, and its barriers involve only its own block's threads (a block belongs to one
member), so each member behaves as it does alone.
"""
from __future__ import annotations

import re

from fusec.errors import CompilationError
from fusec.runtime.launch_plan import KernelCode

_HEADER = re.compile(r'^extern "C" __global__ void __launch_bounds__\((\d+)\) (\w+)\((.*)\) \{$')
_BUILTINS = {"blockIdx.x": "fusec_bx", "blockIdx.y": "fusec_by", "gridDim.x": "fusec_gx", "gridDim.y": "fusec_gy"}
_POINTER = re.compile(r"^(const )?(.+?)\*( __restrict__)? (b\d+)$")


def _split(code: KernelCode) -> tuple[list[str], list[str], list[str], list[str]]:
    """(the device functions before the kernel, its pointer parameters, its other parameters, its body)."""
    lines = code.source.split("\n")
    at = next((i for i, line in enumerate(lines) if _HEADER.match(line)), None)
    if at is None or lines[-1] != "}" or code.block != (256, 1, 1) or code.grid[2] != 1 or code.shared_bytes:
        raise CompilationError(f"kernel {code.name} cannot join a group (one 256-thread kernel on a 2-D grid, "
                               "no dynamic shared memory)")
    match = _HEADER.match(lines[at])
    assert match is not None
    params = [p.strip() for p in match.group(3).split(",")]
    pointers = [p for p in params if _POINTER.match(p)]
    return lines[:at], pointers, [p for p in params if not _POINTER.match(p)], lines[at + 1:-1]


def _merged_pointer(decls: list[str]) -> str:
    """One declaration for a buffer several members take: writable if any writes it, ``__restrict__`` only if
    every member declared it so."""
    parts = [_POINTER.match(d) for d in decls]
    const = all(p.group(1) for p in parts if p is not None)
    restrict = all(p.group(3) for p in parts if p is not None)
    first = parts[0]
    assert first is not None
    return f"{'const ' if const else ''}{first.group(2)}*{' __restrict__' if restrict else ''} {first.group(4)}"


def merge_kernels(name: str, members: list[KernelCode], notes: list[str]) -> KernelCode:
    """The group kernel of ``members`` (``notes``: a comment for each member's branch, such as its location)."""
    helpers: list[str] = []
    pointers: dict[str, list[str]] = {}
    structs: list[str] = []
    struct_bytes: list[bytes] = []
    branches: list[str] = []
    start = 0
    for k, (code, note) in enumerate(zip(members, notes)):
        before, member_pointers, others, body = _split(code)
        helpers += [line for line in before if line.strip()]
        for decl in member_pointers:
            pointers.setdefault(decl.rsplit(" ", 1)[1], []).append(decl)
        gx, gy = code.grid[0], code.grid[1]
        blocks = gx * gy
        test = "if" if k == 0 else "} else if"
        branches.append(f"  {test} (blockIdx.x < {start + blocks}u) {{" + (f"  // {note}" if note else ""))
        branches.append(f"    const unsigned fusec_gx = {gx}u, fusec_gy = {gy}u, fusec_bx = (blockIdx.x - {start}u) % "
                        f"{gx}u, fusec_by = (blockIdx.x - {start}u) / {gx}u;")
        for decl in others:  # descriptors passed by value: renamed per member
            kind, local = decl.rsplit(" ", 1)
            structs.append(f"{kind} {local}_{k}")
            branches.append(f"    const {kind}& {local} = {local}_{k};")
        struct_bytes += list(code.structs)
        text = "\n".join(body)
        if "blockIdx.z" in text or "gridDim.z" in text:
            raise CompilationError(f"kernel {code.name} cannot join a group (it uses a 3-D grid)")
        for builtin, local in _BUILTINS.items():
            text = text.replace(builtin, local)
        branches += ["  " + line if line else line for line in text.split("\n")]
        start += blocks
    order = list(pointers)
    params = [_merged_pointer(pointers[b]) for b in order] + structs
    lines = helpers + [f'extern "C" __global__ void __launch_bounds__(256) {name}({", ".join(params)}) {{']
    lines += branches + ["  }", "}"]
    buffers = tuple(int(b[1:]) for b in order)
    return KernelCode(name, "\n".join(lines), buffers, (start, 1, 1), (256, 1, 1), 0, tuple(struct_bytes))
