"""Kernel Tuner's cache file: read to resume a tuning, written as configurations are measured.

The file is JSON: a header (device_name, kernel_name, problem_size, tune_params_keys, tune_params, objective)
and `cache`, one entry per configuration keyed by its values joined with commas in tune_params order. While a
tuning runs the file stays open for appending, its last two closing braces left off and each entry written on
a line of its own followed by a comma; it is closed at the end. Kernel Tuner reads either form, and so does
this module, so each can resume what the other wrote. Errors are written as their class name
("__error__": "CompilationFailedConfig"), as Kernel Tuner writes them.
"""
import json
import os
from pathlib import Path

import numpy as np

from kforge.kernel_tuner_compat.space import DropInError


def cache_path(cache) -> Path:
    """The file Kernel Tuner would use: `.json` appended when the name lacks it."""
    path = str(Path(cache).resolve()) if isinstance(cache, Path) else str(cache)
    return Path(path if path.endswith(".json") else path + ".json")


def _default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _line(key: str, entry: dict) -> str:
    # Kernel Tuner's errors are str subclasses whose str() is their class name, the form the file holds.
    written = {k: str(v) if isinstance(v, str) and type(v) is not str else v for k, v in entry.items()}
    return "\n" + json.dumps({key: written}, default=_default)[1:-1] + ","


class CacheFile:
    """One cache file of a tuning of `kernel_name` at `problem_size` over `tune_params`."""

    def __init__(self, cache, kernel_name: str, problem_size, tune_params: dict):
        self.path = cache_path(cache)
        self.kernel_name, self.problem_size = kernel_name, problem_size
        self.tune_params = {k: [_default(v) if isinstance(v, np.generic) else v for v in values]
                            for k, values in tune_params.items()}
        self.header: dict | None = None
        self.entries: dict[str, dict] = {}
        self.opened = False
        if self.path.is_file() and self.path.read_text().strip():
            self._read()

    @property
    def device_name(self) -> str | None:
        return self.header["device_name"] if self.header else None

    def _read(self) -> None:
        data = _parsed(self.path)
        for field in ("device_name", "kernel_name", "tune_params_keys", "cache"):
            if field not in data:
                raise DropInError(f"cache: {self.path} has no {field!r}: it is not a Kernel Tuner cache file; name "
                                  "another file, or remove it")
        if data["kernel_name"] != self.kernel_name:
            raise DropInError(f"cache: {self.path} holds results of kernel {data['kernel_name']}, not "
                              f"{self.kernel_name}: name another cache file")
        if "problem_size" in data and not _same_size(data["problem_size"], self.problem_size):
            raise DropInError(f"cache: {self.path} holds results at problem_size {data['problem_size']}, not "
                              f"{self.problem_size}: name another cache file")
        keys = list(self.tune_params)
        if data["tune_params_keys"] != keys:
            order = "in another order" if sorted(data["tune_params_keys"]) == sorted(keys) else "with other parameters"
            raise DropInError(f"cache: {self.path} holds results {order} ({data['tune_params_keys']}, here {keys}); "
                              "its keys follow that order: give tune_params as the cache has them, or another file")
        self.header = {k: v for k, v in data.items() if k != "cache"}
        self.entries = dict(data["cache"])

    def check_device(self, device_name: str) -> None:
        if self.device_name is not None and self.device_name != device_name:
            raise DropInError(f"cache: {self.path} holds results of {self.device_name}, and this tuning runs on "
                              f"{device_name}: name another cache file for this device")

    def open(self, device_name: str) -> None:
        """Start appending: a new file gets its header; an existing one is written again in the open form, its
        entries kept (replaced at once, so an interruption never leaves half a file)."""
        self.check_device(device_name)
        header = self.header or {"device_name": device_name, "kernel_name": self.kernel_name,
                                 "problem_size": self.problem_size, "tune_params_keys": list(self.tune_params),
                                 "tune_params": self.tune_params, "objective": ["time"]}
        text = json.dumps({**header, "cache": {}}, indent="", default=_default)
        assert text.endswith("{}\n}")
        text = text[:-3] + "".join(_line(k, v) for k, v in self.entries.items())
        partial = self.path.with_name(self.path.name + ".partial")
        partial.write_text(text)
        os.replace(partial, self.path)
        self.header, self.opened = header, True

    def add(self, key: str, entry: dict) -> None:
        if key in self.entries:
            return
        self.entries[key] = entry
        with self.path.open("a") as file:
            file.write(_line(key, entry))

    def close(self) -> None:
        """Close the JSON (a file with no entry stays open, as Kernel Tuner leaves it: its reader opens a closed
        empty cache wrongly)."""
        if not self.opened:
            return
        text = self.path.read_text()
        if text.endswith(","):
            self.path.write_text(text[:-1] + "}\n}")
        self.opened = False


def _parsed(path: Path) -> dict:
    text = path.read_text().strip()
    for attempt in (text, text.rstrip(",") + "}\n}"):
        try:
            data = json.loads(attempt)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict):
            return data
    raise DropInError(f"cache: {path} is not a Kernel Tuner cache file (not JSON, closed or open): name another "
                      "file, or remove it")


def _same_size(cached, given) -> bool:
    a, b = np.array(cached), np.array(given)
    return a.size == b.size and bool((a == b).all())
