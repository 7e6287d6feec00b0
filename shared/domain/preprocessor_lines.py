"""The lines a C preprocessor sees in a text: what the compile policy reads directives from, in a submitted
source and in the CUDA headers alike.

Where a comment or a literal starts depends on the language mode NVRTC compiles in: trigraphs (`??/` splices a
line, `??=` is `#`) are replaced before C++17 and not since, raw string literals exist from C++11, and digit
separators (`1'000`, where the `'` opens no character literal) from C++14. A source read in one mode and compiled
in another could hide a directive inside what one reading takes for a comment, so the policy checks a source in
every reading (`readings`).
"""
import functools
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Mode:
    trigraphs: bool = False
    raw_strings: bool = True
    digit_separators: bool = True


HEADERS = Mode()  # how the CUDA headers are read: C++17, NVRTC's default (they use no trigraphs)
MODES = tuple(Mode(t, r, d) for t in (False, True) for r in (False, True) for d in (False, True))
_RAW_PREFIX = re.compile(r"(?:u8|u|U|L)?R\Z")
_RAW_OPENING = re.compile(r'"([^()\\\s]{0,16})\(')


@functools.lru_cache(maxsize=32)
def readings(source: str) -> tuple[tuple[str, ...], ...]:
    """The source's logical lines in every language mode, each distinct reading once."""
    return tuple(dict.fromkeys(tuple(logical_lines(source, mode)) for mode in MODES))


def logical_lines(source: str, mode: Mode = HEADERS) -> list[str]:
    """The lines the preprocessor sees in `mode`: trigraphs replaced where the mode has them, backslash-newlines
    spliced, each comment replaced by one space (a block comment may hide the `#` of a directive or span lines
    inside one); string and character literals, identifiers and numbers kept as they are."""
    if mode.trigraphs:
        source = source.replace("??=", "#").replace("??/", "\\")  # trigraphs first, as C does
    text = re.sub(r"\\\r?\n", "", source)
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            out.append(" ")
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            out.append(" ")
        elif c in "\"'":
            end = _literal_end(text, i)
            out.append(text[i:end])
            i = end
        elif _starts_identifier(c):
            end = _identifier_end(text, i)
            if mode.raw_strings and text.startswith('"', end) and _RAW_PREFIX.match(text, i, end):
                end = _raw_literal_end(text, end)
            out.append(text[i:end])
            i = end
        elif c.isdigit() or (c == "." and text[i + 1:i + 2].isdigit()):
            end = _number_end(text, i, mode)
            out.append(text[i:end])
            i = end
        else:
            out.append(c)
            i += 1
    return "".join(out).split("\n")


def _starts_identifier(c: str) -> bool:
    return c.isalpha() or c in "_$" or ord(c) > 127


def _identifier_end(text: str, start: int) -> int:
    i = start + 1
    while i < len(text) and (_starts_identifier(text[i]) or text[i].isdigit()):
        i += 1
    return i


def _number_end(text: str, start: int, mode: Mode) -> int:
    """The end of a preprocessing number: digits, letters, `_`, `.`, an exponent's sign, and in C++14 `'` before a
    digit or letter (a digit separator), so `1.R"` and `1'0` hold no literal."""
    i = start + 1
    while i < len(text):
        c = text[i]
        if c in "+-" and text[i - 1] in "eEpP":
            i += 1
        elif c == "'" and mode.digit_separators and i + 1 < len(text) and (_starts_identifier(text[i + 1])
                                                                            or text[i + 1].isdigit()):
            i += 2
        elif _starts_identifier(c) or c.isdigit() or c == ".":
            i += 1
        else:
            break
    return i


def _literal_end(text: str, start: int) -> int:
    quote, i = text[start], start + 1
    while i < len(text) and text[i] not in (quote, "\n"):
        i += 2 if text[i] == "\\" else 1
    return min(i + 1, len(text))


def _raw_literal_end(text: str, quote: int) -> int:
    """The end of a raw string literal whose `"` is at `quote`; where no `delimiter(` follows, just past the
    quote (an ordinary string then, as a compiler would reject it)."""
    match = _RAW_OPENING.match(text, quote)
    if match is None:
        return _literal_end(text, quote)
    end = text.find(")" + match.group(1) + '"', match.end())
    return len(text) if end < 0 else end + len(match.group(1)) + 2
