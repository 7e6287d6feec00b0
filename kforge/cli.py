"""The `kforge` command line."""
import json
import os
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel

from kforge.render import describe, events_table, jobs_table, steps_table
from kforge.specfile import SpecError, load_spec
from shared import runtime
from shared.contracts import gpu_of
from shared.errors import field_errors
from shared.events import BaselineFailed, CandidateRejected, Event
from shared.jobs import follow_job, get_job, job_events, list_jobs, submit_job
from shared.projections import job_id_of
from shared.steps import project_optimisation

app = typer.Typer(help="Submit CUDA kernels; get back faster, proven-correct, tunable versions.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
console = Console(highlight=False)


def _runtime() -> runtime.Runtime:
    try:
        import kforge.worker  # noqa: F401  (embedded mode runs every service's tasks in this process)

        return runtime.current()
    except ValidationError as exc:
        console.print("[red]invalid setting[/red] in the environment:")
        for error in field_errors(exc.errors()):
            console.print(f"  [bold]{error.field}[/bold]: {error.message}")
        raise typer.Exit(2) from None


def _resolve(rt: runtime.Runtime, job: str) -> str:
    """Accept a unique prefix of a job id, as git accepts one of a commit."""
    matches = [job_id_of(s) for s in rt.store.stream_ids(f"job-{job}")] if job else []
    if len(matches) == 1:
        return matches[0]
    reason = "no job starts with" if not matches else f"{len(matches)} jobs start with"
    console.print(f"[red]{reason} {job!r}[/red]: `kforge jobs` lists them")
    raise typer.Exit(2)


@app.command()
def tune(
    kernel: Annotated[Path, typer.Argument(help="CUDA source file holding the kernel")],
    spec: Annotated[Path | None, typer.Option("--spec", help="YAML spec; default: KERNEL with .yaml")] = None,
    timeout: Annotated[float, typer.Option(help="seconds to follow the job before returning")] = 3600,
    replay: Annotated[bool, typer.Option("--replay", help="use measurements recorded on a GPU machine "
                                                          "(labelled replay) instead of measuring here")] = False,
    strategy: Annotated[str | None, typer.Option(help="baseline (measure only), tune (search tune_params), or a "
                                                      "rewriting strategy: one_prompt, autonomous, explicit, "
                                                      "multiturn; default: the spec's")] = None,
    provider: Annotated[str | None, typer.Option(help="who rewrites: auto (Claude with ANTHROPIC_API_KEY, else "
                                                      "rules), anthropic, rules, replay")] = None,
    model: Annotated[str | None, typer.Option(help="the LLM model; default: KFORGE_LLM_MODEL")] = None,
    temperature: Annotated[float | None, typer.Option(help="LLM sampling temperature")] = None,
    rag_k: Annotated[int | None, typer.Option("--rag-k", help="earlier optimisations quoted in prompts")] = None,
    replay_job: Annotated[str | None, typer.Option(help="provider replay: the job whose answers are replayed")] = None,
    target_speedup: Annotated[float | None, typer.Option(help="multiturn: stop at this speedup")] = None,
    max_iterations: Annotated[int | None, typer.Option(help="multiturn: most refinements")] = None,
    min_improvement: Annotated[float | None, typer.Option(help="multiturn: less than this gain is no progress")] = None,
    candidate: Annotated[Path | None, typer.Option(help="a rewrite of KERNEL to verify against it (strategy "
                                                        "verify): compiled, signature-checked, run on every trial")] = None,
) -> None:
    """Submit KERNEL and follow the job until it finishes."""
    if candidate is not None and not candidate.is_file():
        console.print(f"[red]--candidate[/red]: {candidate} is not a file; give the candidate's .cu source")
        raise typer.Exit(2)
    try:
        kernel_spec = load_spec(kernel, spec)
    except SpecError as exc:
        console.print(f"[red]invalid submission[/red] ({exc.where}):")
        for error in exc.errors:
            console.print(f"  [bold]{error.field or '(spec)'}[/bold]: {error.message}")
        raise typer.Exit(2) from None
    strategy_options = {k: v for k, v in (("name", strategy), ("target_speedup", target_speedup),
                                          ("max_iterations", max_iterations), ("min_improvement", min_improvement))
                        if v is not None}
    generator = {k: v for k, v in (("provider", provider), ("model", model), ("temperature", temperature),
                                   ("rag_k", rag_k), ("replay_job", replay_job)) if v is not None}
    overrides = {**({"benchmark": {"replay": True}} if replay else {}),
                 **({"strategy": strategy_options} if strategy_options else {}),
                 **({"generator": generator} if generator else {}),
                 **({"strategy": {"name": "verify", "candidate": {"source": candidate.read_text()}}} if candidate else {})}
    if overrides:
        try:
            kernel_spec = type(kernel_spec).model_validate(_merged(kernel_spec.model_dump(), overrides))
        except ValidationError as exc:
            for error in field_errors(exc.errors()):
                console.print(f"[red]{error.field}[/red]: {error.message}")
            raise typer.Exit(2) from None
    rt = _runtime()
    mode = "embedded (in-process, SQLite)" if rt.settings.embedded else "services (Celery over Redis)"
    job_id = submit_job(rt.store, rt.bus, kernel_spec)
    console.print(f"job [bold]{job_id}[/bold] submitted, {mode}")

    def show(event: Event) -> None:
        console.print(f"  [dim]{event.stream_version:>3}[/dim] {event.type:<18} {escape(describe(event))}")
        if isinstance(event, BaselineFailed | CandidateRejected) and event.log:
            console.print(Panel(event.log, title="NVRTC log", border_style="red"))

    with console.status("working…"):
        view = follow_job(rt.store, job_id, show, timeout_s=timeout)
    if kernel_spec.strategy.generates:
        console.print(steps_table(project_optimisation(job_events(rt.store, job_id))))
    if view.status == "completed":
        console.print(f"[green]completed[/green]: {view.summary}")
        return
    if view.status == "failed":
        console.print(f"[red]failed[/red] at {view.failed_stage}: {view.failure}")
        if view.failed_stage == "device" and kernel_spec.strategy.name != "verify":  # replay holds measurements only
            _offer_replay(kernel_spec, kernel, spec)
        raise typer.Exit(1)
    console.print(f"[yellow]still {view.status}[/yellow] after {timeout:.0f} s: `kforge show {job_id}` follows up")
    raise typer.Exit(3)


def _merged(base: dict, overrides: dict) -> dict:
    return {**base, **{k: _merged(base.get(k) or {}, v) if isinstance(v, dict) else v for k, v in overrides.items()}}


def _offer_replay(kernel_spec, kernel: Path, spec: Path | None) -> None:
    from services.benchmark.replay import ReplayBook

    console.print("kforge measures on an NVIDIA GPU: run this on a machine with one and its driver.")
    recording = ReplayBook().find(kernel_spec, kernel_spec.baseline_params())
    if recording:
        again = f"kforge tune {kernel}" + (f" --spec {spec}" if spec else "") + " --replay"
        console.print(f"A measurement of this kernel recorded on {recording.device} ({recording.recorded_on}) can be "
                      f"replayed, labelled as replay: [bold]{again}[/bold]")


@app.command()
def jobs() -> None:
    """List jobs, oldest first."""
    console.print(jobs_table(list_jobs(_runtime().store)))


@app.command()
def show(job: Annotated[str, typer.Argument(help="job id or a unique prefix")]) -> None:
    """Show one job."""
    rt = _runtime()
    view = get_job(rt.store, _resolve(rt, job))
    console.print(jobs_table([view]))
    if view.summary:
        console.print(view.summary)
    if view.failure:
        console.print(f"[red]{view.failed_stage}[/red]: {view.failure}")


@app.command()
def events(job: Annotated[str, typer.Argument(help="job id or a unique prefix")],
           as_json: Annotated[bool, typer.Option("--json", help="one JSON object per line")] = False) -> None:
    """List a job's events in order."""
    rt = _runtime()
    stored = job_events(rt.store, _resolve(rt, job))
    if as_json:
        for event in stored:
            typer.echo(json.dumps(event.model_dump(mode="json")))
    else:
        console.print(events_table(stored))


@app.command()
def serve(host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the HTTP gateway (OpenAPI docs at /docs)."""
    import uvicorn

    from services.gateway.app import create_app

    uvicorn.run(create_app(_runtime), host=host, port=port)


@app.command()
def worker(queues: Annotated[str, typer.Option("--queues", "-Q", help="e.g. planner or benchmark.0")] = "planner",
           device: Annotated[str | None, typer.Option(help="CUDA device a benchmark worker uses; default: the "
                                                      "queue's GPU id (in a container given one GPU, pass 0)")] = None,
           concurrency: int = 1) -> None:
    """Run a Celery worker (needs REDIS_URL). A benchmark.<gpu> worker sees only that GPU."""
    names = [q.strip() for q in queues.split(",") if q.strip()]
    gpus = sorted({gpu_of(q) for q in names if q.startswith(("benchmark.", "verifier."))})
    if len(gpus) > 1:
        console.print("[red]--queues[/red]: one GPU per worker (benchmark.<gpu> and verifier.<gpu> of the same gpu)")
        raise typer.Exit(2)
    if not os.environ.get("REDIS_URL"):
        console.print("[red]REDIS_URL is not set[/red]: workers serve a Redis broker; embedded mode needs none")
        raise typer.Exit(2)
    if device is not None and not gpus:
        console.print("[red]--device[/red] applies to benchmark.<gpu> workers only: drop it or add the queue")
        raise typer.Exit(2)
    if gpus:
        os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # GPU ids mean what nvidia-smi shows
        os.environ["CUDA_VISIBLE_DEVICES"] = device or gpus[0]  # before CUDA initialises in this process
        os.environ["KFORGE_PINNED_GPU"] = gpus[0]  # so the tasks use device 0, the only one visible
    from kforge.worker import app as celery

    # A GPU worker runs one task at a time in its main process, which keeps the compile pool and the
    # process owning the GPU warm between tasks (a kernel that poisons the GPU costs only that process).
    pool = ["--pool", "solo"] if gpus else \
        ["--pool", "threads", "--concurrency", str(concurrency)]
    celery.worker_main(["worker", "-Q", ",".join(names), "--loglevel", "INFO", "-n", f"{names[0]}@%h", *pool])
