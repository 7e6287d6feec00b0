"""The lines a C preprocessor sees in a text: what the compile policy reads directives from, in a submitted
source and in the CUDA headers alike.

Where a comment or a literal starts depends on the language mode NVRTC compiles in: trigraphs (`??/` splices a
line, `??'` is `^`, `??=` is `#`) are replaced before C++17 and not since, raw string literals exist from C++11
(and undo the trigraphs and line splices inside them), and digit separators (`1'000`, where the `'` opens no
character literal) from C++14. A source read in one mode and compiled in another could hide a directive inside
what one reading takes for a comment, so the policy reads a source in the mode of its --std (`modes_for`), and
where the options are not known, in every mode (`readings`).

What no reading can settle is refused (`Unreadable`): a raw string literal whose delimiter NVRTC rejects, and,
outside comments and literals, a `$`, a non-ASCII character or a backslash. NVRTC rejects or splits such
characters in ways that decide whether an `R"` that follows opens a raw string; no kernel needs them there.
"""
import bisect
import functools
import re
from dataclasses import dataclass


class Unreadable(ValueError):
    """The source holds something whose reading by NVRTC the policy cannot settle; the message says what."""


@dataclass(frozen=True)
class Mode:
    trigraphs: bool = False
    raw_strings: bool = True
    digit_separators: bool = True


HEADERS = Mode()  # how the CUDA headers are read: C++17, NVRTC's default (they use no trigraphs)
MODES = tuple(Mode(t, r, d) for t in (False, True) for r in (False, True) for d in (False, True))
_STANDARDS = {"03": Mode(True, False, False), "11": Mode(True, True, False), "14": Mode(True, True, True),
              "17": Mode(False, True, True), "20": Mode(False, True, True)}
_STD_OPTION = re.compile(r"-{1,2}std=c\+\+(\d\d)\Z")
TRIGRAPHS = {"=": "#", "/": "\\", "'": "^", "(": "[", ")": "]", "!": "|", "<": "{", ">": "}", "-": "~"}
_RAW_PREFIX = re.compile(r"(?:u8|u|U|L)?R\Z")
_RAW_OPENING = re.compile(r'"([^()\\\s]{0,16})\(')


def modes_for(options: list[str] | None) -> tuple[Mode, ...]:
    """The language modes a source compiled with `options` is read in: its --std's (NVRTC's default, C++17,
    without one), or every mode when the options are not known (None)."""
    if options is None:
        return MODES
    chosen = [match.group(1) for option in options if (match := _STD_OPTION.match(option))]
    return (_STANDARDS.get(chosen[-1] if chosen else "17", HEADERS),)


@functools.lru_cache(maxsize=32)
def readings(source: str, modes: tuple[Mode, ...] = MODES) -> tuple[tuple[str, ...], ...]:
    """The source's logical lines in each of `modes`, each distinct reading once. Unreadable as above."""
    return tuple(dict.fromkeys(tuple(logical_lines(source, mode, strict=True)) for mode in modes))


def logical_lines(source: str, mode: Mode = HEADERS, strict: bool = False) -> list[str]:
    """The lines the preprocessor sees in `mode`: trigraphs replaced where the mode has them, backslash-newlines
    spliced, each comment replaced by one space (a block comment may hide the `#` of a directive or span lines
    inside one); string and character literals, identifiers and numbers kept as they are, a raw string's lines
    blanked. `strict` (a submitted source): Unreadable for what no reading settles."""
    text, origins = _translated(source, mode.trigraphs)
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
        elif c.isascii() and (c.isalpha() or c == "_"):
            end = _identifier_end(text, i)
            if mode.raw_strings and text.startswith('"', end) and _RAW_PREFIX.match(text, i, end):
                raw_end = _raw_literal_end(source, text, origins, end, strict)
                out.append(text[i:end + 1] + re.sub(r"[^\n]", " ", text[end + 1:raw_end - 1]) + text[raw_end - 1])
                end = raw_end
            else:
                out.append(text[i:end])
            i = end
        elif c.isdigit() or (c == "." and text[i + 1:i + 2].isdigit()):
            end = _number_end(text, i, mode)
            out.append(text[i:end])
            i = end
        else:
            if strict and (c in "$\\" or not c.isascii()):
                raise Unreadable(f"line {text.count(chr(10), 0, i) + 1}: {c!r} outside a comment or a literal, where "
                                 "NVRTC's reading of what follows cannot be told: write names and code in ASCII")
            out.append(c)
            i += 1
    return "".join(out).split("\n")


def _translated(source: str, trigraphs: bool) -> tuple[str, list[int]]:
    """The source after trigraph replacement (where the mode has it) and line splicing, and for each of its
    characters the index in `source` it came from."""
    if "\\" not in source and not (trigraphs and "??" in source):
        return source, list(range(len(source)))
    chars, origins, i, n = [], [], 0, len(source)
    while i < n:
        if trigraphs and source.startswith("??", i) and i + 2 < n and source[i + 2] in TRIGRAPHS:
            c, width = TRIGRAPHS[source[i + 2]], 3
        else:
            c, width = source[i], 1
        if c == "\\" and (splice := re.match(r"\r?\n", source[i + width:i + width + 2])):
            i += width + splice.end()
            continue
        chars.append(c)
        origins.append(i)
        i += width
    return "".join(chars), origins


def _identifier_end(text: str, start: int) -> int:
    i = start + 1
    while i < len(text) and text[i].isascii() and (text[i].isalnum() or text[i] == "_"):
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
        elif c == "'" and mode.digit_separators and i + 1 < len(text) and text[i + 1].isascii() and (
                text[i + 1].isalnum() or text[i + 1] == "_"):
            i += 2
        elif c.isascii() and (c.isalnum() or c in "_."):
            i += 1
        else:
            break
    return i


def _literal_end(text: str, start: int) -> int:
    quote, i = text[start], start + 1
    while i < len(text) and text[i] not in (quote, "\n"):
        i += 2 if text[i] == "\\" else 1
    return min(i + 1, len(text))


def _raw_literal_end(source: str, text: str, origins: list[int], quote: int, strict: bool) -> int:
    """The end, in `text`, of the raw string literal whose `"` is at text[quote]. It is read in `source` itself:
    C++ undoes the trigraphs and line splices inside a raw string. A delimiter NVRTC rejects (a space, a
    backslash, more than 16 characters) is Unreadable in a submitted source: NVRTC still reads a raw string there,
    where a reader might not."""
    start = origins[quote]
    opening = _RAW_OPENING.match(source, start)
    if opening is None:
        if strict:
            raise Unreadable(f"line {text.count(chr(10), 0, quote) + 1}: a raw string literal whose delimiter NVRTC "
                             "rejects: a delimiter is at most 16 characters, none of them a space, a backslash or "
                             "a parenthesis")
        return _literal_end(text, quote)
    close = source.find(")" + opening.group(1) + '"', opening.end())
    end = len(source) if close < 0 else close + len(opening.group(1)) + 2
    return bisect.bisect_left(origins, end)
