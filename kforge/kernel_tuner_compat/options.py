"""tune_kernel's other arguments, read with Kernel Tuner's meaning into the fields of a kforge spec, and those
kforge cannot honour refused, each naming the argument and what to do instead."""
from pathlib import Path

import numpy as np

from kforge.kernel_tuner_compat.space import DEFAULT_BLOCK, DropInError, plain
from shared.domain.spec import SEARCH_STRATEGIES

DEFAULT_BLOCK_NAMES = ("block_size_x", "block_size_y", "block_size_z")
CUDA_LANGS = ("CUDA", "CUPY", "NVCUDA")  # Kernel Tuner's backends for CUDA source; kforge compiles it with NVRTC
OTHER_LANGS = {"__kernel": "OpenCL", "hipLaunchKernelGGL": "HIP"}


def kernel_source_text(kernel_source, lang) -> str:
    """The kernel's CUDA source: given as text, or as the name of a file holding it (a str or Path, or a list of
    files of which only the first may be given)."""
    if lang is not None and str(lang).upper() not in CUDA_LANGS:
        raise DropInError(f"lang={lang!r}: kforge tunes CUDA kernels (lang CUDA, CuPy or NVCUDA); tune {lang} kernels "
                          "with Kernel Tuner itself")
    if isinstance(kernel_source, list | tuple):
        if len(kernel_source) != 1:
            raise DropInError("kernel_source: kforge compiles one source file, and auxiliary files are not sent: "
                              "inline the headers into the kernel's file and pass that one")
        kernel_source = kernel_source[0]
    if callable(kernel_source):
        raise DropInError("kernel_source: a function generating code per configuration is not supported: pass the "
                          "source, with the parameters as macros kforge defines per configuration")
    if isinstance(kernel_source, Path) or (isinstance(kernel_source, str) and "\n" not in kernel_source
                                           and "__global__" not in kernel_source):
        path = Path(kernel_source)
        if not path.is_file():
            raise DropInError(f"kernel_source: {kernel_source!r} is neither a file nor CUDA source (no __global__)")
        kernel_source = path.read_text()
    if not isinstance(kernel_source, str):
        raise DropInError("kernel_source: give the source as a string or a filename, not "
                          f"{type(kernel_source).__name__}")
    if lang is None and "__global__" not in kernel_source:
        found = next((name for marker, name in OTHER_LANGS.items() if marker in kernel_source), None)
        raise DropInError(f"kernel_source: no __global__ kernel in it{f' (it looks like {found})' if found else ''}: "
                          "kforge tunes CUDA kernels")
    return kernel_source


def problem_dims(problem_size) -> list[int]:
    """Kernel Tuner's problem_size (an int, or a tuple or list of up to three) as numbers."""
    if callable(problem_size):
        raise DropInError("problem_size: a function of the configuration is not supported: give the size as numbers "
                          "and put what depends on parameters into grid_div_x/y/z")
    dims = list(problem_size) if isinstance(problem_size, list | tuple | np.ndarray) else [problem_size]
    if not 1 <= len(dims) <= 3:
        raise DropInError(f"problem_size: {len(dims)} dimensions given: give 1 to 3")
    numbers = []
    for dim in dims:
        dim = plain(dim)
        if isinstance(dim, str) and dim.strip().isdigit():
            dim = int(dim)
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise DropInError(f"problem_size: {dim!r} is not a whole number; an expression of tune parameters is not "
                              "supported: give numbers and put what depends on parameters into grid_div_x/y/z")
        numbers.append(dim)
    return numbers


def grid_divisors(name: str, divisor) -> list | None:
    """A grid_div as kforge takes it: a list of expressions (names of parameters, numbers) to multiply."""
    if divisor is None:
        return None
    items = list(divisor) if isinstance(divisor, list | tuple) else [divisor]
    for item in items:
        if callable(item):
            raise DropInError(f"{name}: a function is not supported: give parameter names or expressions of them "
                              "(\"block_size_x*tile_size_x\")")
    return [plain(item) for item in items]


def block_names(names) -> list[str]:
    """block_size_names completed to three, as Kernel Tuner does."""
    names = list(names or [])
    if len(names) > 3:
        raise DropInError("block_size_names: give at most three names (x, y, z)")
    return names + list(DEFAULT_BLOCK_NAMES[len(names):])


def block_defaults(names: list[str], tune_params: dict) -> dict[str, int]:
    """The block sizes no parameter tunes, at Kernel Tuner's defaults, which it also defines in the source."""
    return {name: DEFAULT_BLOCK[i] for i, name in enumerate(names) if name not in tune_params}


def search(strategy, strategy_options, seed) -> dict:
    """benchmark.search for Kernel Tuner's strategy and its options."""
    if strategy is not None and not isinstance(strategy, str):
        raise DropInError("strategy: a strategy object is not supported: name one of Kernel Tuner's: "
                          + ", ".join(SEARCH_STRATEGIES))
    name = strategy or "brute_force"
    if name not in SEARCH_STRATEGIES:
        raise DropInError(f"strategy={name!r}: kforge runs these of Kernel Tuner's strategies: "
                          f"{', '.join(SEARCH_STRATEGIES)}")
    settings: dict = {"strategy": name}
    options = dict(strategy_options or {})
    options.pop("searchspace_construction_options", None)  # how the space is built, not what it holds
    if "max_fevals" in options:
        settings["max_fevals"] = int(options.pop("max_fevals"))
    if "time_limit" in options:
        settings["time_limit_s"] = float(options.pop("time_limit"))
    for key, value in options.items():
        values = value if isinstance(value, list | tuple) else [value]
        if not all(isinstance(plain(v), int | float | str) for v in values):
            raise DropInError(f"strategy_options[{key!r}]: kforge passes numbers, strings and lists of them")
    settings["options"] = {k: [plain(v) for v in value] if isinstance(value, list | tuple) else plain(value)
                           for k, value in options.items()}
    return settings


def refuse_unsupported(*, verify, texmem_args, compiler, defines, observers, simulation_mode, device, objectives,
                       smem_args) -> None:
    """Every argument kforge cannot honour, refused before anything runs."""
    refusals = {
        "verify": (verify, "kforge checks outputs on the GPU, where a Python function cannot run: give the expected "
                           "outputs as answer=[...] with atol"),
        "texmem_args": (texmem_args, "texture memory arguments are not supported: pass the array as a kernel "
                                     "argument"),
        "compiler": (compiler, "kforge compiles CUDA with NVRTC; leave compiler out"),
        "observers": (observers, "kforge times with CUDA events itself and runs no observers; leave them out"),
        "simulation_mode": (simulation_mode, "kforge measures on the GPU; replay a cache file with Kernel Tuner "
                                             "itself (kernel_tuner.tune_kernel(..., simulation_mode=True))"),
        "objectives": (objectives, "kforge's search optimises one objective: give objective= instead"),
    }
    for name, (value, why) in refusals.items():
        if value:
            raise DropInError(f"{name}: {why}")
    if device not in (0, None):
        raise DropInError(f"device={device}: kforge runs on the GPUs its settings give it: set KFORGE_GPUS={device} "
                          "(or CUDA_VISIBLE_DEVICES) instead")
    if defines and any(callable(v) for v in defines.values()):
        raise DropInError("defines: a function value is not supported: kforge defines every tune parameter itself; "
                          "give fixed values only")
    if smem_args is not None and (not isinstance(smem_args, dict) or set(smem_args) != {"size"}
                                  or callable(smem_args["size"])):
        raise DropInError("smem_args: give {'size': bytes}, the bytes a number or an expression of parameters "
                          "(\"block_size_x*4\"); a function is not supported")
