"""How events and jobs read in a terminal."""
from rich.table import Table

from shared.events import (BaselineFailed, BaselineMeasured, BaselineRequested, CandidateRejected, CandidateVerified,
                           ConfigFailed, ConfigMeasured, Event, JobCompleted, JobFailed, JobSubmitted, KernelCompiled,
                           ShardTuned, TuningCompleted, TuningRequested, VerificationIncomplete, VerificationRequested)
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
        case TuningRequested(queue=queue, shard=shard, shards=shards):
            return f"shard {shard + 1} of {shards} to {queue}"
        case ConfigMeasured():
            return _measured(event)
        case ConfigFailed(params=params, stage=stage, reason=reason, replay=replay):
            return f"{_params(params)}: rejected at {stage}: {reason}" + (" [REPLAY]" if replay else "")
        case ShardTuned(error=error) if error:
            return f"could not tune: {error}"
        case ShardTuned():
            return _shard(event)
        case TuningCompleted(best_params=params, best_time_ms=ms, speedup=speedup, configs_evaluated=n) if ms:
            return f"best {ms:.4f} ms with {_params(params)}, {speedup:.2f}x the baseline, of {n} configurations"
        case TuningCompleted(configs_evaluated=n):
            return f"no correct configuration among {n}"
        case VerificationRequested(queue=queue, candidate_id=candidate):
            return f"{candidate} to {queue}"
        case CandidateVerified(trials=trials, skipped=skipped, max_abs_error=error, device=device):
            return (f"matches on {len(trials)} trials ({', '.join(t.label for t in trials)}) on {device}, largest "
                    f"error {error:.3g}" + (f"; {len(skipped)} skipped" if skipped else ""))
        case CandidateRejected(check=check, reason=reason, trial=trial):
            return f"{check}: {reason}" + (f" [{trial}]" if trial else "")
        case VerificationIncomplete(passed=passed, reason=reason):
            return f"{', '.join(passed)} passed; not proven: {reason}"
        case JobCompleted(summary=summary):
            return summary
        case JobFailed(stage=stage, reason=reason):
            return f"{stage}: {reason}"
    return ""


def _params(params: dict | None) -> str:
    return " ".join(f"{k}={v}" for k, v in (params or {}).items())


def _measured(e: ConfigMeasured) -> str:
    rates = f"{e.gbps:,.0f} GB/s" + (f", {e.tflops:,.1f} TFLOP/s" if e.tflops is not None else "")
    how = "1 sample, abandoned: slower than the best" if e.abandoned else f"median of {len(e.samples_ms)}"
    return (f"{_params(e.params)}: {e.median_ms:.4f} ms ({how}), {rates}, {e.pct_of_peak:.0f}% of peak"
            + (" [REPLAY]" if e.replay else ""))


def _shard(e: ShardTuned) -> str:
    busy = 100 * e.gpu_busy_s / e.wall_s if e.wall_s else 0.0
    return (f"{e.configs} configurations ({e.measured} measured, {e.failed} rejected) in {e.wall_s:.2f} s on "
            f"{e.device}; compile {e.compile_s:.2f} s over the pool, GPU busy {busy:.0f}%, first result after "
            f"{e.first_result_s:.2f} s" + (f", {e.host_replacements} GPU process(es) replaced" if e.host_replacements
                                           else "") + (" [REPLAY]" if e.replay else ""))


def events_table(events: list[Event]) -> Table:
    table = Table("#", "position", "time (UTC)", "event", "v", "detail", title="events")
    for e in events:
        table.add_row(str(e.stream_version), str(e.position), e.occurred_at.strftime("%H:%M:%S.%f")[:-3], e.type,
                      str(e.version), describe(e))
    return table


def jobs_table(jobs: list[JobView]) -> Table:
    table = Table("job", "kernel", "strategy", "status", "baseline ms", "best ms", "speedup", "device",
                  "submitted (UTC)", title="jobs")
    for job in jobs:
        table.add_row(job.job_id, job.spec.kernel_name if job.spec else "?", job.spec.strategy.name if job.spec else "?",
                      _status(job), f"{job.baseline_ms:.4f}" if job.baseline_ms else "-",
                      f"{job.best_ms:.4f}" if job.best_ms else "-", f"{job.speedup:.2f}x" if job.speedup else "-",
                      (job.device or "-") + (" [REPLAY]" if job.replay else ""),
                      job.submitted_at.strftime("%Y-%m-%d %H:%M:%S") if job.submitted_at else "-")
    return table


def _status(job: JobView) -> str:
    colour = {"completed": "green", "failed": "red"}.get(job.status, "yellow")
    return f"[{colour}]{job.status}[/{colour}]"
