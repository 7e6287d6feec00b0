"""Admission limits: how much a submission may ask of kforge's machines.

A spec can be valid and still take a worker down: a size that makes the verifier's arrays or its trials
huge, a tuning space whose product Kernel Tuner enumerates in memory, a timeout of a week, an expression
that passes a bound only once its sizes are filled in. submit_job (the gateway, the CLI and the Python API
alike) refuses these before anything is recorded, each error naming the field and the setting that moves
the limit. A worker that knows its device refuses arrays its device or host cannot hold (`memory_refusal`).
"""
import math
import os
from collections.abc import Callable
from dataclasses import dataclass

from shared.domain.dtypes import host_dtype
from shared.domain.errors import FieldError
from shared.domain.expressions import ExpressionError, evaluate, restriction_holds
from shared.domain.spec import KernelSpec, ParamValue


@dataclass(frozen=True)
class Limits:
    """The defaults are those of Settings; see README, "Admission limits"."""

    max_size: int = 1 << 34
    max_array_bytes: int = 32 << 30
    max_search_space: int = 100_000
    max_benchmark_timeout_s: float = 600.0
    max_verify_timeout_s: float = 600.0
    max_search_time_s: float = 4 * 3600.0

    @classmethod
    def of(cls, settings) -> "Limits":
        return cls(max_size=settings.max_size, max_array_bytes=settings.max_array_bytes,
                   max_search_space=settings.max_search_space,
                   max_benchmark_timeout_s=settings.max_benchmark_timeout_s,
                   max_verify_timeout_s=settings.max_verify_timeout_s, max_search_time_s=settings.max_search_time_s)


def limit_errors(spec: KernelSpec, limits: Limits) -> list[FieldError]:
    """Every limit `spec` passes, each naming the field and the setting that moves it."""
    errors = [*_size_errors(spec, limits), *_timeout_errors(spec, limits), *_space_errors(spec, limits)]
    if not errors:  # expressions are evaluated only once their sizes and spaces are known to be bounded
        errors = _expression_errors(spec, "") + _candidate_errors(spec)
    if not errors:
        total = spec.array_bytes()
        if total > limits.max_array_bytes:
            errors.append(FieldError("args", f"the arrays take {total:,} bytes, above the {limits.max_array_bytes:,} "
                                             "a job may use (KFORGE_MAX_ARRAY_BYTES): use smaller sizes"))
    return errors


def memory_refusal(spec: KernelSpec, device_memory_bytes: int | None, input_sets: int = 1) -> str | None:
    """Why a worker must not allocate `spec`'s arrays, or None. A set of inputs is every array plus two copies
    of each output (the pristine and the reference output); the device holds `input_sets` of them (the
    benchmark alternates two, and its comparison draws a third), the host one at a time."""
    outputs = sum(math.prod(spec.shape_of(a)) * host_dtype(a.dtype).itemsize for a in spec.output_args)
    one_set = spec.array_bytes() + 2 * outputs
    for where, have, need in (("the device", device_memory_bytes, input_sets * one_set),
                              ("this host", _host_available_bytes(), one_set)):
        if have is not None and need > have:
            return (f"the arrays and their copies need {need:,} bytes, more than the {have:,} {where} has "
                    "available: use smaller sizes")
    return None


def _size_errors(spec: KernelSpec, limits: Limits) -> list[FieldError]:
    return [FieldError(f"sizes.{name}", f"{value:,} is above the largest size accepted ({limits.max_size:,}, "
                                        "KFORGE_MAX_SIZE): use a smaller size")
            for name, value in spec.sizes.items() if value > limits.max_size]


def _timeout_errors(spec: KernelSpec, limits: Limits) -> list[FieldError]:
    timeouts = [("benchmark.timeout_s", spec.benchmark.timeout_s, limits.max_benchmark_timeout_s,
                 "KFORGE_MAX_BENCHMARK_TIMEOUT_S"),
                ("verify.timeout_s", spec.verify.timeout_s, limits.max_verify_timeout_s, "KFORGE_MAX_VERIFY_TIMEOUT_S"),
                ("benchmark.search.time_limit_s", spec.benchmark.search.time_limit_s, limits.max_search_time_s,
                 "KFORGE_MAX_SEARCH_TIME_S")]
    return [FieldError(field, f"{value:g} s is above the {limit:g} s accepted ({setting}): give a shorter time")
            for field, value, limit, setting in timeouts if value is not None and value > limit]


def _space_errors(spec: KernelSpec, limits: Limits) -> list[FieldError]:
    candidate = spec.strategy.candidate
    spaces = [("tune_params", spec.tune_params),
              *((f"strategy.steps[{i}].tune_params", s.tune_params) for i, s in enumerate(spec.strategy.steps or [])),
              *([("strategy.candidate.tune_params", candidate.tune_params)] if candidate and candidate.tune_params else [])]
    errors = []
    for field, space in spaces:
        size = math.prod(len(values) for values in space.values())
        if size > limits.max_search_space:
            errors.append(FieldError(field, f"the space has {size:,} configurations (the product of the lists' "
                                            f"lengths), above the {limits.max_search_space:,} accepted "
                                            "(KFORGE_MAX_SEARCH_SPACE): use fewer values or parameters"))
    return errors


def _candidate_errors(spec: KernelSpec) -> list[FieldError]:
    candidate = spec.strategy.candidate
    return [] if candidate is None else _expression_errors(spec.for_candidate(candidate), "strategy.candidate.")


def _expression_errors(spec: KernelSpec, prefix: str) -> list[FieldError]:
    """Evaluate every expression of `spec` where it is used: shapes, ranges and work at the spec's sizes, the rest
    at the submitted configuration and at the smallest, first and largest value of every tune parameter.
    The workers evaluate them under the same bounds; here a bomb is a field error instead of a failed job."""
    checks: list[tuple[str, Callable[[], object]]] = []
    for i, arg in enumerate(spec.args):
        if arg.is_array:
            checks.append((f"args[{i}].shape", lambda arg=arg: _extents(spec.shape_of(arg))))
        if arg.range is not None:
            checks.append((f"args[{i}].range", lambda arg=arg: spec.value_range(arg)))
    checks += [("work.bytes", spec.bytes_per_launch), ("work.flops", spec.flops_per_launch)]
    checks += [("problem_size", lambda dim=dim: evaluate(dim, spec.sizes)) for dim in spec.problem_size or []]
    for config in _corners(spec):
        variables = spec.variables(config)
        checks += [(f"args[{i}].value", lambda arg=arg, config=config: spec.scalar_of(arg, config))
                   for i, arg in enumerate(spec.args) if not arg.is_array]
        checks += [(f"grid_div_{axis}", lambda d=d, variables=variables: evaluate(d, variables))
                   for axis in "xyz" for d in getattr(spec, f"grid_div_{axis}") or []]
        checks.append(("problem_size", lambda config=config: spec.launch_geometry(config)))
        checks.append(("smem_args.size", lambda config=config: spec.shared_memory_bytes(config)))
        checks += [(f"restrictions[{i}]", lambda r=r, config=config: restriction_holds(r, spec.restriction_variables(config)))
                   for i, r in enumerate(spec.restrictions)]
    errors: dict[str, FieldError] = {}
    for field, check in checks:
        if prefix + field in errors:
            continue
        try:
            check()
        except ZeroDivisionError:
            errors[prefix + field] = FieldError(prefix + field, "the grid divisors multiply to 0 at "
                                                                "some configuration: every grid_div must be positive")
        except (ExpressionError, OverflowError, ValueError) as exc:
            errors[prefix + field] = FieldError(prefix + field, str(exc))
    return list(errors.values())


def _corners(spec: KernelSpec) -> list[dict[str, ParamValue]]:
    base = spec.baseline_params()
    picks = (lambda v: v[0], lambda v: min(v), lambda v: max(v))
    corners = []
    for pick in picks:
        config = {**base, **{name: pick(values) if all(_is_number(v) for v in values) else values[0]
                             for name, values in spec.tune_params.items()}}
        if config not in corners:
            corners.append(config)
    return corners


def _extents(shape: tuple[int, ...]) -> None:
    if any(extent < 0 for extent in shape):
        raise ExpressionError(f"the shape {shape} has a negative extent: check the expression and sizes")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _host_available_bytes() -> int | None:
    """MemAvailable (free plus reclaimable cache) from /proc/meminfo; elsewhere, free physical memory."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None
