"""What the files a job leaves behind contain: the optimised kernel named with its speedup, the history as
JSON, the generator's transcript, and the plots. All come from the job's events, so any job can be exported
again at any time; `kforge.job_files` writes them."""
import json
import re
from collections.abc import Sequence

from shared.domain.events import Event, GeneratorCalled
from shared.domain.reports.plots import history_svg, landscape_svg
from shared.domain.reports.results import kernel_result
from shared.domain.reports.suggestions import suggest
from shared.domain.reports.tracker import performance_tracker


def kernel_file_text(source: str, params: dict, header: str) -> str:
    """The best kernel as a file that compiles on its own with the best parameters, yet stays tunable:
    each parameter is defined unless the compiler command line defines it (as Kernel Tuner does)."""
    defines = "".join(f"#ifndef {k}\n#define {k} {_literal(v)}\n#endif\n" for k, v in params.items())
    return f"{header}{defines}\n{source.rstrip()}\n"


def file_stem(kernel_name: str) -> str:
    """The kernel's name as a file name: a template instance's <, >, ::, commas and spaces become single
    underscores (scale<float> -> scale_float, ns::k<float, 4> -> ns_k_float_4)."""
    return re.sub(r"\W+", "_", kernel_name).strip("_")


def _literal(value) -> str:
    return str(int(value)) if isinstance(value, bool) else str(value)


def transcript_text(events: Sequence[Event]) -> str:
    calls = [e for e in events if isinstance(e, GeneratorCalled)]
    if not calls:
        return "no generator calls: this job did not rewrite its kernel\n"
    parts = []
    for i, call in enumerate(calls, 1):
        outcome = f"error: {call.error}" if call.error else (
            f"{call.input_tokens}+{call.output_tokens} tokens, ${call.cost_usd:.4f}, {call.latency_ms:.0f} ms")
        parts.append(f"=== call {i}: {call.kind}{' ' + call.step_id if call.step_id else ''} at "
                     f"{call.occurred_at:%Y-%m-%d %H:%M:%S} UTC by {call.provider} ({call.model}); {outcome}\n"
                     + "".join(f"--- retried: {why}\n" for why in call.attempts)
                     + f"--- system\n{call.system}\n--- prompt\n{call.prompt}\n--- response\n{call.response}\n")
    return "\n".join(parts)


def job_files(events: Sequence[Event], plots: bool = True) -> dict[str, str]:
    """The job's files, each name with its text, in the order they are written; without the plots when not
    `plots` (drawing them takes seconds, more than an interrupted `kforge tune` may take to exit)."""
    tracker, result = performance_tracker(events), kernel_result(events)
    if tracker is None or result is None:
        raise ValueError("these events hold no submitted job")
    files: dict[str, str] = {}
    if result.best is not None:
        speedup = result.speedup or 1.0
        header = (f"// {result.kernel_name} optimised by kforge job {result.job_id}: {speedup:.3f}x the submitted "
                  f"kernel ({result.baseline.median_ms:.4f} -> {result.best.median_ms:.4f} ms on {result.device})"
                  f"{' [REPLAY]' if result.replay else ''}\n"
                  f"// through: {' -> '.join(s.step_id for s in tracker.steps) or 'no step (the submitted kernel)'}\n")
        files[f"{file_stem(result.kernel_name)}_optimised_{speedup:.3f}x.cu"] = kernel_file_text(result.best_source,
                                                                                      result.best.params, header)
    history = {"tracker": tracker.model_dump(mode="json"), "result": result.model_dump(mode="json"),
               "total_improvement_percent": tracker.get_total_improvement(), "speedup": tracker.speedup,
               "suggestions": [s.model_dump(mode="json") for s in suggest(events)]}
    files["history.json"] = json.dumps(history, indent=2)
    files["transcript.log"] = transcript_text(events)
    files["overview.txt"] = tracker.generate_overview() + "\n"
    if plots and tracker.baseline_time is not None:
        files["history.svg"] = history_svg(events)
        files["landscape.svg"] = landscape_svg(events)
    return files
