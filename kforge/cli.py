"""The `kforge` command line."""
import contextlib
import json
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.panel import Panel
from rich.spinner import Spinner
from rich.text import Text

from kforge.api import merged, stop_embedded_job
from kforge.job_files import write_job_files
from kforge.progress import JobProgress, SpaceProgress
from kforge.render import (comparison_summary, comparison_table, describe, events_table, job_facts, jobs_table,
                           profile_facts, profile_table, progress_display, progress_lines, slow_table, steps_table,
                           suggestions_table)
from kforge.infer_spec import DEFAULT_SIZE, InferenceError, InferredSpec, infer_spec
from kforge.specfile import SpecError, load_spec, spec_path_for
from shared.adapters.settings import Settings
from shared.application import report_queries as queries
from shared.application import runtime
from shared.application.jobs import (Admission, AdmissionRefused, JobFinished, JobPublic, NoProgress, QueueFull,
                                     UnknownJob, cancel_job, follow_job, follow_jobs, get_job, job_events, list_jobs,
                                     resolve_job_id, submit_job)
from shared.domain.contracts import PLANNER_QUEUE, gpu_of
from shared.domain.errors import FieldError, field_errors
from shared.domain.events import (BaselineFailed, CandidateRejected, ConfigFailed, ConfigMeasured, Event, TaskProfiled,
                                  TuningCompleted)
from shared.domain.projections import JobView, project_job
from shared.domain.reports.comparison import DEFAULT_ALPHA, DEFAULT_THRESHOLD_PERCENT
from shared.domain.reports.profile import DEFAULT_BOTTLENECK_SHARE
from shared.domain.reports.tracker import performance_tracker
from shared.domain.spec import KernelSpec
from shared.domain.steps import project_optimisation

app = typer.Typer(help="Submit CUDA kernels; get back faster, proven-correct, tunable versions.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
console = Console(highlight=False)
KernelOption = Annotated[str | None, typer.Option("--kernel", help="without a spec: the kernel to tune, when the "
                                                                 "source defines several")]
SizeOption = Annotated[list[str] | None, typer.Option("--size", help="without a spec: a size, NAME=VALUE (repeat "
                                                                     "it); default: the first integer parameter "
                                                                     f"{DEFAULT_SIZE}, the others 1")]


def _runtime() -> runtime.Runtime:
    try:
        import kforge.worker  # noqa: F401  (embedded mode runs every service's tasks in this process)

        rt = runtime.current()
    except ValidationError as exc:
        console.print("[red]invalid setting[/red] in the environment:")
        for error in field_errors(exc.errors()):
            console.print(f"  [bold]{escape(error.field)}[/bold]: {escape(error.message)}")
        raise typer.Exit(2) from None
    if rt.settings.embedded:
        # The in-process workers log here, as a worker process logs to its own output: a failed task's
        # traceback is for a bug report, not for the terminal of the person running the command.
        rt.settings.home.mkdir(parents=True, exist_ok=True)
        logging.basicConfig(filename=_log_file(rt.settings), level=logging.WARNING,
                            format="%(asctime)s %(levelname)s %(name)s %(threadName)s: %(message)s")
    return rt


def _resolve(rt: runtime.Runtime, job: str) -> str:
    """Accept a unique prefix of a job id, as git accepts one of a commit (shared.application.jobs.resolve_job_id)."""
    try:
        return resolve_job_id(rt.store, job)
    except UnknownJob as exc:
        console.print(f"[red]{escape(str(exc))}[/red]; `kforge jobs` lists them")
        raise typer.Exit(2) from None


@app.command()
def tune(
    kernel: Annotated[Path, typer.Argument(help="CUDA source file holding the kernel")],
    spec: Annotated[Path | None, typer.Option("--spec", help="YAML spec; default: KERNEL with .yaml, else one "
                                                             "inferred from the kernel's signature")] = None,
    kernel_name: KernelOption = None,
    size: SizeOption = None,
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
    run: Annotated[str | None, typer.Option(help="a run name: jobs submitted under one are compared as a set "
                                                 "(`kforge compare RUN_A RUN_B`)")] = None,
    out: Annotated[Path, typer.Option(help="where the job's files go, under OUT/<job id>")] = Path("kforge-out"),
    no_save: Annotated[bool, typer.Option("--no-save", help="write no files")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print only the job as it ended, as one JSON object; the "
                                                         "progress goes to stderr")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="a line for every event, each configuration's "
                                                                  "too (`kforge events` lists them later)")] = False,
) -> None:
    """Submit KERNEL and follow the job until it finishes."""
    console.stderr = as_json  # --json: stdout holds the JSON alone, and what a person reads goes to stderr
    if candidate is not None and not candidate.is_file():
        console.print(f"[red]--candidate[/red]: {escape(str(candidate))} is not a file; give the candidate's .cu "
                      "source")
        raise typer.Exit(2)
    try:
        if spec is None and kernel.is_file() and spec_path_for(kernel) is None:
            kernel_spec = _inferred_spec(kernel, kernel_name, size)
        elif (kernel_name is not None or size) and kernel.is_file():
            raise SpecError(str(spec or spec_path_for(kernel)), [FieldError(
                "--kernel/--size", "they describe a kernel without a spec: set kernel_name and sizes in the spec")])
        else:
            kernel_spec = load_spec(kernel, spec)
    except SpecError as exc:
        console.print(f"[red]invalid submission[/red] ({escape(str(exc.where))}):")
        for error in exc.errors:
            console.print(f"  [bold]{escape(error.field or '(spec)')}[/bold]: {escape(error.message)}")
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
            kernel_spec = type(kernel_spec).model_validate(merged(kernel_spec.model_dump(), overrides))
        except ValidationError as exc:
            for error in field_errors(exc.errors()):
                console.print(f"[red]{escape(error.field)}[/red]: {escape(error.message)}")
            raise typer.Exit(2) from None
    rt = _runtime()
    _interrupt_on_signals()
    mode = "embedded (in-process, SQLite)" if rt.settings.embedded else "services (Celery over Redis)"
    try:
        job_id = submit_job(rt.store, rt.bus, kernel_spec, run=run, admission=Admission.of(rt.settings),
                            owner=rt.owner)
    except AdmissionRefused as exc:
        console.print(f"[red]invalid submission[/red] ({escape(str(spec or kernel))}):")
        for error in exc.errors:
            console.print(f"  [bold]{escape(error.field)}[/bold]: {escape(error.message)}")
        raise typer.Exit(2) from None
    except QueueFull as exc:
        console.print(f"[red]not submitted[/red]: {escape(str(exc))}")
        raise typer.Exit(3) from None
    console.print(f"job [bold]{job_id}[/bold] submitted, {mode}")

    files = None if no_save else out / job_id
    follower = _Follower(console, verbose)
    try:
        with follower:
            view = follow_job(rt.store, job_id, follower.show, timeout_s=timeout, stalled=rt.bus.stalled,
                              stall_s=rt.settings.stall_timeout_s)
            cancelled = not view.finished and stop_embedded_job(
                rt, job_id, f"not finished within kforge tune --timeout {timeout:g}", "cli")
            if not view.finished and not cancelled and rt.settings.embedded:  # it ended between deadline and cancel
                view = follow_job(rt.store, job_id, follower.show, timeout_s=0)
            if view.finished:
                rt.bus.wait_idle()  # embedded: the in-process workers' last records (TaskProfiled) land before exit
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM / SIGHUP (_interrupt_on_signals)
        _stop_interrupted(rt, job_id, exc.args[0] if exc.args else "SIGINT", follower, files, as_json)
    except NoProgress as exc:
        if stop_embedded_job(rt, job_id, f"kforge tune stopped following: {exc.reason}", "cli"):
            console.print(f"[red]stopped[/red]: {escape(str(exc))}; the job was cancelled. "
                          f"Warnings and tracebacks are in {_log_file(rt.settings)}")
            _echo_job(rt, job_id, as_json)
            _exit_now(1)
        console.print(f"[yellow]stopped following[/yellow]: {escape(str(exc))}. It is left to the workers (is one "
                      f"serving each queue?); `kforge show {job_id}` follows up, `kforge cancel {job_id}` ends it")
        _echo_job(rt, job_id, as_json)
        raise typer.Exit(3) from None
    history = job_events(rt.store, job_id)
    if kernel_spec.strategy.generates:
        console.print(steps_table(project_optimisation(history), console.width))
    if view.baseline_ms is not None:
        console.print(performance_tracker(history).generate_overview(), markup=False)
    if view.status == "completed":
        if not no_save:
            written = write_job_files(history, out / job_id)
            console.print(f"files in {out / job_id}: {', '.join(p.name for p in written)}", markup=False)
        console.print(f"[green]completed[/green]: {escape(view.summary)}")
        _echo_job(rt, job_id, as_json)
        return
    if view.status == "failed":
        console.print(f"[red]failed[/red] at {view.failed_stage}: {escape(view.failure or '')}")
        if view.failed_stage == "device" and kernel_spec.strategy.name != "verify":  # replay holds measurements only
            _offer_replay(kernel_spec, kernel, spec)
        _echo_job(rt, job_id, as_json)
        raise typer.Exit(1)
    if view.status == "cancelled":  # by `kforge cancel`, or the web page, while this command followed it
        console.print(f"[yellow]cancelled[/yellow]: {escape(view.failure or '')}")
        _echo_job(rt, job_id, as_json)
        raise typer.Exit(1)
    follower.summarise()
    if cancelled:
        console.print(f"[yellow]still {view.status}[/yellow] after {timeout:.0f} s: cancelled, as its in-process "
                      "workers stop with this command")
        _save_best_so_far(rt, job_id, files)
        _echo_job(rt, job_id, as_json)
        _exit_now(3)
    console.print(f"[yellow]still {view.status}[/yellow] after {timeout:.0f} s: `kforge show {job_id}` follows up")
    _echo_job(rt, job_id, as_json)
    raise typer.Exit(3)


def _echo_job(rt: runtime.Runtime, job_id: str, as_json: bool) -> None:
    """`kforge tune --json`: the job as it ended, the one thing printed on stdout."""
    if as_json:
        typer.echo(json.dumps(JobPublic.of(get_job(rt.store, job_id)).model_dump(mode="json")))


PIPED_WIDTH = 80  # not a terminal: the most columns of a progress or event line, whatever COLUMNS says
PROGRESS_EVERY_S = 10.0  # not a terminal: how often a search's progress is printed while it runs
PER_CONFIGURATION = (ConfigMeasured, ConfigFailed, TaskProfiled)  # printed with --verbose, else in the progress


class _Follower:
    """What `kforge tune` prints as its job goes on: a line per event (cut to the width) but for each
    configuration's, which --verbose prints too, and the progress of the job's searches (kforge.progress):
    live on a terminal; else, with no live display and within PIPED_WIDTH columns, two lines every
    PROGRESS_EVERY_S seconds while a search runs. Either way a search's last progress stays printed when it
    ends."""

    def __init__(self, out: Console, verbose: bool):
        self.out, self.verbose = out, verbose
        self.progress = JobProgress()
        live = out.is_terminal and not out.is_dumb_terminal
        self.width = out.width if live else min(out.width, PIPED_WIDTH)
        self._lock = threading.Lock()  # the live display renders from its own thread
        self._spinner = Spinner("dots")
        self._live = Live(get_renderable=self._render, console=out, transient=True) if live else None
        self._printed_at = time.monotonic()

    def __enter__(self) -> "_Follower":
        if self._live:
            self._live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._live:
            self._live.stop()

    def show(self, event: Event) -> None:
        with self._lock:
            self.progress.add(event)
        if self.verbose or not isinstance(event, PER_CONFIGURATION):
            self._print_event(event)
        if isinstance(event, TuningCompleted):
            self._print_progress(self.progress.spaces.get(event.candidate_id))
        elif self._live is None and time.monotonic() - self._printed_at >= PROGRESS_EVERY_S:
            self.summarise()

    def summarise(self) -> None:
        """The progress of the search under way, if one is (printed too when the job is interrupted or timed
        out, as the live display goes)."""
        current = self.progress.current
        if current is not None and not current.finished:
            self._print_progress(current)

    def _print_event(self, event: Event) -> None:
        line = Text.assemble((f"  {event.stream_version:>3} ", "dim"), f"{event.type:<18} {describe(event)}")
        if self.verbose:
            self.out.print(line)
        else:
            self.out.print(line, no_wrap=True, overflow="ellipsis", width=self.width)
        if isinstance(event, BaselineFailed | CandidateRejected) and event.log:  # the compiler's words, verbatim
            self.out.print(Panel(Text(event.log), title="NVRTC log", border_style="red"), width=self.width)

    def _print_progress(self, space: SpaceProgress | None) -> None:
        if space is not None and space.done:
            for line in progress_lines(space, self.width - 2):
                self.out.print(Text("  " + line), no_wrap=True, width=self.width)
            self._printed_at = time.monotonic()

    def _render(self) -> RenderableType:
        with self._lock:
            return progress_display(self.progress.current, self._spinner)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _interrupt_on_signals() -> None:
    """Ctrl-C (SIGINT), SIGTERM and SIGHUP stop `kforge tune` alike: the first raises KeyboardInterrupt, so that
    its job is cancelled and its best so far written (_stop_interrupted); from then on, another one ends the
    process at once (a job it had no time to cancel, embedded, is cancelled by the next kforge command:
    shared/adapters/job_owners.py)."""
    def interrupt(signum: int, frame) -> None:
        for stop in STOP_SIGNALS:
            signal.signal(stop, exit_at_once)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    def exit_at_once(signum: int, frame) -> None:
        os.write(2, f"\ninterrupted again ({signal.Signals(signum).name}): exiting at once\n".encode())
        _exit_now(130)

    for stop in STOP_SIGNALS:
        signal.signal(stop, interrupt)


def _stop_interrupted(rt: runtime.Runtime, job_id: str, signame: str, follower: _Follower, files: Path | None,
                      as_json: bool) -> NoReturn:
    """Cancel the job (a worker stops its search at the next batch), write the files of its best so far, say so
    in a line or two, and exit 130."""
    follower.summarise()
    try:
        cancel_job(rt.store, rt.bus, job_id, reason=f"kforge tune was interrupted ({signame})", cancelled_by="cli")
        console.print(f"[yellow]interrupted[/yellow] ({signame}): job {job_id} cancelled")
    except JobFinished:
        console.print(f"[yellow]interrupted[/yellow] ({signame}): job {job_id} had ended already")
    _save_best_so_far(rt, job_id, files, plots=False)
    _echo_job(rt, job_id, as_json)
    _exit_now(130)


def _save_best_so_far(rt: runtime.Runtime, job_id: str, directory: Path | None, plots: bool = True) -> None:
    """A cancelled job keeps the best it measured: its files are written once its baseline was measured (without
    the plots when not `plots`: `kforge export` writes them)."""
    history = job_events(rt.store, job_id)
    if directory is None or project_job(history, job_id).baseline_ms is None:
        return
    written = write_job_files(history, directory, plots)
    console.print(f"files of the best so far in {directory}: {', '.join(p.name for p in written)}"
                  + ("" if plots else f" (`kforge export {job_id}` adds the plots)"), markup=False)


def _exit_now(code: int) -> NoReturn:
    """End the process without the interpreter's clean-up, which would first wait for the work in progress in
    it (the compile pool's queued compiles, a measurement): the job is cancelled, so none of it is wanted, and
    what it recorded is stored. The GPU processes it started are killed, as what they run may take long, and
    the compile children's working directories removed (atexit would have)."""
    for child in multiprocessing.active_children():
        child.kill()
    if (compiler := sys.modules.get("shared.adapters.device.compiler")) is not None:  # only where it compiled
        with contextlib.suppress(OSError):
            compiler.remove_workdirs()
    for stream in (console.file, sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):  # a reader that has gone (`kforge tune | head`)
            stream.flush()
    os._exit(code)


def _log_file(settings: Settings) -> Path:
    return settings.home / "kforge.log"


def _inferred_spec(kernel: Path, kernel_name: str | None, sizes: list[str] | None) -> KernelSpec:
    """The spec inferred from KERNEL's signature, printed with what was guessed before anything is submitted."""
    inferred = _infer(kernel, kernel_name, sizes)
    console.print(f"no spec beside {kernel}: inferred from the kernel's signature (`kforge spec {kernel}` writes it "
                  "to edit):", markup=False)
    console.print(inferred.to_yaml(), markup=False, soft_wrap=True)  # unwrapped: it stays YAML to copy
    try:
        return KernelSpec.model_validate({**inferred.data, "source": kernel.read_text()})
    except ValidationError as exc:
        raise SpecError(f"spec inferred from {kernel}", field_errors(exc.errors())) from None


def _infer(kernel: Path, kernel_name: str | None, sizes: list[str] | None) -> InferredSpec:
    """infer_spec on KERNEL, a mistake reported by the option that fixes it (exit 2)."""
    option = {"kernel_name": "--kernel", "sizes": "--size", "source": "KERNEL"}
    try:
        return infer_spec(kernel.read_text(), kernel_name, _sizes(sizes or []))
    except InferenceError as exc:
        console.print(f"[red]cannot infer a spec[/red] ({escape(str(kernel))}):")
        console.print(f"  [bold]{option[exc.field]}[/bold]: {escape(exc.message)}")
        raise typer.Exit(2) from None


def _sizes(options: list[str]) -> dict[str, int]:
    sizes = {}
    for option in options:
        name, _, value = option.partition("=")
        if not value.strip().isdigit():
            console.print(f"[red]--size[/red]: {escape(repr(option))} is not NAME=VALUE with a whole number (e.g. "
                          "--size n=4096)")
            raise typer.Exit(2)
        sizes[name.strip()] = int(value)
    return sizes


@app.command("spec")
def write_spec(kernel: Annotated[Path, typer.Argument(help="CUDA source file holding the kernel")],
               output: Annotated[Path | None, typer.Option("--output", "-o", help="default: KERNEL with .yaml; "
                                                                                "- prints it")] = None,
               force: Annotated[bool, typer.Option("--force", help="overwrite an existing file")] = False,
               kernel_name: KernelOption = None, size: SizeOption = None) -> None:
    """Write the spec inferred from KERNEL's signature, to edit: `kforge tune KERNEL` then reads it."""
    if not kernel.is_file():
        console.print(f"[red]KERNEL[/red]: {escape(str(kernel))} does not exist: give the path of a .cu file")
        raise typer.Exit(2)
    text = _infer(kernel, kernel_name, size).to_yaml()
    if str(output) == "-":
        typer.echo(text, nl=False)
        return
    target = output or kernel.with_suffix(".yaml")
    if target.exists() and not force:
        console.print(f"[red]not written[/red]: {escape(str(target))} exists; pass --force to overwrite it, or -o "
                      "another path")
        raise typer.Exit(2)
    target.write_text(text)
    console.print(f"wrote {target}: check it, then `kforge tune {kernel}`" + (f" --spec {target}" if output else ""),
                  markup=False)


def _offer_replay(kernel_spec, kernel: Path, spec: Path | None) -> None:
    from services.benchmark.replay import ReplayBook

    console.print("kforge measures on an NVIDIA GPU: run this on a machine with one and its driver.")
    recording = ReplayBook().find(kernel_spec, kernel_spec.baseline_params())
    if recording:
        again = f"kforge tune {kernel}" + (f" --spec {spec}" if spec else "") + " --replay"
        console.print(f"A measurement of this kernel recorded on {recording.device} ({recording.recorded_on}) can be "
                      f"replayed, labelled as replay: [bold]{escape(again)}[/bold]")


@app.command()
def jobs(as_json: Annotated[bool, typer.Option("--json", help="one JSON object per line")] = False) -> None:
    """List jobs, oldest first."""
    found = list_jobs(_runtime().store)
    if as_json:
        for view in found:
            typer.echo(json.dumps(JobPublic.of(view).model_dump(mode="json")))
    else:
        console.print(jobs_table(found, console.width))


@app.command()
def show(job: Annotated[str, typer.Argument(help="job id or a unique prefix")],
         as_json: Annotated[bool, typer.Option("--json", help="as one JSON object")] = False) -> None:
    """Show one job."""
    rt = _runtime()
    view = get_job(rt.store, _resolve(rt, job))
    if as_json:
        typer.echo(json.dumps(JobPublic.of(view).model_dump(mode="json")))
    else:
        console.print(job_facts(view))


@app.command()
def cancel(job: Annotated[str, typer.Argument(help="job id or a unique prefix")],
           reason: Annotated[str, typer.Option(help="recorded with the cancellation")] = "cancelled on request") -> None:
    """Cancel an unfinished job: nothing new starts for it, and a running search stops at its next batch."""
    rt = _runtime()
    job_id = _resolve(rt, job)
    try:
        view = cancel_job(rt.store, rt.bus, job_id, reason=reason, cancelled_by="cli")
    except JobFinished as exc:
        console.print(f"[red]nothing to cancel[/red]: {escape(str(exc))}")
        raise typer.Exit(1) from None
    console.print(job_facts(view))


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


def _report(query, *args):
    """Run a report query; a missing job or a bad argument is a message and exit 2, not a traceback."""
    try:
        return query(*args)
    except (queries.ReportError, ValueError) as exc:
        console.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(2) from None


def _write_json(target: Path | None, model) -> None:
    """--json FILE writes the report there; --json - prints it."""
    if target is None:
        return
    text = model.model_dump_json(indent=2) if hasattr(model, "model_dump_json") else json.dumps(model, indent=2)
    if str(target) == "-":
        typer.echo(text)
    else:
        target.write_text(text)
        console.print(f"written to {target}", markup=False)


JsonOption = Annotated[Path | None, typer.Option("--json", help="write the report as JSON to this file "
                                                                 "('-': print it)")]


@app.command()
def report(job: Annotated[str, typer.Argument(help="job id or a unique prefix")], as_json: JsonOption = None) -> None:
    """The performance overview of a job: steps kept, baseline against final, the best parameters."""
    rt = _runtime()
    tracker = _report(queries.job_tracker, rt.store, _resolve(rt, job))
    if as_json is None or str(as_json) != "-":
        console.print(tracker.generate_overview(), markup=False)
    _write_json(as_json, tracker)


@app.command()
def compare(
    baseline: Annotated[str, typer.Argument(help="the run to compare against: a job id, a run name or a run .json")],
    current: Annotated[str, typer.Argument(help="the run to judge, named the same ways")],
    metric: Annotated[str, typer.Option(help="best: each kernel's best version; baseline: as submitted")] = "best",
    threshold: Annotated[float, typer.Option(help="per cent change below which nothing is significant")] =
        DEFAULT_THRESHOLD_PERCENT,
    alpha: Annotated[float, typer.Option(help="significance level of the rank test on the samples")] = DEFAULT_ALPHA,
    top: Annotated[int, typer.Option(help="regressions and improvements to list")] = 5,
    fail_on_regression: Annotated[bool, typer.Option("--fail-on-regression",
                                                     help="exit 1 when any kernel regressed (for CI gates)")] = False,
    as_json: JsonOption = None,
) -> None:
    """Compare two runs kernel by kernel: IMPROVEMENT, REGRESSION, NO_CHANGE, NEW or REMOVED."""
    rt = _runtime()
    comparison = _report(lambda: queries.compare(rt.store, baseline, current, metric, threshold_percent=threshold,
                                                 alpha=alpha))
    if as_json is None or str(as_json) != "-":
        console.print(comparison_table(comparison))
        for title, rows in (("regressions", comparison.get_regressions(top)),
                            ("improvements", comparison.get_improvements(top))):
            if rows:
                listed = ", ".join(f"{escape(r.kernel)} {r.change_percent:+.1f}%" for r in rows)
                console.print(f"top {title}: {listed}")
        console.print(comparison_summary(comparison))
    _write_json(as_json, comparison)
    if fail_on_regression and comparison.summary.regressions_count:
        console.print(f"[red]{comparison.summary.regressions_count} regression(s)[/red]: failing as asked")
        raise typer.Exit(1)


@app.command("export-run")
def export_run(
    reference: Annotated[str, typer.Argument(help="a run name or a job id")],
    target: Annotated[Path, typer.Argument(help="the .json file to write, e.g. ci/baseline.json")],
    metric: Annotated[str, typer.Option(help="best or baseline times")] = "best",
) -> None:
    """Save a run's times and samples to a file, to compare later runs against (in CI, say)."""
    rt = _runtime()
    found = _report(queries.load_run, rt.store, reference, metric)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(found.model_dump_json(indent=2))
    console.print(f"{len(found.kernels)} kernel(s) of {reference} written to {target}", markup=False)


@app.command()
def suggest(job: Annotated[str, typer.Argument(help="job id or a unique prefix")], as_json: JsonOption = None) -> None:
    """What to try next on a job's kernel, from what its measurements show."""
    rt = _runtime()
    found = _report(queries.job_suggestions, rt.store, _resolve(rt, job))
    if as_json is None or str(as_json) != "-":
        console.print(suggestions_table(found) if found else "no suggestion: nothing measured points anywhere")
    _write_json(as_json, [s.model_dump(mode="json") for s in found])


@app.command()
def profile(
    jobs: Annotated[list[str] | None, typer.Argument(help="job ids or prefixes; default: every job")] = None,
    threshold: Annotated[float, typer.Option(help="share of the total from which a stage is a bottleneck")] =
        DEFAULT_BOTTLENECK_SHARE,
    as_json: JsonOption = None,
) -> None:
    """Where the time went: queue wait, planning, generation, verification, compile and benchmark."""
    rt = _runtime()
    ids = [_resolve(rt, j) for j in jobs or []]
    found = _report(queries.profile, rt.store, ids, threshold)
    if as_json is None or str(as_json) != "-":
        console.print(profile_table(found))
        console.print(profile_facts(found), markup=False)
    _write_json(as_json, found)


@app.command()
def slow(
    threshold: Annotated[float, typer.Option(help="list kernels whose best speedup is below this")] = 0.8,
    optimise: Annotated[bool, typer.Option("--optimise", help="submit each listed kernel again to be rewritten")] =
        False,
    strategy: Annotated[str, typer.Option(help="the strategy of --optimise")] = "multiturn",
    run: Annotated[str | None, typer.Option(help="the run name of the --optimise jobs; default: slow-<threshold>")]
        = None,
    timeout: Annotated[float, typer.Option(help="seconds to follow the --optimise jobs, all of them together")]
        = 3600,
    as_json: JsonOption = None,
) -> None:
    """Kernels whose best speedup (against the spec's reference_ms, else the submitted kernel) is below the
    threshold, slowest first; --optimise submits them all, then follows them together, printing each one's end as
    it comes. As kforge tune, it exits 1 when a job failed (or stopped recording events, and was cancelled) and 3
    when one was unfinished at --timeout; embedded, those unfinished are cancelled."""
    rt = _runtime()
    found = _report(queries.slow_kernels, rt.store, threshold)
    if as_json is None or str(as_json) != "-":
        console.print(slow_table(found, threshold) if found else f"no kernel below {threshold:g}x")
    _write_json(as_json, [r.model_dump(mode="json") for r in found])
    if not optimise or not found:
        return
    name = run or f"slow-{threshold:g}"
    kernels: dict[str, str] = {}

    def submitted(result, job_id: str) -> None:
        kernels[job_id] = result.kernel
        console.print(f"{result.kernel}: job {job_id} submitted ({strategy})", markup=False)

    job_ids = _report(queries.optimise_batch, rt.store, rt.bus, found, strategy, name, submitted, rt.owner)
    with console.status(f"optimising {len(job_ids)} kernel(s)…"):
        followed = follow_jobs(rt.store, job_ids, lambda view: console.print(_job_end(view, kernels)),
                               timeout_s=timeout, stalled=rt.bus.stalled, stall_s=rt.settings.stall_timeout_s)
        if not followed.unfinished:
            rt.bus.wait_idle()
    console.print(jobs_table(followed.views, console.width))
    console.print(f"compare with: kforge compare <earlier run> {name}", markup=False)
    failed = sorted((v for v in followed.views if v.finished and v.status != "completed"),
                    key=lambda v: job_ids.index(v.job_id))  # as submitted, whichever ended first
    if failed:
        console.print(f"[red]{len(failed)} of {len(job_ids)} job(s) did not complete[/red]: "
                      + escape(", ".join(f"{v.job_id} ({kernels[v.job_id]}) {v.status}" for v in failed)))
    if not followed.unfinished:
        if failed:
            raise typer.Exit(1)
        return
    if followed.stalled is not None:
        why, reason = f"stopped: {followed.stalled}", f"kforge slow stopped following: {followed.stalled}"
    else:
        why, reason = f"still unfinished after {timeout:g} s", f"not finished within kforge slow --timeout {timeout:g}"
    cancelled = [v.job_id for v in followed.unfinished if stop_embedded_job(rt, v.job_id, reason, "cli")]
    if rt.settings.embedded:
        # A job may end between the deadline and its cancel: it is said to have ended, not to be cancelled
        stopped = ", ".join(f"{v.job_id} ({kernels[v.job_id]}, {v.status})" for v in followed.unfinished
                            if v.job_id in cancelled)
        ended = ", ".join(f"{v.job_id} ({kernels[v.job_id]})" for v in followed.unfinished if v.job_id not in cancelled)
        said = ([f"{stopped}; cancelled, as the in-process workers stop with this command"] if stopped else []) + \
            ([f"{ended} ended meanwhile"] if ended else [])
        console.print(f"[yellow]{escape(why)}[/yellow]: {escape('; '.join(said))}")
    else:
        unfinished = ", ".join(f"{v.job_id} ({kernels[v.job_id]}, {v.status})" for v in followed.unfinished)
        console.print(f"[yellow]{escape(why)}[/yellow]: {escape(unfinished)}; left to the workers, `kforge show "
                      "<job>` follows up")
    code = 1 if failed or (followed.stalled is not None and cancelled) else 3
    if cancelled:
        _exit_now(code)  # the cancelled jobs' work in progress is not waited for, as kforge tune does
    raise typer.Exit(code)


def _job_end(view: JobView, kernels: dict[str, str]) -> str:
    """One line, as a job followed by `kforge slow --optimise` ends."""
    said = {"completed": f"[green]completed[/green]: {escape(view.summary or '')}",
            "failed": f"[red]failed[/red] at {view.failed_stage}: {escape(view.failure or '')}"}
    ended = said.get(view.status, f"[yellow]{view.status}[/yellow]")
    return f"{escape(kernels[view.job_id])}: job {view.job_id} {ended}"


@app.command()
def export(job: Annotated[str, typer.Argument(help="job id or a unique prefix")],
           out: Annotated[Path, typer.Option(help="the folder to write into")] = Path("kforge-out")) -> None:
    """Write a job's files again: the optimised kernel named with its speedup, history JSON, transcript, plots."""
    rt = _runtime()
    job_id = _resolve(rt, job)
    written = _report(write_job_files, job_events(rt.store, job_id), out / job_id)
    console.print(f"files in {out / job_id}: {', '.join(p.name for p in written)}", markup=False)


@app.command()
def serve(host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the HTTP gateway (OpenAPI docs at /docs)."""
    import uvicorn

    from services.gateway.app import create_app

    _runtime()  # settings are read now: a bad one (KFORGE_API_KEYS=",") stops the gateway before it listens
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

    if PLANNER_QUEUE in names:  # planner workers also look for messages the broker lost
        from services.planner.recovery import start_recovery

        start_recovery(runtime.current, runtime.current().settings.recovery_interval_s)

    # A GPU worker runs one task at a time in its main process, which keeps the compile pool and the
    # process owning the GPU warm between tasks (a kernel that poisons the GPU costs only that process).
    pool = ["--pool", "solo"] if gpus else \
        ["--pool", "threads", "--concurrency", str(concurrency)]
    celery.worker_main(["worker", "-Q", ",".join(names), "--loglevel", "INFO", "-n", f"{names[0]}@%h", *pool])
