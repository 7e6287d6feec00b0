"""The kernel corpus (examples/corpus): kernels written the way users write them (blockDim rather than kforge's
defines, grid-stride loops, bound checks, templates, atomics, shuffles, in-place and several outputs), each
with its spec and one honest rewrite scripted as Claude's answer to a one_prompt request.
tests/unit/test_corpus_kernels.py checks on any machine that each loads, compiles and matches its signature,
and that each rewrite becomes a candidate that does too; bench/corpus_matrix.py runs every kernel through
every path (baseline, tune, explicit with the rules, one_prompt with the scripted answer) on a GPU."""
from dataclasses import dataclass
from pathlib import Path

from kforge.specfile import load_spec
from shared.domain.spec import KernelSpec

CORPUS = Path(__file__).resolve().parent.parent / "examples" / "corpus"


@dataclass(frozen=True)
class Pending:
    """A kernel that needs what kforge does not do yet: `stage` is where it fails until then (load: its spec
    is refused; compile: NVRTC refuses it), `feature` what is missing."""

    feature: str
    stage: str  # load | compile


# Remove an entry once its feature lands: the tests then hold the kernel to every check.
PENDING: dict[str, Pending] = {}


@dataclass(frozen=True)
class CorpusKernel:
    name: str

    @property
    def source_path(self) -> Path:
        return CORPUS / f"{self.name}.cu"

    @property
    def spec_path(self) -> Path:
        return CORPUS / f"{self.name}.yaml"

    @property
    def rewrite_path(self) -> Path:
        return CORPUS / f"{self.name}.rewrite.md"

    @property
    def pending(self) -> Pending | None:
        return PENDING.get(self.name)

    def spec(self) -> KernelSpec:
        return load_spec(self.source_path, self.spec_path)

    def rewrite(self) -> str:
        """Claude's whole answer to the one_prompt request: prose, a ```cuda block and a ```json block."""
        return self.rewrite_path.read_text()

    def job(self, path: str) -> KernelSpec:
        """The spec as a job on one path: baseline, tune, explicit (offline rules) or one_prompt (Claude)."""
        spec = self.spec()
        strategy, generator = PATHS[path]
        return spec.model_validate({**spec.model_dump(), "strategy": strategy,
                                    "generator": {**spec.generator.model_dump(), **generator}})


# Each path's strategy and generator. one_prompt quotes no earlier kernels (rag_k 0): the scripted answer
# is for this kernel alone, and a prompt naming another kernel would only confuse which answer is served.
PATHS = {
    "baseline": ({"name": "baseline"}, {}),
    "tune": ({"name": "tune"}, {}),
    "explicit": ({"name": "explicit"}, {"provider": "rules"}),
    "one_prompt": ({"name": "one_prompt"}, {"provider": "anthropic", "rag_k": 0}),
}


def corpus() -> list[CorpusKernel]:
    return [CorpusKernel(path.stem) for path in sorted(CORPUS.glob("*.yaml"))]
