"""Measurements recorded on a GPU machine, served again where there is no GPU, always marked as replay.

A recording is keyed by everything that decides what runs on the device: source, kernel name, argument
spec, sizes, launch conventions, the configuration's parameters and the target arch. Compiler versions
are left out on purpose: the recording answers "what did this kernel take on that GPU", and the
BaselineMeasured built from it says which device and when.
"""
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from shared.spec import KernelSpec, ParamValue

DEFAULT_BOOK = Path(__file__).parent / "recordings" / "baselines.json"
_LAUNCH_FIELDS = {"kernel_name", "source", "args", "sizes", "problem_size", "grid_div_x", "grid_div_y",
                  "grid_div_z", "block_size_names", "compiler_options"}


@dataclass(frozen=True)
class Recording:
    kernel_name: str
    device: str
    recorded_on: str  # date of the GPU run
    arch: str
    params: dict[str, ParamValue]
    samples_ms: list[float]


def measurement_key(spec: KernelSpec, params: dict[str, ParamValue], arch: str) -> str:
    launch = spec.model_dump(mode="json", include=_LAUNCH_FIELDS)
    return hashlib.sha256(json.dumps([launch, params, arch], sort_keys=True).encode()).hexdigest()


class ReplayBook:
    def __init__(self, path: Path = DEFAULT_BOOK):
        self.path = path
        raw = json.loads(path.read_text()) if path.exists() else {}
        self.recordings = {key: Recording(**value) for key, value in raw.items()}

    def find(self, spec: KernelSpec, params: dict[str, ParamValue]) -> Recording | None:
        """The recording of this kernel and configuration, for whichever arch it was recorded on."""
        arches = [spec.benchmark.arch] if spec.benchmark.arch else sorted({r.arch for r in self.recordings.values()})
        for arch in arches:
            if (found := self.recordings.get(measurement_key(spec, params, arch))) is not None:
                return found
        return None

    def add(self, spec: KernelSpec, recording: Recording) -> None:
        self.recordings[measurement_key(spec, recording.params, recording.arch)] = recording

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {key: asdict(r) for key, r in sorted(self.recordings.items())}
        self.path.write_text(json.dumps(data, indent=1) + "\n")
