"""Answer a generator request of a job: build the prompt from the job's events, ask the job's provider,
record the call (prompt, answer, tokens, cost, latency) and what the answer says, or why it says nothing
usable. Ids derive from the request, so a redelivered request appends nothing twice."""
import time
from uuid import UUID

from pydantic import ValidationError

from services.generator import answers, prompts
from services.generator.names import reconcile
from services.generator.providers import ProviderFailed, provider_for
from services.generator.retrieval import similar_optimisations
from shared.adapters.bus import Bus
from shared.adapters.eventstore import EventStore
from shared.adapters.settings import Settings
from shared.application.requests import answer_request
from shared.domain.errors import field_errors
from shared.domain.events import (CandidateGenerated, Event, GenerationFailed, GenerationRequested, GeneratorCalled,
                                  JobSubmitted, PlanProposed, StepBrokenDown, StepValidated, derived_id)
from shared.domain.expressions import names_in
from shared.domain.spec import CandidateSpec, KernelSpec, SharedMemorySpec, TuningStep
from shared.domain.steps import Optimisation, project_optimisation


def generate(store: EventStore, bus: Bus, job_id: str, request_id: UUID, settings: Settings) -> None:
    def compute(history: list[Event], submitted: JobSubmitted, request: GenerationRequested) -> list[Event]:
        calls = [e for e in history if isinstance(e, GeneratorCalled)]
        return _answer(store, settings, submitted, request, project_optimisation(history), calls)

    answer_request(store, bus, job_id, request_id, GenerationRequested, compute)


def _answer(store: EventStore, settings: Settings, submitted: JobSubmitted, request: GenerationRequested,
            opt: Optimisation, calls: list[GeneratorCalled]) -> list[Event]:
    spec = submitted.spec
    rid, step_id = request.event_id, request.step.id if request.step else None

    def failed(reason: str) -> GenerationFailed:
        return GenerationFailed(event_id=derived_id(rid, "GenerationFailed"), stream_id=request.stream_id,
                                request_id=rid, kind=request.kind, step_id=step_id, reason=reason)

    try:
        provider = provider_for(spec.generator, settings, store, calls, submitted.tenant)
    except ProviderFailed as exc:
        return [failed(str(exc))]
    examples = similar_optimisations(store, spec.source, spec.generator.rag_k, exclude_stream=request.stream_id,
                                     tenant=submitted.tenant)
    prompt = prompts.build(request, spec, opt, examples)
    started = time.perf_counter()
    record = dict(event_id=derived_id(rid, "GeneratorCalled"), stream_id=request.stream_id, request_id=rid,
                  kind=request.kind, step_id=step_id, provider=provider.name, system=prompt.system, prompt=prompt.text)
    try:
        answer = provider.complete(prompt)
    except ProviderFailed as exc:
        return [GeneratorCalled(**record, model=getattr(provider, "model", provider.name), response="",
                                latency_ms=_since(started), attempts=list(exc.attempts), error=str(exc)),
                failed(f"{provider.name}: {exc}")]
    call = GeneratorCalled(**record, model=answer.model, response=answer.text, input_tokens=answer.input_tokens,
                           output_tokens=answer.output_tokens, latency_ms=_since(started), cost_usd=answer.cost_usd,
                           attempts=list(answer.attempts))
    try:
        said = answers.parse(request.kind, answer.text)
    except answers.MalformedAnswer as exc:
        return [call, failed(f"the {provider.name} answer is unusable: {exc}")]
    common = dict(event_id=derived_id(rid, "answer"), stream_id=request.stream_id, request_id=rid)
    match request.kind:
        case "plan" | "replan":
            return [call, PlanProposed(**common, kind=request.kind, steps=_fresh_ids(said.steps, opt))]
        case "validate":
            return [call, StepValidated(**common, step_id=step_id, valid=said.valid, reason=said.reason)]
        case "breakdown":
            return [call, StepBrokenDown(**common, step_id=step_id, substeps=_fresh_ids(said.steps, opt))]
    try:
        candidate, renames = _candidate(said, request.step, spec, opt)
    except ValueError as exc:
        return [call, failed(f"the rewrite is not a usable candidate: {exc}")]
    return [call, CandidateGenerated(**common, step_id=step_id, candidate_id=request.candidate_id, candidate=candidate,
                                     provider=provider.name, renames=renames)]


def _candidate(rewrite: answers.Rewrite, step: TuningStep, spec: KernelSpec,
               opt: Optimisation) -> tuple[CandidateSpec, dict[str, str]]:
    """The rewrite as a candidate whose parameters match its code, checked like a submission would be."""
    current, given = opt.best.candidate, rewrite.settings
    space = given.get("tune_params") or {**(current.tune_params or spec.tune_params), **step.tune_params}
    shared = given.get("smem_args", current.smem_args) or spec.smem_args
    launched = given.get("problem_size", current.problem_size)
    geometry = [*(launched or spec.problem_size or []), *(d for k in ("grid_div_x", "grid_div_y", "grid_div_z")
                                              for d in given.get(k, getattr(current, k)) or []),
                *([] if shared is None else [SharedMemorySpec.model_validate(shared).size])]
    launch_reads = {name for expression in geometry for name in names_in(expression)}
    fixed = reconcile(rewrite.source, space, spec.block_size_names, launch_reads)
    defaults = {name: values[0] for name, values in fixed.tune_params.items()}
    chosen = {fixed.renames.get(k, k): v for k, v in (given.get("params") or {}).items()}
    # Default configuration: the space's first values, then what the best kernel ran with, then the answer's.
    params = {k: v for k, v in {**defaults, **opt.best.params, **chosen}.items() if k in fixed.tune_params}
    renames = {**fixed.renames, **{name: "(dropped: the code never reads it)" for name in fixed.dropped}}
    try:
        candidate = CandidateSpec(source=fixed.source, params=params, tune_params=fixed.tune_params,
                                  restrictions=given.get("restrictions", current.restrictions),
                                  smem_args=shared, problem_size=launched,
                                  **{k: given.get(k, getattr(current, k))
                                                       for k in ("grid_div_x", "grid_div_y", "grid_div_z")})
        spec.for_candidate(candidate)  # its names, expressions and kernel must make sense as a submission
    except ValidationError as exc:
        raise ValueError("; ".join(f"{e.field}: {e.message}" for e in field_errors(exc.errors()))) from None
    return candidate, renames


def _fresh_ids(steps: list[TuningStep], opt: Optimisation) -> list[TuningStep]:
    """Step ids are keys in the job's history: a repeated one gets a numbered suffix."""
    taken, fresh = {s.id for s in opt.planned} | {r.step.id for r in opt.steps}, []
    for step in steps:
        name, n = step.id, 2
        while name in taken:
            name, n = f"{step.id}-{n}", n + 1
        taken.add(name)
        fresh.append(step.model_copy(update={"id": name}))
    return fresh


def _since(started: float) -> float:
    return (time.perf_counter() - started) * 1e3
