"""The lines a C preprocessor sees in a text: what the compile policy reads directives from, in a submitted
source and in the CUDA headers alike."""
import re


def logical_lines(source: str) -> list[str]:
    """The lines the preprocessor sees: trigraphs replaced, backslash-newlines spliced, each comment replaced
    by one space (a block comment may hide the `#` of a directive or span lines inside one); string and
    character literals kept as they are."""
    text = re.sub(r"\\\r?\n", "", source.replace("??=", "#").replace("??/", "\\"))  # trigraphs first, as C does
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
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = _raw_literal_end(text, i)
            out.append(text[i:end])
            i = end
        else:
            out.append(c)
            i += 1
    return "".join(out).split("\n")


def _literal_end(text: str, start: int) -> int:
    quote, i = text[start], start + 1
    while i < len(text) and text[i] not in (quote, "\n"):
        i += 2 if text[i] == "\\" else 1
    return min(i + 1, len(text))


def _raw_literal_end(text: str, start: int) -> int:
    match = re.compile(r'R"([^()\\\s]{0,16})\(').match(text, start)
    if match is None:
        return start + 1
    end = text.find(")" + match.group(1) + '"', match.end())
    return len(text) if end < 0 else end + len(match.group(1)) + 2
