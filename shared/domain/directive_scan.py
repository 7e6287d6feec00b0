"""Every place in a source's text where a directive that matters to the compile policy could stand, found without
deciding what is a comment or a literal.

The policy reads directives from logical lines (preprocessor_lines), and three reviews found ways to make that
reading disagree with NVRTC's, each hiding an `#include` in what one took for a comment. This scan is the
fail-closed half: it looks for `#include`, `#define`, `#if` and `__has_include` everywhere in the text, in
comments and literals too, as written, with its line splices undone, and with its trigraphs also replaced. What it
finds is held to what the policy needs for safety alone (a header name that cannot leave the headers'
directories, no macro-built `__has_include`); so a commented-out `#include <iostream>` still passes, while a
hidden `#include "/etc/passwd"` does not, however it is hidden.
"""
import bisect
import functools
import re
from dataclasses import dataclass

from shared.domain.preprocessor_lines import TRIGRAPHS

# What may stand between the parts of a __has_include use: blanks and short block comments. Bounded, so that no
# text makes the scan quadratic; a longer comment there leaves the use unread, and so refused.
_GAP = r"(?:[ \t\f\v]|/\*.{0,256}?\*/)*"
_KEYWORD = re.compile(r"(include_next|include|import|embed|define|undef|elifdef|elifndef|elif|ifdef|ifndef|if)\b")
_HASH = re.compile(r"#|%:")
_HAS_INCLUDE = re.compile(r"__has_include(?:_next)?\b")
_LITERAL_USE = re.compile(rf"{_GAP}\({_GAP}(?:<([^<>\"\n]*)>|\"([^\"\n]*)\"){_GAP}\)", re.S)
_TESTED = re.compile(rf"defined{_GAP}\(?{_GAP}\Z", re.S)
_ASKED = re.compile(rf"(?:#|%:){_GAP}(?:ifdef|ifndef|elifdef|elifndef){_GAP}\Z", re.S)
_CONDITION_LINE = re.compile(rf"(?:#|%:){_GAP}(?:if|elif|ifdef|ifndef|elifdef|elifndef)\b", re.S)
# A universal character name of a basic character (`\u0069` for i) would spell a directive no scan finds.
# A header name, and whatever follows it: NVRTC opens the header and only warns of the rest.
HEADER_NAME = re.compile(r'\s*(?:<([^<>"\n]*)>|"([^"\n]*)")')
_BASIC_UCN = re.compile(r"\\u00[0-7][0-9A-Fa-f]|\\U0000007[0-9A-Fa-f]|\\U000000[0-6][0-9A-Fa-f]")


MAX_LINES = 64  # lines that block comments may carry one directive over; more is refused, so the scan stays linear


class Overlong(ValueError):
    """A directive that block comments carry over more than MAX_LINES lines."""


@dataclass(frozen=True)
class Found:
    kind: str  # include, include_next, import, embed, define, undef, if, elif, ...
    rest: str  # the rest of its logical line, comments blanked
    text: str  # the directive as found, for messages
    raw: str = ""  # the rest as written, through every line a block comment opened on it may carry it to: what a
    # comment opener inside a literal ('//') would hide from `rest`


def variants(source: str) -> tuple[str, ...]:
    """The text as written, with its line splices undone, and with its trigraphs replaced first."""
    spliced = re.sub(r"\\\r?\n", "", source)
    trigraphs = re.sub(r"\?\?([=/'()!<>-])", lambda m: TRIGRAPHS[m.group(1)], source)
    return tuple(dict.fromkeys((source, spliced, re.sub(r"\\\r?\n", "", trigraphs))))


@functools.lru_cache(maxsize=32)
def directives(source: str) -> tuple[Found, ...]:
    """Every directive of the kinds above that any variant of the text holds anywhere. Overlong as above."""
    found = []
    for text in variants(source):
        closings = [match.start() for match in re.finditer(r"\*/", text)]
        for hash_ in _HASH.finditer(text):
            at = _past_gap(text, hash_.end(), closings)
            if (keyword := _KEYWORD.match(text, at)) is None:
                continue
            rest = _rest_of_line(text, keyword.end(), closings)
            found.append(Found(keyword.group(1), rest, re.sub(r"\s+", " ", f"#{keyword.group(1)}{rest}")[:100],
                               _raw_rest(text, keyword.end(), closings)))
    return tuple(found)


def _raw_rest(text: str, start: int, closings: list[int]) -> str:
    """From `start` to the end of its physical line, and on through the lines that any `/*` on it (in a literal or
    not) may continue the directive to, as written."""
    end = text.find("\n", start)
    end = len(text) if end < 0 else end
    while (opened := text.rfind("/*", start, end)) >= 0 and text.find("*/", opened + 2, end) < 0:
        close = _comment_end(opened, closings)
        if close is None or close <= end:
            break
        following = text.find("\n", close)
        end = len(text) if following < 0 else following
        _within_bound(text, start, end)
    return text[start:end]


def _within_bound(text: str, start: int, end: int) -> None:
    if text.count("\n", start, end) > MAX_LINES:
        raise Overlong(f"a directive is carried over more than {MAX_LINES} lines by block comments: end it on its "
                       "line")


def _past_gap(text: str, at: int, closings: list[int]) -> int:
    """Past the blanks and block comments (which may span lines) from `at`."""
    while at < len(text):
        if text[at] in " \t\f\v":
            at += 1
        elif text.startswith("/*", at) and (end := _comment_end(at, closings)) is not None:
            at = end
        else:
            break
    return at


def _comment_end(start: int, closings: list[int]) -> int | None:
    """Just past the `*/` that closes a block comment opened at `start`, or None where none does."""
    i = bisect.bisect_left(closings, start + 2)
    return closings[i] + 2 if i < len(closings) else None


def has_include_uses(source: str) -> list[tuple[str, str | None]]:
    """Every `__has_include` in any variant of the text: (what it is, the header it names literally), or (what it
    is, None) where it names none (a macro, a paste's part). Asking whether the operator exists, on an #if line, is
    no use."""
    uses = []
    for text in variants(source):
        for match in _HAS_INCLUDE.finditer(text):
            line_start = text.rfind("\n", 0, match.start()) + 1
            before = text[max(line_start, match.start() - 512):match.start()]
            if (_TESTED.search(before) and _CONDITION_LINE.match(before.lstrip())) or _ASKED.match(before.lstrip()):
                continue
            literal = _LITERAL_USE.match(text, match.end())
            shown = text[match.start():match.end() + 60].split("\n")[0]
            uses.append((shown, None if literal is None else literal.group(1) or literal.group(2)))
    return uses


def basic_ucn(source: str) -> str:
    """The first universal character name of a basic character in the source, or ''."""
    match = _BASIC_UCN.search(source)
    return match.group() if match else ""


def _rest_of_line(text: str, start: int, closings: list[int]) -> str:
    """From `start` to the end of the logical line: block comments (which may span lines) blanked, a line comment
    dropped."""
    out, i, n = [], start, len(text)
    while i < n and text[i] != "\n":
        if text.startswith("/*", i):
            end = _comment_end(i, closings)
            _within_bound(text, start, n if end is None else end)
            i = n if end is None else end
            out.append(" ")
        elif text.startswith("//", i):
            break
        else:
            out.append(text[i])
            i += 1
    return "".join(out)
