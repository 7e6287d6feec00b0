"""How events and jobs read in a terminal."""
from rich.table import Table

from shared.events import (BaselineFailed, BaselineMeasured, BaselineRequested, Event, JobCompleted, JobFailed,
                           JobSubmitted, KernelCompiled)
from shared.projections import JobView


def describe(event: Event) -> str:
    match event:
        case JobSubmitted(spec=spec):
            return f"{spec.kernel_name}, strategy {spec.strategy.name}, sizes {spec.sizes}"
        case BaselineRequested(queue=queue, params=params):
            return f"to {queue} with {params}"
        case KernelCompiled(arch=arch, compile_ms=ms, cache_hit=hit):
            return f"NVRTC {arch}: " + ("from the compile cache" if hit else f"compiled in {ms:.0f} ms")
        case BaselineMeasured(median_ms=ms, device=device, samples_ms=samples, replay=replay):
            return f"{ms:.4f} ms median of {len(samples)} on {device}" + (" [REPLAY]" if replay else "")
        case BaselineFailed(stage=stage, reason=reason):
            return f"{stage}: {reason}"
        case JobCompleted(summary=summary):
            return summary
        case JobFailed(stage=stage, reason=reason):
            return f"{stage}: {reason}"
    return ""


def events_table(events: list[Event]) -> Table:
    table = Table("#", "position", "time (UTC)", "event", "v", "detail", title="events")
    for e in events:
        table.add_row(str(e.stream_version), str(e.position), e.occurred_at.strftime("%H:%M:%S.%f")[:-3], e.type,
                      str(e.version), describe(e))
    return table


def jobs_table(jobs: list[JobView]) -> Table:
    table = Table("job", "kernel", "strategy", "status", "baseline ms", "device", "submitted (UTC)", title="jobs")
    for job in jobs:
        table.add_row(job.job_id, job.spec.kernel_name if job.spec else "?", job.spec.strategy.name if job.spec else "?",
                      _status(job), f"{job.baseline_ms:.4f}" if job.baseline_ms else "-",
                      (job.device or "-") + (" [REPLAY]" if job.replay else ""),
                      job.submitted_at.strftime("%Y-%m-%d %H:%M:%S") if job.submitted_at else "-")
    return table


def _status(job: JobView) -> str:
    colour = {"completed": "green", "failed": "red"}.get(job.status, "yellow")
    return f"[{colour}]{job.status}[/{colour}]"
