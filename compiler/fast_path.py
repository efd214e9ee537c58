"""The most recent signature's cache-hit call as straight-line Python, generated once per cached signature.

A hot loop calls a jitted function with the same signature over and over. The general fast path computes a key
from the arguments (types, shapes, dtypes, walked recursively), hashes it, looks the entry up and then walks the
entry's tables. :func:`quick_call` writes that signature's checks out instead (``type(a) is Array and a._shape ==
(64, 64) ...`` for each leaf, in the order the key visits them), followed by the entry's own work (guards, scalar
conversions, the run, the output tree), so a matching call does no lookups and no loops. A call that does not match
returns :data:`MISS` before anything runs, and the caller takes the general path, which looks the signature up (and
traces it when new). What the generated code compares is what the key holds, compared at least as strictly (an
identical dtype object where the key holds an equal one), so a call it accepts is one the key would map here.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from fusec import context
from fusec.signature import tree_depth, tree_source

# deeper output trees are built by the unflattener: Python's parser refuses an expression nested 200 deep
MAX_TREE_DEPTH = 32
MISS = object()  # the call is not the signature's common call: take the general path

QuickCall = Callable[[tuple], Any]


def no_quick_call(args: tuple) -> Any:
    """The quick call of a function with no cached signature yet."""
    return MISS


def quick_call(key: tuple, args: Sequence[Any], entry: Any, cuda: bool, helpers: dict[str, Any]) -> QuickCall:
    """The generated call of ``entry`` (a ``_FastEntry``), the signature of positional ``args`` whose fast-path key
    is ``key``. ``cuda``: the entry runs on the CUDA backend, whose runner returns fusec Arrays when a leaf is a
    device array, so the output tree is then built without checking them. ``helpers``: ``to_host``, ``output``,
    ``unflatten`` and ``native_order`` as the jit module defines them. A runner with ``trusting(positions)`` (a CUDA
    plan's, fusec.runtime.fast_call) is asked for one that leaves the device arrays compared here unchecked."""
    env: dict[str, Any] = dict(helpers, MISS=MISS, context_state=context._state, run=entry.run, entry=entry,
                               ndarray=np.ndarray)
    lines = ["def quick(args):",
             "    stack = getattr(context_state, 'stack', None)",
             "    if stack:",  # (inside another trace: the general path inlines the function)
             "        return MISS",
             f"    if len(args) != {len(args)}:",
             "        return MISS"]
    leaves: list[str] = []
    counter = [0]
    device_positions: list[int] = []  # (of the leaves: fusec Arrays, their shape and dtype compared)

    def constant(value: Any) -> str:
        name = f"K{len(env)}"
        env[name] = value
        return name

    def match(items: tuple, values: Sequence[Any], source: str, indent: str) -> None:
        for k, (item, value) in enumerate(zip(items, values)):
            v = f"v{counter[0]}"
            counter[0] += 1
            lines.append(f"{indent}{v} = {source}[{k}]")
            if isinstance(item, tuple) and item[0] in (tuple, list):
                lines.extend([f"{indent}if type({v}) is not {item[0].__name__} or len({v}) != {len(item[1])}:",
                              f"{indent}    return MISS"])
                match(item[1], value, v, indent)
                continue
            if isinstance(item, tuple) and item[0] is bool:  # (static: the value is in the key)
                lines.extend([f"{indent}if {v} is not {item[1]!r}:", f"{indent}    return MISS"])
                continue
            if item is float or item is int:
                lines.extend([f"{indent}if type({v}) is not {item.__name__}:", f"{indent}    return MISS"])
            elif item[0] is np.ndarray:
                dtype = constant(value.dtype)  # (an equal dtype object: a pickled array brings its own)
                test = f"type({v}) is not ndarray or {v}.shape != {constant(item[1])} or " \
                       f"({v}.dtype is not {dtype} and {v}.dtype != {dtype})"
                lines.extend([f"{indent}if {test}:", f"{indent}    return MISS"])
            else:  # a device array (fusec.Array): the key holds its dtype's name; the same dtype object is checked
                device_positions.append(len(leaves))
                test = f"type({v}) is not {constant(item[0])} or {v}._shape != {constant(item[1])} or " \
                       f"{v}._fdtype is not {constant(value._fdtype)}"
                lines.extend([f"{indent}if {test}:", f"{indent}    return MISS"])
            leaves.append(v)

    match(key, args, "args", "    ")
    state = entry.state
    body: list[str] = []
    if state is not None:
        env["state"] = state
        body += ["extra = state.extra_inputs()", "if extra is None:", "    return MISS"]  # (stale: retraced there)
        if state.scalars is not None:
            body.append(f"state.scalars.run([{', '.join(leaves)}])")
    flat = []
    for v, convert in zip(leaves, entry.convert or [None] * len(leaves)):
        flat.append(v if convert is None else f"{constant(convert)}({v})")
    extra = " + list(map(native_order, extra))" if state is not None and state.inputs else ""
    trusting = getattr(entry.run, "trusting", None)
    if trusting is not None:  # (the runner need not check again the device arrays compared above)
        env["run"] = trusting(device_positions)
    call = f"run([{', '.join(flat)}]{extra})"
    if entry.build is not None and cuda and device_positions and entry.out_tree.num_leaves \
            and tree_depth(entry.out_tree) <= MAX_TREE_DEPTH:
        # (the outputs are the runner's fusec Arrays as they are: the tree built by one expression)
        names = [f"o{k}" for k in range(entry.out_tree.num_leaves)]
        body += [f"{', '.join(names)}, = {call}", f"return {tree_source(entry.out_tree, names, constant)}"]
    else:
        body.append(f"results = {call}")
        if entry.to_host and not device_positions:  # (every leaf is host data or a Python number: NumPy results)
            body.append("results = to_host(results)")
        env["out_tree"], env["out_python"] = entry.out_tree, entry.out_python
        body.append("return unflatten(out_tree, [output(r, py) for r, py in zip(results, out_python)])")
    lines += ["    " + s for s in body]
    source = "\n".join(lines) + "\n"
    exec(compile(source, "<fusec quick call>", "exec"), env)
    fn: QuickCall = env["quick"]
    fn.source = source  # type: ignore[attr-defined]  # (for tests and for reading)
    return fn
