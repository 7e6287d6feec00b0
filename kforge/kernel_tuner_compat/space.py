"""Kernel Tuner's tune_params and restrictions, as kforge's spec takes them.

kforge runs restrictions through its bounded evaluator, which takes comparisons of arithmetic joined by and,
or, not. A Kernel Tuner restriction in that form goes into the spec as it is. Any other restriction (a
callable taking the configuration as a dict, or a string of other Python) runs here, in the caller's process
as Kernel Tuner runs it, over every configuration of the space; the configurations it rules out, like those
a cache file already holds, reach the spec as restrictions that exclude exactly them (`exclusions`).
"""
import builtins
import itertools
import math
from collections.abc import Callable, Iterator

import numpy as np

from kforge.api import KforgeError
from shared.domain.expressions import ExpressionError, check_restriction, names_in, restriction_holds
from shared.domain.spec import MAX_THREADS_PER_BLOCK

Config = dict[str, object]
DEFAULT_BLOCK = (256, 1, 1)  # Kernel Tuner's threads per block along x, y, z when no parameter sets them
# Configurations times characters of exclusion restrictions that kforge's search checks in about a minute on a
# slow core (each restriction is checked on every configuration, at about 1 µs per character).
MAX_EXCLUSION_WORK = 60_000_000


class DropInError(KforgeError, ValueError):
    """An argument of tune_kernel that kforge cannot take as given; the message names it and the fix."""


def plain(value):
    """A numpy scalar as the Python value it holds; anything else as it is."""
    return value.item() if isinstance(value, np.generic) else value


class TuneSpace:
    """The tune parameters in the caller's order, their values as Python values and, for cache keys, as Kernel
    Tuner writes them (str() of the value as given)."""

    def __init__(self, tune_params: dict):
        if not isinstance(tune_params, dict) or not tune_params:
            raise DropInError("tune_params: give a dict of parameter names to lists of values")
        for forbidden in ("grid_size_x", "grid_size_y", "grid_size_z", "time"):
            if forbidden in tune_params:
                raise DropInError(f"tune_params: {forbidden!r} is a name Kernel Tuner reserves: rename it")
        for name, values in tune_params.items():
            if isinstance(values, str | bytes) or not hasattr(values, "__iter__") or len(values) == 0:
                raise DropInError(f"tune_params[{name!r}]: give a non-empty list of values")
        self.names = list(tune_params)
        self.values = {name: [plain(v) for v in tune_params[name]] for name in self.names}
        self.key_text = {name: [str(v) for v in tune_params[name]] for name in self.names}
        self.size = math.prod(len(v) for v in self.values.values())

    def configs(self) -> Iterator[Config]:
        """Every configuration, in Kernel Tuner's brute-force order (the last parameter varying fastest)."""
        for values in itertools.product(*self.values.values()):
            yield dict(zip(self.names, values))

    def position(self, config: Config) -> tuple[int, ...] | None:
        """Where `config` lies in the space (index per parameter), or None when a value is not in it."""
        try:
            return tuple(self.values[name].index(config[name]) for name in self.names)
        except (KeyError, ValueError):
            return None

    def key(self, config: Config) -> str | None:
        """The configuration's key in a Kernel Tuner cache file."""
        at = self.position(config)
        return None if at is None else ",".join(self.key_text[n][i] for n, i in zip(self.names, at))


class Restrictions:
    """The restrictions split into kforge's (`spec`: strings it evaluates itself) and the caller's own (`host`:
    callables and other Python, evaluated here), with what every configuration must meet besides."""

    def __init__(self, restrictions, space: TuneSpace, fixed: dict, block_names: list[str]):
        self.space, self.fixed, self.block_names = space, fixed, block_names
        self.spec: list[str] = []
        self.host: list[Callable[[Config], bool]] = []
        if restrictions is None:
            restrictions = []
        elif callable(restrictions) or isinstance(restrictions, str):
            restrictions = [restrictions]
        for i, restriction in enumerate(restrictions):
            if isinstance(restriction, str):
                if _kforge_can_run(restriction):
                    self.spec.append(restriction)
                else:
                    self.host.append(_python_restriction(restriction))
            elif callable(restriction):
                self.host.append(_called(restriction, i))
            else:
                raise DropInError(f"restrictions[{i}]: {type(restriction).__name__} is not a restriction kforge takes: "
                                  "give strings (\"block_size_x*block_size_y <= 1024\") or functions of the "
                                  "configuration as a dict (lambda p: p['block_size_x'] <= 512)")

    def variables(self, config: Config) -> Config:
        return {**self.fixed, **config}

    def hold_in_spec(self, config: Config) -> bool:
        variables = self.variables(config)
        return all(restriction_holds(r, variables) for r in self.spec)

    def hold(self, config: Config) -> bool:
        return self.hold_in_spec(config) and all(check(config) for check in self.host)

    def threads(self, config: Config) -> int:
        variables = self.variables(config)
        return math.prod(int(variables.get(name, DEFAULT_BLOCK[i])) for i, name in enumerate(self.block_names))

    def runnable(self, config: Config) -> bool:
        """Whether Kernel Tuner would try `config`: it meets every restriction and fits a thread block."""
        return self.hold(config) and self.threads(config) <= MAX_THREADS_PER_BLOCK

    def ruled_out_by_host(self) -> list[Config]:
        """The configurations that kforge's own restrictions let through and the caller's rule out."""
        if not self.host:
            return []
        return [c for c in self.space.configs() if self.hold_in_spec(c) and not all(check(c) for check in self.host)]


def _kforge_can_run(restriction: str) -> bool:
    try:
        check_restriction(restriction)
        return True
    except ExpressionError:
        return False


def _python_restriction(text: str) -> Callable[[Config], bool]:
    """A Kernel Tuner restriction string that is not plain arithmetic, run as Python with the configuration's
    values as variables, as Kernel Tuner runs it."""
    try:
        code = compile(text, "<restriction>", "eval")
    except SyntaxError as exc:
        raise DropInError(f"restrictions: {text!r} is not a Python expression ({exc.msg})") from None
    return lambda config: bool(eval(code, {"__builtins__": builtins}, dict(config)))


def _called(function: Callable, index: int) -> Callable[[Config], bool]:
    def check(config: Config) -> bool:
        try:
            return bool(function(dict(config)))
        except Exception as exc:
            raise DropInError(f"restrictions[{index}] raised {type(exc).__name__}: {exc} on {config}: kforge calls a "
                              "restriction function with the configuration as one dict, as Kernel Tuner's "
                              "lambda p: ... form") from exc
    return check


def exclusions(space: TuneSpace, configs: list[Config]) -> list[str]:
    """Restrictions in kforge's syntax that exactly `configs` fail. Each is `not (...)` of a group of them,
    written as a tree over the parameters in which a subtree holding every combination of the parameters below
    it needs no condition (a cache of a brute-force run stopped midway is a few comparisons), split where an
    expression would pass kforge's bounds. Of a few orders of the parameters, the shortest text is taken."""
    rows = {at for at in map(space.position, configs) if at is not None}
    for row in rows:
        for name, index in zip(space.names, row):
            value = space.values[name][index]
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise DropInError(f"tune_params: {name} = {value!r} is not a finite number, and kforge can exclude "
                                  "a configuration from its search (a cached one, or one a restriction function "
                                  "rules out) only by comparing numbers: give numeric values, or write the "
                                  "restriction as a string")
    if not rows:
        return []
    count = len(space.names)
    orders = {tuple(range(count)), tuple(reversed(range(count))),
              *(tuple(range(k, count)) + tuple(range(k)) for k in range(1, count))}
    texts = min((_encoded(space, order, rows) for order in sorted(orders)), key=lambda t: sum(map(len, t)))
    return [f"not ({text})" for text in texts]


def _encoded(space: TuneSpace, order: tuple[int, ...], rows: set[tuple[int, ...]]) -> list[str]:
    names = [space.names[i] for i in order]
    return _grouped(names, [space.values[n] for n in names], sorted(tuple(r[i] for i in order) for r in rows), [])


def _grouped(names: list[str], values: list[list], rows: list[tuple], prefix: list[str]) -> list[str]:
    tree = _tree(names, values, rows)
    if tree is None and not prefix:
        raise DropInError("every configuration would be excluded from kforge's search")
    whole = " and ".join(prefix + ([f"({tree})"] if tree is not None else []))
    if _fits(f"not ({whole})"):
        return [whole]
    if len(names) == 1:  # one parameter left: its values in halves
        half = len(rows) // 2
        if half == 0:
            raise DropInError(f"cannot write an exclusion of {prefix} within kforge's bounds on an expression")
        return _grouped(names, values, rows[:half], prefix) + _grouped(names, values, rows[half:], prefix)
    return [text for index, rest in _by_first(rows).items()
            for text in _grouped(names[1:], values[1:], rest, [*prefix, f"{names[0]} == {values[0][index]!r}"])]


def _tree(names: list[str], values: list[list], rows: list[tuple]) -> str | None:
    """The condition that exactly `rows` (value indices, unique) meet; None when they are every combination."""
    if len(rows) == math.prod(len(v) for v in values):
        return None
    terms = []
    for index, rest in _by_first(rows).items():
        condition, below = f"{names[0]} == {values[0][index]!r}", _tree(names[1:], values[1:], rest)
        terms.append(condition if below is None else f"{condition} and ({below})")
    return " or ".join(terms)


def _by_first(rows: list[tuple]) -> dict[int, list[tuple]]:
    groups: dict[int, list[tuple]] = {}
    for row in rows:
        groups.setdefault(row[0], []).append(row[1:])
    return groups


def _fits(text: str) -> bool:
    try:
        names_in(text)  # parsed under the bounds on length, terms and nesting that the spec checks
    except ExpressionError:
        return False
    return True


def too_slow_to_check(restrictions: list[str], space: TuneSpace) -> bool:
    """Whether exclusions would make kforge's search too slow: it checks every restriction on every configuration,
    in time that grows with the restriction's length."""
    return space.size * sum(map(len, restrictions)) > MAX_EXCLUSION_WORK
