"""Measurements recorded on a GPU machine, served again where there is no GPU, always marked as replay.

A ReplayProcess stands where the BenchmarkProcess would, so the whole pipeline (compile, search, events, CLI)
runs for real around the recorded outcomes. A recording is keyed by everything that decides what runs on the device: source, kernel name, argument
spec, sizes, launch conventions, the configuration's parameters and the target arch. Compiler versions
are left out on purpose: the recording answers "what did this kernel take on that GPU", and the
event built from it says which device and when.
"""
import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from services.benchmark import sampling
from services.benchmark.measurement import Measured, Order, Setup
from shared.adapters.device.probe import DeviceInfo, Peaks
from shared.adapters.device.process import Failed
from shared.domain.spec import KernelSpec, ParamValue

DEFAULT_BOOK = Path(__file__).parent / "recordings" / "baselines.json"
_LAUNCH_FIELDS = {"kernel_name", "source", "args", "sizes", "problem_size", "grid_div_x", "grid_div_y",
                  "grid_div_z", "smem_args", "block_size_names", "compiler_options"}
_ADDED_ARG_FIELDS = {"specials": [], "range": None, "sorted": False, "data": None, "answer": None}


@dataclass(frozen=True)
class Recording:
    kernel_name: str
    device: str
    recorded_on: str  # date of the GPU run
    arch: str
    params: dict[str, ParamValue]
    samples_ms: list[float] = field(default_factory=list)
    check_ms: float = 0.0
    max_abs_error: float = 0.0
    abandoned: bool = False
    failed_stage: str | None = None  # a recorded failure: its stage and the driver's words
    failed_reason: str = ""
    peaks: dict[str, float] | None = None

    def outcome(self) -> Measured | Failed:
        if self.failed_stage is not None:
            return Failed(self.failed_stage, self.failed_reason)
        return Measured(samples_ms=list(self.samples_ms), check_ms=self.check_ms or self.samples_ms[0],
                        max_abs_error=self.max_abs_error, abandoned=self.abandoned)

    @classmethod
    def of(cls, spec: KernelSpec, device: DeviceInfo, recorded_on: str, params: dict[str, ParamValue],
           outcome: Measured | Failed) -> "Recording":
        common = dict(kernel_name=spec.kernel_name, device=device.name, recorded_on=recorded_on, arch=device.arch,
                      params=params, peaks=asdict(device.peaks) if device.peaks else None)
        if isinstance(outcome, Failed):
            return cls(**common, failed_stage=outcome.stage, failed_reason=outcome.reason)
        return cls(**common, samples_ms=outcome.samples_ms, check_ms=outcome.check_ms,
                   max_abs_error=outcome.max_abs_error, abandoned=outcome.abandoned)


def measurement_key(spec: KernelSpec, params: dict[str, ParamValue], arch: str) -> str:
    launch = spec.model_dump(mode="json", include=_LAUNCH_FIELDS)
    if launch["smem_args"] is None:  # added after recording: left out when absent, so keys stay stable
        del launch["smem_args"]
    for arg in launch["args"]:  # fields added after recording, left out at their defaults so keys stay stable
        for name, default in _ADDED_ARG_FIELDS.items():
            if arg[name] == default:
                del arg[name]
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


class ReplayProcess:
    """Answers like the BenchmarkProcess, from recordings, in the calling process (no child is spawned): never
    measures, and says so in the device name."""

    def __init__(self, book: ReplayBook, spec: KernelSpec):
        self.book, self.spec, self.replacements = book, spec, 0
        mine = [r for r in book.recordings.values() if r.kernel_name == spec.kernel_name] or list(book.recordings.values())
        first = mine[0] if mine else None
        self.device = DeviceInfo(index=0, name=f"{first.device} (recorded {first.recorded_on})" if first else "no recordings",
                                 arch=spec.benchmark.arch or (first.arch if first else "sm_90"),
                                 peaks=Peaks(**first.peaks) if first and first.peaks else None)

    def prepare(self, setup: Setup) -> Failed | None:
        return None

    def measure(self, order: Order) -> Measured | Failed:
        recording = self.book.find(self.spec, order.params)
        if recording is None:
            recorded = sorted({r.kernel_name for r in self.book.recordings.values()}) or ["none"]
            return Failed("replay", f"no recorded measurement of {self.spec.kernel_name} with {order.params} at these "
                                    f"sizes; recordings exist for: {', '.join(recorded)}")
        outcome = recording.outcome()
        return outcome if isinstance(outcome, Failed) else self._against_best(outcome, order, recording)

    def _against_best(self, recorded: Measured, order: Order, recording: Recording) -> Measured | Failed:
        """The recorded launches taken again one by one against this run's best so far, as the GPU would have
        taken them: abandonment is decided here, not copied from a run whose best was another configuration."""
        policy = sampling.policy_of(self.spec.benchmark)
        samples: list[float] = []
        for sample in recorded.samples_ms:
            if sampling.next_step(samples, order.best_ms, policy) is not sampling.Next.SAMPLE:
                break
            samples.append(sample)
        step = sampling.next_step(samples, order.best_ms, policy)
        if step is sampling.Next.SAMPLE and recorded.abandoned:
            best = f"{order.best_ms:.4g} ms" if order.best_ms is not None else "no best yet"
            return Failed("replay", f"{self.spec.kernel_name} with {order.params} was recorded only until it was "
                                    f"abandoned ({len(recorded.samples_ms)} sample(s), {min(recorded.samples_ms):.4g} "
                                    f"ms at best) against that run's best; here ({best}) it would be timed in full, "
                                    "and those launches were never recorded: record it again on a GPU machine "
                                    "(bench/record_replays.py)")
        return Measured(samples_ms=samples, check_ms=recorded.check_ms, max_abs_error=recorded.max_abs_error,
                        abandoned=step is sampling.Next.ABANDON)

    def close(self) -> None:
        pass
