"""Does a kernel take the arguments the spec describes? Checked on PTX, so on any machine, GPU or not."""
import numpy as np

from shared.spec import ArgSpec, KernelSpec


def expected_types(arg: ArgSpec) -> set[str]:
    """The PTX parameter types that can carry `arg`: a pointer for an array, the scalar's width otherwise."""
    if arg.is_array:
        return {"u64"}
    dtype = np.dtype(arg.dtype)
    bits = dtype.itemsize * 8
    if dtype.kind == "f":
        return {f"f{bits}", f"b{bits}"} | ({"u16"} if bits == 16 else set())
    return {f"u{bits}", f"s{bits}", f"b{bits}"}


def mismatch(spec: KernelSpec, types: list[str]) -> str:
    """'' when the parameters fit the spec's args, else what differs, naming the argument."""
    args = spec.args
    if len(types) != len(args):
        return (f"the kernel takes {len(types)} parameters ({', '.join(types) or 'none'}) but args lists {len(args)} "
                f"({', '.join(a.name for a in args)})")
    for position, (arg, kind) in enumerate(zip(args, types)):
        if kind not in expected_types(arg):
            what = "a pointer" if arg.is_array else f"a {arg.dtype} scalar"
            return (f"parameter {position} ({arg.name}) should be {what} (PTX .{'/.'.join(sorted(expected_types(arg)))})"
                    f" but the kernel declares .{kind}")
    return ""
