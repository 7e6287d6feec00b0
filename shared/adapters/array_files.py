"""Arrays a spec fixes in .npy files: an input's `data`, an output's `answer` (Kernel Tuner's answer).

A file is read without np.load: its header is parsed (numpy's own parser, bounded), a dtype holding Python
objects is refused (kforge never unpickles), and then exactly the bytes the header announces are read, no
more, into an array of the argument's dtype and shape. The spec records the sha256 of the whole file when the
spec file is loaded; every later read hashes the bytes it reads and refuses a file that changed since, so a
job never runs on other data than it was submitted with.

A bfloat16 argument's file holds its values' bit patterns (shared/domain/dtypes.py), as uint16 or as the 2-byte void
that np.save writes for an ml_dtypes.bfloat16 array; both are read as the uint16 the host holds them in.
"""
import hashlib
import math
from pathlib import Path
from typing import BinaryIO

import numpy as np
from numpy.lib import format as npy

from shared.domain.dtypes import BFLOAT16, host_dtype
from shared.domain.errors import FieldError
from shared.domain.spec import ArrayFile, KernelSpec

READ_BYTES = 1 << 24  # read and hashed at a time
HEADER_BYTES = 10_000  # numpy's own bound on a header (np.load's max_header_size)
_HEADERS = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}


class ArrayFileError(ValueError):
    """A .npy file that cannot serve as the spec says; the message says why and what to do."""


def array_file(path: Path, max_bytes: int) -> ArrayFile:
    """`path` as a spec records it: checked to hold one plain array of at most `max_bytes`, with its sha256."""
    path = path.resolve()
    digest = hashlib.sha256()
    with _opened(path) as file:
        dtype, shape, _, start = _header(file, path)
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > max_bytes:
            raise ArrayFileError(f"{path} holds {nbytes:,} bytes, above the {max_bytes:,} a job may use "
                                 "(KFORGE_MAX_ARRAY_BYTES): use smaller arrays")
        _check_length(file, path, start + nbytes)
        file.seek(0)
        while chunk := file.read(READ_BYTES):
            digest.update(chunk)
    return ArrayFile(path=str(path), sha256=digest.hexdigest())


def read_array(file: ArrayFile, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """The array in `file`, which must hold `dtype` values in `shape` and still have the content recorded."""
    path = Path(file.path)
    with _opened(path) as opened:
        held, held_shape, fortran_order, start = _header(opened, path)
        _check_fits(path, held, held_shape, dtype, shape)
        array = np.empty(math.prod(shape), host_dtype(dtype))
        _check_length(opened, path, start + array.nbytes)
        opened.seek(0)
        digest = hashlib.sha256(opened.read(start))
        into, done = memoryview(array.view(np.uint8)), 0
        while done < array.nbytes:
            read = opened.readinto(into[done:done + READ_BYTES])
            if not read:
                raise ArrayFileError(f"{path} ended after {done:,} of its {array.nbytes:,} bytes while it was read: "
                                     "leave it unchanged while a job runs")
            digest.update(into[done:done + read])
            done += read
    if digest.hexdigest() != file.sha256:
        raise ArrayFileError(f"{path} changed since the job was submitted (sha256 {file.sha256[:12]}… then, "
                             f"{digest.hexdigest()[:12]}… now): put the original back, or submit the job again")
    # A Fortran-ordered file (np.save of a transposed array) holds the columns one after the other.
    return np.ascontiguousarray(array.reshape(shape, order="F" if fortran_order else "C"))


def array_file_errors(spec: KernelSpec) -> list[FieldError]:
    """Every `data` and `answer` file whose header does not fit its argument at the spec's sizes (the content is
    not read: its sha256 was recorded with it)."""
    errors = []
    for i, arg in enumerate(spec.args):
        for field, file in (("data", arg.data), ("answer", arg.answer)):
            if file is None:
                continue
            path = Path(file.path)
            try:
                with _opened(path) as opened:
                    held, held_shape, _, _ = _header(opened, path)
                _check_fits(path, held, held_shape, arg.dtype, spec.shape_of(arg))
            except ArrayFileError as exc:
                errors.append(FieldError(f"args[{i}].{field}", str(exc)))
    return errors


def _opened(path: Path) -> BinaryIO:
    if not path.is_file():
        what = "does not exist" if not path.exists() else "is not a regular file"
        raise ArrayFileError(f"{path} {what}: give the path of a .npy file (np.save writes one)")
    try:
        return path.open("rb")
    except OSError as exc:
        raise ArrayFileError(f"cannot read {path}: {exc.strerror}") from None


def _header(file: BinaryIO, path: Path) -> tuple[np.dtype, tuple[int, ...], bool, int]:
    """(dtype, shape, Fortran order, where the values start), from a header numpy's np.save writes."""
    try:
        version = npy.read_magic(file)
        if version not in _HEADERS:
            raise ValueError(f"format version {version[0]}.{version[1]}, which kforge does not read")
        shape, fortran_order, dtype = _HEADERS[version](file, max_header_size=HEADER_BYTES)
    except (ValueError, SyntaxError) as exc:
        raise ArrayFileError(f"{path} is not a .npy file kforge reads ({exc}): write it with np.save") from None
    if dtype.hasobject:
        raise ArrayFileError(f"{path} holds Python objects, which only unpickling reads, and kforge never "
                             "unpickles: save a plain numeric array of the argument's dtype")
    if dtype.fields is not None or dtype.subdtype is not None:
        raise ArrayFileError(f"{path} holds records ({dtype}): save a plain numeric array of the argument's dtype")
    return dtype, shape, fortran_order, file.tell()


def _check_fits(path: Path, held: np.dtype, held_shape: tuple[int, ...], dtype: str, shape: tuple[int, ...]) -> None:
    if held != host_dtype(dtype) and not (dtype == BFLOAT16 and held == np.dtype("V2")):
        fix = ("save its bit patterns as uint16 (shared.domain.dtypes.to_bfloat16 rounds floats to them) or save an "
               "ml_dtypes.bfloat16 array" if dtype == BFLOAT16
               else f"save it with .astype('{np.dtype(dtype).newbyteorder('<').str}')")
        raise ArrayFileError(f"{path} holds {held} values ({held.str}), the argument is {dtype}: {fix}")
    if tuple(held_shape) != tuple(shape):
        raise ArrayFileError(f"{path} has shape {tuple(held_shape)}, the argument {shape} at the spec's sizes: save "
                             "an array of that shape, or change shape or sizes")


def _check_length(file: BinaryIO, path: Path, expected: int) -> None:
    size = file.seek(0, 2)
    if size != expected:
        raise ArrayFileError(f"{path} has {size:,} bytes where its header announces {expected:,}: write it again "
                             "with np.save")


def named_file_errors(spec: KernelSpec) -> list[FieldError]:
    """Every `data` and `answer` of a spec from a stranger (over HTTP), refused: kforge's machines would read
    whatever path it named, and its errors would tell whether the file exists and what it holds."""
    return [FieldError(f"args[{i}].{field}", "names a file on kforge's machines, which a submission over HTTP may "
                                            "not: submit the job with the kforge CLI or Python API where the file is, "
                                            "or describe the values with range and sorted")
            for i, arg in enumerate(spec.args) for field in ("data", "answer") if getattr(arg, field) is not None]
