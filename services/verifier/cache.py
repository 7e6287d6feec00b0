"""Trials kept on the device between candidates, within a byte budget: a job's candidates are all tried on
the same trials, so its inputs and the reference's outputs are made once and serve every candidate.
Over budget, the oldest trials go first; the trial being added always stays, even when it alone is over
budget, since the candidate about to run needs it."""
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

Entry = TypeVar("Entry")


class TrialCache(Generic[Entry]):
    def __init__(self, budget_bytes: int, release: Callable[[Entry], None]):
        self.budget_bytes = budget_bytes
        self._release = release
        self._entries: OrderedDict[Hashable, tuple[Entry, int]] = OrderedDict()

    @property
    def total_bytes(self) -> int:
        return sum(nbytes for _, nbytes in self._entries.values())

    def keys(self) -> list[Hashable]:
        """Oldest first."""
        return list(self._entries)

    def get(self, key: Hashable) -> Entry | None:
        found = self._entries.get(key)
        return None if found is None else found[0]

    def make_room(self, nbytes: int) -> None:
        """Release the oldest entries until `nbytes` more fit in the budget (or none is left): done before the
        new trial is allocated, so the device never holds it and what it replaces at once."""
        while self._entries and self.total_bytes + nbytes > self.budget_bytes:
            _, (entry, _) = self._entries.popitem(last=False)
            self._release(entry)

    def add(self, key: Hashable, entry: Entry, nbytes: int) -> None:
        self.make_room(nbytes)
        self._entries[key] = (entry, nbytes)
