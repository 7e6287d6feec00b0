"""Includes whose header name a CUDA header builds with macros, as thrust's do:
`#include __THRUST_DEVICE_SYSTEM_ALGORITH_DETAIL_HEADER_INCLUDE(unique.h)` names
`<thrust/system/cuda/detail/unique.h>` once expanded. (CUB's BlockLoad and WarpLoad reach such includes.)

Such an include opens a file the headers chose for as long as every name its expansion passes through keeps the
definitions the headers give it. A source could otherwise aim it anywhere (`#define h /../../etc/passwd`). So
the include is expanded under every definition that any file of the headers gives each name, on every branch of
every #if, and with each name also left undefined; every header name that can result must be a relative path
without `..` (and is then vetted like a literal include), and the names passed through are returned: the source, its
-D and -U options and its tune parameters (which become -D defines) may define or undefine none of them.
"""
import functools
import itertools
import os
import re
from dataclasses import dataclass

from shared.domain.directive_scan import HEADER_NAME
from shared.domain.preprocessor_lines import logical_lines

MAX_EXPANSIONS = 256  # header names one include may expand to; thrust's give 4 (its cuda, omp, tbb, cpp systems)
MAX_DEPTH = 32  # macros within macros
_TOKEN = re.compile(r'[A-Za-z_]\w*|\.?\d(?:[eEpP][+-]|[\w.])*|"(?:\\.|[^"\\\n])*"|%:%:|%:|##|\S')  # no whitespace
_STRINGISE_OR_PASTE = {"#", "##", "%:", "%:%:"}
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*\Z")
_DEFINE_NAME = re.compile(r"^[ \t]*(?:#|%:)[ \t]*(?:/\*.*?\*/[ \t]*)*define[ \t]+([A-Za-z_]\w*)", re.M)
_DEFINE = re.compile(r"\s*(?:#|%:)\s*define\s+([A-Za-z_]\w*)(\([^)]*\))?(.*)\Z", re.S)


class Unfollowable(ValueError):
    """The include's expansion could not be followed to every header it may name; the message says why."""


@dataclass(frozen=True)
class Built:
    headers: tuple[tuple[bool, str], ...]  # (angled, header name) of every expansion that names a header
    names: frozenset[str]  # every name the expansion passes through


Token = tuple[str, frozenset[str]]  # a token and the macros whose expansion it came from (not expanded again)


@functools.lru_cache(maxsize=1024)
def built_headers(operand: str, dirs: tuple[str, ...]) -> Built:
    """What `#include <operand>` in one of the headers in `dirs` may open, when nothing outside them defines a
    name it passes through. Unfollowable when it may name an absolute path or one through `..`
    (an expansion that names no header at all is a compile error, and opens nothing)."""
    names: set[str] = set()
    tokens = tuple((token, frozenset()) for token in _TOKEN.findall(operand))
    headers = []
    for expansion in _expand(tokens, dirs, names, 0):
        text = "".join(expansion)
        named = HEADER_NAME.match(text)
        if named is None:
            continue
        header = named.group(1) if named.group(1) is not None else named.group(2)
        if header.startswith("/") or ".." in header.split("/"):  # else it is looked for only under the directories
            raise Unfollowable(f"it can expand to {text[:80]!r}, which is not a relative header name")
        headers.append((named.group(1) is not None, header))
    return Built(tuple(dict.fromkeys(headers)), frozenset(names))


def _expand(tokens: tuple[Token, ...], dirs: tuple[str, ...], names: set[str], depth: int) -> list[tuple[str, ...]]:
    """Every token sequence `tokens` can become: each name expanded by each of its definitions, or left as it is."""
    if depth > MAX_DEPTH:
        raise Unfollowable(f"its macros nest more than {MAX_DEPTH} deep")
    if not tokens:
        return [()]
    (token, hidden), rest = tokens[0], tokens[1:]
    if not _IDENTIFIER.match(token) or token in hidden:
        return [(token, *tail) for tail in _expand(rest, dirs, names, depth)]
    names.add(token)
    results = [(token, *tail) for tail in _expand(rest, dirs, names, depth)]  # where it is not defined
    for params, body in _definitions(token, dirs):
        if _STRINGISE_OR_PASTE & set(body):
            raise Unfollowable(f"{token} quotes or pastes tokens (# or ##)")
        if params is not None and not all(_IDENTIFIER.match(p) for p in params):
            raise Unfollowable(f"{token} takes variable arguments")
        if params is None:
            marked = hidden | {token}
            results += _expand(tuple((b, marked) for b in body) + rest, dirs, names, depth + 1)
        elif (call := _arguments(rest)) is not None:
            arguments, closing, after = call
            marked = (hidden & closing) | {token}  # as C marks a call's expansion (Prosser's algorithm)
            if len(arguments) != len(params) and not (params == () and arguments == [()]):
                raise Unfollowable(f"{token} takes {len(params)} argument(s), given {len(arguments)}")
            for chosen in itertools.product(*(_expand(a, dirs, names, depth + 1) for a in arguments)):
                substituted = tuple(item for b in body for item in (
                    ((t, marked) for t in chosen[params.index(b)]) if b in params else ((b, marked),)))
                results += _expand(substituted + after, dirs, names, depth + 1)
        if len(results) > MAX_EXPANSIONS:
            raise Unfollowable(f"it expands more than {MAX_EXPANSIONS} ways")
    return results


def _arguments(tokens: tuple[Token, ...]) -> tuple[list[tuple[Token, ...]], frozenset[str], tuple[Token, ...]] | None:
    """A function-like macro's arguments, split at top-level commas, the macros its `)` came from, and the tokens
    after the `)`; None where no `(` follows (the name is then not a call, and stays as it is)."""
    if not tokens or tokens[0][0] != "(":
        return None
    arguments, current, depth = [], [], 0
    for i, item in enumerate(tokens[1:], start=1):
        token = item[0]
        if token == ")" and depth == 0:
            arguments.append(tuple(current))
            return arguments, item[1], tokens[i + 1:]
        if token == "," and depth == 0:
            arguments.append(tuple(current))
            current = []
            continue
        depth += {"(": 1, ")": -1}.get(token, 0)
        current.append(item)
    raise Unfollowable("a macro's arguments are not closed on the include's line")


def _definitions(name: str, dirs: tuple[str, ...]) -> list[tuple[tuple[str, ...] | None, tuple[str, ...]]]:
    """Every definition of `name` in the headers: (its parameters, or None for an object-like macro; its body)."""
    return [(params, body) for path in _defined_in(dirs).get(name, ())
            for defined, params, body in _defines(path) if defined == name]


@functools.lru_cache(maxsize=8)
def _defined_in(dirs: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Each macro name defined anywhere in `dirs`, and the files that define it (read once: about 0.3 s for
    the CUDA runtime's and CCCL's 2,400 headers)."""
    found: dict[str, set[str]] = {}
    for directory in dirs:
        for root, _, files in os.walk(directory):
            for file in files:
                path = os.path.join(root, file)
                try:
                    with open(path, encoding="utf-8", errors="replace") as handle:
                        text = handle.read()
                except OSError:
                    continue
                for match in _DEFINE_NAME.finditer(re.sub(r"\\\r?\n", "", text)):  # lines spliced
                    found.setdefault(match.group(1), set()).add(path)
    return {name: tuple(sorted(paths)) for name, paths in found.items()}


@functools.lru_cache(maxsize=512)
def _defines(path: str) -> tuple[tuple[str, tuple[str, ...] | None, tuple[str, ...]], ...]:
    with open(path, encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    found = []
    for line in logical_lines(text):
        match = _DEFINE.match(line)
        if match is None:
            continue
        name, params, body = match.groups()
        listed = None if params is None else tuple(p.strip() for p in params[1:-1].split(",") if p.strip())
        found.append((name, listed, tuple(_TOKEN.findall(body))))
    return tuple(found)
