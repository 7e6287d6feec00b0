"""Does a kernel take the arguments a spec lists? Compared on the parameter types PTX declares (the caller
compiles), so it holds on any machine, GPU or not. Admission checks the submitted kernel with it, the verifier
a candidate. PTX knows a pointer only as a 64-bit value: an array's dtype and a pointer's const-ness are not in
it, so they are not compared. Nor is a 16-bit float scalar's kind: `__half` and `__nv_bfloat16` are both .b16."""
from dataclasses import dataclass

from shared.domain.dtypes import host_dtype, is_float
from shared.domain.spec import DTYPES, ArgSpec


# How a kernel declares an element of each dtype, for the fixes the mismatches name.
C_TYPES = {"float32": "float", "float64": "double", "float16": "__half", "bfloat16": "__nv_bfloat16",
           "int8": "signed char", "uint8": "unsigned char", "int16": "short", "uint16": "unsigned short",
           "int32": "int", "uint32": "unsigned int", "int64": "long long", "uint64": "unsigned long long"}


@dataclass(frozen=True)
class Mismatch:
    field: str  # the spec field that disagrees with the kernel: args, args[i] or args[i].dtype
    what: str  # what differs, naming the argument and the kernel's parameter
    fix: str  # what would make args and the kernel agree


def expected_types(arg: ArgSpec) -> set[str]:
    """The PTX parameter types that can carry `arg`: a pointer for an array, the scalar's width otherwise."""
    return {"u64"} if arg.is_array else _scalar_types(arg.dtype)


def mismatches(args: list[ArgSpec], types: list[str], constants: dict[str, int] | None = None) -> list[Mismatch]:
    """Every parameter whose PTX type cannot carry its argument; none when the kernel fits `args`. A count
    that differs is one mismatch: past a missing parameter every position is off by one, so comparing them
    would only add noise. With `constants` (the __constant__ variables PTX declares, by name), every constant
    arg must name one of them."""
    parameters = [(i, a) for i, a in enumerate(args) if a.is_parameter]
    if len(types) != len(parameters):
        return [Mismatch("args", f"the kernel takes {len(types)} parameters ({', '.join(types) or 'none'}) but args "
                                 f"lists {len(parameters)} ({', '.join(a.name for _, a in parameters) or 'none'})",
                         "list one argument per kernel parameter, in the order of its signature")]
    found = [_mismatch(position, arg, kind) for (position, arg), kind in zip(parameters, types)
             if kind not in expected_types(arg)]
    return found + [Mismatch(f"args[{i}].name", f"args[{i}] ({a.name}) has role constant, but the kernel's source "
                                                f"declares no __constant__ {a.name} at file scope",
                             f"declare it (__constant__ {C_TYPES.get(a.dtype, a.dtype)} {a.name}[...];) or name the "
                             "one it declares")
                    for i, a in enumerate(args) if not a.is_parameter and constants is not None
                    and a.name not in constants]


def smaller_constants(args: list[ArgSpec], constants: dict[str, int], nbytes: dict[str, int]) -> list[Mismatch]:
    """Every constant arg whose values (`nbytes` of them, by name) do not fit the __constant__ array the source
    declares (`constants`: its size in bytes, by name)."""
    return [Mismatch(f"args[{i}].shape", f"__constant__ {a.name} holds {constants[a.name]} bytes, and args[{i}] gives "
                                         f"it {nbytes[a.name]}",
                     "make the shape fit the declaration (or the declaration the shape)")
            for i, a in enumerate(args) if a.name in constants and a.name in nbytes
            and nbytes[a.name] > constants[a.name]]


def _mismatch(position: int, arg: ArgSpec, kind: str) -> Mismatch:
    field = f"args[{position}]"
    what = "a pointer" if arg.is_array else f"a {arg.dtype} scalar"
    differs = (f"parameter {position} ({arg.name}) should be {what} (PTX .{'/.'.join(sorted(expected_types(arg)))})"
               f" but the kernel declares .{kind}")
    carriers = [dtype for dtype in DTYPES if kind in _scalar_types(dtype)]
    if not carriers:  # a struct or vector passed by value (.b8[16]): no dtype describes it
        return Mismatch(field, differs, "args cannot describe a struct passed by value: have the kernel take its "
                                        "fields as separate scalars")
    dtypes = " or ".join(carriers)
    if arg.is_array:
        return Mismatch(field, differs, f"give {arg.name} a value instead of a shape and a dtype of {dtypes}, or have "
                                        "the kernel take a pointer")
    if kind == "u64":  # a pointer, or a 64-bit integer: PTX does not tell them apart
        return Mismatch(field, differs, f"give {arg.name} a shape if the kernel takes an array there, else a dtype of "
                                        f"{dtypes}")
    return Mismatch(f"{field}.dtype", differs, f"use a dtype of {dtypes}, or change the kernel's parameter")


def _scalar_types(dtype: str) -> set[str]:
    """PTX passes a scalar by its width: as its own type (f32, s32, u32) or as bits of that width (b32)."""
    bits = host_dtype(dtype).itemsize * 8
    if is_float(dtype):
        return {f"f{bits}", f"b{bits}"} | ({"u16"} if bits == 16 else set())
    return {f"u{bits}", f"s{bits}", f"b{bits}"}
