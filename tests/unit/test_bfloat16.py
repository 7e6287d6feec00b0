"""bfloat16 end to end on a machine without a GPU: the spec takes it, the host holds it as uint16 bit patterns
correctly rounded from float32 and float64 (shared/domain/dtypes.py), inputs and .npy files come as those bits, the
tolerance is the bfloat16 default, a `__nv_bfloat16` kernel compiles through the sandbox and takes bfloat16
args by its PTX, inference reads `__nv_bfloat16` parameters, and kforge's own kernels compile for bfloat16.
The device's side (its generator's bits, its comparison, a baseline and verifications) is
tests/gpu/test_bfloat16_device.py."""
import numpy as np
import pytest

from kforge.infer_spec import infer_spec
from kforge.specfile import load_spec
from shared.adapters.array_files import ArrayFileError, array_file, read_array
from shared.adapters.device.compiler import compile_kernel, parameter_types
from shared.adapters.device.own_kernels import compile_module, module_source
from shared.adapters.inputs import SPECIAL_STRIDE, distribution, draw, make_arrays, stream_key
from shared.domain.dtypes import CANONICAL_NAN, from_bfloat16, to_bfloat16
from shared.domain.signature import mismatches
from shared.domain.spec import KernelSpec
from shared.domain.tolerance import Observed, derive
from tests.corpus_kernels import CORPUS

AXPY = load_spec(CORPUS / "bf16_axpy.cu", CORPUS / "bf16_axpy.yaml")  # y = a*x + y, __nv_bfloat16 throughout
EVERY_PATTERN = np.arange(1 << 16, dtype=np.uint16)
FINITE = EVERY_PATTERN[np.isfinite(from_bfloat16(EVERY_PATTERN))]


def spec_with(n: int = 1000, **x) -> KernelSpec:
    """The axpy at size `n`, its input x given `x` (range, sorted, specials, data)."""
    args = [a.model_dump(exclude_defaults=True) for a in AXPY.args]
    args[2].update(x)
    return AXPY.model_validate({**AXPY.model_dump(), "sizes": {"n": n}, "args": args})


# --- the spec ---------------------------------------------------------------------------------------------
def test_the_spec_takes_bfloat16_arrays_scalars_and_specials_with_the_bfloat16_tolerance():
    spec = spec_with(specials=["nan", "-inf", "denormal"])
    assert [a.dtype for a in spec.args] == ["int32", "bfloat16", "bfloat16", "bfloat16"]
    assert spec.array_bytes() == 2 * 2 * 1000  # two bytes an element
    assert spec.benchmark.tolerance("bfloat16") == (2e-2, 2e-2)
    assert spec.value_range(spec.args[2]) == (-1.0, 1.0)
    between = spec_with(range=[1000.5, 1003])  # bfloat16 holds 1000 and 1004, nothing between
    with pytest.raises(ValueError, match=r"\[1000.5, 1003\) holds no bfloat16 value"):
        between.value_range(between.args[2])


def test_a_bfloat16_scalar_is_passed_as_its_bits():
    a = AXPY.scalar_of(AXPY.args[1], AXPY.baseline_params())
    assert isinstance(a, np.uint16) and a == 0x3F00  # 0.5


# --- the host's conversion ----------------------------------------------------------------------------------
def test_every_bfloat16_round_trips_exactly_through_float32_and_float64():
    as_float32 = from_bfloat16(FINITE)
    assert np.array_equal(to_bfloat16(as_float32), FINITE)
    assert np.array_equal(to_bfloat16(as_float32.astype(np.float64)), FINITE)
    assert np.array_equal(to_bfloat16(from_bfloat16(np.array([0x7F80, 0xFF80]))), [0x7F80, 0xFF80])  # +-inf
    assert to_bfloat16([np.nan, -np.nan]).tolist() == [CANONICAL_NAN] * 2


@pytest.mark.parametrize("value, bits", [
    (1 + 2 ** -8, 0x3F80),  # halfway between 1 and 1 + 2**-7: to the even one, 1
    (1 + 3 * 2 ** -8, 0x3F82),  # halfway between 1 + 2**-7 and 1 + 2**-6: to the even one, up
    (-(1 + 2 ** -8), 0xBF80),
    (float(np.nextafter(np.float32(1 + 2 ** -8), np.float32(2))), 0x3F81),  # just above halfway: up
    (float(np.nextafter(np.float32(1 + 2 ** -8), np.float32(0))), 0x3F80),  # just below: down
    (1 + 2 ** -8 + 2 ** -40, 0x3F81),  # a float64 above halfway that float32 would round onto it: still up
    (float.fromhex("0x1.fep127"), 0x7F7F),  # the largest bfloat16
    (float.fromhex("0x1.ffp127"), 0x7F80),  # halfway above it: infinity
    (1e300, 0x7F80), (-1e300, 0xFF80),
    (2.0 ** -133, 0x0001), (2.0 ** -134, 0x0000), (1.5 * 2.0 ** -133, 0x0002),  # subnormals, ties to even
    (-0.0, 0x8000), (0.1, 0x3DCD),
])
def test_a_float_rounds_to_the_nearest_bfloat16_ties_to_even(value, bits):
    assert int(to_bfloat16(value)) == bits
    assert int(to_bfloat16(np.float64(value))) == bits


# --- inputs -------------------------------------------------------------------------------------------------
def test_drawn_inputs_are_bfloat16_bits_in_the_range_and_specials_cycle():
    x = make_arrays(spec_with(n=20_000, specials=["nan", "-inf", "denormal"]), 3)["x"]
    assert x.dtype == np.uint16 and x.shape == (20_000,)
    values = from_bfloat16(x)
    assert np.isnan(values[0]) and values[SPECIAL_STRIDE] == -np.inf and x[2 * SPECIAL_STRIDE] == 0x0001
    rest = np.delete(values, np.arange(0, x.size, SPECIAL_STRIDE))
    assert rest.min() == -1 and rest.max() == 1 - 2 ** -7 and abs(float(rest.mean())) < 0.02
    assert np.array_equal(rest * 128, np.round(rest * 128))  # [-1, 1) in steps of 2**-7, every one exact
    assert len(np.unique(rest)) == 256


@pytest.mark.parametrize("low, high, sorted_", [(1000, 1001, False), (0.5, 3.25, False), (-0.3, 60000, True),
                                                (-1e30, 1e-30, False), (-1e30, 1e-30, True)])
def test_a_bfloat16_range_holds_low_and_leaves_out_high_sorted_or_not(low, high, sorted_):
    how = distribution("bfloat16", low, high, 50_000 if sorted_ else 0)
    values = from_bfloat16(draw(how, stream_key(9, 2), 0, 50_000)).astype(np.float64)
    assert values.min() >= low and values.max() < high
    if sorted_:
        assert (values[1:] >= values[:-1]).all()
    if (low, high) == (1000, 1001):  # bfloat16 holds only 1000 there (1004 is next): rounding up is taken back
        assert set(values.tolist()) == {1000.0}


# --- .npy files ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("held", ["uint16", "V2"], ids=["uint16 bits", "ml_dtypes.bfloat16 as np.save writes it"])
def test_a_bfloat16_file_holds_its_bits_as_uint16_or_as_ml_dtypes_saves_them(tmp_path, held):
    bits = to_bfloat16(np.linspace(-2, 2, 64))
    np.save(tmp_path / "x.npy", bits.view(held))
    spec = spec_with(n=64, data=array_file(tmp_path / "x.npy", 1 << 20).model_dump())
    assert read_array(spec.args[2].data, "bfloat16", (64,)).tobytes() == bits.tobytes()
    assert np.array_equal(make_arrays(spec, 1)["x"], bits)


def test_a_float_file_for_a_bfloat16_argument_is_refused_with_the_fix(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros(64, np.float32))
    with pytest.raises(ArrayFileError, match=r"holds float32 values \(<f4\), the argument is bfloat16: save its "
                                             r"bit patterns as uint16 \(shared.domain.dtypes.to_bfloat16"):
        read_array(array_file(tmp_path / "x.npy", 1 << 20), "bfloat16", (64,))


# --- tolerance ----------------------------------------------------------------------------------------------
def test_a_bfloat16_output_gets_its_default_and_a_spread_its_eps_floors():
    exact = derive("y", "bfloat16", {}, Observed(spread=0.0, spread_rel=0.0, runs=3, terms=1000, largest=1.0))
    assert (exact.atol, exact.rtol) == (2e-2, 2e-2) and exact.reason.startswith("the bfloat16 default")
    spread = derive("y", "bfloat16", {}, Observed(spread=1e-3, spread_rel=0.0, runs=3, terms=1 << 20, largest=1.0))
    assert spread.atol == 2 ** -7 * (1 << 20) and spread.rtol == pytest.approx(2 * 2 ** -7 * 1024)


# --- the kernel: compile, signature, inference --------------------------------------------------------------
def test_a_bfloat16_kernel_compiles_in_the_sandbox_and_takes_its_bfloat16_args():
    compiled = compile_kernel(AXPY.source, AXPY.kernel_name, AXPY.baseline_params(), [], "sm_90")
    assert compiled.cubin.startswith(b"\x7fELF")
    types = parameter_types(AXPY.source, AXPY.kernel_name, AXPY.baseline_params(), [], "sm_90")
    assert types == ["u32", "b16", "u64", "u64"]  # __nv_bfloat16 by value: a 2-byte struct, .b16
    assert mismatches(AXPY.args, types) == []
    as_float = [*AXPY.args[:1], AXPY.args[1].model_copy(update={"dtype": "float32"}), *AXPY.args[2:]]
    (wider,) = mismatches(as_float, types)
    assert wider.field == "args[1].dtype" and "float16 or bfloat16" in wider.fix


def test_inference_reads_nv_bfloat16_parameters_as_bfloat16():
    source = ("#include <cuda_bf16.h>\n__global__ void k(const __nv_bfloat16 *__restrict__ x, nv_bfloat16* y, "
              "const __nv_bfloat16* z, __nv_bfloat16 a, int n) {}")
    args = infer_spec(source).data["args"]
    assert args == [{"name": "x", "dtype": "bfloat16", "shape": ["n"], "role": "in"},
                    {"name": "y", "dtype": "bfloat16", "shape": ["n"], "role": "out"},
                    {"name": "z", "dtype": "bfloat16", "shape": ["n"], "role": "in"},
                    {"name": "a", "dtype": "bfloat16", "value": 1.0},
                    {"name": "n", "dtype": "int32", "value": "n"}]
    inferred = KernelSpec.model_validate({**infer_spec(source).data, "source": source})
    types = parameter_types(inferred.source, inferred.kernel_name, inferred.baseline_params(), [], "sm_90")
    assert mismatches(inferred.args, types) == []


def test_kforges_own_bfloat16_kernels_compile_without_sm_80_conversions():
    source = module_source("bfloat16")
    for define in ("TO_DOUBLE (double)bfloat16_to_float", "FROM_DOUBLE double_to_bfloat16", "PRECISION 8",
                   "VALUE unsigned short"):
        assert f"#define {define}\n" in source
    assert compile_module("bfloat16", "sm_75").cubin  # the oldest arch NVRTC targets, before bfloat16 instructions

