"""Every event kforge records, in one place.

An event is an immutable fact named in the past tense. The envelope (`event_id`, `stream_id`,
`stream_version`, `position`, `occurred_at`) is common; the rest of a class's fields are its payload.
`type` and `version` are class-level: the version is the payload's schema version, and an older stored
payload is upcast on read, one version step at a time, by the registry's upcasters. An event type this
build does not know, or a newer version of one, is refused with a clear error rather than guessed at.
"""
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar
from uuid import UUID, NAMESPACE_URL, uuid4, uuid5

from pydantic import BaseModel, ConfigDict, Field, computed_field

from shared.domain.spec import STORED, CandidateSpec, KernelSpec, ParamValue, TuningStep

ENVELOPE = ("event_id", "stream_id", "stream_version", "position", "occurred_at")


class Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    schema_version: ClassVar[int] = 1

    event_id: UUID = Field(default_factory=uuid4)
    stream_id: str
    stream_version: int | None = Field(None, description="1-based index in its stream, set by the store")
    position: int | None = Field(None, description="global order, set by the store")
    occurred_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def type(self) -> str:
        return type(self).__name__

    @computed_field  # type: ignore[prop-decorator]
    @property
    def version(self) -> int:
        return self.schema_version

    def payload(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={*ENVELOPE, "type", "version"})


def derived_id(*parts: object) -> UUID:
    """A deterministic event id: a redelivered message recomputes the same ids, so the store's
    idempotency on event_id turns its second append into a no-op."""
    return uuid5(NAMESPACE_URL, "kforge:" + "/".join(str(p) for p in parts))


# --- jobs -------------------------------------------------------------------------------------------
LOCAL_TENANT = "local"  # the CLI's and the Python API's jobs, and those of a gateway without API keys


class JobSubmitted(Event):
    """v2 adds `run`: jobs submitted under one run name are compared as a set (`kforge compare`).
    v3 adds `tenant`, whose the job is: the gateway records a hash of the submitting API key (never the
    key), local submissions LOCAL_TENANT."""

    schema_version: ClassVar[int] = 3
    spec: KernelSpec
    submitted_by: str = "cli"
    run: str | None = None
    tenant: str = LOCAL_TENANT


class JobCompleted(Event):
    summary: str


class JobFailed(Event):
    stage: str
    reason: str


class JobCancelled(Event):
    """Stopped on request: no further work is started for it, and running work stops at its next check."""

    reason: str
    cancelled_by: str  # cli | http | python | kforge (the process that ran it in-process had ended)


JOB_ENDS = (JobCompleted, JobFailed, JobCancelled)  # a job ends with exactly one of these


# --- baseline ---------------------------------------------------------------------------------------
class BaselineRequested(Event):
    queue: str
    params: dict[str, ParamValue]


class KernelCompiled(Event):
    request_id: UUID
    arch: str
    compile_ms: float
    cache_key: str
    cache_hit: bool = False  # compile_ms is then the time of the original compilation
    log: str = ""


class DeviceFacts(BaseModel):
    """What the benchmark knew of its GPU: the roofline's peaks and the SMs a launch must fill."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    sm_count: int | None = None
    dram_gbps: float
    fp32_tflops: float
    l2_mb: float


class Tolerance(BaseModel):
    """How one output was compared with the reference's, |out - ref| <= atol + rtol x |ref|, and why
    (shared/domain/tolerance.py): `spread` is how far the reference's own runs on the same inputs disagreed,
    absolutely and relative to |ref|; a nonzero one widens the tolerance of an output left unset in the spec."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    output: str
    atol: float
    rtol: float
    spread: float = 0.0
    spread_rel: float = 0.0
    reason: str


class BaselineMeasured(Event):
    """v2 adds `facts`, the device's peaks and SM count (none on a device without the attributes).
    v3 adds `tolerances`, what each output of every configuration is checked against the reference with, and
    why (none recorded before v3, nor in replay)."""

    schema_version: ClassVar[int] = 3
    request_id: UUID
    device: str
    params: dict[str, ParamValue]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    samples_ms: list[float]
    median_ms: float
    replay: bool = False
    facts: DeviceFacts | None = None
    tolerances: list[Tolerance] = Field(default_factory=list)


class BaselineFailed(Event):
    request_id: UUID
    stage: str  # compile | device | data | the check that failed: load | launch | output | timeout | crashed | replay
    reason: str
    log: str = ""


# --- optimisation steps: the planner asks the generator, the generator answers ------------------------
class GenerationRequested(Event):
    """Ask the generator for a plan, a verdict on a step, a breakdown of one, or a rewrite by one.

    `kind` is plan | replan | validate | breakdown | rewrite; `step` is the step concerned (none for plans);
    `candidate_id` names the rewrite to come; `focus` is the performance category steering a refinement."""

    queue: str
    kind: str
    step: TuningStep | None = None
    candidate_id: str | None = None
    focus: str | None = None


class GeneratorCalled(Event):
    """One call to a generator provider, answered or not: the full transcript and what it cost."""

    request_id: UUID
    kind: str
    step_id: str | None
    provider: str  # anthropic | rules | replay
    model: str
    system: str
    prompt: str
    response: str
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float = 0.0
    cost_usd: float = 0.0
    attempts: list[str] = Field(default_factory=list, description="why earlier attempts were retried")
    error: str | None = None  # why the call got no answer


class PlanProposed(Event):
    """The steps a plan or replan proposes, in the order they are to be tried; none means nothing left."""

    request_id: UUID
    kind: str  # plan | replan
    steps: list[TuningStep]


class StepValidated(Event):
    """Whether a step is a real, tunable change of the code worth making now (profiling or compiler flags are not)."""

    request_id: UUID
    step_id: str
    valid: bool
    reason: str


class StepBrokenDown(Event):
    """A step replaced by smaller ones (none: it is small enough to execute as it is)."""

    request_id: UUID
    step_id: str
    substeps: list[TuningStep]


class CandidateGenerated(Event):
    """A rewrite of the current kernel by a step, its parameter names reconciled with its code."""

    request_id: UUID
    step_id: str
    candidate_id: str
    candidate: CandidateSpec
    provider: str
    renames: dict[str, str] = Field(default_factory=dict, description="tune parameter names changed to match the code")


class GenerationFailed(Event):
    request_id: UUID
    kind: str
    step_id: str | None
    reason: str


class StepSkipped(Event):
    """A step not executed: judged not worth it, or a step it depends on brought no improvement."""

    step_id: str
    reason: str


class StepAccepted(Event):
    """A step's tuned candidate beat the best kernel so far beyond the noise and becomes the best.

    v2 adds `speedup` (best so far / candidate, from their interleaved timing) and `speedup_ci`, its 95%
    interval; None where none could be measured (no device, or a step accepted before v2)."""

    schema_version: ClassVar[int] = 2
    step_id: str
    candidate_id: str
    old_time_ms: float
    new_time_ms: float
    best_params: dict[str, ParamValue]
    speedup: float
    speedup_ci: tuple[float, float] | None


class StepDiscarded(Event):
    """A step whose candidate failed or was no faster; the best kernel stays what it was."""

    step_id: str
    candidate_id: str | None
    stage: str  # generate | verify | tune | compare
    reason: str
    new_time_ms: float | None = None


# --- verification: a candidate computes what the submitted kernel computes, or it is rejected saying why ---
class VerificationRequested(Event):
    queue: str
    candidate_id: str
    candidate: CandidateSpec


class TrialPassed(BaseModel):
    """One trial of a verified candidate: where it ran, with which seed, how close it came."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    label: str
    sizes: dict[str, int]
    seed: int
    max_abs_error: float
    max_rel_error: float
    tolerances: list[Tolerance] = Field(default_factory=list, description="per output: within what, and why")


class CandidateVerified(Event):
    """v2 adds each trial's `tolerances`."""

    schema_version: ClassVar[int] = 2
    request_id: UUID
    candidate_id: str
    device: str
    trials: list[TrialPassed]
    skipped: list[str] = Field(default_factory=list, description="trials the submitted kernel itself failed, and why")
    max_abs_error: float
    max_rel_error: float


class CandidateRejected(Event):
    """v2 adds `tolerances`: those the outputs were judged with on the trial that showed it (none for a
    rejection made before the outputs were compared)."""

    schema_version: ClassVar[int] = 2
    request_id: UUID
    candidate_id: str
    check: str  # compile | signature | launch | timeout | crashed | out_of_bounds | ... | reference
    reason: str
    trial: str | None = None  # the trial that showed it: label, sizes and seed
    log: str = ""  # NVRTC's log for a compile rejection
    tolerances: list[Tolerance] = Field(default_factory=list)


class SanitizerCheck(BaseModel):
    tool: str  # memcheck | racecheck | initcheck | synccheck
    verdict: str  # passed | failed (rejects the candidate) | error (the run itself broke) | timeout
    first_error: str = ""  # the tool's first error line, or why the run gave no verdict
    seconds: float


class SanitizerChecked(Event):
    """compute-sanitizer's checks of a verified candidate, one small launch each, recorded whether they ran
    or not: `tool_path` None means the tool is not installed and nothing was sanitised."""

    request_id: UUID
    candidate_id: str
    tool_path: str | None
    sizes: dict[str, int]  # the small trial's sizes
    checks: list[SanitizerCheck]
    note: str


class VerificationIncomplete(Event):
    """Without a GPU only the checks that need none ran: the candidate is neither proven nor rejected."""

    request_id: UUID
    candidate_id: str
    passed: list[str]
    reason: str


# --- tuning: searching a kernel's tune_params for the fastest configuration that computes the right answer ---
class TuningRequested(Event):
    """Search `shard` of `shards` of a candidate's space (the submitted kernel's: candidate_id "submitted")."""

    queue: str
    candidate_id: str = "submitted"
    shard: int = 0
    shards: int = 1


class ConfigMeasured(Event):
    """A configuration that ran, produced the reference output and was timed."""

    request_id: UUID
    params: dict[str, ParamValue]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    samples_ms: list[float]
    median_ms: float
    min_ms: float
    mean_ms: float
    stddev_ms: float
    ci95_ms: float | None  # half-width of the 95% CI of the mean; None with one sample
    abandoned: bool = False  # stopped early: its samples clearly slower than the best so far
    max_abs_error: float = 0.0
    gbps: float = 0.0
    tflops: float | None = None
    pct_of_peak: float = 0.0
    compile_ms: float = 0.0
    cache_hit: bool = False
    replay: bool = False


class ConfigFailed(Event):
    """A configuration that may never be ranked, with the stage and the driver's or compiler's words."""

    request_id: UUID
    params: dict[str, ParamValue]
    stage: str  # compile | load | launch | output | roofline | timeout | crashed
    reason: str
    log: str = ""
    replay: bool = False


class ShardTuned(Event):
    """One worker's part of a space is done; timings are wall-clock seconds on that worker."""

    request_id: UUID
    device: str
    strategy: str
    configs: int
    measured: int
    failed: int
    best_params: dict[str, ParamValue] | None
    best_ms: float | None
    wall_s: float
    compile_s: float  # summed compile time of the configurations (spread over the pool's processes)
    gpu_busy_s: float  # time the GPU process spent checking and timing
    first_result_s: float  # from start to the first configuration measured
    cache_hits: int = 0
    host_replacements: int = 0  # GPU processes replaced after a fault, hang or crash
    replay: bool = False
    error: str | None = None  # why the shard could not run at all (no device, a failing reference)


class TuningCompleted(Event):
    """Every shard of a space is done: the merged best."""

    candidate_id: str
    best_params: dict[str, ParamValue] | None
    best_time_ms: float | None
    configs_evaluated: int
    configs_failed: int
    speedup: float | None  # baseline time / best time


# --- comparison: a tuned candidate against the best kernel so far, timed in turn in one GPU session -----
class ComparisonRequested(Event):
    """Time the best kernel so far (`incumbent`, with its params) and the candidate's best configuration
    interleaved on one GPU. The tuning's medians (`incumbent_ms`, `candidate_ms`) are what the step is judged
    on where no device can time them."""

    queue: str
    candidate_id: str
    incumbent: CandidateSpec
    candidate: CandidateSpec
    incumbent_ms: float
    candidate_ms: float


class KernelsCompared(Event):
    """The paired timing of a ComparisonRequested: `speedup` is incumbent time / candidate time and
    `speedup_ci` its 95% interval, None when unavailable (`note` says why). `error`: the comparison could
    not run (a launch failed, an output differed), and the candidate is not kept."""

    request_id: UUID
    candidate_id: str
    device: str
    incumbent_samples_ms: list[float]
    candidate_samples_ms: list[float]
    incumbent_ms: float
    candidate_ms: float
    speedup: float | None
    speedup_ci: tuple[float, float] | None
    note: str = ""
    replay: bool = False
    error: str | None = None


# --- the work of a worker task, for the pipeline profile ----------------------------------------------
class TaskProfiled(Event):
    """One task a worker ran for a request of this job: when it started (queue wait is the time since the
    request), how long it took and the worker process's peak memory so far."""

    request_id: UUID
    task: str  # the Celery task name, e.g. benchmark.tune
    worker: str  # host:pid
    started_at: datetime
    wall_s: float
    peak_rss_mb: float


class TaskFailed(Event):
    """A worker task raised what its handler did not expect, on its first attempt and on each of its retries
    (KFORGE_TASK_RETRIES): the request's answer, so nothing waits for another, and the planner ends the job.
    `request_id` is the request the task answered or, for the planner, the event it was reacting to. The
    traceback stays in the worker's log: an event holds what a user can act on."""

    request_id: UUID
    task: str  # the Celery task name, e.g. verifier.verify_candidate
    error_type: str  # e.g. ImportError
    error: str  # the exception's message
    attempts: int  # 1 + the retries made


# --- webhooks: a finished job is announced to its webhook_url, signed, retried with backoff ----------------
class WebhookRequested(Event):
    """Announce the job's end (`kind`: job.completed | job.failed | job.cancelled) to `url`."""

    queue: str
    url: str
    kind: str


class WebhookAttempted(Event):
    """One delivery attempt and what the receiver answered, or why there was no answer."""

    request_id: UUID
    attempt: int  # 1-based
    url: str
    status_code: int | None
    error: str | None
    duration_ms: float
    retry_in_s: float | None  # when the next attempt follows; None: none follows


class WebhookDelivered(Event):
    request_id: UUID
    attempts: int
    status_code: int


class WebhookAbandoned(Event):
    """No more attempts: every retry failed, the receiver said 410 Gone, or the URL is not allowed."""

    request_id: UUID
    attempts: int
    reason: str


# --- decoding, with explicit handling of unknown and newer events -------------------------------------
class UnknownEventType(LookupError):
    pass


class EventFromNewerVersion(LookupError):
    pass


@dataclass(frozen=True)
class Undecodable:
    """A stored event this build cannot read (an unknown type, a newer version, a payload that no longer
    validates), as read models that span jobs see it: in its place, so one such event marks its own job
    and not every job. It is no Event: nothing ever appends one."""

    position: int
    stream_id: str
    stream_version: int
    occurred_at: datetime
    type: str
    version: int
    reason: str

    def describe(self) -> str:
        return f"event {self.position} ({self.type} v{self.version}) cannot be read: {self.reason}"


Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


def _added_optional_field(payload: dict[str, Any]) -> dict[str, Any]:
    """The new version only added a field with a default: the older payload reads as it is."""
    return payload


def _accepted_before_intervals(payload: dict[str, Any]) -> dict[str, Any]:
    """A step accepted on the tuning's medians alone: its speedup is their ratio, with no interval."""
    return {**payload, "speedup": payload["old_time_ms"] / payload["new_time_ms"], "speedup_ci": None}


def _submitted_before_tenants(payload: dict[str, Any]) -> dict[str, Any]:
    """A job recorded before tenants were: it was local or on a gateway where every key saw every job, so it
    goes to the local tenant, which only admin keys see on a gateway with keys."""
    return {**payload, "tenant": LOCAL_TENANT}


class EventRegistry:
    """Maps stored (type, version, payload) back to event objects."""

    def __init__(self, types: Iterable[type[Event]], upcasters: dict[tuple[str, int], Upcaster] | None = None):
        self.types = {t.__name__: t for t in types}
        self.upcasters = upcasters or {}

    def decode(self, type_name: str, version: int, payload: dict[str, Any], envelope: dict[str, Any]) -> Event:
        cls = self.types.get(type_name)
        if cls is None:
            raise UnknownEventType(
                f"stored event {envelope.get('event_id')} has type {type_name!r}, which this kforge does not know; "
                "it was written by a newer or different kforge: upgrade this one"
            )
        if version > cls.schema_version:
            raise EventFromNewerVersion(
                f"stored {type_name} is version {version} but this kforge reads up to version {cls.schema_version}; "
                "upgrade kforge"
            )
        while version < cls.schema_version:
            step = self.upcasters.get((type_name, version))
            if step is None:
                raise EventFromNewerVersion(f"no upcaster for {type_name} from version {version}")
            payload, version = step(payload), version + 1
        return cls.model_validate({**payload, **envelope}, context=STORED)  # its shape, not today's rules


EVENTS = EventRegistry(
    [JobSubmitted, JobCompleted, JobFailed, BaselineRequested, KernelCompiled, BaselineMeasured, BaselineFailed,
     TuningRequested, ConfigMeasured, ConfigFailed, ShardTuned, TuningCompleted,
     VerificationRequested, CandidateVerified, CandidateRejected, VerificationIncomplete, SanitizerChecked,
     GenerationRequested, GeneratorCalled, PlanProposed, StepValidated, StepBrokenDown, CandidateGenerated,
     GenerationFailed, StepSkipped, StepAccepted, StepDiscarded, TaskProfiled, TaskFailed, JobCancelled,
     WebhookRequested, WebhookAttempted, WebhookDelivered, WebhookAbandoned, ComparisonRequested, KernelsCompared],
    upcasters={("JobSubmitted", 1): _added_optional_field, ("JobSubmitted", 2): _submitted_before_tenants,
               ("BaselineMeasured", 1): _added_optional_field, ("BaselineMeasured", 2): _added_optional_field,
               ("CandidateVerified", 1): _added_optional_field, ("CandidateRejected", 1): _added_optional_field,
               ("StepAccepted", 1): _accepted_before_intervals},
)
