"""`tune_kernel` with Kernel Tuner 1.5's signature and meaning, run as a kforge tune job.

The call becomes a KernelSpec (strategy tune: the space searched by Kernel Tuner's strategy, every configuration
compiled with NVRTC, checked against the reference output and timed with CUDA events) that runs through kforge's
runtime; the job's ConfigMeasured and ConfigFailed events become Kernel Tuner's results. The reference is the
first configuration that meets the restrictions: without `answer`, every other configuration must compute what
it computes; with `answer`, it must first match the answer itself.
"""
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kforge.api import KforgeError, build_spec, optimise
from kforge.kernel_tuner_compat import options
from kforge.kernel_tuner_compat.arguments import constant_args, spec_args
from kforge.kernel_tuner_compat.cache import CacheFile
from kforge.kernel_tuner_compat.results import (best_config, cached_result, config_line, outcome_result,
                                                total_timings, with_metrics)
from kforge.kernel_tuner_compat.space import (DropInError, Restrictions, TuneSpace, exclusions, plain,
                                              too_slow_to_check)
from shared.application import runtime
from shared.domain.events import BaselineMeasured, ConfigFailed, ConfigMeasured, Event, JobSubmitted, KernelCompiled
from shared.domain.projections import job_id_of, project_job
from shared.domain.spec import MAX_THREADS_PER_BLOCK

JOB_TIMEOUT_S = 7 * 24 * 3600.0  # a tuning is followed to its end; its own budget comes from strategy_options
NUMPY_ALLCLOSE_RTOL = 1e-5  # Kernel Tuner compares with an answer through numpy.allclose, whose rtol this is


def tune_kernel(kernel_name, kernel_source, problem_size, arguments, tune_params, grid_div_x=None, grid_div_y=None,
                grid_div_z=None, restrictions=None, answer=None, atol=1e-6, verify=None, verbose=False, lang=None,
                device=0, platform=0, smem_args=None, cmem_args=None, texmem_args=None, compiler=None,
                compiler_options=None, defines=None, log=None, iterations=7, block_size_names=None, quiet=False,
                strategy=None, strategy_options=None, cache=None, metrics=None, simulation_mode=None, parallel=None,
                observers=None, objective=None, objective_higher_is_better=None, objectives=None, seed=None):
    """Tune `kernel_name` over `tune_params` as Kernel Tuner's tune_kernel does; returns (results, env).

    `platform` (OpenCL), `log` and `parallel` are accepted and have no effect: kforge compiles in parallel and
    splits a brute-force space over its GPUs by itself. What kforge cannot honour raises DropInError (a
    ValueError) naming the argument and the fix. See README, "Kernel Tuner scripts"."""
    started = time.perf_counter()
    options.refuse_unsupported(verify=verify, texmem_args=texmem_args, compiler=compiler,
                               defines=defines, observers=observers, simulation_mode=simulation_mode, device=device,
                               objectives=objectives, smem_args=smem_args)
    source = options.kernel_source_text(kernel_source, lang)
    space = TuneSpace(tune_params)
    names = options.block_names(block_size_names)
    fixed = {**options.block_defaults(names, space.values), "kernel_tuner": 1,
             **{k: plain(v) for k, v in (defines or {}).items()}}
    rules = Restrictions(restrictions, space, fixed, names)
    objective, higher = _objective(objective, objective_higher_is_better, strategy)
    search = options.search(strategy, strategy_options, seed)
    dims = options.problem_dims(problem_size)
    cache_file = CacheFile(cache, kernel_name, _as_written(problem_size), tune_params) if cache else None
    runnable = [c for c in space.configs() if rules.runnable(c)]
    if not runnable:
        raise DropInError(f"restrictions: none of the {space.size} configurations meets them within {MAX_THREADS_PER_BLOCK} "
                          "threads per block: loosen them")
    results: dict[str, dict] = {}
    if cache_file is not None:
        for config in runnable:
            key = space.key(config)
            if key in cache_file.entries:
                results[key] = with_metrics(cached_result(cache_file.entries[key]), metrics)
    env = {"device_name": cache_file.device_name if cache_file else None}
    if len(results) < len(runnable):  # what the cache holds is not measured again
        spec = {"kernel_name": kernel_name, "source": source, "problem_size": dims, "block_size_names": names,
                "params": {**fixed, **runnable[0]}, "tune_params": space.values,
                "compiler_options": list(compiler_options or []),
                "benchmark": {"iterations": iterations, "min_samples": iterations, "search": search,
                              **({"seed": seed} if seed is not None else {})},
                "strategy": {"name": "tune"}}
        for axis, divisor in (("x", grid_div_x), ("y", grid_div_y), ("z", grid_div_z)):
            spec[f"grid_div_{axis}"] = options.grid_divisors(f"grid_div_{axis}", divisor)
        if smem_args is not None:
            spec["smem_args"] = {"size": plain(smem_args["size"])}
        if answer is not None and any(a is not None for a in answer):
            spec["verify"] = {"atol": float(atol), "rtol": NUMPY_ALLCLOSE_RTOL}
        skip = [c for c in runnable if space.key(c) in results]
        collector = _Collector(space, cache_file, metrics, quiet, verbose)
        _measure(spec, arguments, answer, cmem_args, rules, skip, collector)
        results = {**collector.results, **results}  # a configuration measured again keeps its cached result
        env.update(device_name=collector.device, compute_capability=collector.compute_capability,
                   kforge_job_id=collector.job_id)
    ordered = sorted(results.values(), key=lambda r: space.position(r) or ())
    env.update(problem_size=dims + [1] * (3 - len(dims)), iterations=iterations,
               compiler_options=list(compiler_options or []))
    best = best_config(ordered, objective, higher)
    if best is not None:
        env["best_config"] = best
        if not quiet:
            print(f"\nbest configuration for {objective}: {config_line(best, space.names + [objective])}")
    elif not quiet:
        print("no results to report")
    return ordered, total_timings(ordered, env, 1000 * (time.perf_counter() - started))


def _objective(objective, higher_is_better, strategy) -> tuple[str, bool]:
    objective = objective or "time"
    if not isinstance(objective, str):
        raise DropInError("objective: give one name (\"time\", or a metric's); kforge does not tune for several")
    if objective != "time" and (strategy or "brute_force") != "brute_force":
        raise DropInError(f"objective={objective!r}: kforge's search strategies minimise time; with brute_force "
                          "(every configuration measured) the best by a metric is chosen afterwards")
    return objective, bool(higher_is_better) if higher_is_better is not None else False


def _as_written(problem_size):
    """problem_size as Kernel Tuner writes it into a cache header."""
    return [plain(d) for d in problem_size] if isinstance(problem_size, list | tuple) else plain(problem_size)


def _measure(spec: dict, arguments, answer, cmem_args, rules: Restrictions, skip: list[dict],
             collector: "_Collector") -> None:
    """Complete the spec (its arguments saved as arrays, the configurations to leave out excluded), run the tune
    job and collect its outcomes; the configurations in `skip` are not measured."""
    space, cache_file = rules.space, collector.cache_file
    ruled_out = [c for c in rules.ruled_out_by_host() if rules.threads(c) <= MAX_THREADS_PER_BLOCK]
    excluded = exclusions(space, ruled_out + skip)
    if skip and too_slow_to_check(excluded, space):
        excluded = exclusions(space, ruled_out)
        if not collector.quiet:
            print(f"the cache's {len(skip)} configurations are measured again (their results from the cache are "
                  "kept): excluding them would slow kforge's search more")
    if too_slow_to_check(excluded, space):
        raise DropInError(f"excluding the {len(ruled_out)} configurations that restriction functions rule out takes "
                          f"{sum(map(len, excluded)):,} characters of restrictions over a space of {space.size:,} "
                          "configurations, more than kforge's search checks in reasonable time: write the "
                          "restrictions as strings of arithmetic comparisons (block_size_x * tile_x <= 1024), which "
                          "kforge evaluates itself")
    settings = runtime.current().settings
    if cache_file is not None and cache_file.device_name and (here := gpu_name_here(settings)):
        cache_file.check_device(here)
    with tempfile.TemporaryDirectory(prefix="kforge-kernel-tuner-") as folder:
        args = spec_args(arguments, answer, spec["source"], spec["kernel_name"], Path(folder), settings.max_array_bytes)
        args += constant_args(cmem_args, Path(folder), settings.max_array_bytes)
        kernel_spec = build_spec(spec={**spec, "args": args, "restrictions": rules.spec + excluded})
        try:
            run_job(kernel_spec, collector)
        finally:
            if cache_file is not None:
                cache_file.close()
    collector.check()


def run_job(spec, on_event) -> str:
    """Submit the job and follow it to its end (tests replace this)."""
    return optimise(spec, timeout_s=JOB_TIMEOUT_S, on_event=on_event)


def gpu_name_here(settings) -> str | None:
    """The name of the GPU an embedded kforge measures on, asked in a process of its own so that this one holds
    no CUDA state; None without a device, or where the workers run elsewhere (then the job's device is checked)."""
    if not settings.embedded:
        return None
    code = ("import sys\nfrom shared.adapters.device.probe import NoCudaDevice, probe\n"
            "try:\n    print(probe(int(sys.argv[1])).name)\nexcept NoCudaDevice:\n    pass\n")
    done = subprocess.run([sys.executable, "-c", code, settings.gpus[0]], capture_output=True, text=True, timeout=300)
    return done.stdout.strip() or None


class _Collector:
    """Follows the job's events: each configuration's outcome becomes a result (printed as Kernel Tuner prints
    it, and added to the cache file once the device is known)."""

    def __init__(self, space: TuneSpace, cache_file: CacheFile | None, metrics, quiet: bool, verbose: bool):
        self.space, self.cache_file, self.metrics, self.quiet, self.verbose = space, cache_file, metrics, quiet, verbose
        self.events: list[Event] = []
        self.results: dict[str, dict] = {}
        self.job_id = self.device = self.compute_capability = None
        self.error: Exception | None = None  # raised once the job has ended: raised here, it would leave it running

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        try:
            self._take(event)
        except Exception as exc:  # a metric that fails, a cache file of another device
            self.error = self.error or exc

    def _take(self, event: Event) -> None:
        if isinstance(event, JobSubmitted):
            self.job_id = job_id_of(event.stream_id)
            if not self.quiet:
                print(f"kforge job {self.job_id} (kforge show {self.job_id}: its events and reports)")
        elif isinstance(event, KernelCompiled) and self.compute_capability is None:
            self.compute_capability = event.arch.removeprefix("sm_")
        elif isinstance(event, BaselineMeasured):
            self.device = event.device
            if not self.quiet:
                print(f"Using: {event.device}")
            if self.cache_file is not None:
                cache_file, self.cache_file = self.cache_file, None  # kept only once opened for this device
                cache_file.open(event.device)
                self.cache_file = cache_file
        elif isinstance(event, ConfigMeasured | ConfigFailed) and self.error is None:
            at = self.space.position(event.params)
            if at is None:  # not a configuration of this space: never sent by a tune job of it
                return
            config = {n: self.space.values[n][i] for n, i in zip(self.space.names, at)}
            key = self.space.key(config)
            result = self.results[key] = outcome_result(event, config, self.metrics)
            if self.cache_file is not None:
                self.cache_file.add(key, result)
            if not self.quiet and (isinstance(event, ConfigMeasured) or self.verbose):
                print(config_line(result, [*self.space.names, "time", *(self.metrics or {})]))

    def check(self) -> None:
        """Raise what ended the job early; a search where every configuration failed still gives its results."""
        if self.error is not None:
            raise self.error
        view = project_job(self.events, self.job_id or "")
        if view.status == "failed" and not (view.failed_stage == "tuning" and self.results):
            raise KforgeError(f"kforge job {self.job_id} failed at {view.failed_stage}: {view.failure}")
        if view.status == "failed" and not self.quiet:
            print(f"kforge job {self.job_id}: {view.failure}")
        if view.status == "cancelled":
            raise KforgeError(f"kforge job {self.job_id} was cancelled: {view.failure}")
