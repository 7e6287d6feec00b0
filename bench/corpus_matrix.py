"""On a GPU machine: every kernel of the corpus (examples/corpus) through every path kforge offers, embedded.

    python bench/corpus_matrix.py [--only saxpy,gemv] [--paths baseline,tune,explicit,one_prompt]
                                  [--jobs-timeout 240] [--concurrency 4] [--json OUT]

Four jobs per kernel: `baseline` (measure the kernel as submitted), `tune` (its tune_params searched),
`explicit` (the default steps, rewritten by the offline rules) and `one_prompt` (Claude's rewrite: the kernel's
scripted answer, <kernel>.rewrite.md, served by a loopback Messages API). kforge runs embedded (SQLite under a
temporary KFORGE_HOME, the in-process bus) and several jobs are in flight at once (--concurrency), which keeps
the GPU's benchmark and verifier queues busy while others compile and generate. Each job ends as its last
event says (completed with its summary, failed with the stage and reason, cancelled) or HUNG when it did not
end within --jobs-timeout (it is then cancelled). The table shows each job's outcome, its wall time from
submission to its end and its speedup over the submitted kernel; everything written to stderr by this process
and its children is kept, and a Python traceback there is flagged with the jobs in flight when it appeared.
Exit status 1 when a job did not complete (kernels waiting on a feature, tests/corpus_kernels.py PENDING, aside)
or a traceback appeared.
"""
import argparse
import json
import logging
import os
import queue
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PATHS = ("baseline", "tune", "explicit", "one_prompt")
TRACEBACK = "Traceback (most recent call last)"
TARGET_S = 540  # the whole matrix (84 jobs) on one H100, issue 19


@dataclass
class JobResult:
    kernel: str
    path: str
    outcome: str = "not run"  # completed | failed:<stage> | cancelled | HUNG | refused | stalled
    detail: str = ""  # the summary, the failure's reason, or why it was not submitted
    job_id: str | None = None
    wall_s: float | None = None  # submission to the job's end (or to giving up on it)
    busy_s: float | None = None  # worker time spent on its tasks (TaskProfiled), queue waits excluded
    baseline_ms: float | None = None
    speedup: float | None = None  # over the submitted kernel
    steps: list[str] = field(default_factory=list)  # generating paths: each step and how it ended
    task_failures: list[str] = field(default_factory=list)
    tracebacks: int = 0  # tracebacks on stderr while it was in flight
    started: float = 0.0
    ended: float = 0.0


class StderrTap:
    """Everything written to file descriptor 2, by this process's logging and prints and by its children that
    inherit it, copied on to the real stderr and kept, line by line with when it arrived."""

    def __init__(self):
        self.lines: list[tuple[float, str]] = []
        self._lock = threading.Lock()

    def __enter__(self) -> "StderrTap":
        sys.stderr.flush()
        self._saved = os.dup(2)
        read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        self._thread = threading.Thread(target=self._pump, args=(read,), daemon=True, name="stderr-tap")
        self._thread.start()
        return self

    def _pump(self, fd: int) -> None:
        pending = b""
        while chunk := os.read(fd, 65536):
            os.write(self._saved, chunk)
            pending += chunk
            *complete, pending = pending.split(b"\n")
            now = time.monotonic()
            with self._lock:
                self.lines.extend((now, line.decode(errors="replace")) for line in complete)
        if pending:
            with self._lock:
                self.lines.append((time.monotonic(), pending.decode(errors="replace")))

    def __exit__(self, *exc) -> None:
        sys.stderr.flush()
        os.dup2(self._saved, 2)  # children still holding the pipe keep the pump alive: it is a daemon
        self._thread.join(timeout=2)

    def tracebacks(self) -> list[tuple[float, str]]:
        """(when, the traceback's first 25 lines) for each Python traceback seen."""
        with self._lock:
            lines = list(self.lines)
        found = []
        for i, (when, line) in enumerate(lines):
            if TRACEBACK in line:
                found.append((when, "\n".join(text for _, text in lines[i:i + 25])))
        return found


def scripted_model(kernels):
    """A Messages API that answers each rewrite request with the scripted answer of the kernel the prompt
    asks about (the first ```cuda block of the prompt is the kernel being optimised), so that jobs of different
    kernels can ask at the same time."""
    from tests.messages_api import DEFAULT_MODEL, MessagesAPI, Received, Reply

    answers = {k.spec().source.strip(): k.rewrite() for k in kernels if _loads(k)}

    class CorpusModel(MessagesAPI):
        def _next(self, received: Received) -> Reply:
            with self._lock:
                self.requests.append(received)
            text = "".join(block.get("text", "") if isinstance(block, dict) else str(block)
                           for message in (received.body or {}).get("messages", [])
                           for block in _blocks(message.get("content")))
            asked = text.split("```cuda\n", 1)[1].split("\n```", 1)[0].strip() if "```cuda\n" in text else ""
            answer = answers.get(asked)
            if answer is None:
                error = {"type": "api_error", "message": "no scripted answer for this kernel"}
                return Reply(500, json.dumps({"type": "error", "error": error}).encode())
            body = {"id": f"msg_corpus{len(self.requests):04d}", "type": "message", "role": "assistant",
                    "model": DEFAULT_MODEL, "content": [{"type": "text", "text": answer}], "stop_reason": "end_turn",
                    "stop_sequence": None, "usage": {"input_tokens": 1500, "output_tokens": 900}}
            return Reply(200, json.dumps(body).encode())

    return CorpusModel()


def _blocks(content) -> list:
    return content if isinstance(content, list) else [{"text": content or ""}]


def _loads(kernel) -> bool:
    try:
        kernel.spec()
        return True
    except Exception:  # a spec this kforge refuses: its jobs are recorded as refused
        return False


def run_job(rt, kernel, path: str, timeout_s: float, result: JobResult) -> None:
    """Submit one job, follow it to its end or the timeout, and fill `result` from its events."""
    from shared.application.jobs import NoProgress, cancel_job, follow_job, job_events, submit_job

    result.started = time.monotonic()
    try:
        spec = kernel.job(path)
        owner = {"owner": rt.owner} if getattr(rt, "owner", None) is not None else {}
        job_id = submit_job(rt.store, rt.bus, spec, submitted_by="corpus-matrix", run="corpus-matrix", **owner)
    except Exception as exc:  # the spec does not load or admission refuses it: the reason is the result
        result.outcome, result.detail = "refused", f"{type(exc).__name__}: {exc}"
        result.ended = time.monotonic()
        return
    result.job_id = job_id
    try:
        view = follow_job(rt.store, job_id, lambda event: None, timeout_s=timeout_s, poll_s=0.25,
                          stalled=rt.bus.stalled)
        finished = view.finished
    except NoProgress as exc:
        finished, result.outcome, result.detail = False, "stalled", exc.reason
    if not finished:
        try:
            cancel_job(rt.store, rt.bus, job_id, reason=f"corpus matrix: no end within {timeout_s:.0f} s",
                       cancelled_by="python")
        except Exception:  # it ended meanwhile
            pass
    result.ended = time.monotonic()
    summarise(result, job_events(rt.store, job_id), finished)


def summarise(result: JobResult, events: list, finished: bool) -> None:
    from shared.domain.events import (JOB_ENDS, BaselineMeasured, CandidateRejected, JobCancelled, JobCompleted,
                                      JobFailed, StepAccepted, StepDiscarded, StepSkipped, TaskFailed, TaskProfiled)
    from shared.domain.projections import project_job

    end = next((e for e in reversed(events) if isinstance(e, JOB_ENDS)), None)
    if not finished and result.outcome != "stalled":
        result.outcome = "HUNG"
        result.detail = f"no end within the timeout; last event {events[-1].type}" if events else "no event"
    match end:
        case JobCompleted(summary=summary) if finished:
            result.outcome, result.detail = "completed", summary
        case JobFailed(stage=stage, reason=reason) if finished:
            result.outcome, result.detail = f"failed:{stage}", reason
        case JobCancelled(reason=reason) if finished:
            result.outcome, result.detail = "cancelled", reason
    if end is not None and events:
        result.wall_s = (end.occurred_at - events[0].occurred_at).total_seconds()
    else:
        result.wall_s = result.ended - result.started
    result.busy_s = sum(e.wall_s for e in events if isinstance(e, TaskProfiled))
    baseline = next((e for e in events if isinstance(e, BaselineMeasured)), None)
    result.baseline_ms = baseline.median_ms if baseline else None
    result.task_failures = [f"{e.task}: {e.error_type}: {e.error}" for e in events if isinstance(e, TaskFailed)]
    if result.path != "baseline":
        result.speedup = project_job(events).speedup  # timed in turn with the submitted kernel where it was
    if result.path not in ("baseline", "tune"):
        rejected = {e.candidate_id: e for e in events if isinstance(e, CandidateRejected)}
        for e in events:
            if isinstance(e, StepAccepted):
                gain = f" {e.speedup:.2f}x" if e.speedup else ""
                result.steps.append(f"{e.step_id}: accepted{gain}")
            elif isinstance(e, StepDiscarded):
                why = rejected.get(e.candidate_id or "")
                check = f" ({why.check})" if why else ""
                result.steps.append(f"{e.step_id}: discarded at {e.stage}{check}: {e.reason[:160]}")
            elif isinstance(e, StepSkipped):
                result.steps.append(f"{e.step_id}: skipped: {e.reason[:120]}")


def cell(result: JobResult) -> str:
    """One table cell: the outcome in colour, its wall time and speedup."""
    if result.outcome == "completed":
        colour, word = "green", "ok"
        if result.path in ("explicit", "one_prompt") and not any(": accepted" in s for s in result.steps):
            colour, word = "yellow", "kept none"
    elif result.outcome in ("HUNG", "stalled"):
        colour, word = "bold red", result.outcome
    else:
        colour, word = "red", result.outcome
    parts = [f"[{colour}]{word}[/{colour}]"]
    if result.wall_s is not None:
        parts.append(f"{result.wall_s:.0f}s")
    if result.speedup is not None:
        parts.append(f"{result.speedup:.2f}x")
    elif result.path == "baseline" and result.baseline_ms is not None:
        parts.append(f"{result.baseline_ms:.3f}ms")
    if result.tracebacks:
        parts.append("[bold red]TB[/bold red]")
    return " ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated kernel names (default: the whole corpus)")
    parser.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated, of {', '.join(PATHS)}")
    parser.add_argument("--jobs-timeout", type=float, default=240.0, help="seconds before a job counts as HUNG")
    parser.add_argument("--concurrency", type=int, default=4, help="jobs in flight at once")
    parser.add_argument("--json", type=Path, help="write every job's result here")
    args = parser.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    if unknown := sorted(set(paths) - set(PATHS)):
        parser.error(f"unknown path(s) {', '.join(unknown)}: use {', '.join(PATHS)}")
    os.environ.update(KFORGE_HOME=tempfile.mkdtemp(prefix="kforge-corpus-"))
    os.environ.pop("REDIS_URL", None), os.environ.pop("DATABASE_URL", None)

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from tests.corpus_kernels import corpus

    kernels = corpus()
    if args.only:
        wanted = set(args.only.split(","))
        if missing := sorted(wanted - {k.name for k in kernels}):
            parser.error(f"no corpus kernel named {', '.join(missing)}")
        kernels = [k for k in kernels if k.name in wanted]
    console = Console(highlight=False, width=200)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    with StderrTap() as tap:
        import kforge.worker  # noqa: F401  (every service's tasks, in this process)
        from shared.adapters.settings import Settings
        from shared.application import runtime

        model = scripted_model(kernels)
        rt = runtime.build(Settings(KFORGE_HOME=os.environ["KFORGE_HOME"], REDIS_URL=None, DATABASE_URL=None,
                                    ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=model.url,
                                    KFORGE_LLM_MAX_RETRIES=0))
        runtime.install(rt)
        results = [JobResult(k.name, p) for k in kernels for p in paths]
        todo: queue.Queue[JobResult] = queue.Queue()
        by_name = {k.name: k for k in kernels}
        for r in results:
            todo.put(r)

        def follower() -> None:
            while True:
                try:
                    r = todo.get_nowait()
                except queue.Empty:
                    return
                console.print(f"[dim]start {r.kernel} {r.path}[/dim]")
                try:
                    run_job(rt, by_name[r.kernel], r.path, args.jobs_timeout, r)
                except Exception as exc:  # the matrix itself broke on this job: say so and go on
                    r.outcome, r.detail = "error", f"{type(exc).__name__}: {exc}"
                console.print(f"{r.kernel:<16} {r.path:<11} {cell(r)}  {escape(r.detail[:140])}")

        started = time.monotonic()
        threads = [threading.Thread(target=follower, name=f"follower-{i}") for i in range(max(1, args.concurrency))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        total_s = time.monotonic() - started
        model.close()
        tracebacks = tap.tracebacks()

    def in_flight(when: float) -> list[JobResult]:
        return [r for r in results if r.started and r.started <= when <= (r.ended or when) + 1.0]

    for when, _ in tracebacks:
        for r in in_flight(when):
            r.tracebacks += 1
    table = Table("kernel", *paths, title=f"corpus matrix: {len(results)} jobs in {total_s:.0f} s (target for the "
                                          f"whole matrix: {TARGET_S} s)")
    for k in kernels:
        table.add_row(k.name, *(cell(r) for r in results if r.kernel == k.name))
    console.print(table)
    for r in results:
        if r.outcome != "completed" or r.task_failures or r.steps:
            pending = by_name[r.kernel].pending
            waits = f" [yellow](waits on {escape(pending.feature)})[/yellow]" if pending else ""
            console.print(f"[bold]{r.kernel} {r.path}[/bold] ({r.job_id or 'not submitted'}): {r.outcome}: "
                          f"{escape(r.detail[:400])}{waits}")
            for line in r.steps + [f"TaskFailed {t}" for t in r.task_failures]:
                console.print(f"    {escape(line)}")
    for when, text in tracebacks:
        jobs = ", ".join(f"{r.kernel}/{r.path}" for r in in_flight(when)) or "none"
        console.print(f"[bold red]traceback at +{when - started:.0f} s[/bold red] (jobs in flight: {jobs}):\n"
                      f"{escape(text)}")
    if args.json:
        args.json.write_text(json.dumps({
            "total_s": total_s, "concurrency": args.concurrency, "jobs_timeout_s": args.jobs_timeout,
            "jobs": [{k: v for k, v in asdict(r).items() if k not in ("started", "ended")} for r in results],
            "tracebacks": [{"at_s": when - started, "text": text} for when, text in tracebacks]}, indent=2))
    console.file.flush()
    sys.stdout.flush()
    # Leave without the interpreter's clean-up: a job given up on may still hold a worker thread (a tuning
    # that stops only at its next batch), which the clean-up would wait for; what the jobs recorded is stored.
    os._exit(0 if all(r.outcome == "completed" or by_name[r.kernel].pending for r in results)
             and not tracebacks else 1)


if __name__ == "__main__":
    main()
