"""The kernel submission: what the user sends, validated so that every error names the field and the fix.

Launch geometry follows Kernel Tuner's conventions, which kforge's users already know:
`problem_size` is up to three expressions, the thread block comes from the parameters named in
`block_size_names` (256, 1, 1 when absent) and the grid is `ceil(problem_size[i] / prod(grid_div_i))`,
where `grid_div_x` defaults to `[block_size_x]` (likewise y and z).
Each launch gets `smem_args.size` bytes of dynamic shared memory (Kernel Tuner's smem_args; 0 when absent).
"""
import math
import re
from pathlib import PurePosixPath
from typing import Annotated, Literal

import numpy as np
from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, HttpUrl, ValidationInfo, field_validator,
                      model_validator)

from shared.domain.compile_policy import (check_define_value, check_macro_names, check_options, check_source,
                                          option_macros, option_values)
from shared.domain.dtypes import BFLOAT16, bfloat16_held_range, float_info, host_dtype, is_float, kind, scalar
from shared.domain.expressions import ExpressionError, Number, check_restriction, evaluate, names_in, restriction_holds

DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
          "uint64")
DEFAULT_BLOCK = {"block_size_x": 256, "block_size_y": 1, "block_size_z": 1}
MAX_THREADS_PER_BLOCK = 1024  # every CUDA GPU's limit, which Kernel Tuner's Searchspace applies to block sizes
Expression = int | str
ParamValue = int | float | str
# Patterns are whole-text matches: `pattern=` runs them in pydantic's Rust engine, where $ is the end of the
# text; the checks below use re.fullmatch, because Python's $ also matches before a final newline.
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
IDENTIFIER = rf"^{_NAME}$"


def is_identifier(name: str) -> bool:
    return re.fullmatch(_NAME, name) is not None


KERNEL_NAME_MAX = 200
# A kernel is named as NVRTC's nvrtcAddNameExpression names it: an identifier, optionally qualified (ns::k), or
# a template instance (scale<float>, ns::k<float, 4>). The expression is compiled as C++ inside the program, so
# its template arguments may hold only type names, integers, spaces, ::, *, &, -, commas and nested <>: no ; { }
# # quotes or newlines that could add code. Parentheses are refused too, which rules out calls and casts; write
# the value instead (f<8> rather than f<(1<<3)>).
_QUALIFIED = rf"(?:::)?(?:{_NAME}::)*({_NAME})"
_KERNEL_NAME = re.compile(rf"{_QUALIFIED}(?: *<[A-Za-z0-9_ :<>,*&\-]*>)?")


def check_kernel_name(name: str) -> str:
    """`name` when it is an identifier or a name expression; a ValueError naming what is wrong otherwise."""
    shape = ("is neither an identifier nor a template instance named as NVRTC names it (scale<float>, "
             "ns::k<float, 4>)")
    if len(name) > KERNEL_NAME_MAX:
        raise ValueError(f"{name[:40]!r}... {shape}: it is {len(name)} characters, at most {KERNEL_NAME_MAX}")
    if _KERNEL_NAME.fullmatch(name) is None:
        raise ValueError(f"{name!r} {shape}: template arguments may hold only type names, integers, spaces, ::, "
                         "*, &, -, commas and nested <> (no ; { } # quotes, newlines or parentheses: write f<8> "
                         "rather than f<(1<<3)>)")
    if not _angles_balanced(name):
        raise ValueError(f"{name!r} {shape}: its < and > do not pair up")
    return name


def _angles_balanced(name: str) -> bool:
    """Every < of the template arguments closed, and only the last > closing the first <."""
    if "<" not in name:
        return True
    depth, arguments = 0, name[name.index("<"):]
    for position, char in enumerate(arguments):
        depth += {"<": 1, ">": -1}.get(char, 0)
        if depth == 0 and position < len(arguments) - 1:
            return False
    return depth == 0


def kernel_base_name(kernel_name: str) -> str:
    """The kernel's own name in the source: `scale` for scale<float>, `k` for ns::k<float, 4>."""
    return re.match(_QUALIFIED, kernel_name).group(1)


def is_template_instance(kernel_name: str) -> bool:
    return "<" in kernel_name


KernelName = Annotated[str, AfterValidator(check_kernel_name)]


STORED = {"stored": True}
"""Validation context of a spec read back from the event store. It was admitted under the rules of its day,
which later versions may tighten: it is checked for its shape only, never against today's submission rules,
so stored history stays readable (a rule tightened later would otherwise make old jobs unreadable)."""


def _stored(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get("stored"))


def submission_rule(check):
    """A check of a value that submissions must pass and stored specs skip (see STORED)."""
    def rule(value, info: ValidationInfo):
        return value if _stored(info) else check(value)
    return rule


def field_rule(check):
    """submission_rule for a field validator of a model (a classmethod)."""
    def rule(cls, value, info: ValidationInfo):
        return value if _stored(info) else check(cls, value)
    return rule


def model_rule(check):
    """submission_rule for a model validator run after the fields (takes the model)."""
    def rule(self, info: ValidationInfo):
        return self if _stored(info) else check(self)
    return rule


def _check_space(space: dict[str, list[ParamValue]]) -> dict[str, list[ParamValue]]:
    for name, values in space.items():
        if not is_identifier(name):
            raise ValueError(f"tune parameter {name!r} is not an identifier: it becomes a -D define")
        if not values:
            raise ValueError(f"tune parameter {name!r} has no values: give at least one")
        for value in values:
            check_define_value(name, value)
    return space


def _check_defines(params: dict[str, "ParamValue"]) -> dict[str, "ParamValue"]:
    for name in params:
        if not is_identifier(name):
            raise ValueError(f"parameter {name!r} is not an identifier: it becomes a -D define")
        check_define_value(name, params[name])
    return params


TuneSpace = Annotated[dict[str, list[ParamValue]], AfterValidator(submission_rule(_check_space))]
Defines = Annotated[dict[str, ParamValue], AfterValidator(submission_rule(_check_defines))]
Restriction = Annotated[str, AfterValidator(submission_rule(check_restriction))]


class _Strict(BaseModel):
    # No NaN or Infinity in any float field: JSON's 1e999 parses as Infinity, which no limit catches.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ArrayFile(_Strict):
    """A .npy file on the workers' machine and the sha256 of its bytes when the spec file was read, so that a
    file changed since is refused where it is used (shared/adapters/array_files.py) rather than used unnoticed. A spec
    file names only the path (`data: x.npy`, relative to the spec file); its loader records the rest."""

    path: str = Field(description="absolute path of the .npy file")
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="of the file's bytes")]

    @model_validator(mode="before")
    @classmethod
    def _not_a_bare_path(cls, value):
        if isinstance(value, str):
            raise ValueError(f"{value!r} is a path alone: a spec file's loader (kforge tune --spec) reads it and "
                             "records its sha256; elsewhere give {path: <absolute path>, sha256: <of its bytes>}")
        return value

    @field_validator("path")
    @classmethod
    @field_rule
    def _absolute(cls, path: str) -> str:
        if not PurePosixPath(path).is_absolute():
            raise ValueError(f"{path!r} is relative, which would depend on each worker's directory: give an absolute "
                             "path (a spec file's relative paths are resolved against the spec file)")
        return path


# [low, high) of an input without a range, by dtype kind: within every dtype of the kind, int8 and uint8 too.
DEFAULT_RANGES = {"f": (-1.0, 1.0), "i": (-100, 100), "u": (0, 100)}
MAX_SPAN = 2 ** 64 - 1  # values an integer range may hold: the count travels to the device as a 64-bit integer


def held_float_range(dtype: str, low: float, high: float) -> tuple[float, float]:
    """The smallest value of float `dtype` at or above `low` and the largest below `high`: the range [low, high)
    as the dtype holds it (the nearest value to low may lie below it, and to high at or above it)."""
    if dtype == BFLOAT16:
        return bfloat16_held_range(low, high)
    held = np.dtype(dtype).type
    lowest, top = held(low), held(high)
    if float(lowest) < low:
        lowest = np.nextafter(lowest, held(np.inf))
    below = top if float(top) < high else np.nextafter(top, held(-np.inf))
    return float(lowest), float(below)


class ArgSpec(_Strict):
    """One kernel argument, in the order of the kernel's signature; or, with role constant, a `__constant__`
    array of the kernel's source that the host fills before every launch (Kernel Tuner's cmem_args), which is
    no parameter."""

    name: Annotated[str, Field(pattern=IDENTIFIER)]
    dtype: str
    shape: list[Expression] | None = Field(None, description="array extent per dimension, in size variables")
    role: Literal["in", "out", "inout", "scalar", "constant"] | None = Field(
        None, description="default: in for arrays; constant: a __constant__ array of the source of this name, an "
                          "input filled before every launch, not a kernel parameter")
    value: Expression | float | None = Field(None, description="a scalar argument's value")
    specials: list[Literal["nan", "inf", "-inf", "zero", "-zero", "denormal"]] = Field(
        default_factory=list, description="special values the verifier mixes into this input (floats only)")
    range: list[Expression | float] | None = Field(
        None, min_length=2, max_length=2,
        description="[low, high): an input's values, uniform from low (included) to high (left out); expressions "
                    "over sizes, evaluated at each trial's sizes, e.g. [0, n] for indices into n elements")
    sorted: bool = Field(False, description="an input's values non-decreasing in memory order (row pointers, "
                                            "sorted keys), within range")
    data: ArrayFile | None = Field(None, description="an input's values, fixed: a .npy file of its dtype and shape")
    answer: ArrayFile | None = Field(None, description="an output's expected values (Kernel Tuner's answer): a .npy "
                                                       "file of its dtype and shape, compared with verify.atol/rtol")

    @field_validator("dtype")
    @classmethod
    @field_rule
    def _known_dtype(cls, dtype: str) -> str:
        if dtype not in DTYPES:
            raise ValueError(f"{dtype!r} is not a dtype kforge knows: use one of {', '.join(DTYPES)}")
        return dtype

    @model_validator(mode="after")
    @model_rule
    def _array_or_scalar(self) -> "ArgSpec":
        if self.shape is not None and self.value is not None:
            raise ValueError(f"argument {self.name!r} has both shape and value: arrays take shape, scalars take value")
        if self.shape is None and self.value is None:
            raise ValueError(f"argument {self.name!r} needs a shape (arrays, e.g. shape: [n]) or a value (scalars)")
        if self.role == "constant" and self.shape is None:
            raise ValueError(f"argument {self.name!r} is a __constant__ array (role constant): give it a shape, e.g. "
                             "shape: [17, 17], or [1] for one value")
        if self.shape is not None and self.role == "scalar":
            raise ValueError(f"argument {self.name!r} has a shape, so its role is in, out or inout, not scalar")
        if self.value is not None and self.role not in (None, "scalar"):
            raise ValueError(f"argument {self.name!r} has a value, so it is a scalar: drop role or set role: scalar")
        if self.specials and (not is_float(self.dtype) or self.shape is None or self.role == "out"):
            raise ValueError(f"argument {self.name!r}: specials apply to float input arrays only; drop them here")
        return self

    @model_validator(mode="after")
    @model_rule
    def _values_given_once(self) -> "ArgSpec":
        given = [name for name in ("range", "sorted", "data", "answer") if getattr(self, name)]
        if self.value is not None and given:
            raise ValueError(f"{given[0]}: argument {self.name!r} is a scalar; range, sorted, data and answer "
                             "describe arrays: drop it")
        if self.effective_role == "out" and (given := [name for name in given if name != "answer"]):
            raise ValueError(f"{given[0]}: argument {self.name!r} is an output (role out), which starts with no "
                             "values: make it role inout to give it input values, or give its expected values as answer")
        if self.answer is not None and not self.is_output:
            raise ValueError(f"answer: argument {self.name!r} is an input, and answer holds an output's expected "
                             "values: set role out or inout, or give fixed input values as data")
        if self.data is not None and (self.range is not None or self.sorted or self.specials):
            raise ValueError(f"data: it fixes the values of {self.name!r}, so range, sorted and specials have "
                             "nothing to draw: drop them")
        if self.sorted and self.specials:
            raise ValueError(f"sorted: specials would break the order of {self.name!r}: drop one of the two")
        return self

    @property
    def is_array(self) -> bool:
        return self.shape is not None

    @property
    def effective_role(self) -> str:
        return self.role or ("in" if self.is_array else "scalar")

    @property
    def is_output(self) -> bool:
        return self.effective_role in ("out", "inout")

    @property
    def is_parameter(self) -> bool:
        """Whether the kernel takes it as a parameter: every argument but a __constant__ array."""
        return self.effective_role != "constant"


# Kernel Tuner's strategy names (kernel_tuner.interface.strategy_map), checked here so a typo is a field error.
SEARCH_STRATEGIES = ("brute_force", "random_sample", "minimize", "basinhopping", "diff_evo", "genetic_algorithm",
                     "greedy_mls", "ordered_greedy_mls", "greedy_ils", "dual_annealing", "mls", "pso",
                     "simulated_annealing", "firefly_algorithm", "bayes_opt")

# The strategies that measure or prove the submitted kernel and never rewrite it.
MEASURING_STRATEGIES = ("baseline", "tune", "verify")

# Output comparison against the reference: (atol, rtol) per dtype kind and size, for |out - ref| <= atol + rtol*|ref|.
# Float sums computed in another order differ in the last bits, so floats get room; integers must match exactly.
# bfloat16 keeps 8 bits of precision (eps 2**-7, 0.0078): two honest kernels differ by a result rounded to its
# neighbour (up to eps relative) plus an intermediate rounded to bfloat16 or not (up to eps/2 of it, e.g. a*x
# rounded before + y, or fused): atol and rtol of 2e-2, about 2.5 eps each, hold them.
DEFAULT_TOLERANCE = {"float16": (1e-2, 1e-2), "bfloat16": (2e-2, 2e-2), "float32": (1e-4, 1e-4),
                     "float64": (1e-9, 1e-9)}


class WorkSpec(_Strict):
    """What one launch must do, for the roofline check and the GB/s and TFLOP/s reported per configuration."""

    bytes: Expression | None = Field(None, description="bytes one launch must move to or from memory; default: "
                                                       "every array argument read or written once")
    flops: Expression | None = Field(None, description="floating-point operations per launch, e.g. 2*n**3")


class SearchSpec(_Strict):
    """How the tuning space is searched: Kernel Tuner's strategies, run by kforge's runner."""

    strategy: str = "brute_force"
    max_fevals: Annotated[int | None, Field(ge=1)] = None
    time_limit_s: Annotated[float | None, Field(gt=0)] = None
    options: dict[str, ParamValue | list[ParamValue]] = Field(default_factory=dict,
                                                               description="Kernel Tuner strategy_options")

    @field_validator("strategy")
    @classmethod
    @field_rule
    def _known_strategy(cls, name: str) -> str:
        if name not in SEARCH_STRATEGIES:
            raise ValueError(f"{name!r} is not a Kernel Tuner strategy: use one of {', '.join(SEARCH_STRATEGIES)}")
        return name


def _at_least_six_pairs(pairs: int) -> int:
    if pairs < 6:
        raise ValueError(f"{pairs} pairs cannot bound a speedup at 95%: give 6 or more")
    return pairs


class BenchmarkSpec(_Strict):
    iterations: Annotated[int, Field(ge=1, le=1000)] = Field(7, description="most timed launches per configuration")
    warmup: Annotated[int, Field(ge=0, le=100)] = Field(
        0, description="untimed launches before sampling; the checked launch before them already warms up")
    seed: int = 0
    arch: Annotated[str | None, Field(pattern=r"^sm_[0-9]{2,3}[a-z]?$")] = Field(
        None, description="NVRTC target, e.g. sm_90; default: the benchmark device's own"
    )
    replay: bool = Field(False, description="serve measurements recorded on a GPU machine instead of measuring; "
                                            "results are labelled replay")
    min_samples: Annotated[int, Field(ge=1, le=1000)] = Field(3, description="timed launches before the CI may stop")
    ci_target: Annotated[float, Field(gt=0, lt=1)] = Field(
        0.02, description="stop sampling when the 95% confidence interval of the mean is within this fraction")
    abandon_factor: Annotated[float, Field(gt=1)] = Field(
        1.25, description="two samples this many times slower than the best so far end a configuration")
    l2_flush: bool = Field(False, description="evict the L2 cache before every timed launch")
    comparison_pairs: Annotated[int, Field(ge=2, le=1000), AfterValidator(submission_rule(_at_least_six_pairs))] = Field(
        15, description="launches of each kernel, in turn, when a tuned candidate is compared with the best so far "
                        "(6 at least: fewer cannot bound the median ratio at 95%)")
    comparison_max_pairs: Annotated[int, Field(ge=2, le=5000)] = Field(
        120, description="more pairs are timed, one at a time up to this many, while the speedup's interval still "
                         "straddles the bar a step must clear")
    atol: Annotated[float | None, Field(ge=0)] = Field(None, description="absolute tolerance; default per dtype")
    rtol: Annotated[float | None, Field(ge=0)] = Field(None, description="relative tolerance; default per dtype")
    timeout_s: Annotated[float, Field(gt=0)] = Field(60.0, description="a configuration running longer is killed")
    search: SearchSpec = Field(default_factory=SearchSpec)

    def tolerance(self, dtype: str) -> tuple[float, float]:
        atol, rtol = DEFAULT_TOLERANCE.get(dtype, (0.0, 0.0))
        return (atol if self.atol is None else self.atol, rtol if self.rtol is None else self.rtol)


class VerifySpec(_Strict):
    """How a candidate is proven to match the submitted kernel (the reference) on the GPU."""

    seeds: Annotated[int, Field(ge=1, le=20)] = Field(2, description="trials at the spec's sizes, each with a fresh seed")
    odd_sizes: bool = Field(True, description="also try every size variable at n-1 and at a prime below it")
    atol: Annotated[float | None, Field(ge=0)] = Field(None, description="absolute tolerance; default: benchmark's")
    rtol: Annotated[float | None, Field(ge=0)] = Field(None, description="relative tolerance; default: benchmark's")
    timeout_s: Annotated[float, Field(gt=0)] = Field(30.0, description="a run longer than this is a hang")
    guard_bytes: Annotated[int, Field(ge=256, le=1 << 20, multiple_of=256)] = Field(
        4096, description="canary bytes before and after every array, to catch out-of-bounds writes; a multiple "
                          "of 256 so that arrays keep cudaMalloc's alignment, which vector loads rely on")


class SharedMemorySpec(_Strict):
    """Kernel Tuner's smem_args: the dynamic shared memory (`extern __shared__`) every launch gets."""

    size: Expression = Field(description="bytes per block, an expression of sizes and parameters, e.g. "
                                         "block_size_x * 4")


class CandidateSpec(_Strict):
    """A rewrite of the submitted kernel: its source and, when it is tunable, its own space and launch geometry."""

    source: Annotated[str, Field(min_length=1, description="CUDA C++ source of the candidate")]
    kernel_name: KernelName | None = Field(None, description="default: the spec's")
    params: Defines = Field(default_factory=dict, description="defines for the candidate, over the spec's params")
    tune_params: TuneSpace | None = Field(None, description="the candidate's tuning space; default: the spec's")
    restrictions: list[Restriction] | None = Field(None, description="default: the spec's")
    problem_size: list[Expression] | None = Field(
        None, description="default: the spec's; a rewrite that launches its points on other axes (a flat index read "
                          "as its coordinates) gives its own, of the size variables")
    grid_div_x: list[Expression] | None = Field(None, description="default: the spec's")
    grid_div_y: list[Expression] | None = None
    grid_div_z: list[Expression] | None = None
    smem_args: SharedMemorySpec | None = Field(None, description="default: the spec's")



# --- optimisation strategies: LLM Kernel Tuner's names and knobs -----------------------------------------
STEP_ID = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"


class TuningStep(_Strict):
    """One optimisation step of the explicit strategy (or one planned by the autonomous strategy)."""

    id: Annotated[str, Field(pattern=STEP_ID)]
    description: str = Field("", description="what the step changes, in a sentence")
    prompt_template: str = Field("", description="the rewrite prompt; {kernel_string} becomes the current kernel")
    tune_params: TuneSpace = Field(default_factory=dict, description="parameters the step introduces, with their values")
    skip_evaluation: bool = Field(False, description="apply without first asking whether the step makes sense")
    depends_on: list[str] = Field(default_factory=list,
                                  description="steps that must have brought an improvement for this one to run")

    @field_validator("prompt_template")
    @classmethod
    @field_rule
    def _has_kernel_string(cls, template: str) -> str:
        if template and "{kernel_string}" not in template:
            raise ValueError("prompt_template must contain {kernel_string}, where the current kernel is pasted")
        return template


def _step(id: str, description: str, ask: str, tune_params: dict | None = None, **more) -> TuningStep:
    prompt = (f"{ask}\n\nThe kernel:\n```cuda\n{{kernel_string}}\n```\n"
              "Keep its name and signature. Make what you introduce tunable through the parameters named here, "
              "used in the code under exactly these names.")
    return TuningStep(id=id, description=description, prompt_template=prompt, tune_params=tune_params or {}, **more)


DEFAULT_STEPS = (
    _step("block_size", "make the thread block size a tunable parameter",
          "Use block_size_x (a compile-time define kforge sets to the launch's block size) instead of blockDim.x.",
          {"block_size_x": [32, 64, 128, 256, 512, 1024]}, skip_evaluation=True),
    _step("restrict", "mark pointer arguments __restrict__ and read-only ones const",
          "Declare every pointer argument __restrict__ (kforge passes distinct buffers) and the read-only ones const."),
    _step("elements_per_thread", "let each thread compute several elements in a grid-stride loop",
          "Let each thread process elements_per_thread elements in a grid-stride loop, the grid shrunk accordingly.",
          {"elements_per_thread": [1, 2, 4, 8, 16]}),
    _step("vectorize", "load and store 128-bit vectors where alignment allows, with a scalar tail",
          "Load and store float4 (or int4) vectors where every array allows it, handling the last n % 4 elements "
          "one by one."),
    _step("unroll", "unroll loops by a tunable factor",
          "Unroll the loops with #pragma unroll and a tunable factor loop_unroll_factor.",
          {"loop_unroll_factor": [1, 2, 4, 8]}, depends_on=["elements_per_thread"]),
    _step("launch_bounds", "tell the compiler the block size with __launch_bounds__",
          "Add __launch_bounds__ with the block size, so the compiler budgets registers for it."),
)
"""The explicit strategy's steps when none are given: each a real, tunable change of the code."""


class StrategySpec(_Strict):
    """What the job does. baseline: measure the submitted kernel. tune: baseline, then search tune_params.
    verify: prove `candidate` computes what the submitted kernel computes. one_prompt, autonomous, explicit,
    multiturn: rewrite the kernel step by step, every candidate verified and tuned, the best kept. Any other
    name is a custom strategy registered with the planner. Left out, it is tune when the spec has tune_params
    and baseline when it has none."""

    name: Annotated[str, Field(pattern=IDENTIFIER)] = "baseline"
    candidate: CandidateSpec | None = None
    # autonomous: plan, validate each step, optionally break it down, execute, optionally replan
    with_replanning: bool = True
    breakdown_steps: bool = True
    max_breakdowns: Annotated[int, Field(ge=0, le=10)] = 2
    max_replanning: Annotated[int, Field(ge=0, le=10)] = 2
    # explicit: predefined steps; default: the planner's step list
    steps: list[TuningStep] | None = None
    # multiturn: refine until the target speedup, a plateau or the iteration limit
    target_speedup: Annotated[float, Field(gt=0)] = 1.5
    max_iterations: Annotated[int, Field(ge=1, le=50)] = 5
    min_improvement: Annotated[float, Field(ge=0, lt=1)] = Field(
        0.05, description="an iteration improving the best time by less than this fraction makes no progress")
    patience: Annotated[int, Field(ge=1, le=10)] = Field(2, description="iterations without progress before stopping")
    reference_ms: Annotated[float | None, Field(gt=0)] = Field(
        None, description="time the speedup categories compare with (e.g. a library's); default: the baseline")
    min_speedup_margin: Annotated[float, Field(ge=0, lt=1)] = Field(
        0.02, description="a step is kept only when the 95% interval of its speedup over the best so far lies "
                          "above 1 + this margin")
    options: dict[str, ParamValue | list[ParamValue]] = Field(default_factory=dict,
                                                               description="settings of a custom strategy")

    @field_validator("name")
    @classmethod
    @field_rule
    def _not_a_search_strategy(cls, name: str) -> str:
        if name in SEARCH_STRATEGIES:
            raise ValueError(f"{name!r} is one of Kernel Tuner's search strategies, which kforge runs inside tuning: "
                             f"set strategy: {{name: tune}} and benchmark: {{search: {{strategy: {name}}}}}")
        return name

    @model_validator(mode="after")
    @model_rule
    def _candidate_for_verify(self) -> "StrategySpec":
        if (self.name == "verify") != (self.candidate is not None):
            raise ValueError("strategy verify takes a candidate (candidate: {source: ...}), and only verify does")
        if self.steps is not None:
            ids = [s.id for s in self.steps]
            repeated = sorted({i for i in ids if ids.count(i) > 1})
            if repeated:
                raise ValueError(f"steps: ids must be unique, repeated: {', '.join(repeated)}")
            for step in self.steps:
                unknown = [d for d in step.depends_on if d not in ids[:ids.index(step.id)]]
                if unknown:
                    raise ValueError(f"steps: {step.id} depends on {', '.join(unknown)}, which no earlier step is")
        return self

    def explicit_steps(self) -> list[TuningStep]:
        return list(self.steps) if self.steps is not None else list(DEFAULT_STEPS)

    @property
    def generates(self) -> bool:
        """Whether the job rewrites the kernel (every strategy but the three measuring ones)."""
        return self.name not in MEASURING_STRATEGIES


class GeneratorSpec(_Strict):
    """Who rewrites the kernel. auto: Claude when ANTHROPIC_API_KEY is set, else the offline rules."""

    provider: Literal["auto", "anthropic", "rules", "replay"] = "auto"
    model: str | None = Field(None, description="default: the setting KFORGE_LLM_MODEL")
    temperature: Annotated[float | None, Field(ge=0, le=1)] = Field(
        None, description="sampling temperature; sent only when set")
    max_tokens: Annotated[int | None, Field(ge=256, le=64000)] = Field(None, description="default: KFORGE_LLM_MAX_TOKENS")
    rag_k: Annotated[int, Field(ge=0, le=20)] = Field(
        3, description="earlier accepted optimisations of similar kernels quoted in prompts")
    replay_job: Annotated[str | None, Field(pattern=r"^[0-9a-f]{4,32}$")] = Field(
        None, description="provider replay: the job whose recorded answers are replayed")

    @model_validator(mode="after")
    @model_rule
    def _replay_source(self) -> "GeneratorSpec":
        if (self.provider == "replay") != (self.replay_job is not None):
            raise ValueError("provider replay takes replay_job (the job whose transcript is replayed), and only it does")
        return self


class KernelSpec(_Strict):
    """A kernel submission: source, signature, problem size and how to launch it."""

    kernel_name: KernelName = Field(description="the kernel, or its template instance: scale<float>")
    source: Annotated[str, Field(min_length=1, description="CUDA C++ source holding the kernel")]
    args: Annotated[list[ArgSpec], Field(min_length=1)]
    sizes: dict[str, int] = Field(default_factory=dict, description="problem-size variables, e.g. {n: 1048576}")
    problem_size: list[Expression] | None = Field(None, description="Kernel Tuner's problem_size; default: sizes")
    grid_div_x: list[Expression] | None = None
    grid_div_y: list[Expression] | None = None
    grid_div_z: list[Expression] | None = None
    smem_args: SharedMemorySpec | None = Field(None, description="dynamic shared memory per launch; default: none")
    block_size_names: list[str] = Field(default_factory=lambda: list(DEFAULT_BLOCK))
    params: Defines = Field(default_factory=dict, description="defines for the submitted kernel")
    tune_params: TuneSpace = Field(default_factory=dict)
    restrictions: list[Restriction] = Field(default_factory=list)
    compiler_options: list[str] = Field(default_factory=list)
    work: WorkSpec = Field(default_factory=WorkSpec)
    benchmark: BenchmarkSpec = Field(default_factory=BenchmarkSpec)
    verify: VerifySpec = Field(default_factory=VerifySpec)
    strategy: StrategySpec = Field(default_factory=StrategySpec)
    generator: GeneratorSpec = Field(default_factory=GeneratorSpec)
    webhook_url: HttpUrl | None = None

    @model_validator(mode="before")
    @classmethod
    def _tune_when_tune_params(cls, data, info: ValidationInfo):
        """A submission with tune_params and no strategy tunes them, as Kernel Tuner would; without tune_params it
        measures the kernel (strategy baseline). A stored spec names its strategy already."""
        if isinstance(data, dict) and "strategy" not in data and data.get("tune_params") and not _stored(info):
            return {**data, "strategy": {"name": "tune"}}
        return data

    @field_validator("sizes")
    @classmethod
    @field_rule
    def _positive_sizes(cls, sizes: dict[str, int]) -> dict[str, int]:
        for name, value in sizes.items():
            if not is_identifier(name):
                raise ValueError(f"size variable {name!r} is not an identifier: use letters, digits and _")
            if value <= 0:
                raise ValueError(f"size {name} = {value} must be positive")
        return sizes

    @field_validator("problem_size")
    @classmethod
    @field_rule
    def _up_to_three(cls, dims: list[Expression] | None) -> list[Expression] | None:
        if dims is not None and not 1 <= len(dims) <= 3:
            raise ValueError(f"problem_size has {len(dims)} dimensions: give 1 to 3, as in Kernel Tuner")
        return dims

    @field_validator("block_size_names")
    @classmethod
    @field_rule
    def _block_names(cls, names: list[str]) -> list[str]:
        if not 1 <= len(names) <= 3:
            raise ValueError("block_size_names takes 1 to 3 names (x, y, z)")
        for name in names:
            if not is_identifier(name):
                raise ValueError(f"block size name {name!r} is not an identifier: it names a tune parameter")
        return names

    @field_validator("compiler_options")
    @classmethod
    @field_rule
    def _no_arch_override(cls, options: list[str]) -> list[str]:
        for option in options:
            if option.startswith(("-arch", "--gpu-architecture")):
                raise ValueError(f"{option!r}: set the target with benchmark.arch (e.g. sm_90), not a compiler option")
        return check_options(options)

    @model_validator(mode="after")
    @model_rule
    def _consistent(self) -> "KernelSpec":
        names = [a.name for a in self.args]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"args: names must be unique, repeated: {', '.join(duplicates)}")
        if not any(a.is_output for a in self.args):
            raise ValueError("args: no argument has role out or inout, so there is no result to verify; mark the output")
        _check_kernel_defined(check_source(self.source, options=self.compiler_options), self.kernel_name)
        values = {**{name: " ".join(map(str, values)) for name, values in self.tune_params.items()},
                  **{name: str(value) for name, value in self.params.items()}, **option_values(self.compiler_options)}
        check_macro_names(self.source, {**{name: f"tune_params.{name}" for name in {*self.params, *self.tune_params}},
                                        **option_macros(self.compiler_options)}, options=self.compiler_options,
                          values=values)
        candidate = self.strategy.candidate
        if candidate is not None:
            try:
                _check_kernel_defined(check_source(candidate.source, options=self.compiler_options),
                                      candidate.kernel_name or self.kernel_name)
            except ValueError as exc:
                raise ValueError(f"strategy.candidate: {exc}") from None
        self._check_names()
        self._check_answers()
        if self.strategy.name == "tune" and not self.tune_params:
            raise ValueError("strategy tune needs tune_params, e.g. tune_params: {block_size_x: [64, 128, 256]}")
        return self

    def _check_answers(self) -> None:
        answered = [i for i, a in enumerate(self.args) if a.answer is not None]
        drawn = [a.name for a in self.drawn_inputs]
        if answered and drawn:
            raise ValueError(f"args[{answered[0]}].answer: expected outputs hold for fixed inputs only (as Kernel "
                             f"Tuner's answer goes with fixed arguments): give data for every input array; "
                             f"{', '.join(drawn)} has none")

    def _check_names(self) -> None:
        sizes, params = set(self.sizes), set(self.params) | set(self.tune_params) | set(self.block_size_names)
        checks: list[tuple[str, Expression | float, set[str]]] = [
            (f"args[{i}].shape", dim, sizes) for i, a in enumerate(self.args) for dim in a.shape or []
        ]
        checks += [(f"args[{i}].range", bound, sizes) for i, a in enumerate(self.args) for bound in a.range or []]
        checks += [(f"args[{i}].value", a.value, sizes | params) for i, a in enumerate(self.args) if a.value is not None]
        checks += [("problem_size", dim, sizes) for dim in self.problem_size or []]
        checks += [(f"work.{k}", v, sizes) for k, v in (("bytes", self.work.bytes), ("flops", self.work.flops)) if v is not None]
        for axis in "xyz":
            checks += [(f"grid_div_{axis}", d, sizes | params) for d in getattr(self, f"grid_div_{axis}") or []]
        if self.smem_args is not None:
            checks.append(("smem_args.size", self.smem_args.size, sizes | params))
        checks += [(f"restrictions[{i}]", r, sizes | params) for i, r in enumerate(self.restrictions)]
        for field, expression, known in checks:
            try:
                unknown = names_in(expression) - known
            except ExpressionError as exc:
                raise ValueError(f"{field}: {exc}") from None
            if unknown:
                raise ValueError(
                    f"{field}: {expression!r} uses {', '.join(sorted(unknown))}; define it under sizes "
                    f"(known: {', '.join(sorted(known)) or 'none'})"
                )
        if self.problem_size is None and not 1 <= len(self.sizes) <= 3:
            raise ValueError("problem_size: give it explicitly (e.g. problem_size: [n]) when sizes has more than 3 names")

    # --- derived, used by every service the same way ---
    @property
    def output_args(self) -> list[ArgSpec]:
        return [a for a in self.args if a.is_output]

    @property
    def parameters(self) -> list[ArgSpec]:
        """The arguments the kernel takes as parameters, in its signature's order: args but the constants."""
        return [a for a in self.args if a.is_parameter]

    @property
    def constants(self) -> list[ArgSpec]:
        """The __constant__ arrays filled before every launch (role constant)."""
        return [a for a in self.args if not a.is_parameter]

    @property
    def dimensions(self) -> list[Expression]:
        """The problem size the grid covers, one expression per axis: problem_size, or the sizes' names in order."""
        return list(self.problem_size if self.problem_size is not None else self.sizes)

    def baseline_params(self) -> dict[str, ParamValue]:
        """The submitted kernel's defines: its `params`, plus Kernel Tuner's default block size."""
        return {**self._block_defaults(), **self.params}

    def _block_defaults(self) -> dict[str, int]:
        return {name: DEFAULT_BLOCK.get(name, 1) for name in self.block_size_names}

    def variables(self, params: dict[str, ParamValue]) -> dict[str, Number]:
        """What expressions may name: default block sizes, size variables and numeric parameters."""
        numeric = {k: v for k, v in params.items() if isinstance(v, int | float)}
        return {**self._block_defaults(), **self.sizes, **numeric}

    def launch_geometry(self, params: dict[str, ParamValue]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(grid, block) for a configuration, in Kernel Tuner's conventions."""
        env = self.variables(params)
        block = [1, 1, 1]
        for i, name in enumerate(self.block_size_names):
            block[i] = int(env[name])
        dims = self.dimensions
        grid = [1, 1, 1]
        for i, dim in enumerate(dims):
            divisors = getattr(self, f"grid_div_{'xyz'[i]}")
            if divisors is None:
                divisors = [self.block_size_names[i]] if i < len(self.block_size_names) else [1]
            div = math.prod(evaluate(d, env) for d in divisors)
            grid[i] = math.ceil(evaluate(dim, env) / div)
        return (grid[0], grid[1], grid[2]), (block[0], block[1], block[2])

    def shared_memory_bytes(self, params: dict[str, ParamValue]) -> int:
        """The dynamic shared memory bytes of a configuration's launch (Kernel Tuner's smem_args); 0 without
        smem_args. Refused, with the fix, when the size is negative or not a whole number of bytes."""
        if self.smem_args is None:
            return 0
        size = evaluate(self.smem_args.size, self.variables(params))
        if size < 0 or not float(size).is_integer():
            raise ValueError(f"{self.smem_args.size!r} gives {size} bytes of dynamic shared memory at {params}: it "
                             "must be a whole number of bytes, 0 or more (use // to divide)")
        return int(size)

    def restrictions_hold(self, config: dict[str, ParamValue]) -> bool:
        """Whether a configuration meets every restriction, each run by the bounded evaluator. Kernel Tuner
        gets this rather than the restrictions' text, which it would run as Python, unbounded."""
        variables = self.restriction_variables(config)
        return all(restriction_holds(r, variables) for r in self.restrictions)

    def restriction_variables(self, config: dict[str, ParamValue]) -> dict[str, ParamValue]:
        """What restrictions may name: block sizes, sizes and every parameter, text values included."""
        return {**self._block_defaults(), **self.sizes, **self.params, **config}

    def shape_of(self, arg: ArgSpec) -> tuple[int, ...]:
        return tuple(int(evaluate(dim, self.sizes)) for dim in arg.shape or [])

    def value_range(self, arg: ArgSpec) -> tuple[Number, Number]:
        """[low, high) of an input's values at this spec's sizes (a trial at other sizes has a spec of its own):
        its range, or its dtype's default. Refused, with the fix, when it is empty or the dtype cannot hold it."""
        if arg.range is None:
            return DEFAULT_RANGES[kind(arg.dtype)]
        low, high = (evaluate(bound, self.sizes) for bound in arg.range)
        shown, at = f"[{low}, {high})", f" at sizes {self.sizes}"
        if is_float(arg.dtype):
            largest = float_info(arg.dtype).largest
            if max(abs(low), abs(high)) > largest:
                raise ValueError(f"{shown} reaches beyond the largest {arg.dtype} ({largest:g}): narrow the range")
            lowest, below = held_float_range(arg.dtype, low, high)
            if not lowest <= below:
                raise ValueError(f"{shown} holds no {arg.dtype} value{at}: make high greater than low")
            return low, high
        if any(isinstance(bound, float) and not bound.is_integer() for bound in (low, high)):
            raise ValueError(f"{shown}{at} has a bound that is not an integer, for {arg.dtype} values: use // to "
                             "divide sizes")
        low, high = int(low), int(high)
        held = np.iinfo(arg.dtype)
        if low < held.min or high > held.max + 1:
            raise ValueError(f"{shown}{at} reaches beyond the {arg.dtype} values [{held.min}, {held.max + 1}): "
                             "narrow the range")
        if low >= high:
            raise ValueError(f"{shown} is empty{at}: make high greater than low")
        if high - low > MAX_SPAN:
            raise ValueError(f"{shown} holds {high - low} values, more than the {MAX_SPAN} (2**64 - 1) kforge draws "
                             "from: raise low or lower high by one")
        return low, high

    @property
    def fixed_inputs(self) -> list[ArgSpec]:
        """The input arrays whose values come from a file (`data`) rather than the generator."""
        return [a for a in self.args if a.data is not None]

    @property
    def sized_fixed_inputs(self) -> list[ArgSpec]:
        """The fixed inputs whose shape follows the sizes: their files fit the spec's sizes only (a filter of
        fixed taps, say, fits them all)."""
        return [a for a in self.fixed_inputs if any(names_in(dim) & set(self.sizes) for dim in a.shape or [])]

    @property
    def drawn_inputs(self) -> list[ArgSpec]:
        """The input arrays (in, inout and constant) whose values the generator draws."""
        return [a for a in self.args if a.is_array and a.effective_role != "out" and a.data is None]

    def scalar_of(self, arg: ArgSpec, params: dict[str, ParamValue]) -> np.generic:
        return scalar(evaluate(arg.value, self.variables(params)), arg.dtype)

    def for_candidate(self, candidate: CandidateSpec) -> "KernelSpec":
        """The submission as the candidate would be submitted: its source, defines, space and geometry, the
        same arguments, sizes and benchmark settings; the job's own strategy does not apply to it."""
        own = {k: v for k, v in candidate.model_dump(exclude={"source", "kernel_name", "params"}).items()
               if v is not None}
        return self.model_validate({**self.model_dump(), **own, "source": candidate.source,
                                    "kernel_name": candidate.kernel_name or self.kernel_name,
                                    "params": {**self.params, **candidate.params}, "strategy": {"name": "baseline"}})

    def as_candidate(self) -> CandidateSpec:
        """The submitted kernel in a candidate's terms: where every optimisation starts."""
        return CandidateSpec(source=self.source, kernel_name=self.kernel_name, params=self.params,
                             tune_params=self.tune_params, restrictions=self.restrictions, grid_div_x=self.grid_div_x,
                             grid_div_y=self.grid_div_y, grid_div_z=self.grid_div_z, smem_args=self.smem_args)

    def with_sizes(self, sizes: dict[str, int]) -> "KernelSpec":
        """The same kernel at other sizes (verification trials at odd sizes), validated like any spec."""
        return self.model_validate({**self.model_dump(), "sizes": {**self.sizes, **sizes}})

    def bytes_per_launch(self) -> int:
        """The spec's figure, or every array read or written once: the least any correct kernel moves."""
        if self.work.bytes is not None:
            return int(evaluate(self.work.bytes, self.sizes))
        return self.array_bytes()

    def array_bytes(self) -> int:
        """The size of every array argument together."""
        return sum(math.prod(self.shape_of(a)) * host_dtype(a.dtype).itemsize for a in self.args if a.is_array)

    def flops_per_launch(self) -> float | None:
        return None if self.work.flops is None else float(evaluate(self.work.flops, self.sizes))


def _check_kernel_defined(source: str, kernel_name: str) -> None:
    """Catch a misspelt kernel_name before anything compiles: list the kernels the source does define. A
    template instance (scale<float>) must name a template kernel, and a template kernel must be named by an
    instance: NVRTC finds neither otherwise."""
    kernels = defined_kernels(source)
    base = kernel_base_name(kernel_name)
    if kernels and base not in kernels:
        raise ValueError(f"kernel_name: {kernel_name!r} is not defined in source; it defines {', '.join(kernels)}")
    if not kernels:
        raise ValueError("source: no __global__ function found; the source must define the kernel named by kernel_name")
    if is_template_instance(kernel_name) and not kernels[base]:
        raise ValueError(f"kernel_name: {kernel_name!r} names a template instance, but {base} is not a template "
                         f"in source: write kernel_name: {base}")
    if not is_template_instance(kernel_name) and kernels[base]:
        raise ValueError(f"kernel_name: {base} is a template in source: name the instance to run, e.g. "
                         f"kernel_name: {base}<float>")


def defined_kernels(source: str) -> dict[str, bool]:
    """The __global__ functions `source` declares, in order: each name, and whether it is a template."""
    declarations = re.sub(r"__launch_bounds__\s*\([^)]*\)", " ", _COMMENTS.sub(" ", source))
    return {name: bool(template) for template, name in _KERNEL_DECLARATION.findall(declarations)}


_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
# A kernel's declaration, with the template head before it when it is a template (template <typename T>).
_KERNEL_DECLARATION = re.compile(r"(\btemplate\s*<[^;{}]*?>[^;{}<>]*?)?__global__\s+[^;{}()]*?\b(\w+)\s*\(")
