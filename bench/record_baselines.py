"""On a GPU machine: measure each example's baseline live and write the replay book.

    python bench/record_baselines.py OUT.json     (then commit it as services/benchmark/recordings/baselines.json)
"""
import sys
import tempfile
from datetime import date
from pathlib import Path
from uuid import uuid4

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kforge.specfile import load_spec  # noqa: E402
from services.benchmark import gpu, handlers  # noqa: E402
from services.benchmark.replay import Recording, ReplayBook  # noqa: E402
from services.planner.policy import react  # noqa: E402
from shared.events import BaselineMeasured, JobSubmitted  # noqa: E402
from shared.eventstore import EventStore  # noqa: E402
from shared.projections import project_job  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


class _DiscardingBus:
    def dispatch(self, message) -> None:
        pass  # no planner runs here: the measurement is all this script wants


def main(out: Path) -> None:
    device = gpu.probe(0)
    book = ReplayBook(out)
    with tempfile.TemporaryDirectory() as root:
        store = EventStore(f"sqlite:///{root}/record.db")
        for spec_file in sorted(EXAMPLES.glob("*.yaml")):
            spec = load_spec(spec_file.with_suffix(".cu"), spec_file)
            stream = f"job-{uuid4().hex[:12]}"
            submitted = store.append(stream, [JobSubmitted(stream_id=stream, spec=spec)], expected_version=0)[0]
            request = store.append(stream, react(submitted, project_job([submitted]), ["0"]).events, 1)[0]
            handlers.measure_baseline(store, _DiscardingBus(), stream.removeprefix("job-"), request.event_id, 0,
                                      device.arch)
            measured = next(e for e in store.read_stream(stream) if isinstance(e, BaselineMeasured))
            book.add(spec, Recording(kernel_name=spec.kernel_name, device=device.name,
                                     recorded_on=date.today().isoformat(), arch=device.arch,
                                     params=measured.params, samples_ms=measured.samples_ms))
            print(f"{spec.kernel_name}: {measured.median_ms:.4f} ms median of {len(measured.samples_ms)}")
    book.save()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
