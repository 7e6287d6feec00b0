"""Search a kernel's tuning space: Kernel Tuner chooses the configurations, kforge evaluates them.

Kernel Tuner's `Searchspace` applies the restrictions and the device's thread limit, and its strategies
(brute force, random, genetic, bayes, ...) decide what to try next. kforge supplies the runner: every
configuration of a batch is submitted to the compile pool at once, and each cubin goes to the GPU process
as soon as it exists, so the GPU checks and times one configuration while the CPU cores compile the next.

A configuration counts only when its launch succeeded, its output matched the reference and its time is
physically possible; anything else is a ConfigFailed with the reason, and Kernel Tuner sees an error
marker, never a time.
"""
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Protocol
from uuid import UUID

from services.benchmark import roofline
from services.benchmark.compile_cache import compile_through
from services.benchmark.compile_pool import CompileOutcome, CompilePool
from services.benchmark.measurement import Measured, Order, Setup
from services.benchmark.sampling import summarize
from shared.adapters.device.nvrtc import CompileError
from shared.adapters.device.probe import DeviceInfo
from shared.adapters.device.process import Failed
from shared.domain.events import ConfigFailed, ConfigMeasured, derived_id
from shared.domain.expressions import ExpressionError
from shared.domain.spec import KernelSpec, ParamValue

ConfigOutcome = ConfigMeasured | ConfigFailed
FLUSH_EVERY_S = 0.5  # how often results are handed on (appended to the store) while a batch runs


def config_key(params: dict[str, ParamValue]) -> str:
    return ",".join(f"{k}={params[k]}" for k in sorted(params))


@dataclass
class Tally:
    """What a search cost and found, for ShardTuned and the benchmark report."""

    started: float = field(default_factory=time.perf_counter)
    compile_s: float = 0.0
    gpu_busy_s: float = 0.0
    first_result_s: float | None = None
    cache_hits: int = 0
    measured: int = 0
    failed: int = 0
    best: ConfigMeasured | None = None

    @property
    def wall_s(self) -> float:
        return time.perf_counter() - self.started


class MeasuringProcess(Protocol):
    """What a search needs of the GPU process: a BenchmarkProcess, or a ReplayProcess from recordings."""

    device: DeviceInfo
    replacements: int

    def prepare(self, setup: Setup) -> Failed | None: ...
    def measure(self, order: Order) -> Measured | Failed: ...


class SetupFailed(RuntimeError):
    """The reference could not be compiled or run, so no configuration can be checked."""


class SpaceEvaluator:
    """Evaluates configurations of one space for one request; remembers every outcome, so a revisit by
    the strategy (or a redelivered task, through `recorded`) costs nothing."""

    def __init__(self, spec: KernelSpec, process: MeasuringProcess, pool: CompilePool, arch: str, stream: str,
                 request_id: UUID, on_outcomes: Callable[[list[ConfigOutcome]], None],
                 recorded: list[ConfigOutcome] = (), replay: bool = False, reference: KernelSpec | None = None):
        """`reference` computes the outputs every configuration must match: the submitted kernel, which is
        `spec` itself unless `spec` is a generated candidate."""
        self.spec, self.process, self.pool, self.arch = spec, process, pool, arch
        self.reference = reference or spec
        self.stream, self.request_id, self.on_outcomes, self.replay = stream, request_id, on_outcomes, replay
        # What every configuration of this space shares, computed once rather than per configuration.
        self.base_params = spec.baseline_params()
        self.bytes_per_launch, self.flops_per_launch = spec.bytes_per_launch(), spec.flops_per_launch()
        self.tally = Tally()
        self.outcomes: dict[str, ConfigOutcome] = {}
        self._unsent: list[ConfigOutcome] = []
        self._sent_at = time.perf_counter()
        self._prepared = False
        self._logged: dict[str, str] = {}  # each distinct compile log, stored once: log -> its configuration
        for outcome in recorded:
            self._keep(outcome, announce=False)

    def evaluate(self, configs: list[dict[str, ParamValue]]) -> list[ConfigOutcome]:
        """One outcome per configuration, aligned with `configs`."""
        base = self.base_params
        todo = [c for c in dict.fromkeys(config_key(c) for c in configs) if c not in self.outcomes]
        by_key = {config_key(c): c for c in configs}
        fresh = [{**base, **by_key[k]} for k in todo]
        compiling = self.pool.compile_all(self.spec.source, self.spec.kernel_name, fresh, self.spec.compiler_options,
                                          self.arch) if fresh else iter(())
        if not self._prepared:
            self._prepare()  # while the pool compiles the batch
        for compiled in compiling:
            self._keep(self._evaluate(todo[compiled.index], by_key[todo[compiled.index]], compiled))
        self._flush(force=True)
        return [self.outcomes[config_key(c)] for c in configs]

    # --- one configuration ---
    def _evaluate(self, key: str, params: dict[str, ParamValue], compiled: CompileOutcome) -> ConfigOutcome:
        def failed(stage: str, reason: str, log: str = "") -> ConfigFailed:
            return ConfigFailed(event_id=derived_id(self.request_id, key, "ConfigFailed"), stream_id=self.stream,
                                request_id=self.request_id, params=params, stage=stage, reason=reason, log=log,
                                replay=self.replay)

        if compiled.error is not None:
            return failed("compile", str(compiled.error), self._log_once(compiled.error.log, key))
        kernel = compiled.kernel
        self.tally.compile_s += 0.0 if compiled.cache_hit else kernel.compile_ms / 1e3
        self.tally.cache_hits += compiled.cache_hit
        defines = {**self.base_params, **params}  # what the kernel was compiled with
        try:
            grid, block = self.spec.launch_geometry(defines)
            shared_bytes = self.spec.shared_memory_bytes(defines)
        except (ValueError, ZeroDivisionError) as exc:  # an ExpressionError is a ValueError too
            return failed("geometry", f"the launch geometry cannot be computed: {exc}")
        best = self.tally.best.median_ms if self.tally.best else None
        started = time.perf_counter()
        outcome = self.process.measure(Order(params=defines, kernel=kernel, grid=grid, block=block, best_ms=best,
                                             shared_bytes=shared_bytes))
        self.tally.gpu_busy_s += time.perf_counter() - started
        if isinstance(outcome, Failed):
            return failed(outcome.stage, outcome.reason)
        stats = summarize(outcome.samples_ms)
        verdict = roofline.assess(stats.median_ms, self.bytes_per_launch, self.flops_per_launch,
                                  self.process.device.peaks, self.spec.benchmark.l2_flush)
        if verdict.impossible:
            return failed("roofline", verdict.impossible)
        return ConfigMeasured(event_id=derived_id(self.request_id, key, "ConfigMeasured"), stream_id=self.stream,
                              request_id=self.request_id, params=params, grid=grid, block=block,
                              samples_ms=outcome.samples_ms, median_ms=stats.median_ms, min_ms=stats.min_ms,
                              mean_ms=stats.mean_ms, stddev_ms=stats.stddev_ms,
                              ci95_ms=None if len(outcome.samples_ms) < 2 else stats.ci95_ms,
                              abandoned=outcome.abandoned, max_abs_error=outcome.max_abs_error, gbps=verdict.gbps,
                              tflops=verdict.tflops, pct_of_peak=verdict.pct_of_peak, compile_ms=kernel.compile_ms,
                              cache_hit=compiled.cache_hit, replay=self.replay)

    def _log_once(self, log: str, key: str) -> str:
        """The log for a ConfigFailed: in full the first time, else a pointer to the configuration that has it
        (every configuration of a space usually fails to compile the same way)."""
        first = self._logged.setdefault(log, key)
        return log if first == key or not log else f"[the same compiler log as configuration {first}]"

    def _prepare(self) -> None:
        failed = self.process.prepare(reference_setup(self.reference, self.pool.cache, self.arch))
        if failed is not None:
            raise SetupFailed(failed.reason)
        self._prepared = True

    def _keep(self, outcome: ConfigOutcome, announce: bool = True) -> None:
        self.outcomes[config_key(outcome.params)] = outcome
        if isinstance(outcome, ConfigMeasured):
            self.tally.measured += 1
            if self.tally.first_result_s is None:
                self.tally.first_result_s = self.tally.wall_s
            if not outcome.abandoned and (self.tally.best is None or outcome.median_ms < self.tally.best.median_ms):
                self.tally.best = outcome
        else:
            self.tally.failed += 1
        if announce:
            self._unsent.append(outcome)
            self._flush()

    def _flush(self, force: bool = False) -> None:
        if self._unsent and (force or time.perf_counter() - self._sent_at >= FLUSH_EVERY_S):
            self.on_outcomes(self._unsent)
            self._unsent, self._sent_at = [], time.perf_counter()


def reference_setup(reference: KernelSpec, cache, arch: str) -> Setup:
    """The device setup every configuration of a job is checked against: the submitted kernel, as submitted,
    on inputs from the spec's seed. Raises SetupFailed when it does not compile."""
    params = reference.baseline_params()
    try:
        kernel, _ = compile_through(cache, reference.source, reference.kernel_name, params,
                                    reference.compiler_options, arch)
    except CompileError as exc:
        raise SetupFailed(f"the submitted kernel (the reference) does not compile: {exc}\n{exc.log}") from None
    return Setup(spec=reference, seed=reference.benchmark.seed, reference=kernel,
                 reference_geometry=reference.launch_geometry(params), reference_params=params,
                 reference_shared_bytes=reference.shared_memory_bytes(params))


# --- Kernel Tuner's side --------------------------------------------------------------------------------
_import_lock = threading.Lock()


def _kernel_tuner():
    """Kernel Tuner, imported on first use (it pulls in scipy and pandas, which only tuning needs).

    It also imports torch when present, only to accept torch tensors as arguments, which kforge never
    passes. Importing torch costs seconds and is not safe from a worker thread (seen on the GPU machine:
    "partially initialized module 'torch'", then a segfault), so torch is hidden during the import."""
    with _import_lock:
        hide_torch = "torch" not in sys.modules
        if hide_torch:
            sys.modules["torch"] = None  # makes `import torch` raise ImportError, which Kernel Tuner handles
        try:
            return _import_kernel_tuner()
        finally:
            if hide_torch:
                del sys.modules["torch"]


def _import_kernel_tuner():
    from kernel_tuner.interface import Options, strategy_map
    from kernel_tuner.runners.runner import Runner
    from kernel_tuner.searchspace import Searchspace
    from kernel_tuner.util import CompilationFailedConfig, RuntimeFailedConfig, TuningBudget
    from constraint import FunctionConstraint  # python-constraint2, Kernel Tuner's solver

    return SimpleNamespace(Options=Options, strategy_map=strategy_map, Runner=Runner, Searchspace=Searchspace,
                           FunctionConstraint=FunctionConstraint,
                           CompilationFailedConfig=CompilationFailedConfig, RuntimeFailedConfig=RuntimeFailedConfig,
                           TuningBudget=TuningBudget)


def search(spec: KernelSpec, evaluator: SpaceEvaluator, shard: int = 0, shards: int = 1) -> list[ConfigOutcome]:
    """Run the spec's Kernel Tuner strategy over its space (or, for brute force split over workers, over
    every `shards`-th configuration from `shard`); return the outcomes of everything evaluated."""
    kt = _kernel_tuner()
    device = evaluator.process.device
    try:
        space = kt.Searchspace(spec.tune_params, _bounded_restrictions(kt, spec), device.max_threads,
                               block_size_names=spec.block_size_names)
    except ExpressionError as exc:
        raise SetupFailed(f"restrictions: {exc}") from None
    settings = spec.benchmark.search
    fevals = min(settings.max_fevals or space.size, space.size)  # Kernel Tuner caps the budget at the space
    strategy_options = dict(settings.options)
    if settings.strategy != "brute_force":  # brute force refuses a budget: it always runs the whole space
        if settings.max_fevals:
            strategy_options["max_fevals"] = settings.max_fevals
        if settings.time_limit_s:
            strategy_options["time_limit"] = settings.time_limit_s
    options = kt.Options(
        tune_params=spec.tune_params, restrictions=space._modified_restrictions,
        restrictions_unmodified=list(spec.restrictions), strategy=settings.strategy,
        strategy_options=kt.Options(strategy_options), objective=["time"], objective_higher_is_better=[False],
        verbose=False, cache={}, cachefile=None, metrics=None, simulation_mode=False, seed=spec.benchmark.seed,
        budget=kt.TuningBudget(time_limit=settings.time_limit_s, max_fevals=fevals))
    if settings.max_fevals:  # random_sample reads its sample count from here
        options["max_fevals"] = fevals
    runner = _runner_class(kt)(evaluator, device)
    if settings.strategy == "brute_force":
        runner.run(space.sorted_list()[shard::shards], options)
    else:
        kt.strategy_map[settings.strategy].tune(space, runner, options)
    return list(evaluator.outcomes.values())


def _bounded_restrictions(kt, spec: KernelSpec) -> list | None:
    """The restrictions as one constraint that runs kforge's bounded evaluator. Given their text, Kernel
    Tuner and python-constraint compile and fold it as Python: `9 ** 9 ** 9 > block_size_x` never returned.
    A constraint over no named variables is called with every tune parameter's value, in tune_params order."""
    if not spec.restrictions:
        return None
    names = list(spec.tune_params)
    return [kt.FunctionConstraint(lambda *values: spec.restrictions_hold(dict(zip(names, values))))]


def _runner_class(kt):
    class KforgeRunner(kt.Runner):
        """Kernel Tuner's runner contract: one result dict per config, `time` a Python float in ms, or
        `__error__` set to an ErrorConfig instance (never a time) for anything that failed."""

        def __init__(self, evaluator: SpaceEvaluator, device: DeviceInfo):
            super().__init__()
            self.evaluator = evaluator
            self.dev = SimpleNamespace(name=device.name, max_threads=device.max_threads)  # bayes_opt reads .dev

        def get_device_info(self):
            return self.dev

        def get_environment(self, tuning_options):
            return {"device_name": self.dev.name}

        def run(self, parameter_space, tuning_options):
            names = list(tuning_options.tune_params)
            wanted = []
            for index, values in enumerate(parameter_space):
                if tuning_options.budget.is_done():
                    break
                tuning_options.budget.add_evaluations(1)
                wanted.append(index)
            configs = [dict(zip(names, parameter_space[i])) for i in wanted]
            results: list[dict | None] = [None] * len(parameter_space)
            for index, params, outcome in zip(wanted, configs, self.evaluator.evaluate(configs)):
                results[index] = self._result(params, outcome)
            return results

        @staticmethod
        def _result(params: dict, outcome: ConfigOutcome) -> dict:
            if isinstance(outcome, ConfigFailed):
                error = kt.CompilationFailedConfig() if outcome.stage == "compile" else kt.RuntimeFailedConfig()
                return {**params, "__error__": error}
            return {**params, "time": float(outcome.median_ms), "times": list(outcome.samples_ms),
                    "compile_time": outcome.compile_ms, "timestamp": outcome.occurred_at.isoformat()}

    return KforgeRunner
