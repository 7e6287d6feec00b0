"""Optimisation strategies: each decides the job's next step from its folded events alone.

Built-ins follow LLM Kernel Tuner's strategies (one prompt, autonomous, explicit) and the multiturn
refinement users of kernel-optimisation loops know. A custom strategy is any object with
`decide(optimisation, strategy_spec) -> Decision`, registered by name with `register`, or published by
an installed package under the entry-point group `kforge.strategies`.
"""
from importlib.metadata import entry_points

from services.planner.strategies.decisions import Ask, Decision, Finish, Skip, Strategy
from shared.domain.strategy_names import ENTRY_POINT_GROUP, note_registered

_REGISTRY: dict[str, Strategy] = {}


class UnknownStrategy(LookupError):
    pass


def register(name: str):
    """Class or object decorator: `@register("mine") class Mine: def decide(self, opt, spec): ...`."""
    def add(strategy):
        _REGISTRY[name] = strategy() if isinstance(strategy, type) else strategy
        note_registered(name)
        return strategy
    return add


def strategy_for(name: str) -> Strategy:
    if name not in _REGISTRY:
        for entry in entry_points(group=ENTRY_POINT_GROUP, name=name):
            register(name)(entry.load())
    if name not in _REGISTRY:
        raise UnknownStrategy(f"strategy {name!r} is not registered with the planner; registered: "
                              f"{', '.join(sorted(_REGISTRY))}. Register a custom one with "
                              "services.planner.strategies.register or the kforge.strategies entry point")
    return _REGISTRY[name]


def registered() -> list[str]:
    return sorted(_REGISTRY)


# The built-ins register themselves on import.
from services.planner.strategies import autonomous, explicit, multiturn, one_prompt  # noqa: E402,F401

__all__ = ["Ask", "Decision", "Finish", "Skip", "Strategy", "UnknownStrategy", "register", "registered", "strategy_for"]
