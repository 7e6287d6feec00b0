"""Index arithmetic as polynomials, to tell how a subscript moves with the thread's indices.

`(size_t)r * cols + c` becomes {(c,): 1, (cols, r): 1}: its stride along c is 1 (coalesced when c follows
threadIdx.x), its stride along r is `cols`. Casts to integer types are looked through; locals can be
substituted by their definitions (`int i = y * nx + x;` makes in[i + nx] {(x,): 1, (nx, y): 1, (nx,): 1}).
What is not a sum of products (a division, a call, a load) becomes one opaque atom, `?(text)`, that keeps the
names it holds, so a stride along a variable inside one is unknown rather than wrong.
"""
import math
import re
from dataclasses import dataclass

Term = tuple[str, ...]  # sorted atom names; () is the constant term
Poly = dict[Term, int]

_TYPE_WORDS = {"int", "unsigned", "signed", "long", "short", "char", "size_t", "ptrdiff_t", "int64_t", "uint64_t",
               "int32_t", "uint32_t", "const", "__int64", "uint", "ulong", "std", "::"}
_TOKEN = re.compile(r"\s*(?:(?P<number>0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][-+]?\d+)?)(?P<suffix>[uUlLfF]*)"
                    r"|(?P<name>[A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)*)|(?P<op><<|>>|::|[-+*/%()\[\]<>,&|^~!?:.]))")


class NotAffine(ValueError):
    """The text is not an integer expression these polynomials can hold."""


@dataclass(frozen=True)
class _Token:
    kind: str  # number | name | op
    text: str


def parse(text: str, known: dict[str, Poly] | None = None) -> Poly:
    """The polynomial of an integer expression; names in `known` are replaced by their polynomials."""
    tokens = _tokens(text)
    parser = _Parser(tokens, known or {})
    poly = parser.expression()
    if parser.at != len(tokens):
        raise NotAffine(f"unexpected {tokens[parser.at].text!r} in {text!r}")
    return poly


def reading_only(text: str, known: dict[str, Poly], allowed: set[str]) -> Poly | None:
    """The polynomial of `text` (names in `known` replaced by theirs) when it depends on `allowed` names alone
    (a local of the launch geometry: `allowed` the threadIdx, blockIdx, blockDim names); else None."""
    try:
        poly = parse(text, known)
    except NotAffine:
        return None
    return poly if names(poly) <= allowed else None


def names(poly: Poly) -> set[str]:
    """Every name the polynomial depends on, those inside opaque atoms included."""
    found = set()
    for term in poly:
        for atom in term:
            found |= _atom_names(atom)
    return found


def stride(poly: Poly, variable: str) -> Poly | None:
    """d poly / d variable, when the variable appears at most linearly and outside opaque atoms; else None."""
    result: Poly = {}
    for term, coefficient in poly.items():
        if variable not in term:
            if any(variable in _atom_names(atom) for atom in term if atom.startswith("?")):
                return None
            continue
        rest = list(term)
        rest.remove(variable)
        if variable in rest or any(variable in _atom_names(atom) for atom in rest if atom.startswith("?")):
            return None
        key = tuple(rest)
        result[key] = result.get(key, 0) + coefficient
    return {k: v for k, v in result.items() if v}


def without(poly: Poly, variables: set[str]) -> Poly:
    """The terms that involve none of `variables`."""
    return {term: c for term, c in poly.items() if not any(names({(a,): 1}) & variables for a in term)}


def value(poly: Poly | None, values: dict[str, float]) -> float | None:
    """The polynomial's value with `values` for its names; None where one is not known."""
    if poly is None or any(name not in values for term in poly for name in term):
        return None
    return sum(coefficient * math.prod(values[name] for name in term) for term, coefficient in poly.items())


def quotient(poly: Poly, divisor: Poly) -> Poly | None:
    """poly / divisor where the divisor is one term (an integer times names) that divides every term of poly
    exactly; else None."""
    if len(divisor) != 1 or any(atom.startswith("?") for atom in next(iter(divisor))):
        return None
    (names_, coefficient), = divisor.items()
    result: Poly = {}
    for term, c in poly.items():
        rest = list(term)
        for name in names_:
            if name not in rest:
                return None
            rest.remove(name)
        if c % coefficient:
            return None
        result[tuple(rest)] = c // coefficient
    return result


def substitute(poly: Poly, name: str, value: Poly) -> Poly | None:
    """poly with `value` for the name; None where the name stands inside an opaque atom."""
    result: Poly = {}
    for term, c in poly.items():
        if any(name in _atom_names(atom) for atom in term if atom.startswith("?")):
            return None
        rest = [atom for atom in term if atom != name]
        replaced = {tuple(rest): c}
        for _ in range(len(term) - len(rest)):
            replaced = product(replaced, value)
        result = add(result, replaced)
    return result


def spelled(poly: Poly) -> str:
    """The polynomial as C arithmetic in 64 bits (the source's own may be narrower; an index that fits its array
    is the same in both); "" where it holds an opaque atom."""
    terms = []
    for term, coefficient in sorted(poly.items()):
        if any(atom.startswith("?") for atom in term):
            return ""
        factors = [*([] if coefficient == 1 and term else [f"{coefficient}LL"]), *(f"(long long){n}" for n in term)]
        terms.append(" * ".join(factors))
    return " + ".join(terms).replace("+ -", "- ") or "0"


def minus(a: Poly, b: Poly) -> Poly:
    return add(a, {term: -c for term, c in b.items()})


def is_unit(poly: Poly | None) -> bool:
    return poly == {(): 1}


def is_constant(poly: Poly) -> bool:
    return all(term == () for term in poly)


def _atom_names(atom: str) -> set[str]:
    if atom.startswith("?"):
        return set(re.findall(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", atom[1:]))
    return {atom}


def _tokens(text: str) -> list[_Token]:
    tokens, at = [], 0
    text = text.strip()
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None or match.end() == at:
            raise NotAffine(f"cannot read {text[at:]!r}")
        at = match.end()
        if match["number"]:
            if "." in match["number"] or "e" in match["number"].lower() or "f" in match["suffix"].lower():
                tokens.append(_Token("float", match["number"]))
            else:
                tokens.append(_Token("number", str(int(match["number"], 0))))
        elif match["name"]:
            tokens.append(_Token("name", re.sub(r"\s+", "", match["name"])))
        else:
            tokens.append(_Token("op", match["op"]))
    return tokens


class _Parser:
    def __init__(self, tokens: list[_Token], known: dict[str, Poly]):
        self.tokens, self.known, self.at = tokens, known, 0

    def peek(self, offset: int = 0) -> _Token | None:
        at = self.at + offset
        return self.tokens[at] if at < len(self.tokens) else None

    def take(self, text: str | None = None) -> _Token:
        token = self.peek()
        if token is None or (text is not None and token.text != text):
            raise NotAffine(f"expected {text or 'more'}")
        self.at += 1
        return token

    def expression(self) -> Poly:
        start = self.at
        poly = self.term()
        while (token := self.peek()) and token.text in "+-" and token.kind == "op":
            self.take()
            right = self.term()
            poly = add(poly, right if token.text == "+" else {t: -c for t, c in right.items()})
        if (token := self.peek()) and token.kind == "op" and token.text in ("<<", ">>", "&", "|", "^", "?", "<", ">"):
            return self._opaque_from(start)
        return poly

    def term(self) -> Poly:
        start = self.at
        poly = self.unary()
        while (token := self.peek()) and token.kind == "op" and token.text in "*/%":
            self.take()
            right = self.unary()
            if token.text == "*":
                poly = product(poly, right)
            elif is_constant(poly) and is_constant(right) and right.get((), 0):
                a, b = poly.get((), 0), right[()]
                value = abs(a) // abs(b) * (1 if (a >= 0) == (b > 0) else -1) if token.text == "/" else \
                    a - b * (abs(a) // abs(b) * (1 if (a >= 0) == (b > 0) else -1))
                poly = {(): value} if value else {}
            else:
                poly = self._opaque(start, self.at)
        return poly

    def unary(self) -> Poly:
        token = self.peek()
        if token is None:
            raise NotAffine("the expression ends early")
        if token.kind == "op" and token.text in "+-":
            self.take()
            inner = self.unary()
            return inner if token.text == "+" else {t: -c for t, c in inner.items()}
        if token.kind == "op" and token.text == "(" and self._is_cast():
            while self.take().text != ")":
                pass
            return self.unary()
        if token.kind == "name" and token.text in ("static_cast", "reinterpret_cast") and self.peek(1) \
                and self.peek(1).text == "<":
            self.take()
            self.take("<")
            while self.take().text != ">":
                pass
            return self.unary()
        return self.primary()

    def primary(self) -> Poly:
        start = self.at
        token = self.take()
        if token.kind == "number":
            value = int(token.text)
            return {(): value} if value else {}
        if token.kind == "float":
            raise NotAffine(f"{token.text} is not an integer")
        if token.kind == "op" and token.text == "(":
            poly = self.expression()
            self.take(")")
            return poly
        if token.kind == "name":
            following = self.peek()
            if following and following.text in ("(", "["):
                self._skip_group()
                while (following := self.peek()) and following.text == "[":
                    self._skip_group()
                return self._opaque(start, self.at)
            if token.text in self.known:
                return dict(self.known[token.text])
            return {(token.text,): 1}
        raise NotAffine(f"unexpected {token.text!r}")

    def _is_cast(self) -> bool:
        words, at = [], self.at + 1
        while at < len(self.tokens) and self.tokens[at].text != ")":
            words.append(self.tokens[at].text)
            at += 1
        return bool(words) and all(word in _TYPE_WORDS for word in words)

    def _skip_group(self) -> None:
        opening = self.take().text
        closing_ = {"(": ")", "[": "]"}[opening]
        depth = 1
        while depth:
            text = self.take().text
            depth += text == opening
            depth -= text == closing_

    def _opaque_from(self, start: int) -> Poly:
        depth = 0
        while (token := self.peek()) is not None:
            if token.text in "([":
                depth += 1
            elif token.text in ")]":
                if depth == 0:
                    break
                depth -= 1
            elif token.text == "," and depth == 0:
                break
            self.take()
        return self._opaque(start, self.at)

    def _opaque(self, start: int, end: int) -> Poly:
        return {("?" + " ".join(t.text for t in self.tokens[start:end]),): 1}


def add(a: Poly, b: Poly) -> Poly:
    result = dict(a)
    for term, coefficient in b.items():
        result[term] = result.get(term, 0) + coefficient
    return {t: c for t, c in result.items() if c}


def product(a: Poly, b: Poly) -> Poly:
    result: Poly = {}
    for ta, ca in a.items():
        for tb, cb in b.items():
            term = tuple(sorted(ta + tb))
            result[term] = result.get(term, 0) + ca * cb
    return {t: c for t, c in result.items() if c}
