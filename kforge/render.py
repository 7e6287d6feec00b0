"""How events and jobs read in a terminal."""
from rich import box
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.progress_bar import ProgressBar
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from kforge.progress import SpaceProgress
from shared.domain.events import (BaselineFailed, BaselineMeasured, BaselineRequested, CandidateGenerated,
                                  CandidateRejected, CandidateVerified, ComparisonRequested, ConfigFailed,
                                  ConfigMeasured, Event, GenerationFailed, GenerationRequested, GeneratorCalled,
                                  JobCancelled, JobCompleted, JobFailed, JobSubmitted, KernelCompiled, KernelsCompared,
                                  PlanProposed, SanitizerChecked, ShardTuned, StepAccepted, StepBrokenDown,
                                  StepDiscarded, StepSkipped, StepValidated, TaskFailed, TaskProfiled, Tolerance,
                                  TuningCompleted, TuningRequested, VerificationIncomplete, VerificationRequested,
                                  WebhookAbandoned, WebhookAttempted, WebhookDelivered, WebhookRequested)
from shared.domain.projections import JobView
from shared.domain.reports.comparison import ChangeType, Comparison
from shared.domain.reports.profile import PipelineProfile
from shared.domain.reports.results import KernelResult
from shared.domain.reports.suggestions import OptimizationSuggestion
from shared.domain.speedup import speedup_text
from shared.domain.steps import OVERALL, SUBMITTED, Optimisation


def describe(event: Event) -> str:
    match event:
        case JobSubmitted(spec=spec):
            return f"{spec.kernel_name}, strategy {spec.strategy.name}, sizes {spec.sizes}"
        case BaselineRequested(queue=queue, params=params):
            return f"to {queue} with {params}"
        case KernelCompiled(arch=arch, compile_ms=ms, cache_hit=hit):
            return f"NVRTC {arch}: " + ("from the compile cache" if hit else f"compiled in {ms:.0f} ms")
        case BaselineMeasured(median_ms=ms, device=device, samples_ms=samples, replay=replay, tolerances=tolerances):
            return (_replay_mark(replay) + f"{ms:.4f} ms median of {len(samples)} on {device}"
                    + _widened(tolerances))
        case BaselineFailed(stage=stage, reason=reason):
            return f"{stage}: {reason}"
        case TuningRequested(queue=queue, shard=shard, shards=shards):
            return f"shard {shard + 1} of {shards} to {queue}"
        case ConfigMeasured():
            return _measured(event)
        case ConfigFailed(params=params, stage=stage, reason=reason, replay=replay):
            return _replay_mark(replay) + f"{_params(params)}: rejected at {stage}: {reason}"
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
                    f"error {error:.3g}" + (f"; {len(skipped)} skipped" if skipped else "")
                    + _widened([t for trial in trials for t in trial.tolerances]))
        case CandidateRejected(check=check, reason=reason, trial=trial):
            return f"{check}: {reason}" + (f" [{trial}]" if trial else "")
        case SanitizerChecked(note=note):
            return note
        case VerificationIncomplete(passed=passed, reason=reason):
            return f"{', '.join(passed)} passed; not proven: {reason}"
        case GenerationRequested(kind=kind, step=step, focus=focus):
            return f"{kind}" + (f" {step.id}: {step.description}" if step else "") + (f" [{focus}]" if focus else "")
        case GeneratorCalled(error=error, provider=provider, model=model, attempts=attempts) if error:
            return f"{provider} ({model}) gave no answer: {error}" + (f"; {len(attempts)} retries" if attempts else "")
        case GeneratorCalled():
            return _call(event)
        case PlanProposed(steps=steps):
            return f"{len(steps)} step(s): {', '.join(s.id for s in steps)}" if steps else "nothing further to try"
        case StepValidated(step_id=step, valid=valid, reason=reason):
            return f"{step} {'is worth trying' if valid else 'is not a tunable change worth trying'}: {reason}"
        case StepBrokenDown(step_id=step, substeps=subs):
            return f"{step} into {', '.join(s.id for s in subs)}" if subs else f"{step} is small enough"
        case CandidateGenerated(step_id=step, candidate=c, provider=provider, renames=renames):
            return (f"{step} by {provider}: {len(c.source.splitlines())} lines, tune_params {c.tune_params}"
                    + (f", renamed {renames}" if renames else ""))
        case GenerationFailed(kind=kind, reason=reason):
            return f"{kind}: {reason}"
        case StepSkipped(step_id=step, reason=reason):
            return f"{step}: {reason}"
        case StepAccepted(step_id=step, old_time_ms=old, new_time_ms=new, best_params=params):
            return (f"{step}: {old:.4f} -> {new:.4f} ms, {speedup_text(event.speedup, event.speedup_ci)} with "
                    f"{_params(params)}")
        case ComparisonRequested(queue=queue, candidate_id=candidate, incumbent_ms=old, candidate_ms=new) \
                if candidate == OVERALL:
            return f"the best kernel ({new:.4f} ms) against the submitted one ({old:.4f} ms), in turn on {queue}"
        case ComparisonRequested(queue=queue, candidate_id=candidate, incumbent_ms=old, candidate_ms=new):
            return f"{candidate} ({new:.4f} ms tuned) against the best so far ({old:.4f} ms), in turn on {queue}"
        case KernelsCompared(error=error) if error:
            return f"{event.candidate_id} could not be compared: {error}"
        case KernelsCompared():
            return _compared(event)
        case StepDiscarded(step_id=step, stage=stage, reason=reason):
            return f"{step} at {stage}: {reason}"
        case TaskProfiled(task=task, worker=worker, wall_s=wall, peak_rss_mb=peak, started_at=started):
            return f"{task} on {worker}: started {started:%H:%M:%S}, ran {wall:.2f} s, worker peak {peak:,.0f} MB"
        case TaskFailed(task=task, error_type=kind, error=error, attempts=attempts):
            return f"{task} failed on all {attempts} attempt(s): {kind}: {error}"
        case WebhookRequested(kind=kind, url=url, queue=queue):
            return f"{kind} to {url}, on {queue}"
        case WebhookAttempted():
            return _attempted(event)
        case WebhookDelivered(status_code=code, attempts=attempts):
            return f"HTTP {code} on attempt {attempts}"
        case WebhookAbandoned(attempts=attempts, reason=reason):
            return f"after {attempts} attempt(s): {reason}"
        case JobCompleted(summary=summary):
            return summary
        case JobFailed(stage=stage, reason=reason):
            return f"{stage}: {reason}"
        case JobCancelled(cancelled_by=who, reason=reason):
            return f"by {who}: {reason}"
    return ""


def _attempted(e: WebhookAttempted) -> str:
    answer = e.error or f"HTTP {e.status_code}"
    retry = f"; next attempt in {e.retry_in_s:g} s" if e.retry_in_s is not None else ""
    return f"attempt {e.attempt} to {e.url}: {answer} in {e.duration_ms:.0f} ms{retry}"


def _widened(tolerances: list[Tolerance]) -> str:
    """Each output whose tolerance the reference's own spread widened, at its widest; '' when none was."""
    widest: dict[str, Tolerance] = {}
    for t in tolerances:
        if t.spread > 0 and (t.output not in widest or t.atol > widest[t.output].atol):
            widest[t.output] = t
    return "".join(f"; {t.output} within atol {t.atol:.3g} + rtol {t.rtol:.3g} x |ref|, as {t.reason}"
                   for t in widest.values())


def _replay_mark(replay: bool) -> str:
    """First on the line, so that a line cut to the terminal's width still says it was replayed."""
    return "[REPLAY] " if replay else ""


def _params(params: dict | None) -> str:
    return " ".join(f"{k}={v}" for k, v in (params or {}).items())


def _measured(e: ConfigMeasured) -> str:
    rates = f"{e.gbps:,.0f} GB/s" + (f", {e.tflops:,.1f} TFLOP/s" if e.tflops is not None else "")
    how = "1 sample, abandoned: slower than the best" if e.abandoned else f"median of {len(e.samples_ms)}"
    return (_replay_mark(e.replay) + f"{_params(e.params)}: {e.median_ms:.4f} ms ({how}), {rates}, "
            f"{e.pct_of_peak:.0f}% of peak")


def _compared(e: KernelsCompared) -> str:
    timed = f"{len(e.candidate_samples_ms)} pairs" if len(e.candidate_samples_ms) > 1 else "tuning medians"
    against = "the best kernel: " if e.candidate_id == OVERALL else f"{e.candidate_id}: "
    what = "the submitted one" if e.candidate_id == OVERALL else "the best so far"
    return (_replay_mark(e.replay) + f"{against}{speedup_text(e.speedup, e.speedup_ci)} {what} "
            f"({e.incumbent_ms:.4f} -> {e.candidate_ms:.4f} ms, {timed} on {e.device})"
            + (f"; {e.note}" if e.note else ""))


def _call(e: GeneratorCalled) -> str:
    spent = f", {e.input_tokens}+{e.output_tokens} tokens, ${e.cost_usd:.4f}" if e.input_tokens else ""
    retried = f", after {len(e.attempts)} retries" if e.attempts else ""
    return f"{e.kind} answered by {e.provider} ({e.model}) in {e.latency_ms:.0f} ms{spent}{retried}"


WIDE_STEPS = 120  # columns from which `steps_table` has room for the times before and after each step


def steps_table(opt: Optimisation, width: int = 80) -> Group:
    """One row per step the job acted on: what it tried and what it cost or gained, within `width` columns (the
    times before and after, and the change, only when there is room); then why each step not kept was not."""
    wide = width >= WIDE_STEPS
    table = Table(title="optimisation steps", box=box.SIMPLE_HEAD)
    table.add_column("step", no_wrap=True, overflow="ellipsis", max_width=24)
    table.add_column("status", no_wrap=True)
    if wide:
        for name in ("before ms", "after ms", "change"):
            table.add_column(name, no_wrap=True, justify="right")
    table.add_column("speedup [95% CI]", no_wrap=True)
    table.add_column("best params", overflow="fold", min_width=16)
    reasons = []
    for r in opt.steps:
        colour = {"accepted": "green", "discarded": "red"}.get(r.status, "yellow")
        change = f"{(r.old_ms - r.new_ms) / r.old_ms:+.1%}" if r.old_ms and r.new_ms else "-"
        times = [_ms(r.old_ms), _ms(r.new_ms), change] if wide else []
        table.add_row(Text(r.step.id), Text(r.status, style=colour), *times,
                      speedup_text(r.speedup, r.speedup_ci) if r.speedup is not None else "-",
                      Text("\n".join(f"{k}={v}" for k, v in r.best_params.items()))
                      if r.status == "accepted" and r.best_params else "-")
        if r.status != "accepted" and r.reason:
            reasons.append(Text(f"{r.step.id} ({r.status}): {r.reason}"))
    return Group(table, *reasons)


def _shard(e: ShardTuned) -> str:
    busy = 100 * e.gpu_busy_s / e.wall_s if e.wall_s else 0.0
    return (_replay_mark(e.replay) + f"{e.configs} configurations ({e.measured} measured, {e.failed} rejected) in "
            f"{e.wall_s:.2f} s on {e.device}; compile {e.compile_s:.2f} s over the pool, GPU busy {busy:.0f}%, first "
            f"result after {e.first_result_s:.2f} s"
            + (f", {e.host_replacements} GPU process(es) replaced" if e.host_replacements else ""))


def progress_lines(space: SpaceProgress, width: int = 80) -> list[str]:
    """A search's progress in lines of at most `width` columns (cut short with …): configurations done of the
    total, the time left and the rejections by stage; then, once there is one, the best so far with its
    parameters."""
    eta = "done" if space.finished else f"ETA {_duration(space.eta_s())}"
    done = _replay_mark(space.replay) + f"{_label(space)} {space.done}/{space.total}"
    counts = ", ".join(p for p in (done, eta, _rejections(space)) if p)
    return [_cut(line, width) for line in (counts, _best(space)) if line]


def _cut(line: str, width: int) -> str:
    return line if len(line) <= width else line[:width - 1] + "…"


def progress_display(space: SpaceProgress | None, spinner: Spinner) -> RenderableType:
    """The live display of a search, each line cut to the terminal's width: a bar with done of total and the
    time left, the best so far, the rejections by stage; before any search, that the job is being worked on."""
    head = Table.grid(padding=(0, 1))
    if space is None:
        head.add_row(spinner, "working…")
        return head
    head.add_row(spinner, Text(_replay_mark(space.replay) + _label(space), no_wrap=True),
                 ProgressBar(total=space.total or 1, completed=space.done, width=24),
                 Text(f"{space.done}/{space.total}  ETA {_duration(space.eta_s())}", no_wrap=True))
    return Group(head, *(Text(line, no_wrap=True, overflow="ellipsis")
                         for line in (_best(space) or "best: none yet", _rejections(space) or "rejected: none")))


def _label(space: SpaceProgress) -> str:
    return "tuning" if space.candidate_id == SUBMITTED else f"tuning {space.candidate_id}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}" if minutes >= 60 else f"{minutes}:{secs:02d}"


def _rejections(space: SpaceProgress) -> str:
    if not space.rejected:
        return ""
    stages = ", ".join(f"{stage} {count}" for stage, count in space.rejected.most_common())
    return f"{space.rejected.total()} rejected ({stages})"


def _best(space: SpaceProgress) -> str:
    if space.best is None:
        return ""
    return f"best {space.best.median_ms:.4f} ms: {_params(space.best.params)}"


def events_table(events: list[Event]) -> Table:
    table = Table(title="events")
    for name in ("#", "position", "time (UTC)", "event", "v"):
        table.add_column(name, no_wrap=True)
    table.add_column("detail", min_width=24)
    for e in events:
        table.add_row(str(e.stream_version), str(e.position), e.occurred_at.strftime("%H:%M:%S.%f")[:-3], e.type,
                      str(e.version), Text(describe(e)))
    return table


WIDE_JOBS = 150  # columns from which `jobs_table` has room for every column; below, it shows the essential ones


def jobs_table(jobs: list[JobView], width: int = 80) -> Table:
    """One line per job, within `width` columns: the full job id (to copy), what ran and how it went; the run,
    baseline, device and submission time only when there is room for them."""
    wide = width >= WIDE_JOBS
    table = Table(title="jobs", box=box.SIMPLE_HEAD)
    table.add_column("job", no_wrap=True, min_width=12)
    table.add_column("kernel", no_wrap=True, overflow="ellipsis", max_width=None if wide else 18)
    table.add_column("strategy", no_wrap=True, overflow="ellipsis")
    if wide:
        table.add_column("run", no_wrap=True, overflow="ellipsis")
    table.add_column("status", no_wrap=True)
    if wide:
        table.add_column("baseline ms", no_wrap=True, justify="right")
    table.add_column("best ms", no_wrap=True, justify="right")
    table.add_column("speedup", no_wrap=True, justify="right")
    if wide:
        table.add_column("device", no_wrap=True, overflow="ellipsis")
        table.add_column("submitted (UTC)", no_wrap=True, min_width=19)
    for job in jobs:
        run = [Text(job.run or "-")] if wide else []
        baseline = [_ms(job.baseline_ms)] if wide else []
        device = [Text((job.device or "-") + (" [REPLAY]" if job.replay else "")),
                  job.submitted_at.strftime("%Y-%m-%d %H:%M:%S") if job.submitted_at else "-"] if wide else []
        table.add_row(job.job_id, Text(job.spec.kernel_name if job.spec else "?"),
                      job.spec.strategy.name if job.spec else "?", *run, _status(job), *baseline,
                      _ms(job.best_ms), f"{job.speedup:.2f}x" if job.speedup else "-", *device)
    return table


def job_facts(job: JobView) -> Table:
    """One job as a listing, a fact a line: what `kforge show` prints."""
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold", no_wrap=True)
    facts.add_column(overflow="fold")
    spec = job.spec
    rows = [("job", job.job_id), ("kernel", spec.kernel_name if spec else "?"),
            ("strategy", spec.strategy.name if spec else "?"), ("status", Text.from_markup(_status(job))),
            ("run", job.run),
            ("submitted (UTC)", job.submitted_at.strftime("%Y-%m-%d %H:%M:%S") if job.submitted_at else None),
            ("device", (job.device or "") + (" [REPLAY]" if job.replay else "") or None),
            ("baseline ms", _ms(job.baseline_ms) if job.baseline_ms else None),
            ("best ms", _ms(job.best_ms) if job.best_ms else None), ("best params", _params(job.best_params) or None),
            ("speedup", f"{job.speedup:.2f}x" if job.speedup else None), ("summary", job.summary),
            ("failure", f"{job.failed_stage}: {job.failure}" if job.failure else None),
            ("unreadable", job.unreadable)]
    for name, value in rows:
        if value is not None:
            facts.add_row(name, value if isinstance(value, Text) else Text(value))
    return facts


def _status(job: JobView) -> str:
    colour = {"completed": "green", "failed": "red"}.get(job.status, "yellow")
    return f"[{colour}]{job.status}[/{colour}]"


def comparison_table(comparison: Comparison) -> Table:
    table = Table("kernel", "baseline ms", "current ms", "change", "result", "p", title=(
        f"{comparison.baseline} -> {comparison.current} ({comparison.metric} times; significant: "
        f">= {comparison.threshold_percent:g}% and p < {comparison.alpha:g})"))
    colours = {ChangeType.REGRESSION: "red", ChangeType.IMPROVEMENT: "green"}
    for row in comparison.kernels:
        colour = colours.get(row.change_type, "yellow")
        table.add_row(escape(row.kernel), _ms(row.baseline_time_ms), _ms(row.current_time_ms),
                      f"{row.change_percent:+.1f}%" if row.change_percent is not None else "-",
                      f"[{colour}]{row.change_type.value}[/{colour}]",
                      f"{row.p_value:.3g}" if row.p_value is not None else "-")
    return table


def comparison_summary(comparison: Comparison) -> str:
    s = comparison.summary
    overall = f", overall {s.overall_change_percent:+.1f}%" if s.overall_change_percent is not None else ""
    return (f"{s.total} kernels: {s.regressions_count} regressions, {s.improvements_count} improvements, "
            f"{s.unchanged_count} unchanged, {s.new_count} new, {s.removed_count} removed{overall}")


def suggestions_table(suggestions: list[OptimizationSuggestion]) -> Table:
    table = Table("priority", "type", "suggestion", "evidence", "how", "expected", title="optimisation suggestions")
    colours = {"critical": "red", "high": "magenta", "medium": "yellow", "low": "dim"}
    for s in suggestions:
        colour = colours[s.priority.value]
        table.add_row(f"[{colour}]{s.priority.value}[/{colour}]", s.type.value, escape(s.description),
                      escape(s.evidence), escape(s.implementation_hint), escape(s.expected_improvement))
    return table


def profile_table(profile: PipelineProfile) -> Table:
    jobs = f"{len(profile.jobs)} job" + ("s" if len(profile.jobs) != 1 else "")
    table = Table("stage", "seconds", "% of total", "tasks", title=f"pipeline profile of {jobs}: {profile.total_s:.2f} "
                  f"worker-seconds, {profile.wall_s:.2f} s wall-clock")
    for stage in profile.stages:
        marker = " [red]bottleneck[/red]" if stage.stage in profile.bottlenecks else ""
        table.add_row(stage.stage, f"{stage.seconds:.2f}", f"{stage.percent:.1f}%{marker}", str(stage.tasks))
    return table


def profile_facts(profile: PipelineProfile) -> str:
    rate = f"{100 * profile.cache_hit_rate:.1f}% ({profile.cache_hits}/{profile.compiles})" \
        if profile.cache_hit_rate is not None else "no compilations"
    memory = f"{profile.peak_worker_memory_mb:,.0f} MB" if profile.peak_worker_memory_mb is not None else "not recorded"
    lines = [f"compile cache hit rate: {rate}", f"LLM: {profile.llm_calls} calls, {profile.tokens} tokens, "
             f"${profile.cost_usd:.4f}", f"peak worker memory: {memory}"]
    if profile.tasks_unprofiled:
        lines.append(f"{profile.tasks_unprofiled} requests have no profile record yet (running, or recorded by an "
                     "older kforge): their time is not counted")
    return "\n".join(lines)


def slow_table(kernels: list[KernelResult], threshold: float) -> Table:
    table = Table("kernel", "best speedup", "against", "best ms", "% of peak", "job", "strategy",
                  title=f"kernels below {threshold:g}x")
    for r in kernels:
        table.add_row(escape(r.kernel), f"{r.speedup_vs_reference:.2f}x",
                      "reference" if r.reference_ms else "baseline", _ms(r.best.median_ms if r.best else None),
                      f"{r.best.pct_of_peak:.0f}%" if r.best and r.best.pct_of_peak is not None else "-", r.job_id,
                      r.strategy)
    return table


def _ms(value: float | None) -> str:
    return f"{value:.4f}" if value is not None else "-"
