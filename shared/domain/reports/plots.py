"""The plots of a job, as SVG text drawn from its events with matplotlib (no display needed).

history: for a search (strategy tune), the best time so far against configurations evaluated, every
configuration a faint point and the baseline a reference line; for a rewriting job, a bar per step tried.
landscape: the time against each tune parameter of the fastest candidate's space, one panel each, and a
heatmap of the best time over the two parameters that explain the most of it."""
import io
import math
import threading
from collections.abc import Callable, Sequence

from shared.domain.events import Event, JobSubmitted
from shared.domain.reports.search_space import SearchedSpace, best_so_far, searched_spaces
from shared.domain.reports.tracker import PerformanceTracker, performance_tracker
from shared.domain.steps import SUBMITTED

KEPT, NOT_KEPT, BASELINE, POINTS, BEST, FAILED = "#2a9d3f", "#c0392b", "#666666", "#4c72b0", "#dd8452", "#c0392b"
# Text stays text (searchable, and the names the tests look for); element ids are the same on every drawing of
# the same events, and no date is written, so a report rebuilt from events is the same file.
STYLE = {"svg.fonttype": "none", "svg.hashsalt": "kforge", "font.size": 9,
         "axes.spines.top": False, "axes.spines.right": False}
PANEL_COLUMNS, PANEL_HEIGHT = 3, 2.6  # inches high
LABELLED_CELLS = 100  # a heatmap with more cells than this is read by its colours, not its numbers
RASTERISED_POINTS = 2000  # more points than this are drawn as an image inside the SVG, which stays small
_MATPLOTLIB = threading.Lock()  # matplotlib is not thread-safe, and the gateway draws in a thread pool


def history_svg(events: Sequence[Event]) -> str:
    """How the job got faster: the search converging, or the time after each rewriting step."""
    tracker = performance_tracker(events)
    if tracker is None:
        raise ValueError("these events hold no submitted job")
    spec = next(e for e in events if isinstance(e, JobSubmitted)).spec
    if spec.strategy.generates:
        return _render(lambda fig: _steps(fig, tracker), 7.0, 1.4 + 0.32 * (len(tracker.tried) + 1))
    space = next((s for s in searched_spaces(events) if s.candidate_id == SUBMITTED), None)
    if space is None or not space.measured:
        baseline = f"baseline {tracker.baseline_time:.4f} ms; " if tracker.baseline_time else ""
        searched = (f"all {len(space.outcomes)} configurations failed" if space else
                    "no configuration searched yet" if spec.strategy.name == "tune" else "nothing is searched")
        return _render(lambda fig: _message(fig, f"{tracker.kernel_name}: {baseline}{searched}"))
    return _render(lambda fig: _convergence(fig.subplots(), tracker, space), 7.0, 4.2)


def landscape_svg(events: Sequence[Event]) -> str:
    """Time against each tune parameter of the fastest candidate's space, and the heatmap of two of them."""
    spaces = [s for s in searched_spaces(events) if s.outcomes]
    if not spaces:
        return _render(lambda fig: _message(fig, "tuning landscape: no configuration evaluated yet"))
    space = min(spaces, key=lambda s: s.best_ms if s.best_ms is not None else math.inf)
    kernel = next(e for e in events if isinstance(e, JobSubmitted)).spec.kernel_name
    if not space.axes:
        return _render(lambda fig: _message(fig, f"{kernel}, {_named(space)}: no tune parameter to plot"))
    pair = space.heatmap_pair() if space.measured else None  # a heatmap of failures alone has no scale
    height = _panels_height(space) + (_heatmap_height(space, pair) if pair else 0) + 0.9
    return _render(lambda fig: _landscape(fig, kernel, space, pair, others=len(spaces) - 1), 8.0, height)


def _render(draw: Callable, width: float = 7.0, height: float = 1.2) -> str:
    import matplotlib  # imported when drawing: the CLI's other commands need not wait for it
    from matplotlib.figure import Figure

    with _MATPLOTLIB, matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(width, height), layout="constrained")
        draw(fig)
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


def _message(fig, text: str) -> None:
    fig.text(0.5, 0.5, text, ha="center", va="center", color=BASELINE)


def _convergence(ax, tracker: PerformanceTracker, space: SearchedSpace) -> None:
    ax.set_gid("convergence")
    times = [o.time_ms for o in space.outcomes]
    running = best_so_far(times)
    evaluated = range(1, len(times) + 1)
    measured = [(x, o) for x, o in zip(evaluated, space.outcomes) if o.time_ms is not None]
    many = len(measured) > RASTERISED_POINTS
    for abandoned, style in ((False, dict(color=POINTS, label="a configuration")),
                             (True, dict(facecolors="none", edgecolors=POINTS, label="abandoned early"))):
        points = [(x, o.time_ms) for x, o in measured if o.abandoned == abandoned]
        if points:
            ax.scatter(*zip(*points), s=14, alpha=0.4, linewidths=0.8 if abandoned else 0, zorder=3, rasterized=many,
                       **style)
    best = space.best_ms
    found = running.index(best) + 1
    speedup = f", {tracker.baseline_time / best:.2f}x the baseline" if tracker.baseline_time else ""
    ax.step(*zip(*[(x, b) for x, b in zip(evaluated, running) if b is not None]), where="post", color=KEPT,
            linewidth=2, label=f"best so far: {best:.4f} ms from configuration {found}{speedup}")
    failed = [x for x, t in zip(evaluated, times) if t is None]
    if failed:  # along the bottom, which the margin below keeps clear of the times
        ax.scatter(failed, [0.04] * len(failed), transform=ax.get_xaxis_transform(), marker="x", s=14,
                   color=FAILED, label=f"failed ({len(failed)})")
    if tracker.baseline_time:
        ax.axhline(tracker.baseline_time, color=BASELINE, linestyle="--", linewidth=1,
                   label=f"baseline {tracker.baseline_time:.4f} ms")
    ax.margins(y=0.15)
    _time_scale(ax, [o.time_ms for _, o in measured] + [tracker.baseline_time or 0])
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # configurations are counted, not measured
    ax.set_xlim(0.5, len(times) + 0.5)
    ax.set_xlabel("configurations evaluated, in order")
    ax.set_ylabel("median time (ms)")
    ax.set_title(f"{tracker.kernel_name}: the search converging over {len(times)} configurations")
    ax.figure.legend(loc="outside lower center", ncols=2, fontsize="small")  # below: the points stay in view


def _steps(fig, tracker: PerformanceTracker) -> None:
    """One bar per step: horizontal, so that step names of any length stay readable and never overlap."""
    ax = fig.subplots()
    ax.set_gid("steps")
    rows = [("baseline", tracker.baseline_time, BASELINE, "not measured yet")]
    rows += [(s.step_id, s.new_ms, KEPT if s.status == "accepted" else NOT_KEPT, f"no time ({s.status})")
             for s in tracker.tried]
    longest = max((t for _, t, _, _ in rows if t is not None), default=1.0)
    for y, (_, time, colour, untimed) in enumerate(rows):
        if time is None:
            ax.text(0, y, f" {untimed}", va="center", color=BASELINE)
            continue
        ax.barh(y, time, color=colour, height=0.6)
        gain = f" ({tracker.baseline_time / time:.2f}x)" if tracker.baseline_time and y else ""
        ax.text(time + 0.01 * longest, y, f"{time:.4f} ms{gain}", va="center")
    ax.set_yticks(range(len(rows)), [name for name, *_ in rows])
    ax.invert_yaxis()  # in the order tried, top down
    ax.set_xlim(0, longest * 1.3)  # room for the figures written after the bars
    ax.set_xlabel("best tuned time (ms)")
    speedup = f", {tracker.speedup:.2f}x overall" if tracker.speedup else ""
    ax.set_title(f"{tracker.kernel_name}: time after each step (green kept, red not){speedup}")


def _landscape(fig, kernel: str, space: SearchedSpace, pair: tuple[str, str] | None, others: int) -> None:
    failed = len(space.outcomes) - len(space.measured)
    also = f"; the fastest of {others + 1} candidates tuned" if others else ""
    fig.suptitle(f"{kernel}, {_named(space)}: time against each tune parameter\n"
                 f"{len(space.measured)} configurations measured, {failed} failed{also}")
    if pair is None:
        _panels(fig, space)
        return
    panels_fig, heatmap_fig = fig.subfigures(2, 1, height_ratios=[_panels_height(space), _heatmap_height(space, pair)])
    _panels(panels_fig, space)
    _heatmap(heatmap_fig.subplots(), space, *pair)


def _panels_height(space: SearchedSpace) -> float:
    return PANEL_HEIGHT * math.ceil(len(space.axes) / PANEL_COLUMNS)


def _heatmap_height(space: SearchedSpace, pair: tuple[str, str]) -> float:
    return min(2.0 + 0.4 * len(space.axes[pair[1]]), 6.0)


def _named(space: SearchedSpace) -> str:
    return "as submitted" if space.candidate_id == SUBMITTED else f"candidate {space.candidate_id}"


def _panels(fig, space: SearchedSpace) -> None:
    """A panel per tune parameter: its values in tune_params order on x, every configuration's time a point
    (hollow: abandoned early), the best per value joined, and the failures per value counted."""
    names = list(space.axes)
    columns = min(len(names), PANEL_COLUMNS)
    grid = fig.subplots(math.ceil(len(names) / columns), columns, sharey=True, squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[len(names):]:
        ax.remove()
    many = len(space.outcomes) * len(names) > RASTERISED_POINTS
    for i, (ax, name) in enumerate(zip(axes, names)):
        ax.set_gid(f"panel-{name}")
        values = space.axes[name]
        by_value = [[o for o in space.outcomes if o.params.get(name) == v] for v in values]
        points, hollow = [], []
        for x, outcomes in enumerate(by_value):
            timed = [o for o in outcomes if o.time_ms is not None]
            step = min(0.06, 0.5 / max(len(timed) - 1, 1))  # side by side within half a slot, in recorded order
            for k, outcome in enumerate(timed):
                (hollow if outcome.abandoned else points).append((x + (k - (len(timed) - 1) / 2) * step,
                                                                  outcome.time_ms))
        if points:
            ax.scatter(*zip(*points), s=12, color=POINTS, alpha=0.45, linewidths=0, label="a configuration",
                       rasterized=many)
        if hollow:
            ax.scatter(*zip(*hollow), s=12, facecolors="none", edgecolors=POINTS, alpha=0.6, linewidths=0.8,
                       label="abandoned early", rasterized=many)
        best = sorted((values.index(key[0]), time) for key, time in space.best_by([name]).items())
        ax.plot(*zip(*best), color=BEST, marker="D", markersize=4, linewidth=1.5, label="best per value")
        ax.set_xticks(range(len(values)), [str(v) for v in values], rotation=45 if len(values) > 6 else 0)
        failures = [sum(o.time_ms is None for o in outcomes) for outcomes in by_value]
        if any(failures):  # counted along the top, value by value
            top = ax.secondary_xaxis("top")
            top.set_xticks(range(len(values)), [str(n) if n else "" for n in failures])
            top.tick_params(length=0, labelsize=7, labelcolor=FAILED)
            top.spines["top"].set_visible(False)
            top.set_xlabel("failed", color=FAILED, fontsize=7, labelpad=1)
        ax.set_xlim(-0.6, len(values) - 0.4)
        ax.set_xlabel(name)
        if i % columns == 0:
            ax.set_ylabel("median time (ms)")
    _time_scale(axes[0], [o.time_ms for o in space.measured])
    legend = {label: handle for ax in axes[:len(names)] for handle, label in zip(*ax.get_legend_handles_labels())}
    fig.legend(legend.values(), legend.keys(), loc="outside lower center", ncols=len(legend), fontsize="small")


def _heatmap(ax, space: SearchedSpace, x: str, y: str) -> None:
    """The best time for each pair of values; a pair where every configuration failed is hatched and
    counted, a pair never evaluated (restricted, or the search skipped it) left blank."""
    import numpy
    from matplotlib import colormaps
    from matplotlib.colors import LogNorm, Normalize
    from matplotlib.patches import Rectangle

    ax.set_gid("heatmap")
    xs, ys = space.axes[x], space.axes[y]
    best, failed = space.best_by([x, y]), space.failed_only([x, y])
    cells = numpy.ma.masked_invalid([[best.get((vx, vy), math.nan) for vx in xs] for vy in ys])
    times = list(best.values())
    norm = (LogNorm if max(times) >= 10 * min(times) else Normalize)(min(times), max(times))
    cmap = colormaps["viridis_r"].with_extremes(bad="white")  # the fastest brightest
    image = ax.imshow(cells, cmap=cmap, norm=norm, aspect="auto", origin="lower")
    ax.figure.colorbar(image, ax=ax, label="best median time (ms)")
    for vx, vy in failed:
        ax.add_patch(Rectangle((xs.index(vx) - 0.5, ys.index(vy) - 0.5), 1, 1, facecolor="#eeeeee",
                               edgecolor=FAILED, hatch="xx", linewidth=0))
    if len(xs) * len(ys) <= LABELLED_CELLS:
        for (vx, vy), time in best.items():
            r, g, b, _ = cmap(norm(time))
            ink = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"
            ax.text(xs.index(vx), ys.index(vy), f"{time:.3g}", ha="center", va="center", color=ink, fontsize=7)
    (fastest_x, fastest_y), _ = min(best.items(), key=lambda item: item[1])
    ax.add_patch(Rectangle((xs.index(fastest_x) - 0.5, ys.index(fastest_y) - 0.5), 1, 1, fill=False,
                           edgecolor="black", linewidth=2))
    ax.set_xticks(range(len(xs)), [str(v) for v in xs], rotation=45 if len(xs) > 8 else 0)
    ax.set_yticks(range(len(ys)), [str(v) for v in ys])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    blank = len(xs) * len(ys) - len(best) - len(failed)
    ax.set_title(f"best time per {x} and {y}, which explain {space.explained_share(x):.0%} and "
                 f"{space.explained_share(y):.0%} of its variance\noutlined: the fastest; hatched: every "
                 f"configuration failed ({len(failed)}); blank: not evaluated ({blank})", fontsize=8)


def _time_scale(ax, times: list[float]) -> None:
    """A logarithmic time axis where the times span ten times or more, so fast ones are not flattened."""
    positive = [t for t in times if t > 0]
    if positive and max(positive) >= 10 * min(positive):
        ax.set_yscale("log")
