"""The verifier corpus (tests/corpus) as verify jobs: one spec per candidate, with what must happen to it."""
from dataclasses import dataclass
from pathlib import Path

import yaml

from kforge.specfile import load_spec
from tests.conftest import EXAMPLES

CORPUS = Path(__file__).resolve().parent / "corpus"
CPU_CHECKS = {"compile", "signature"}  # what a machine without a GPU can reject


@dataclass(frozen=True)
class Case:
    kernel: str
    file: str
    spec: object  # KernelSpec with strategy verify
    accept: tuple[str, ...]  # the checks that may reject it, or ("pass",)

    @property
    def id(self) -> str:
        return f"{self.kernel}/{self.file}"


def load_cases() -> list[Case]:
    cases = []
    for kernel, entry in yaml.safe_load((CORPUS / "corpus.yaml").read_text()).items():
        base = load_spec(EXAMPLES / f"{entry['spec']}.cu", EXAMPLES / f"{entry['spec']}.yaml")
        for file, expected in entry["candidates"].items():
            expected = {"accept": expected} if isinstance(expected, list) else expected
            source = (CORPUS / kernel / file).read_text() if file.endswith(".cu") else _edited(base.source, expected)
            candidate = {"source": source, "params": expected.get("params", {})}
            spec = base.model_validate({**base.model_dump(), "sizes": entry["sizes"],
                                        "strategy": {"name": "verify", "candidate": candidate}})
            cases.append(Case(kernel, file, spec, tuple(expected["accept"])))
    return cases


def _edited(source: str, expected: dict) -> str:
    """The example's source with each edit applied to its first match: a fault one line away from it."""
    for old, new in expected.get("edits", []):
        assert old in source, f"corpus edit {old!r} no longer matches the example kernel"
        source = source.replace(old, new, 1)
    return source
