"""What a submitted source and its compiler options may ask of NVRTC. Checked where a spec arrives and again
before every compile, since candidates arrive later, from a model that a submitted kernel can talk to.

NVRTC reads any file an include names, and some options read or write files, so a stranger's kernel could
quote `/proc/self/environ` into its compile log or overwrite the event store. So:
- an include names a header by a plain relative path (`<cuda_fp16.h>`, "cuda/std/cstdint"): never an
  absolute path, `..`, or a macro. The compile runs in an empty working directory, and NVRTC searches only
  the CUDA headers kforge ships (`Headers`: those of the nvidia-cuda-runtime and nvidia-cuda-cccl
  packages, then kforge's own C_HEADERS, which the compiler passes to NVRTC itself), so such a name can only
  reach those;
- an angle include must name a header there that is safe to include, with every header it reaches however
  deep. A header that names a file by a macro (thrust's do, on CUB's BlockLoad's path) is followed through the
  headers' own definitions of every name the macro passes through (built_includes.py), and the source, its -D
  and -U options and its tune parameters may then define none of those names: else they could aim it anywhere;
- directives that open files by other means (`#include_next`, `#import`, `#embed`, `__has_include` of a
  non-literal) are refused;
- compiler options come from an allowlist of options that change code generation only.
"""
import functools
import os
import re
from dataclasses import dataclass

from shared.domain.built_includes import Unfollowable, built_headers
from shared.domain.directive_scan import HEADER_NAME, Overlong, basic_ucn, directives, has_include_uses
from shared.domain.preprocessor_lines import Unreadable, logical_lines, modes_for, readings

MAX_OPTION_CHARS = 200


class PolicyViolation(ValueError):
    """A source or option NVRTC must not see; the message names the line or option and what to do."""


# --- the source ---------------------------------------------------------------------------------------
_SAFE_HEADER = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9_.+/-]*")
_INCLUDE_OPERAND = re.compile(r'\s*(?:<([^<>"\n]*)>|"([^"\n]*)")\s*\Z')
_DIRECTIVE = re.compile(r"\s*(?:#|%:)\s*([A-Za-z_]\w*)?(.*)\Z", re.S)
_HAS_INCLUDE = re.compile(r"__has_include(?:_next)?\b")
# `#ifdef __has_include` and `defined(__has_include)` ask only whether the operator exists, and open nothing
# (CCCL's headers ask it; some versions' do it on the path from cuda_bf16.h).
_HAS_INCLUDE_TESTED = re.compile(r"\bdefined\s*\(\s*__has_include(?:_next)?\s*\)|\bdefined\s+__has_include(?:_next)?\b"
                                 r"|^\s*(?:#|%:)\s*(?:ifn?def|elifn?def)\s+__has_include(?:_next)?\b")
_HAS_INCLUDE_LITERAL = re.compile(r'__has_include\s*\(\s*(?:<([^<>"\n]*)>|"([^"\n]*)")\s*\)')
_DIRECTIVES = {"define", "undef", "if", "ifdef", "ifndef", "elif", "elifdef", "elifndef", "else", "endif",
               "pragma", "error", "warning", "line", "include"}
_PASTE = re.compile(r"##|%:%:")
_PROBING = re.compile(r"##|%:%:|__has_include")
# What an #if may call: the preprocessor's own operators (__has_include is held to a literal header apart).
_CALL = re.compile(r"([A-Za-z_]\w*)(?:\s|/\*.{0,256}?\*/)*\(", re.S)
_OPERATORS = {"defined", "__has_include", "__has_include_next", "__has_builtin", "__has_attribute",
              "__has_cpp_attribute", "__has_feature", "__has_extension", "__has_warning"}
_MACRO_DEFINED = re.compile(r"\s*(?:#|%:)\s*(define|undef)\s+([A-Za-z_]\w*)")
_MACRO_OPTION = re.compile(r"(?:-D|--define-macro=|-U|--undefine-macro=)([A-Za-z_]\w*)")


def check_source(source: str, headers: "Headers | None" = None, options: list[str] | None = None) -> str:
    """The source unchanged, or PolicyViolation for the first directive that could open a file it may not, read in
    the language mode of the --std in `options` (in every mode when they are not given: preprocessor_lines), and
    found anywhere in its text, whatever hides it (directive_scan). `headers`: what NVRTC will search, by default
    the CUDA headers kforge ships (`vetted_headers()`)."""
    if "\x00" in source:
        raise PolicyViolation("source: contains a NUL character; send plain CUDA C++ text")
    if re.search(r"\r(?!\n)", source):  # NVRTC splices a backslash, carriage returns and a newline
        raise PolicyViolation("source: a carriage return not followed by a newline; end lines with \\n or \\r\\n")
    headers = headers if headers is not None else vetted_headers()
    lines_read = _readings(source, options)
    for lines in lines_read:
        for number, line in enumerate(lines, start=1):
            directive = _DIRECTIVE.match(line)
            if directive is not None:
                _check_directive(number, directive.group(1), directive.group(2), headers)
            if _HAS_INCLUDE.search(line):
                _check_has_include(number, line)
    found = _check_text(source, headers)
    _check_pastes_in_conditions(found)
    built_from = _built_from(lines_read, found, headers)
    for lines in lines_read:
        for number, line in enumerate(lines, start=1):
            if (defined := _MACRO_DEFINED.match(line)) and defined.group(2) in built_from:
                raise PolicyViolation(f"source line {number}: #{defined.group(1)} {defined.group(2)}: "
                                      f"{_keep(defined.group(2), built_from)}")
    for directive in found:
        if directive.kind in ("define", "undef") and (name := _first_name(directive.rest)) in built_from:
            raise PolicyViolation(f"source: {directive.text!r}: {_keep(name, built_from)}")
    return source


def check_macro_names(source: str, macros: dict[str, str], headers: "Headers | None" = None,
                      options: list[str] | None = None, values: dict[str, str] | None = None) -> None:
    """PolicyViolation when a macro defined from outside the source (`macros`: each name, and what defines it: a
    -D or -U option, a tune parameter) is one that a header the source includes builds an include's path from;
    or when one's value (`values`, by name) names a macro of the source's that pastes tokens, which an #if could
    then expand into __has_include."""
    headers = headers if headers is not None else vetted_headers()
    found = _scanned(source)
    built_from = _built_from(_readings(source, options), found, headers)
    for name, where in macros.items():
        if name in built_from:
            raise PolicyViolation(f"{where}: {_keep(name, built_from)}")
    probing = _probing_macros(found)
    for name, value in (values or {}).items():
        if used := _calls(value) or sorted(probing & set(re.findall(r"[A-Za-z_]\w*", value))):
            raise PolicyViolation(f"{macros.get(name, name)}: its value expands {used[0]}, a macro that calls another "
                                  "or pastes tokens (##), which an #if could expand into __has_include: give it a "
                                  "plain value")


def _readings(source: str, options: list[str] | None) -> tuple[tuple[str, ...], ...]:
    try:
        return readings(source, modes_for(options))
    except Unreadable as exc:
        raise PolicyViolation(f"source {exc}") from None


def _check_text(source: str, headers: "Headers") -> tuple:
    """The directives found anywhere in the text (directive_scan), each held to what safety needs: an include
    names a plain relative header, vetted where the headers hold it; __has_include names one literally."""
    if ucn := basic_ucn(source):
        raise PolicyViolation(f"source: {ucn} spells a basic character as a universal character name, which could "
                              "spell a directive: write the character itself")
    found = _scanned(source)
    for directive in found:
        if directive.kind in ("include_next", "import", "embed"):
            raise PolicyViolation(f"source: {directive.text!r}: #{directive.kind} is not allowed, even where a "
                                  "comment or a literal seems to hold it")
        if directive.kind == "include":
            operand = HEADER_NAME.match(directive.rest)
            if operand is None:
                raise PolicyViolation(f"source: {directive.text!r} must name a header as <name.h> or \"name.h\" "
                                      "(a macro that expands to a path is not allowed)")
            header = operand.group(1) if operand.group(1) is not None else operand.group(2)
            _check_header(0, header)
            if any(os.path.isfile(os.path.join(d, header)) for d in headers.dirs) and (
                    refusal := headers.refusal(header, angled=operand.group(1) is not None)):
                raise PolicyViolation(f"source: {refusal}")
    for shown, header in has_include_uses(source):
        if header is None:
            raise PolicyViolation(f"source: {shown!r}: __has_include must name a header literally, as "
                                  "__has_include(<cuda_fp16.h>)")
        _check_header(0, header)
    return found


def _scanned(source: str) -> tuple:
    try:
        return directives(source)
    except Overlong as exc:
        raise PolicyViolation(f"source: {exc}") from None


def _first_name(text: str) -> str:
    match = re.match(r"\s*([A-Za-z_]\w*)", text)
    return match.group(1) if match else ""


def _probing_macros(found: tuple) -> set[str]:
    """The source's macros that could build __has_include in an #if: those that paste tokens (## or %:%:) or call
    a function-like macro (a CUDA header's may paste), and those that expand one, every definition counted."""
    bodies: dict[str, str] = {}
    for directive in found:
        if directive.kind == "define" and (name := _first_name(directive.rest)):
            body = directive.rest[directive.rest.index(name) + len(name):] + " " + directive.raw
            bodies[name] = bodies.get(name, "") + " " + body
    probing = {name for name, body in bodies.items() if _PASTE.search(body) or _calls(body)}
    while grown := {name for name, body in bodies.items() if name not in probing
                    and probing & set(re.findall(r"[A-Za-z_]\w*", body))}:
        probing |= grown
    return probing


def _calls(text: str) -> list[str]:
    """The function-like macros `text` calls (a name, blanks or block comments, then `(`), but the preprocessor's
    own operators (defined, __has_builtin, ...). Nothing is taken for a comment or a literal first, so none
    hides a call."""
    return [name for name in _CALL.findall(text) if name not in _OPERATORS]


def _check_pastes_in_conditions(found: tuple) -> None:
    """An #if that calls a function-like macro, or expands a macro of the source's that pastes tokens or calls one,
    could build __has_include (`a##b` of `__has_` and `include`), which would then probe a path no literal names:
    refused."""
    probing = _probing_macros(found)
    for directive in found:
        if directive.kind not in ("if", "elif"):
            continue
        said = directive.rest + "\n" + directive.raw
        if used := _calls(said) or sorted(probing & set(re.findall(r"[A-Za-z_]\w*", said))):
            raise PolicyViolation(f"source: {directive.text!r} expands {used[0]}, a macro that calls another or pastes "
                                  "tokens (##): an #if may do neither, since either can build __has_include and probe "
                                  "any path; test a plain macro instead")


def option_values(options: list[str]) -> dict[str, str]:
    """The values that -D options give their macros, by name."""
    return {match.group(1): option[match.end() + 1:] for option in options
            if (match := _MACRO_OPTION.match(option)) and option.startswith(("-D", "--define-macro="))}


def option_macros(options: list[str]) -> dict[str, str]:
    """The macros that -D and -U options define or undefine, each with the option."""
    return {match.group(1): f"compiler_options: {option[:80]!r}" for option in options
            if (match := _MACRO_OPTION.match(option))}


def _built_from(lines_read: tuple[tuple[str, ...], ...], found: tuple, headers: "Headers") -> dict[str, str]:
    """Each name from which a header the source includes (in any of its readings, or found anywhere in its text)
    builds an include's path by macros, and that header."""
    names: dict[str, str] = {}
    operands = [directive.group(2) for line in dict.fromkeys(line for lines in lines_read for line in lines)
                if (directive := _DIRECTIVE.match(line)) and directive.group(1) == "include"]
    operands += [directive.rest for directive in found if directive.kind == "include"]
    for text in dict.fromkeys(operands):
        operand = HEADER_NAME.match(text)
        if operand is not None:
            angled, quoted = operand.groups()
            header = angled if angled is not None else quoted
            for name in headers.built_from(header, angled is not None):
                names.setdefault(name, header)
    return names


def _keep(name: str, built_from: dict[str, str]) -> str:
    return (f"{built_from[name]} includes headers whose names its macros build from {name} (thrust's do), so a "
            f"kernel that includes it may not define or undefine {name}: rename the macro or the tune parameter")


def _check_directive(number: int, name: str | None, rest: str, headers: "Headers") -> None:
    if name is None:
        if rest.strip():
            raise PolicyViolation(f"source line {number}: {('#' + rest).strip()[:80]!r} is not a preprocessor "
                                  "directive NVRTC may run")
        return  # the null directive
    if name not in _DIRECTIVES:
        raise PolicyViolation(f"source line {number}: #{name} is not allowed; use #include with a CUDA header "
                              "such as <cuda_fp16.h>, or the usual #define/#if/#pragma")
    if name == "include":
        operand = _INCLUDE_OPERAND.match(rest)
        if operand is None:
            raise PolicyViolation(f"source line {number}: #include{rest[:60]} must name a header as <name.h> or "
                                  '"name.h" (a macro that expands to a path is not allowed)')
        angled, quoted = operand.groups()
        _check_header(number, angled if angled is not None else quoted)
        refusal = headers.refusal(angled if angled is not None else quoted, angled=angled is not None)
        if refusal:
            raise PolicyViolation(f"source line {number}: {refusal}")


def _check_has_include(number: int, line: str) -> None:
    line = _HAS_INCLUDE_TESTED.sub(" ", line)
    literal_uses = _HAS_INCLUDE_LITERAL.findall(line)
    if len(literal_uses) != len(_HAS_INCLUDE.findall(line)) or "__has_include_next" in line:
        raise PolicyViolation(f"source line {number}: __has_include must name a header literally, as "
                              "__has_include(<cuda_fp16.h>)")
    for angled, quoted in literal_uses:
        _check_header(number, angled or quoted)


def _check_header(number: int, header: str) -> None:
    parts = header.split("/")
    if not _SAFE_HEADER.fullmatch(header) or ".." in parts or "" in parts or "." in parts:
        raise PolicyViolation(f"source{f' line {number}' if number else ''}: the header {header!r} is not allowed: "
                              "include CUDA's own "
                              "headers by their plain names (e.g. <cuda_fp16.h>, <cuda/std/cstdint>); absolute "
                              "paths, '..' and host files cannot be included")


# --- the headers ----------------------------------------------------------------------------------------
AVAILABLE = ("the CUDA runtime's (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h, cooperative_groups.h, mma.h, "
             "cuda_pipeline.h, vector_types.h, ...), CCCL's (cuda/std/..., cuda/..., nv/target, cub/...) and the C "
             "headers kernels include (math.h, cmath, float.h, cfloat, limits.h, climits, stdint.h, cstdint, "
             "stddef.h, cstddef, stdlib.h, cstdlib, string.h, cstring, stdio.h, cstdio, assert.h, cassert, and "
             "through CCCL limits, type_traits, utility, algorithm, array)")
# NVRTC has no C or C++ library headers. kforge's stand-ins for those kernels include
# (shared/adapters/device/c_headers) are searched after the CUDA headers: the C ones self-contained, so a CUDA
# header including one on a host-only branch reaches nothing more, the C++ ones CCCL's cuda/std headers with
# their names also in std; and IMPLICIT_HEADER, included before every kernel, gives what nvcc's implicit
# <cuda_runtime.h> brings in through the host's <math.h> and <cmath> (the infinities and NaN, std::sqrt and its
# kin), so a kernel written for nvcc compiles unchanged.
C_HEADERS = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", "adapters", "device", "c_headers"))
IMPLICIT_HEADER = "kforge_implicit.h"
_OPENS_FILES = {"include", "include_next", "import", "embed"}


@dataclass(frozen=True)
class Headers:
    """The directories NVRTC searches for a kernel's includes, in its order. kforge passes them to NVRTC itself
    (shared/adapters/device/compiler.py): a submitter's options can add none."""
    dirs: tuple[str, ...]

    def refusal(self, header: str, angled: bool) -> str:
        """'' when `header` (a plain relative name) may be included, else why not. An angle include must find
        its header here; a quoted one found nowhere here is left to NVRTC, which can then look for it only in
        the compile's empty working directory."""
        return _reach(self, header, angled).refusal

    def built_from(self, header: str, angled: bool) -> frozenset[str]:
        """The names from which a header this include reaches builds an include's path by macros."""
        return _reach(self, header, angled).built_from


@dataclass(frozen=True)
class Reach:
    refusal: str  # '' when every file an include can open is safe
    built_from: frozenset[str] = frozenset()  # names that then must keep the headers' definitions


# The packages whose headers kforge compiles with, and a file by which each one's include directory is found.
_SHIPPED_HEADERS = (("nvidia-cuda-runtime", "cudart", "cuda_runtime_api.h"),
                    ("nvidia-cuda-crt", "cudart", "crt/mma.h"),  # <mma.h>'s implementation, beside the runtime's
                    ("nvidia-cuda-cccl", "cccl", "cuda/std/version"))


@functools.cache
def vetted_headers() -> Headers:
    """The CUDA headers kforge ships: nvidia-cuda-runtime's include directory, then nvidia-cuda-cccl's, as this
    Python imports them (sys.path, so PYTHONPATH's too: the versions kforge requires), else where cuda.pathfinder
    finds them (a CUDA toolkit); then kforge's C_HEADERS."""
    from cuda.pathfinder import find_nvidia_header_directory

    found = (_installed_include(package, marker) or find_nvidia_header_directory(name)
             for package, name, marker in _SHIPPED_HEADERS)
    return Headers(tuple(dict.fromkeys([*(os.path.realpath(d) for d in found if d), C_HEADERS])))


def _installed_include(package: str, marker: str) -> str | None:
    """The directory of `package` that holds `marker`, for the first copy of the package on sys.path."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        files = distribution(package).files or []
    except PackageNotFoundError:
        return None
    for file in files:
        path = file.as_posix()
        if path.endswith("/" + marker) and os.path.isfile(located := file.locate()):
            return str(located.parents[marker.count("/")])
    return None


@functools.lru_cache(maxsize=4096)  # bounded: the names come from strangers
def _reach(headers: Headers, header: str, angled: bool) -> Reach:
    found = [os.path.join(d, header) for d in headers.dirs if os.path.isfile(os.path.join(d, header))]
    if not found and angled:
        if not headers.dirs:
            return Reach(f"<{header}> cannot be included: kforge found no CUDA headers on this machine (the "
                         "nvidia-cuda-runtime and nvidia-cuda-cccl packages)")
        return Reach(f"<{header}> is not among the CUDA headers kforge compiles with: {AVAILABLE}")
    built_from: frozenset[str] = frozenset()
    for path in found:
        reach = _unsafe_reach(path, headers.dirs)
        if reach.refusal:
            return Reach(f"{header} cannot be included: {reach.refusal}. Available are {AVAILABLE}, but none that "
                         "reaches one")
        built_from |= reach.built_from
    return Reach("", built_from)


def _unsafe_reach(start: str, dirs: tuple[str, ...]) -> Reach:
    """Every file NVRTC could open from `start` on must be a file in `dirs` that an include names literally, or
    by macros of the headers alone (built_includes.py); the reach says the first that is not, and the names those
    macros pass through. Over every branch of every #if and every directory NVRTC could search, so it holds
    whatever the source defines, bar those names."""
    seen, todo, built_from = set(), [start], set()
    while todo:
        opened = todo.pop()
        real = os.path.realpath(opened)
        if real in seen:
            continue
        seen.add(real)
        if not any(os.path.commonpath([real, d]) == d for d in dirs):
            return Reach(f"it reaches {opened}, outside the CUDA headers' directories")
        for how, name in _includes(real):
            if how == "!":
                return Reach(f"it reaches {_short(real, dirs)}, which has {name!r}: the source's own #defines could "
                             f"aim that at any file ({_who_does(name, real, dirs)})")
            if how == "=":
                try:
                    built = built_headers(name, dirs)
                except Unfollowable as why:
                    return Reach(f"it reaches {_short(real, dirs)}, which has '#include {name}': {why}")
                built_from |= built.names
                found = built.headers
            else:
                found = ((how == "<", name),)
            for angled, header in found:
                places = dirs if angled else (os.path.dirname(opened), os.path.dirname(real), *dirs)
                todo.extend(p for d in places if os.path.isfile(p := os.path.join(d, header)))
    return Reach("", frozenset(built_from))


@functools.cache
def _includes(path: str) -> tuple[tuple[str, str], ...]:
    """The header's includes as ('<' or '"', name), ('=', the operand) for an #include of a macro, and ('!', the
    directive) for one that opens a file by other means: #include_next, #import, #embed, or __has_include of a
    non-literal."""
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            text = file.read()
    except OSError:
        return ()
    found = []
    for line in logical_lines(text):
        directive = _DIRECTIVE.match(line)
        if directive is not None and directive.group(1) in _OPENS_FILES:
            operand = _INCLUDE_OPERAND.match(directive.group(2))
            if directive.group(1) == "include" and operand is None:
                found.append(("=", directive.group(2).strip()))
            elif directive.group(1) != "include":
                found.append(("!", f"#{directive.group(1)}{directive.group(2)}".strip()[:120]))
            else:
                found.append(("<", operand.group(1)) if operand.group(1) is not None else ('"', operand.group(2)))
        used = _HAS_INCLUDE_TESTED.sub(" ", line)
        if _HAS_INCLUDE.search(used) and len(_HAS_INCLUDE_LITERAL.findall(used)) != len(_HAS_INCLUDE.findall(used)):
            found.append(("!", line.strip()[:80]))
    return tuple(found)


# CCCL before 13.3 passes the names it asks __has_include about through this macro, and a macro's arguments are
# expanded first, so a source's #defines reach them; 13.3 writes __has_include itself.
_HAS_INCLUDE_THROUGH_MACRO = re.compile(r"(?:#|%:)\s*define\s+\w+\s*\(\s*(\w+)\s*\)\s*__has_include\s*\(\s*\1\s*\)")


def _who_does(line: str, path: str, dirs: tuple[str, ...]) -> str:
    if _HAS_INCLUDE_THROUGH_MACRO.match(line):
        found = path.removesuffix(_short(path, dirs)).rstrip(os.sep)
        return (f"CCCL before 13.3 does this, and this worker found that CCCL at {found}: install "
                "nvidia-cuda-cccl>=13.3, which kforge requires, where the worker runs")
    return "thrust's headers do this"


def _short(path: str, dirs: tuple[str, ...]) -> str:
    return min((os.path.relpath(path, d) for d in dirs if os.path.commonpath([path, d]) == d), key=len)


# --- the options ----------------------------------------------------------------------------------------
_IDENT = r"[A-Za-z_]\w*"
_BOOL = r"(?:true|false)"
_ALLOWED_OPTIONS = [re.compile(p + r"\Z") for p in (
    rf"(?:-D|--define-macro=){_IDENT}(?:=[^\n\r\x00]*)?",
    rf"(?:-U|--undefine-macro=){_IDENT}",
    r"-{1,2}std=c\+\+(?:03|11|14|17|20)",
    r"-{1,2}use_fast_math",
    rf"-{{1,2}}(?:ftz|prec-div|prec-sqrt|fmad)={_BOOL}",
    r"-{1,2}extra-device-vectorization",
    r"-lineinfo|--generate-line-info|-G|--device-debug",
    r"-{1,2}maxrregcount=\d{1,3}",
    r"-restrict|--restrict",
    r"-default-device|--device-as-default-execution-space",
    r"-w|--disable-warnings|-{1,2}Wreorder|-{1,2}Wno-deprecated-declarations",
    r"-{1,2}(?:diag-suppress|diag-error|diag-warn)=\d+(?:,\d+)*",
    r"-{1,2}(?:no-)?display-error-number",
    r"-{1,2}dopt=(?:on|off)|-{1,2}(?:rdc|relocatable-device-code)=false",
    r"-{1,2}minimal",
    r"-{1,2}(?:Ofast-compile)=(?:0|min|mid|max)",
    r"(?:-Xptxas=|--ptxas-options=)(?:-v|--verbose|-O[0-3]|--warn-on-spills|--warn-on-local-memory-usage"
    r"|-dlcm=(?:ca|cg|cs)|-dscm=(?:wb|cg|cs|wt)|--allow-expensive-optimizations=(?:true|false))",
)]


# nvcc options that kernels' build files carry, which NVRTC does not take, and what to do instead.
_NVCC_ONLY = ((re.compile(r"-{1,2}expt-relaxed-constexpr\Z"),
               "NVRTC does not take it, and lets device code call constexpr functions without it: remove it"),
              (re.compile(r"-{1,2}(?:expt-)?extended-lambda\Z"),
               "NVRTC compiles no host code, so a kernel has no host lambdas to pass: remove it"),
              (re.compile(r"-O[0-3s]?\Z"), "NVRTC optimises device code fully by default; to set ptxas's level, pass "
                                            "-Xptxas=-O3"),
              (re.compile(r"-Xcompiler\b|--compiler-options\b"), "NVRTC runs no host compiler: remove it"))


def check_options(options: list[str]) -> list[str]:
    """The options unchanged, or PolicyViolation naming the first that is not on the allowlist."""
    for option in options:
        hint = next((why for pattern, why in _NVCC_ONLY if pattern.match(option)), None)
        if hint:
            raise PolicyViolation(f"compiler_options: {option[:80]!r} is an nvcc option; {hint}")
        if len(option) > MAX_OPTION_CHARS or not any(p.match(option) for p in _ALLOWED_OPTIONS):
            raise PolicyViolation(
                f"compiler_options: {option[:80]!r} is not allowed. Options that read or write files (-I, "
                "--pre-include, --create-pch, --use-pch, --pch-dir, --time, --fdevice-time-trace, ...) and other "
                "unlisted ones are refused; allowed are -D/-U, --std=c++NN, --use_fast_math, --ftz/--prec-div/"
                "--prec-sqrt/--fmad=true|false, --extra-device-vectorization, -lineinfo, -G, --maxrregcount=N, "
                "--restrict, -default-device, warnings and diagnostics (-w, --diag-suppress=N), --dopt=on|off, "
                "--minimal, --Ofast-compile=LEVEL and -Xptxas=-v|-O3|--warn-on-spills|-dlcm=ca|cg|cs")
        if _MACRO_OPTION.match(option) and _PROBING.search(option):
            raise PolicyViolation(f"compiler_options: {option[:80]!r} pastes tokens (##) or names __has_include, "
                                  "which an #if would use to probe any path: define the plain value itself")
    return options


def check_define_value(name: str, value: object) -> None:
    """A tune parameter's value becomes `-Dname=value`: one line of text, with no NUL."""
    text = str(value)
    if any(c in text for c in "\n\r\x00") or len(text) > MAX_OPTION_CHARS or _PROBING.search(text):
        raise PolicyViolation(f"tune parameter {name}: the value {text[:40]!r} must be one short line of text "
                              "with no token pasting (##) and no __has_include: it becomes a -D define")
