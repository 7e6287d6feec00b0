"""kforge from Python: optimise a kernel and read every report, in the embedded mode by default (or against
the services when REDIS_URL and DATABASE_URL are set).

    from kforge import make_kernel_tunable
    tuned_kernel, best_params, tracker = make_kernel_tunable("examples/vector_add.cu", strategy="explicit")
    print(tracker.get_total_improvement())
"""
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kforge.infer_spec import InferenceError, InferredSpec, infer_spec
from kforge.job_files import write_job_files
from kforge.specfile import SpecError, load_spec, spec_path_for
from shared.application import report_queries as queries
from shared.application import runtime
from shared.application.jobs import (Admission, AdmissionRefused, JobFinished, NoProgress, QueueFull, UnknownJob,
                                     cancel_job, follow_job, job_events, resolve_job_id, submit_job)
from shared.domain.errors import field_errors
from shared.domain.events import Event
from shared.domain.projections import project_job
from shared.domain.reports.comparison import Comparison
from shared.domain.reports.profile import DEFAULT_BOTTLENECK_SHARE, PipelineProfile
from shared.domain.reports.results import KernelResult
from shared.domain.reports.suggestions import OptimizationSuggestion
from shared.domain.reports.tracker import PerformanceTracker, performance_tracker
from shared.domain.spec import CandidateSpec, KernelSpec, ParamValue
from shared.domain.steps import project_optimisation


class KforgeError(RuntimeError):
    """A submission or a job that could not give what was asked; the message says why and what to change."""


def _runtime() -> runtime.Runtime:
    import kforge.worker  # noqa: F401  (embedded mode runs every service's tasks in this process)

    return runtime.current()


def build_spec(kernel: str | Path | None = None, spec: KernelSpec | dict | str | Path | None = None,
               on_inferred: Callable[[InferredSpec], None] = lambda inferred: None, **overrides: Any) -> KernelSpec:
    """A spec from a .cu path (its .yaml beside it unless `spec` names one), or from kernel source text with
    `spec` as a mapping, a KernelSpec or a YAML path; `overrides` replace top-level fields (strategy=...).
    With no spec at all, it is inferred from the kernel's signature (kernel_name= picks the kernel, sizes= sets
    sizes) and handed to `on_inferred` before the overrides apply."""
    if kernel is None and spec is None:
        raise KforgeError("kernel: give a .cu path or the kernel's source")
    try:
        if spec is None and _without_spec(kernel):
            inferred = infer_spec(_source(kernel), overrides.pop("kernel_name", None), overrides.pop("sizes", None))
            on_inferred(inferred)
            data = {**inferred.data, "source": _source(kernel)}
        elif isinstance(spec, KernelSpec | dict):
            data = spec.model_dump() if isinstance(spec, KernelSpec) else dict(spec)
            if kernel is not None:
                data["source"] = _source(kernel)
        else:
            path = Path(kernel) if kernel is not None and _is_path(kernel) else None
            data = load_spec(path, Path(spec) if spec is not None else None).model_dump()
            if kernel is not None and path is None:
                data["source"] = str(kernel)
        if isinstance(overrides.get("strategy"), str):
            overrides["strategy"] = {"name": overrides["strategy"]}
        return KernelSpec.model_validate(merged(data, overrides))
    except (SpecError, InferenceError) as exc:
        raise KforgeError(str(exc)) from None
    except ValidationError as exc:
        raise KforgeError("invalid spec: " + "; ".join(f"{e.field}: {e.message}"
                                                       for e in field_errors(exc.errors()))) from None


def merged(base: dict, overrides: dict) -> dict:
    """Overrides of nested fields keep the rest: benchmark={"replay": True} keeps the spec's other settings."""
    return {**base, **{k: merged(base.get(k) or {}, v) if isinstance(v, dict) else v for k, v in overrides.items()}}


def _is_path(kernel: str | Path) -> bool:
    return isinstance(kernel, Path) or ("__global__" not in kernel and str(kernel).endswith((".cu", ".cuh")))


def _without_spec(kernel: str | Path) -> bool:
    """Source text, or a .cu file with no spec beside it (a missing file is left for load_spec to report)."""
    return not _is_path(kernel) or (Path(kernel).is_file() and spec_path_for(Path(kernel)) is None)


def _source(kernel: str | Path) -> str:
    return Path(kernel).read_text() if _is_path(kernel) else str(kernel)


def optimise(spec: KernelSpec, run: str | None = None, timeout_s: float = 3600,
             on_event: Callable[[Event], None] = lambda e: None) -> str:
    """Submit and follow a job to its end; returns the job id."""
    rt = _runtime()
    try:
        job_id = submit_job(rt.store, rt.bus, spec, submitted_by="python", run=run,
                            admission=Admission.of(rt.settings), owner=rt.owner)
    except AdmissionRefused as exc:
        raise KforgeError("invalid spec: " + "; ".join(map(str, exc.errors))) from None
    except QueueFull as exc:
        raise KforgeError(str(exc)) from None
    try:
        view = follow_job(rt.store, job_id, on_event, timeout_s=timeout_s, stalled=rt.bus.stalled,
                          stall_s=rt.settings.stall_timeout_s)
    except NoProgress as exc:
        if stop_embedded_job(rt, job_id, f"stopped following: {exc.reason}", "python"):
            raise KforgeError(f"{exc}; it was cancelled") from None
        raise KforgeError(f"{exc}; it is left to the workers (is one serving each queue?): read it later with "
                          f"kforge.tracker({job_id!r})") from None
    if not view.finished:
        if stop_embedded_job(rt, job_id, f"not finished within the {timeout_s:.0f} s timeout", "python"):
            raise KforgeError(f"job {job_id} still {view.status} after {timeout_s:.0f} s: cancelled, as its "
                              "in-process workers stop with this process")
        raise KforgeError(f"job {job_id} still {view.status} after {timeout_s:.0f} s: read it later with "
                          f"kforge.tracker({job_id!r})")
    rt.bus.wait_idle()  # embedded: the in-process workers' last records (TaskProfiled) land before reading
    return job_id


def stop_embedded_job(rt: runtime.Runtime, job_id: str, reason: str, cancelled_by: str) -> bool:
    """Cancel a job no longer followed in embedded mode, where its workers are threads of this process that
    end with it: left as it is, it would stay unfinished for ever. Returns whether it was cancelled."""
    if not rt.settings.embedded:
        return False  # worker processes carry on with it
    try:
        cancel_job(rt.store, rt.bus, job_id, reason=reason, cancelled_by=cancelled_by)
    except JobFinished:
        return False
    return True


def make_kernel_tunable(kernel: str | Path, spec: KernelSpec | dict | str | Path | None = None, *,
                        run: str | None = None, timeout_s: float = 3600, out_dir: str | Path | None = None,
                        show_overview: bool = True, **overrides: Any
                        ) -> tuple[CandidateSpec, dict[str, ParamValue], PerformanceTracker]:
    """Optimise a kernel; returns (tuned_kernel, best_params, performance_tracker) as LLM Kernel Tuner does.

    The tuned kernel is the fastest proven-correct version (its source, tune_params and restrictions); the
    best parameters are those it was fastest with. A failed job raises KforgeError with the reason. Without a
    spec, the one inferred from the kernel's signature is used (printed first when show_overview)."""
    kernel_spec = build_spec(kernel, spec, on_inferred=_print_inferred if show_overview else lambda inferred: None,
                             **overrides)
    job_id = optimise(kernel_spec, run=run, timeout_s=timeout_s)
    events = job_events(_runtime().store, job_id)
    tracker = performance_tracker(events)
    if tracker.status == "failed":
        view = project_job(events, job_id)
        raise KforgeError(f"job {job_id} failed at {view.failed_stage}: {view.failure}")
    if show_overview:
        print(tracker.generate_overview())
    if out_dir is not None:
        write_job_files(events, Path(out_dir) / job_id)
    best = project_optimisation(events).best
    if tracker.steps:
        best_params = dict(tracker.steps[-1].best_tune_params)
    else:  # nothing beat the submitted kernel: its own values of what it tunes
        defaults = kernel_spec.baseline_params()
        best_params = {k: defaults[k] for k in kernel_spec.tune_params if k in defaults} or defaults
    return best.candidate, best_params, tracker


def _print_inferred(inferred: InferredSpec) -> None:
    print(f"no spec given: kforge inferred this one from the kernel's signature\n{inferred.to_yaml()}")


def tracker(job_id: str) -> PerformanceTracker:
    """A job's tracker (`job_id`: its id or any unique prefix of it, as everywhere here)."""
    return _reported(queries.job_tracker, _resolve(job_id))


def suggestions(job_id: str) -> list[OptimizationSuggestion]:
    return _reported(queries.job_suggestions, _resolve(job_id))


def compare(baseline: str, current: str, metric: str = "best", threshold_percent: float = 5.0,
            alpha: float = 0.05) -> Comparison:
    """Compare two runs: job ids, run names given at submission, or run files (.json) exported earlier."""
    return _reported(lambda store: queries.compare(store, baseline, current, metric,
                                                   threshold_percent=threshold_percent, alpha=alpha))


def profile(*job_ids: str, bottleneck_share: float = DEFAULT_BOTTLENECK_SHARE) -> PipelineProfile:
    """Where the time went: of the jobs named, or of every job."""
    return _reported(queries.profile, [_resolve(j) for j in job_ids], bottleneck_share)


def slow_kernels(threshold: float = 0.8) -> list[KernelResult]:
    return _reported(queries.slow_kernels, threshold)


def cancel(job_id: str, reason: str = "cancelled on request") -> None:
    """Cancel an unfinished job; a KforgeError if it has ended or does not exist."""
    rt = _runtime()
    job_id = _resolve(job_id)
    try:
        cancel_job(rt.store, rt.bus, job_id, reason=reason, cancelled_by="python")
    except JobFinished as exc:
        raise KforgeError(str(exc)) from None
    except KeyError:
        raise KforgeError(f"no job {job_id}: `kforge jobs` lists them") from None


def export(job_id: str, directory: str | Path) -> list[Path]:
    """Write a job's files (optimised kernel, history JSON, transcript, plots) into `directory`."""
    return write_job_files(_reported(queries.events_of, _resolve(job_id)), Path(directory))


def _resolve(job: str) -> str:
    """The job a unique prefix of its id names, as the CLI and the gateway's comparisons take one."""
    try:
        return resolve_job_id(_runtime().store, job)
    except UnknownJob as exc:
        raise KforgeError(f"{exc}; `kforge jobs` lists them") from None


def _reported(query, *arguments):
    """A report from the store; a missing job or a bad argument is a KforgeError saying which."""
    try:
        return query(_runtime().store, *arguments)
    except (queries.ReportError, ValueError) as exc:
        raise KforgeError(str(exc)) from None
