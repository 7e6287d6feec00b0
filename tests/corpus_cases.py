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
            accept, params = (expected, {}) if isinstance(expected, list) else (expected["accept"], expected["params"])
            # "(example)": the example kernel itself, under other params (a correct rewrite by construction).
            source = base.source if file == "(example)" else (CORPUS / kernel / file).read_text()
            candidate = {"source": source, "params": params}
            spec = base.model_validate({**base.model_dump(), "sizes": entry["sizes"],
                                        "strategy": {"name": "verify", "candidate": candidate}})
            cases.append(Case(kernel, file, spec, tuple(accept)))
    return cases
