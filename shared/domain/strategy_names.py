"""The names a job's strategy may take, known where jobs are admitted (CLI, Python, HTTP), which never load the
planner: the measuring strategies, the planner's built-ins, strategies published by installed packages under
the entry-point group `kforge.strategies`, and those registered in this process."""
from difflib import get_close_matches
from importlib.metadata import entry_points

from shared.domain.spec import MEASURING_STRATEGIES

BUILT_IN_STRATEGIES = ("one_prompt", "autonomous", "explicit", "multiturn")
ENTRY_POINT_GROUP = "kforge.strategies"
_registered_here: set[str] = set()


def note_registered(name: str) -> None:
    """The planner's `register` reports each name here, so admission in the same process accepts it."""
    _registered_here.add(name)


def known_strategies() -> list[str]:
    published = {entry.name for entry in entry_points(group=ENTRY_POINT_GROUP)}
    custom = sorted((published | _registered_here) - set(MEASURING_STRATEGIES) - set(BUILT_IN_STRATEGIES))
    return [*MEASURING_STRATEGIES, *BUILT_IN_STRATEGIES, *custom]


def unknown_strategy(name: str) -> str | None:
    """Why `name` cannot run, with the nearest known name, or None when it can: refused at submission, not
    after the baseline has been measured."""
    known = known_strategies()
    if name in known:
        return None
    near = get_close_matches(name, known, n=1)
    hint = f"did you mean {near[0]!r}? " if near else ""
    return f"strategy {name!r} is not known: {hint}use one of {', '.join(known)}"
