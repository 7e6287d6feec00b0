"""On a GPU machine: tune each example live and write the replay book from the job's events.

    python bench/record_replays.py OUT.json     (then commit it as services/benchmark/recordings/baselines.json)

Every baseline and every configuration's outcome (measured, or failed with the driver's words) is kept,
so `kforge tune --replay` replays whole tuning runs on GPU-less machines.
"""
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(out: Path) -> None:
    os.environ.update(KFORGE_HOME=tempfile.mkdtemp(prefix="kforge-record-"), KFORGE_GPUS="0")
    os.environ.pop("REDIS_URL", None), os.environ.pop("DATABASE_URL", None)
    import kforge.worker  # noqa: F401  (registers the tasks the in-process bus runs)
    from kforge.specfile import load_spec
    from shared.adapters.device.probe import probe
    from services.benchmark.measurement import Measured
    from shared.adapters.device.process import Failed
    from services.benchmark.replay import Recording, ReplayBook
    from shared.application import runtime
    from shared.application.jobs import job_events, submit_job
    from shared.domain.events import BaselineMeasured, ConfigFailed, ConfigMeasured

    device = probe(0)
    rt = runtime.current()
    book = ReplayBook(out)
    for spec_file in sorted((ROOT / "examples").glob("*.yaml")):
        spec = load_spec(spec_file.with_suffix(".cu"), spec_file)
        job_id = submit_job(rt.store, rt.bus, spec, submitted_by="record")
        rt.bus.wait_idle()
        for event in job_events(rt.store, job_id):
            if isinstance(event, BaselineMeasured | ConfigMeasured):
                outcome = Measured(samples_ms=event.samples_ms, check_ms=event.samples_ms[0],
                                   max_abs_error=getattr(event, "max_abs_error", 0.0),
                                   abandoned=getattr(event, "abandoned", False))
            elif isinstance(event, ConfigFailed):
                outcome = Failed(event.stage, event.reason)
            else:
                continue
            params = {**spec.baseline_params(), **event.params}
            book.add(spec, Recording.of(spec, device, event.occurred_at.date().isoformat(), params, outcome))
        print(f"{spec.kernel_name}: {rt.store.read_stream(f'job-{job_id}')[-1].model_dump().get('summary')}")
    book.save()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
