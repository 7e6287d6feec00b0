"""Length-prefixed JSON frames over a pipe: how the compile sandbox and its child talk."""
import json
import struct
from typing import BinaryIO

_HEADER = struct.Struct(">I")


def write_frame(pipe: BinaryIO, message: dict) -> None:
    body = json.dumps(message).encode()
    pipe.write(_HEADER.pack(len(body)) + body)
    pipe.flush()


def read_frame(pipe: BinaryIO) -> dict | None:
    """The next message, or None once the other end has closed the pipe."""
    header = pipe.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    return json.loads(pipe.read(size))
