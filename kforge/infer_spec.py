"""A spec inferred from a kernel's signature, for a kernel submitted without one.

Const pointers are inputs, other pointers outputs (role out), integer scalars size variables of their own
name, float scalars 1.0. Arrays are shaped [n] by the first integer parameter (a size `n` of the default
size when the kernel has none), and block_size_x is tuned, Kernel Tuner's convention. What the signature
cannot tell is said in `notes`; admission still checks the dtypes against the kernel's PTX signature.
"""
import re
from dataclasses import dataclass

import yaml

from services.generator.rules.cuda_text import find_kernel
from shared.domain.dtypes import is_float
from shared.domain.preprocessor_lines import logical_lines
from shared.domain.spec import defined_kernels

DEFAULT_SIZE = 2**20
BLOCK_SIZES = [64, 128, 256, 512, 1024]
_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "__grid_constant__", "std"}
_SCALAR_DTYPES = {
    "float": "float32", "double": "float64", "__half": "float16", "half": "float16",
    "__nv_bfloat16": "bfloat16", "nv_bfloat16": "bfloat16",
    "char": "int8", "signed char": "int8", "unsigned char": "uint8", "short": "int16", "unsigned short": "uint16",
    "int": "int32", "unsigned": "uint32", "long": "int64", "long long": "int64", "unsigned long": "uint64",
    "unsigned long long": "uint64", "size_t": "uint64", "ptrdiff_t": "int64",
    **{f"{sign}int{bits}_t": f"{sign}int{bits}" for sign in ("", "u") for bits in (8, 16, 32, 64)},
}

# CUDA's vector types, which kernels take pointers to for 64- and 128-bit accesses: an array of them is an array of
# their element type with one more dimension, the lanes (a float4 *x of n elements is float32 of shape [n, 4]).
_VECTOR_DTYPES = {
    **{f"{name}{lanes}": (dtype, lanes) for name, dtype in (
        ("char", "int8"), ("uchar", "uint8"), ("short", "int16"), ("ushort", "uint16"), ("int", "int32"),
        ("uint", "uint32"), ("longlong", "int64"), ("ulonglong", "uint64"), ("float", "float32"),
        ("double", "float64")) for lanes in (2, 3, 4)},
    "__half2": ("float16", 2), "half2": ("float16", 2), "__nv_bfloat162": ("bfloat16", 2),
    "nv_bfloat162": ("bfloat16", 2),
}


_CONSTANT_ARRAY = re.compile(r"__constant__\s+(?:const\s+)?((?:unsigned\s+|signed\s+)?[A-Za-z_]\w*(?:\s+long)?)\s+"
                             r"([A-Za-z_]\w*)\s*((?:\[\s*\d+\s*\]\s*)+);")


class InferenceError(ValueError):
    """The signature cannot be read into a spec. `field` is what to change: kernel_name (which kernel), sizes
    or source (a parameter whose type no dtype describes); the message says how."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


@dataclass(frozen=True)
class Parameter:
    name: str
    dtype: str
    pointer: bool
    const: bool
    lanes: int = 1  # elements per pointee: a float4 pointer's are 4 float32


@dataclass(frozen=True)
class InferredSpec:
    data: dict  # the spec's fields, without source
    notes: list[str]  # what was guessed and how to change it

    def to_yaml(self) -> str:
        """The spec as a YAML file to edit: the notes as comments, one line per field and per argument."""
        lines = [f"# inferred by kforge from the signature of {self.data['kernel_name']}: check it and edit",
                 *(f"# - {note}" for note in self.notes)]
        for field, value in self.data.items():
            if field == "args":
                lines += ["args:", *(f"  - {_flow(arg)}" for arg in value)]
            else:
                lines.append(_flow({field: value})[1:-1])  # the one field, without the braces around it
        return "\n".join(lines) + "\n"


def _flow(value: dict) -> str:
    return yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=float("inf")).strip()


def infer_spec(source: str, kernel_name: str | None = None, sizes: dict[str, int] | None = None) -> InferredSpec:
    """The spec of `kernel_name` (default: the source's only __global__ function), with `sizes` replacing the
    default size of each size variable named."""
    name = _chosen_kernel(source, kernel_name)
    parameters = kernel_parameters(source, name)
    integers = [p.name for p in parameters if not p.pointer and p.dtype.startswith(("int", "uint"))]
    shape_size = integers[0] if integers else "n"
    default_sizes = {shape_size: DEFAULT_SIZE, **{n: 1 for n in integers[1:]}}
    if unknown := set(sizes or {}) - set(default_sizes):
        raise InferenceError("sizes", f"{name} has no size {', '.join(sorted(unknown))}; its sizes are "
                                      f"{', '.join(default_sizes)}")
    notes = []
    if outputs := [p.name for p in parameters if p.pointer and not p.const]:
        notes.append(f"{', '.join(outputs)}: a non-const pointer is an output (role out): set role: inout where the "
                     "kernel reads it first, role: in (or make it const) where it only reads it")
    if not integers:
        notes.append(f"{name} takes no integer size: every array holds n = {DEFAULT_SIZE} elements; check that the "
                     "kernel stays within them")
    if integers[1:]:
        notes.append(f"only {shape_size} sizes the arrays; {', '.join(integers[1:])} = 1: set them with "
                     "--size NAME=VALUE (sizes= in Python), and the shapes where they count elements too")
    if vectors := [p for p in parameters if p.lanes > 1]:
        notes.append(f"{', '.join(f'{p.name} ({p.dtype} x {p.lanes})' for p in vectors)}: a pointer to a vector type "
                     f"is an array of its elements, one row of lanes per vector, so {shape_size} counts vectors")
    constants, unread = _constant_arrays(source)
    if constants:
        notes.append(f"{', '.join(a['name'] for a in constants)}: __constant__ arrays of the source (role constant), "
                     "filled with drawn values before every launch: give data: FILE.npy to fix their values")
    if unread:
        notes.append(f"{', '.join(unread)}: __constant__ declarations whose type or extent kforge could not read "
                     "(an expression, a macro, a vector type, an initializer): where the host fills one, add it to "
                     "args with role: constant, its dtype and shape; one it never fills reads as zeros")
    floats = [p.name for p in parameters if not p.pointer and is_float(p.dtype)]
    if floats:
        notes.append(f"{', '.join(floats)} = 1.0: a float scalar's value is not in the signature; set its value")
    data = {
        "kernel_name": name,
        "sizes": {**default_sizes, **(sizes or {})},
        "problem_size": [shape_size],
        "args": [*(_arg(p, shape_size) for p in parameters), *constants],
        "tune_params": {"block_size_x": BLOCK_SIZES},
    }
    return InferredSpec(data, notes)


def _arg(parameter: Parameter, shape_size: str) -> dict:
    if parameter.pointer:
        shape = [shape_size] if parameter.lanes == 1 else [shape_size, parameter.lanes]
        return {"name": parameter.name, "dtype": parameter.dtype, "shape": shape,
                "role": "in" if parameter.const else "out"}
    return {"name": parameter.name, "dtype": parameter.dtype,
            "value": 1.0 if is_float(parameter.dtype) else parameter.name}


def _constant_arrays(source: str) -> tuple[list[dict], list[str]]:
    """The __constant__ arrays the source declares with literal extents and no initializer (the host fills
    them), each name once; and the names of the other __constant__ declarations, which it could not read."""
    text = "\n".join(logical_lines(source))
    read: dict[str, dict] = {}
    for type_, name, extents in _CONSTANT_ARRAY.findall(text):
        if _normalised(type_.split()) in _SCALAR_DTYPES:
            read.setdefault(name, {"name": name, "dtype": _SCALAR_DTYPES[_normalised(type_.split())],
                                   "shape": [int(e) for e in re.findall(r"\[\s*(\d+)\s*\]", extents)],
                                   "role": "constant"})
    declared = dict.fromkeys(re.findall(r"__constant__[^;=]*?([A-Za-z_]\w*)\s*(?:\[[^;=]*)?(?:;|=)", text))
    return list(read.values()), [name for name in declared if name not in read]


def _chosen_kernel(source: str, kernel_name: str | None) -> str:
    kernels = defined_kernels(source)
    if not kernels:
        raise InferenceError("source", "no __global__ function found; the source must define the kernel to tune")
    if kernel_name is None and len(kernels) > 1:
        raise InferenceError("kernel_name", f"the source defines {len(kernels)} kernels ({', '.join(kernels)}): "
                                            "name the one to tune")
    name = kernel_name or next(iter(kernels))
    if name not in kernels:
        raise InferenceError("kernel_name", f"{name!r} is not defined in the source; it defines {', '.join(kernels)}")
    if kernels[name]:
        raise InferenceError("kernel_name", f"{name} is a template, so its parameter types are not in its signature: "
                                            f"write the spec by hand, naming an instance (kernel_name: {name}<float>)")
    return name


def kernel_parameters(source: str, kernel_name: str) -> list[Parameter]:
    """Each parameter of the kernel's definition, its type read into a kforge dtype."""
    try:
        kernel = find_kernel(source, kernel_name)
    except ValueError as exc:
        raise InferenceError("source", str(exc)) from None
    return [_parameter(position, source[start:end]) for position, (start, end) in
            enumerate(kernel.parameters(source))]


def _parameter(position: int, text: str) -> Parameter:
    declaration = " ".join(text.split("=")[0].split())
    tokens = re.findall(r"[A-Za-z_]\w*|[*&\[]", declaration)
    words = [t for t in tokens if t not in _QUALIFIERS and t not in "*&["]
    if "&" in tokens or len(words) < 2:
        raise InferenceError("source", f"parameter {position} ({declaration}) is not a named value or pointer: "
                                       "write the spec by hand")
    name, type_words = words[-1], words[:-1]
    pointers = tokens.count("*") + tokens.count("[")
    dtype, lanes = _SCALAR_DTYPES.get(_normalised(type_words)), 1
    if dtype is None and pointers == 1 and len(type_words) == 1 and type_words[0] in _VECTOR_DTYPES:
        dtype, lanes = _VECTOR_DTYPES[type_words[0]]
    if dtype is None or pointers > 1:
        raise InferenceError("source", f"parameter {position} ({declaration}): {' '.join(type_words)}"
                                       f"{'*' * pointers} has no kforge dtype (a scalar or a pointer to one of float, "
                                       "double, __half, __nv_bfloat16, the integer types and their vector types such "
                                       "as float4 and __half2): write the spec by hand")
    pointee = tokens[:tokens.index("*")] if "*" in tokens else tokens  # float *const p writes through p
    return Parameter(name, dtype, pointer=pointers == 1, const="const" in pointee, lanes=lanes)


def _normalised(type_words: list[str]) -> str:
    """`unsigned long int` as `unsigned long`, `signed int` as `int`: one spelling per C type."""
    words = [w for w in type_words if w != "signed"] or ["int"]
    if len(words) > 1 and words[-1] == "int":
        words = words[:-1]
    return " ".join(words)
