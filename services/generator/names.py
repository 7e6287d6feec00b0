"""Make a rewrite's tunable parameters and its code agree.

Rewrites (an LLM's especially) drift: the code reads BLOCK_SIZE_X while the parameters say block_size_x,
a parameter is declared but never used, or the code #defines the very parameter it should receive. Each
drift either breaks the compile or, worse, tunes nothing. Parameters are -D defines, so the code must use
them by exactly their names and must not define them itself.
"""
import re
from dataclasses import dataclass, field

from shared.domain.spec import ParamValue

IDENTIFIER = re.compile(r"\b[A-Za-z_]\w*\b")
COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


@dataclass(frozen=True)
class Reconciled:
    source: str
    tune_params: dict[str, list[ParamValue]]
    renames: dict[str, str] = field(default_factory=dict)  # old name -> new name (in the code or the parameters)
    dropped: tuple[str, ...] = ()  # parameters the code never reads
    guarded: tuple[str, ...] = ()  # the code's own #defines of a parameter, now only fallbacks


def _normal(name: str) -> str:
    return name.replace("_", "").lower()


def reconcile(source: str, tune_params: dict[str, list[ParamValue]], launch_names: list[str],
              launch_reads: set[str] = frozenset()) -> Reconciled:
    """`launch_names` (block_size_x ...) set the launch geometry, so the code is renamed to them; any
    other parameter is renamed to what the code calls it. A parameter is dropped only when neither the code
    nor the launch reads it: the launch reads the block size names and `launch_reads` (the names in the grid
    divisors, the problem size and smem_args), whether or not the code does (a kernel may use blockDim instead)."""
    code_names = set(IDENTIFIER.findall(COMMENT.sub(" ", source)))
    read_by_launch = set(launch_names) | set(launch_reads)
    params, renames, dropped = {}, {}, []
    for name, values in tune_params.items():
        if name in code_names:
            params[name] = values
            continue
        similar = sorted(n for n in code_names if _normal(n) == _normal(name))
        if not similar and name in read_by_launch:
            params[name] = values
        elif not similar:
            dropped.append(name)
        elif name in launch_names:
            source = re.sub(rf"\b{similar[0]}\b", name, source)
            renames[similar[0]] = name
            params[name] = values
        else:
            renames[name] = similar[0]
            params[similar[0]] = values
    source, guarded = _guard_defines(source, list(params))
    return Reconciled(source=source, tune_params=params, renames=renames, dropped=tuple(dropped), guarded=guarded)


def _guard_defines(source: str, names: list[str]) -> tuple[str, tuple[str, ...]]:
    """`#define p 256` in the code would silently override -Dp=...: keep it only as the fallback."""
    guarded = []
    for name in names:
        define = re.compile(rf"^([ \t]*)#[ \t]*define[ \t]+{name}\b[^\n]*$", re.MULTILINE)
        match = define.search(source)
        if match and not re.search(rf"#[ \t]*ifndef[ \t]+{name}\b", source[:match.start()]):
            source = define.sub(lambda m: f"{m.group(1)}#ifndef {name}\n{m.group(0)}\n{m.group(1)}#endif", source, 1)
            guarded.append(name)
    return source, tuple(guarded)
