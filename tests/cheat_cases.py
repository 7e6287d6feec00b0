"""The cheat catalogue (tests/corpus/cheats.yaml) as one_prompt jobs whose model answer is the cheat."""
from dataclasses import dataclass

import yaml

from kforge.specfile import load_spec
from services.planner.strategies.one_prompt import STEP
from shared.domain.spec import KernelSpec
from tests.conftest import EXAMPLES
from tests.corpus_cases import CORPUS

CHEATS = CORPUS / "cheats"


@dataclass(frozen=True)
class Cheat:
    file: str  # <kernel>/<name>.md under tests/corpus/cheats
    family: str
    expect: tuple[str, ...]  # outcomes that count as its catch (cheats.yaml says how they are named)
    answer: str  # the model's whole answer: prose, a ```cuda block and a ```json block
    spec: KernelSpec  # the example at the catalogue's sizes, strategy one_prompt, generator anthropic

    @property
    def id(self) -> str:
        return self.file.removesuffix(".md")

    @property
    def honest(self) -> bool:
        return self.expect == ("accepted",)


def load_cheats() -> list[Cheat]:
    catalogue = yaml.safe_load((CORPUS / "cheats.yaml").read_text())
    jobs = {kernel: _job(entry["spec"], entry["sizes"]) for kernel, entry in catalogue["jobs"].items()}
    return [Cheat(file, entry["family"], tuple(entry["expect"]), (CHEATS / file).read_text(),
                  jobs[file.split("/")[0]].with_sizes(entry.get("sizes") or jobs[file.split("/")[0]].sizes))
            for file, entry in catalogue["answers"].items()]


def _job(example: str, sizes: dict[str, int]) -> KernelSpec:
    spec = load_spec(EXAMPLES / f"{example}.cu", EXAMPLES / f"{example}.yaml")
    # Short hang limits: a cheat that hangs costs its GPU process this long, not the test's whole budget.
    return spec.model_validate({**spec.model_dump(), "sizes": sizes, "strategy": {"name": STEP.id},
                                "generator": {"provider": "anthropic"}, "verify": {"timeout_s": 10},
                                "benchmark": {**spec.benchmark.model_dump(), "timeout_s": 10}})
