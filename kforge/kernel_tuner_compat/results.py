"""A kforge tuning's outcomes as Kernel Tuner's results: one dict per configuration with its tune parameters,
`time` (the mean of `times`, in ms, as Kernel Tuner reports it), `times`, the timing keys Kernel Tuner's own
tools read (compile_time, verification_time, benchmark_time, strategy_time, framework_time, all ms), `timestamp`
and the metrics asked for; a configuration kforge rejected carries `__error__` (Kernel Tuner's error classes)
and no time, with kforge's reason under `kforge_error`."""
import builtins
import sys

from shared.domain.events import ConfigFailed, ConfigMeasured

TIMINGS = ("compile_time", "verification_time", "benchmark_time", "strategy_time", "framework_time")


def error_classes() -> dict[str, type]:
    """Kernel Tuner's error markers by name (imported on first use: Kernel Tuner pulls in scipy and pandas)."""
    from kernel_tuner.util import CompilationFailedConfig, ErrorConfig, InvalidConfig, RuntimeFailedConfig

    return {c.__name__: c for c in (ErrorConfig, InvalidConfig, CompilationFailedConfig, RuntimeFailedConfig)}


def outcome_result(outcome: ConfigMeasured | ConfigFailed, config: dict, metrics: dict | None) -> dict:
    """The result of one configuration kforge evaluated (`config`: its values as the caller gave them)."""
    result: dict = dict(config)
    if isinstance(outcome, ConfigMeasured):
        samples = list(outcome.samples_ms)
        # A compile served from kforge's cache took no time here (compile_ms is then the original compile's).
        result.update(time=float(outcome.mean_ms), times=samples,
                      compile_time=0.0 if outcome.cache_hit else float(outcome.compile_ms),
                      verification_time=0.0, benchmark_time=float(sum(samples)))
    else:
        errors = error_classes()
        kind = {"compile": "CompilationFailedConfig", "geometry": "InvalidConfig"}.get(outcome.stage,
                                                                                      "RuntimeFailedConfig")
        result.update(__error__=errors[kind](), compile_time=0.0, verification_time=0.0, benchmark_time=0.0,
                      kforge_error=f"{outcome.stage}: {outcome.reason.splitlines()[0] if outcome.reason else ''}")
    result.update(strategy_time=0.0, framework_time=0.0, timestamp=str(outcome.occurred_at))
    return with_metrics(result, metrics)


def cached_result(entry: dict) -> dict:
    """A cache entry as Kernel Tuner's reader returns it: an error's name becomes its error class."""
    errors = error_classes()
    result = dict(entry)
    for value in entry.values():
        if isinstance(value, str) and value in errors:
            result["__error__"] = errors[value]()
    return result


def with_metrics(result: dict, metrics: dict | None) -> dict:
    """Kernel Tuner's user metrics, in order (each may use those before it), on a result with a time."""
    if not metrics or "__error__" in result:
        return result
    if not isinstance(metrics, dict):
        raise TypeError("metrics should be a dict of names to functions or expressions, in the order they build")
    for name, metric in metrics.items():
        if callable(metric):
            result[name] = metric(result)
        elif isinstance(metric, str):
            result[name] = eval(compile(metric, f"<metric {name}>", "eval"), {"__builtins__": builtins}, dict(result))
        else:
            raise TypeError(f"metrics[{name!r}]: give a function of the result or a string expression")
    return result


def best_config(results: list[dict], objective: str = "time", higher_is_better: bool = False) -> dict | None:
    """The best result by `objective`, errors never chosen while any result has a value (Kernel Tuner's rule)."""
    if not results:
        return None
    worst = -sys.float_info.max if higher_is_better else sys.float_info.max

    def cost(result: dict) -> float:
        value = result.get(objective)
        return value if "__error__" not in result and isinstance(value, float | int) else worst

    return (max if higher_is_better else min)(results, key=cost)


def total_timings(results: list[dict], env: dict, wall_ms: float) -> dict:
    """The totals Kernel Tuner adds to env, and the time spent outside them (`overhead_time`; none where kforge's
    parallel compiles, or a resumed cache's times, add up to more than the wall time of this call)."""
    totals = {f"total_{key}": sum(r.get(key, 0.0) for r in results) for key in TIMINGS}
    env.update(totals)
    env["overhead_time"] = max(0.0, wall_ms - sum(totals.values()))
    return env


def config_line(result: dict, keys: list[str]) -> str:
    """One configuration as Kernel Tuner prints it: name=value pairs, floats to three decimals, times in ms."""
    shown = []
    for key in keys:
        if key in result:
            value = result[key]
            text = f"{value:.3f}" if isinstance(value, float) else str(value)
            shown.append(f"{key}={text}{'ms' if key == 'time' else ''}")
    if "__error__" in result:
        shown.append(f"{result['__error__']!s} ({result.get('kforge_error', '')})")
    return ", ".join(shown)
