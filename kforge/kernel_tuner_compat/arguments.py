"""Kernel Tuner's `arguments` and `answer` as the args of a kforge spec.

Every array's values are the kernel's input, as Kernel Tuner uploads them: each is saved to a .npy file that the
spec names as the argument's `data` (outputs too, as inout, since Kernel Tuner uploads their contents as well).
With an `answer`, the arrays it gives a value for are the outputs, checked against it (their `answer` file),
and the others inputs. Without one, the kernel's signature decides: const pointers are inputs, the rest outputs,
checked against what the reference configuration computes. Scalars become scalar arguments of their numpy
dtype; a Python int or float takes the dtype of the kernel's parameter (int32 and float32 when it cannot be read).
`cmem_args` become constant args (role constant): their values fixed, copied into the module's __constant__
variables of their names before every launch, as Kernel Tuner copies them.
"""
import re
from pathlib import Path

import numpy as np

from kforge.infer_spec import InferenceError, Parameter, kernel_parameters
from kforge.kernel_tuner_compat.space import DropInError
from shared.adapters.array_files import ArrayFileError, array_file
from shared.domain.dtypes import is_float
from shared.domain.spec import DTYPES, kernel_base_name


def spec_args(arguments, answer, source: str, kernel_name: str, folder: Path, max_bytes: int) -> list[dict]:
    """The spec's args for `arguments`, their arrays saved under `folder`."""
    if not isinstance(arguments, list | tuple) or not arguments:
        raise DropInError("arguments: give the kernel's arguments as a list of numpy arrays and scalars")
    if answer is not None and (not isinstance(answer, list | tuple) or len(answer) != len(arguments)):
        raise DropInError(f"answer: give a list with one entry per argument ({len(arguments)}), None where an "
                          "argument is not checked")
    signature = _signature(source, kernel_name, len(arguments))
    checked = answer is not None and any(a is not None for a in answer)
    args = []
    for i, value in enumerate(arguments):
        parameter = signature[i] if signature else None
        name = _unique(parameter.name if parameter else f"arg{i}", [a["name"] for a in args])
        expected = answer[i] if answer is not None else None
        if isinstance(value, np.ndarray):
            role = ("inout" if expected is not None else "in") if checked else \
                   ("in" if parameter and parameter.const else "inout")
            args.append(_array(i, name, value, role, parameter, expected, folder, max_bytes))
        else:
            if expected is not None:
                raise DropInError(f"answer[{i}]: argument {i} is a scalar, which the kernel cannot change: use None")
            args.append(_scalar(i, name, value, parameter))
    return args


def _signature(source: str, kernel_name: str, count: int) -> list[Parameter] | None:
    """The kernel's parameters, or None where its signature cannot be read (a template, a struct type)."""
    try:
        parameters = kernel_parameters(source, kernel_base_name(kernel_name))
    except InferenceError:
        return None
    if len(parameters) != count:
        raise DropInError(f"arguments: {count} given, and {kernel_name} takes {len(parameters)} "
                          f"({', '.join(p.name for p in parameters)})")
    return parameters


def _unique(name: str, taken: list[str]) -> str:
    name = name if re.fullmatch(r"[A-Za-z_]\w*", name) else "arg"
    candidate, n = name, 1
    while candidate in taken:
        candidate, n = f"{name}_{n}", n + 1
    return candidate


def _array(i: int, name: str, value: np.ndarray, role: str, parameter: Parameter | None, expected,
           folder: Path, max_bytes: int) -> dict:
    dtype = _dtype(f"arguments[{i}]", value.dtype)
    if parameter is not None and (not parameter.pointer or parameter.dtype != dtype):
        wanted = f"a pointer to {parameter.dtype}" if parameter.pointer else f"a {parameter.dtype} scalar"
        raise DropInError(f"arguments[{i}]: a {dtype} array, where {name} is {wanted}: pass "
                          f"{'an array of that dtype' if parameter.pointer else 'a numpy scalar'}")
    values = _native(value)
    arg = {"name": name, "dtype": dtype, "shape": list(values.shape), "role": role,
           "data": _saved(folder / f"{i}_{name}.npy", values, max_bytes, f"arguments[{i}]")}
    if expected is not None:
        if not isinstance(expected, np.ndarray):
            raise DropInError(f"answer[{i}]: give a numpy array (or None), not {type(expected).__name__}")
        if _dtype(f"answer[{i}]", expected.dtype) != dtype or expected.size != values.size:
            raise DropInError(f"answer[{i}]: {expected.size} {expected.dtype} values, and argument {i} holds "
                              f"{values.size} {dtype} values: give the expected output in the argument's dtype "
                              "and size")
        arg["answer"] = _saved(folder / f"{i}_{name}.answer.npy", _native(expected).reshape(values.shape), max_bytes,
                               f"answer[{i}]")
    return arg


def constant_args(cmem_args: dict | None, folder: Path, max_bytes: int) -> list[dict]:
    """Kernel Tuner's `cmem_args` ({name of a __constant__ variable: its values}) as constant args."""
    args = []
    for name, values in (cmem_args or {}).items():
        field = f"cmem_args[{name!r}]"
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise DropInError(f"{field}: a key names the __constant__ variable to fill, an identifier")
        array = _native(np.asarray(values))
        args.append({"name": name, "dtype": _dtype(field, array.dtype), "shape": list(array.shape), "role": "constant",
                     "data": _saved(folder / f"constant_{name}.npy", array, max_bytes, field)})
    return args


def _native(array: np.ndarray) -> np.ndarray:
    """The array as a C-ordered, native-endian array of the bytes the device gets: Kernel Tuner copies an array's
    memory as it lies, so a Fortran-ordered one goes flat in its memory order, keeping the device's view."""
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    if array.ndim == 0:
        return array.reshape(1)
    return array if array.flags.c_contiguous else array.ravel(order="K")


def _saved(path: Path, values: np.ndarray, max_bytes: int, field: str) -> dict:
    np.save(path, values)
    try:
        return array_file(path, max_bytes).model_dump()
    except ArrayFileError as exc:
        raise DropInError(f"{field}: {exc}") from None


def _scalar(i: int, name: str, value, parameter: Parameter | None) -> dict:
    if isinstance(value, bool | np.bool_):
        raise DropInError(f"arguments[{i}]: a bool has no CUDA type kforge passes: use numpy.int32(...) or "
                          "numpy.int8(...)")
    if isinstance(value, np.generic):
        dtype, number = _dtype(f"arguments[{i}]", value.dtype), value.item()
    elif isinstance(value, int | float):
        fallback = "int32" if isinstance(value, int) else "float32"
        dtype = parameter.dtype if parameter is not None and not parameter.pointer else fallback
        number = value
        if isinstance(value, float) and not is_float(dtype):
            raise DropInError(f"arguments[{i}]: the float {value}, where {name} is {dtype}: pass an integer")
    else:
        raise DropInError(f"arguments[{i}]: {type(value).__name__} is neither a numpy array nor a scalar: kforge "
                          "passes numpy arrays, numpy scalars and Python numbers")
    if parameter is not None and (parameter.pointer or parameter.dtype != dtype):
        wanted = f"a pointer to {parameter.dtype} (pass an array)" if parameter.pointer else f"{parameter.dtype}"
        raise DropInError(f"arguments[{i}]: a {dtype} scalar, where {name} is {wanted}")
    if not np.isfinite(number):
        raise DropInError(f"arguments[{i}]: {number} is not finite, and kforge passes finite scalars only")
    return {"name": name, "dtype": dtype, "value": float(number) if is_float(dtype) else int(number)}


def _dtype(field: str, dtype: np.dtype) -> str:
    if dtype.name not in DTYPES:
        raise DropInError(f"{field}: kforge has no dtype {dtype.name}: use one of {', '.join(DTYPES)}")
    return dtype.name
