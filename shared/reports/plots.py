"""Plots of what people look at: a job's history (time after each step) and its tuning landscape (every
configuration's time). SVG text, drawn with matplotlib's non-interactive backend."""
import io
from collections.abc import Sequence

from shared.events import ConfigFailed, ConfigMeasured, Event, TuningRequested
from shared.reports.tracker import PerformanceTracker


def _figure(width: float = 7.0, height: float = 3.6):
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and CI
    from matplotlib import pyplot

    return pyplot.subplots(figsize=(width, height), layout="constrained")


def _svg(fig) -> str:
    from matplotlib import pyplot

    buffer = io.StringIO()
    fig.savefig(buffer, format="svg")
    pyplot.close(fig)
    return buffer.getvalue()


def history_svg(tracker: PerformanceTracker) -> str:
    """Bars of the best time after the baseline and after every step tried; kept steps in green."""
    fig, ax = _figure()
    labels, times, colours = ["baseline"], [tracker.baseline_time or 0.0], ["#888888"]
    for step in tracker.tried:
        if step.new_ms is not None:
            labels.append(step.step_id)
            times.append(step.new_ms)
            colours.append("#2a9d3f" if step.status == "accepted" else "#c0392b")
    if tracker.steps and not tracker.tried:  # strategy tune: the search is the one step
        labels.append("tune")
        times.append(tracker.final_time)
        colours.append("#2a9d3f")
    ax.bar(range(len(times)), times, color=colours)
    ax.set_xticks(range(len(times)), labels, rotation=30, ha="right")
    ax.set_ylabel("time (ms)")
    speedup = f", {tracker.speedup:.2f}x" if tracker.speedup else ""
    ax.set_title(f"{tracker.kernel_name}: time after each step (green kept, red not){speedup}")
    return _svg(fig)


def landscape_svg(events: Sequence[Event]) -> str:
    """Every configuration measured, sorted by time, one series per candidate; rejected ones counted."""
    fig, ax = _figure()
    candidate_of = {e.event_id: e.candidate_id for e in events if isinstance(e, TuningRequested)}
    series: dict[str, list[float]] = {}
    for e in events:
        if isinstance(e, ConfigMeasured) and not e.abandoned and e.request_id in candidate_of:
            series.setdefault(candidate_of[e.request_id], []).append(e.median_ms)
    failed = sum(1 for e in events if isinstance(e, ConfigFailed))
    for candidate, times in series.items():
        ordered = sorted(times)
        ax.plot(range(1, len(ordered) + 1), ordered, marker="o", markersize=3, linewidth=1, label=candidate)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # configurations are counted, not measured
    ax.set_xlabel("configurations, fastest first")
    ax.set_ylabel("median time (ms)")
    ax.set_title(f"tuning landscape ({sum(map(len, series.values()))} measured, {failed} rejected)")
    if series:
        ax.legend(fontsize="small")
    return _svg(fig)
