"""A 3D kernel of one point per thread read with its y and z axes swapped (services/generator/rules/axis_order.py):
a transpose across x and z then reads as one across x and y, and nothing is swapped where the two launches could
run other points; and a kernel of x and z alone read as the 2D kernel of x and y."""
import pytest

from services.generator import rules
from services.generator.rules.axis_order import swapped, z_as_y
from services.generator.rules.canonical import canonical
from services.generator.rules.shapes import reading, recognise
from tests.unit.rules_variants import BATCH_ALONG_Z, PLANAR_TO_PACKED, edited


def test_the_channels_of_blockIdx_z_are_launched_along_y():
    read = reading(PLANAR_TO_PACKED)
    assert recognise(PLANAR_TO_PACKED)[0].name == "transposed"
    assert read.problem_size == ["w", "c", "h"]
    assert "unsigned ch = blockIdx.y * blockDim.y + threadIdx.y;" in read.source
    assert "unsigned py = blockIdx.z * blockDim.z + threadIdx.z;" in read.source
    candidate = rules.apply("shared_tile", PLANAR_TO_PACKED, PLANAR_TO_PACKED.as_candidate())
    grid, block = PLANAR_TO_PACKED.for_candidate(candidate).launch_geometry(
        {**PLANAR_TO_PACKED.baseline_params(), **candidate.params})
    assert grid[2] == 61 and block[2] == 1  # a plane of rows per block layer, as py was a row per block row


def _with(spec, **changes):
    return spec.model_validate({**spec.model_dump(), **changes})


REFUSED = {
    # blocks deeper than one thread along z: their threads would take the y axis's block sizes
    "deep_blocks_along_z": _with(PLANAR_TO_PACKED, tune_params={"block_size_x": [32], "block_size_z": [1, 2]}),
    # a guard that leaves the channel unbounded: the new launch could run channels the old one never did
    "unbounded_z": edited(PLANAR_TO_PACKED, " || ch >= channels", ""),
    # more rows than CUDA's grid holds along z
    "too_many_rows": _with(PLANAR_TO_PACKED, sizes={"w": 173, "h": 70000, "c": 3}),
    # as many rows as it holds: one more, as a verification trial takes, would not fit
    "rows_at_the_grid_limit": _with(PLANAR_TO_PACKED, sizes={"w": 64, "h": 65535, "c": 3}),
    # a grid divided otherwise than by the block sizes
    "own_divisors": _with(PLANAR_TO_PACKED, grid_div_z=["1"]),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_the_axes_are_not_swapped_where_the_launches_could_differ(name):
    assert swapped(canonical(REFUSED[name])) is None


def test_a_kernel_no_more_specific_shape_reads_swapped_keeps_its_axes():
    planar = edited(PLANAR_TO_PACKED, "packed[((size_t)py * width + px) * channels + ch]",
                    "packed[((size_t)ch * height + py) * width + px]")
    assert swapped(canonical(planar)) is not None  # exact, but points either way
    assert recognise(planar)[0].name == "points" and reading(planar).problem_size == ["w", "h", "c"]


@pytest.mark.parametrize("divisors", [[], ["block_size_z"]], ids=["a_block_per_index", "the_block_size_spelt_out"])
def test_a_grid_along_z_divided_by_the_block_size_or_by_nothing_is_swapped_alike(divisors):
    """grid_div_z: [] (a block per channel, one thread deep) or the default spelt out launch the grid a spec leaving
    it out launches (review, helper-88: both were refused)."""
    spec = _with(PLANAR_TO_PACKED, grid_div_z=divisors)
    assert recognise(spec)[0].name == "transposed"
    geometry = []
    for submitted in (PLANAR_TO_PACKED, spec):
        candidate = rules.apply("shared_tile", submitted, submitted.as_candidate())
        geometry.append(submitted.for_candidate(candidate).launch_geometry(
            {**submitted.baseline_params(), **candidate.params}))
    assert geometry[0] == geometry[1]


def test_a_batch_along_z_beside_x_alone_is_read_and_launched_along_y():
    """`int batch = blockIdx.z;` with y launched one block deep: the points of x and the batch, 2D."""
    read = reading(BATCH_ALONG_Z)
    assert recognise(BATCH_ALONG_Z)[0].name == "points" and read.problem_size == ["n", "batches"]
    assert "int batch = blockIdx.y;" in read.source
    candidate = rules.apply("vectorize", BATCH_ALONG_Z, BATCH_ALONG_Z.as_candidate())
    grid, block = BATCH_ALONG_Z.for_candidate(candidate).launch_geometry(
        {**BATCH_ALONG_Z.baseline_params(), **candidate.params})
    assert grid == (5, 6, 1) and block == (256, 1, 1)  # 4099 points in vectors of 4 a thread, a batch a block row


@pytest.mark.parametrize("changes", [
    {"problem_size": ["n", 2, "batches"]},  # two blocks along y: each would run the batch twice read so
    {"tune_params": {"block_size_x": [64], "block_size_z": [1, 2]}},  # blocks deeper than one thread along z
    {"grid_div_z": ["2"]},  # a block for two batches
])
def test_a_batch_along_z_is_not_read_as_y_where_the_launches_could_differ(changes):
    changed = _with(BATCH_ALONG_Z, **changes)
    assert recognise(changed)[0] is None and reading(changed).problem_size == changed.problem_size


def test_a_kernel_naming_y_anywhere_keeps_its_z():
    divided = _with(BATCH_ALONG_Z, grid_div_y=None, grid_div_z=None)  # the block sizes', one thread deep
    assert z_as_y(divided) is not None
    naming = edited(divided, "int batch = blockIdx.z;", "int batch = blockIdx.z + 0 * blockIdx.y;")
    assert z_as_y(naming) is None and recognise(naming)[0] is None
