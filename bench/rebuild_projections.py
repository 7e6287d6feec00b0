"""How long rebuilding every read model from 10,000 events takes: the job view, the optimisation, the
tracker, the kernel result, the suggestions and the pipeline profile, folded from a stream of whole jobs.

Goal (issue 6): under 1 s for 10,000 events, folding only (events already decoded), and reported beside it
the time to read and decode them from SQLite first. Prints a table; exits 1 if the goal is missed."""
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kforge.specfile import load_spec  # noqa: E402
from shared.adapters.eventstore import EventStore  # noqa: E402
from shared.domain.projections import project_job  # noqa: E402
from shared.domain.reports.profile import pipeline_profile  # noqa: E402
from shared.domain.reports.results import kernel_result  # noqa: E402
from shared.domain.reports.suggestions import suggest  # noqa: E402
from shared.domain.reports.tracker import performance_tracker  # noqa: E402
from shared.domain.steps import project_optimisation  # noqa: E402
from tests.report_streams import T0, JobStream, rewrite_job, spec_with, tune_job  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TARGET_EVENTS, GOAL_S = 10_000, 1.0


def jobs(spec) -> list[list]:
    """Whole jobs, tune and rewrite alternately, until they hold 10,000 events."""
    out, total, i = [], 0, 0
    while total < TARGET_EVENTS:
        start = T0 + timedelta(minutes=i)
        events = tune_job(spec, f"t{i:05d}", start=start) if i % 2 else rewrite_job(spec, f"r{i:05d}")
        out.append(events)
        total += len(events)
        i += 1
    return out


def one_long_job(spec) -> list:
    """A single sweep of 10,000 configurations: long streams must not fold in quadratic time."""
    spec = spec_with(spec, strategy={"name": "tune"}, tune_params={"block_size_x": list(range(1, TARGET_EVENTS + 1))})
    job = JobStream("sweep", spec)
    job.baseline([1.0] * 5)
    job.tune("submitted", {v: [1.0 + v / 1e5] * 3 for v in range(1, TARGET_EVENTS - 10)}, baseline_ms=1.0)
    return job.complete()


def fold_all(streams: list[list]) -> None:
    for events in streams:
        project_job(events)
        project_optimisation(events)
        performance_tracker(events)
        kernel_result(events)
        suggest(events)
    pipeline_profile(streams)


def best_of(runs: int, work) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def main() -> int:
    spec = load_spec(EXAMPLES / "vector_add.cu", EXAMPLES / "vector_add.yaml")
    streams = jobs(spec)
    count = sum(map(len, streams))
    fold_min, fold_median = best_of(5, lambda: fold_all(streams))
    sweep = one_long_job(spec)
    sweep_min, sweep_median = best_of(5, lambda: fold_all([sweep]))
    with tempfile.TemporaryDirectory() as home:
        store = EventStore(f"sqlite:///{home}/bench.db")
        for events in streams:
            store.append(events[0].stream_id, [e.model_copy(update={"stream_version": None, "position": None})
                                               for e in events], expected_version=0)
        ids = store.stream_ids("job-")
        read_min, read_median = best_of(3, lambda: fold_all([store.read_stream(s) for s in ids]))
        store.close()
    print(f"{count:,} events in {len(streams)} jobs (tune and rewriting jobs alternately)")
    print(f"{'rebuild':<34}{'best s':>10}{'median s':>10}")
    print(f"{'fold every read model':<34}{fold_min:>10.3f}{fold_median:>10.3f}")
    print(f"{'read from SQLite, decode, fold':<34}{read_min:>10.3f}{read_median:>10.3f}")
    print(f"{f'one job of {len(sweep):,} events, fold':<34}{sweep_min:>10.3f}{sweep_median:>10.3f}")
    ok = fold_median < GOAL_S and sweep_median < GOAL_S
    print(f"goal: fold 10,000 events in < {GOAL_S:g} s, as many jobs or as one: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
