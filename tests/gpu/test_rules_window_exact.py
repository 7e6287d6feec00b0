"""register_window's rewrites give every output bit for bit as the submitted kernel does on the GPU (the verifier
judges them within a tolerance; the rule claims more: the same operations on the same values in the same order,
NVRTC's fusing included). Each kernel of tests/unit/test_rules_window.py, and its spellings of a count of the taps
inside, at its spec's sizes, in five configurations of window_rows and block shape, the inputs drawn once for both.
CuPy launches them (the device has it; skipped elsewhere)."""
import numpy as np
import pytest

from services.generator import rules
from services.generator.rules.cuda_text import normalised
from tests.unit.test_rules_window import KERNELS, TAKEN

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")
# window_rows, block x, block y; 12 x 5 threads end each block with a partial warp, whose lanes deal the edge points
CONFIGURATIONS = ((1, 32, 4), (2, 32, 4), (4, 16, 8), (8, 32, 8), (2, 12, 5))
CASES = {**KERNELS, **{name: spec for name, spec in TAKEN.items() if name.startswith("a count")}}


def _launched(source: str, spec, params: dict, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    defines = tuple(f"-D{k}={v}" for k, v in params.items() if k not in spec.block_size_names)
    module = cp.RawModule(code=source, options=("-std=c++17", *defines))
    held, arguments = {name: cp.asarray(values) for name, values in arrays.items()}, []
    for arg in spec.args:
        if arg.is_array and not arg.is_parameter:  # a __constant__ array: the module's global of its name
            module.get_global(arg.name).copy_from_device(held[arg.name].data, held[arg.name].nbytes)
        elif arg.is_array:
            arguments.append(held[arg.name])
        else:
            arguments.append(np.dtype(arg.dtype).type(spec.scalar_of(arg, params)))
    grid, block = spec.launch_geometry(params)
    module.get_function(spec.kernel_name)(tuple(grid), tuple(block), tuple(arguments))
    cp.cuda.runtime.deviceSynchronize()
    return {name: cp.asnumpy(values) for name, values in held.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_every_output_is_the_submitted_kernels_bit_for_bit(name):
    spec = CASES[name]
    candidate = rules.apply("register_window", spec, spec.as_candidate())
    rng = np.random.default_rng(5)
    arrays = {a.name: (rng.standard_normal(int(np.prod(spec.shape_of(a)))) if np.dtype(a.dtype).kind == "f" else
                       rng.integers(0, 100, int(np.prod(spec.shape_of(a))))).astype(a.dtype)
              for a in spec.args if a.is_array}
    base = spec.baseline_params()
    expected = _launched(spec.source, spec, base, arrays)
    bx, by = spec.block_size_names[:2]
    for rows, x, y in CONFIGURATIONS:
        params = {**base, **candidate.params, "window_rows": rows, bx: x, by: y}
        got = _launched(normalised(candidate.source), spec.for_candidate(candidate), params, arrays)
        for array, values in got.items():
            assert values.tobytes() == expected[array].tobytes(), (array, params)
