"""Kernels written the ways users write them (tests/corpus/styles, README.md there): each is admitted, read as the
shape found.yaml names, and its shape's rewrites compile across their tune spaces. found.yaml marks the
spellings the recognisers do not read yet (`# wanted:`), so a change that reads one more shows here."""
from pathlib import Path

import pytest
import yaml

from kforge.specfile import load_spec
from services.generator import rules
from services.generator.rules.shapes import recognise
from shared.adapters.device.compiler import compile_kernel
from shared.application.kernel_admission import kernel_errors
from tests.unit.rules_variants import sample

STYLES = Path(__file__).resolve().parent.parent / "corpus" / "styles"
FOUND = yaml.safe_load((STYLES / "found.yaml").read_text())


def test_every_kernel_of_the_directory_has_its_shape_named():
    assert sorted(FOUND) == sorted(path.stem for path in STYLES.glob("*.cu"))


@pytest.mark.parametrize("name", sorted(FOUND))
def test_each_style_is_admitted_read_as_its_shape_and_rewritten(name):
    spec = load_spec(STYLES / f"{name}.cu", STYLES / f"{name}.yaml")
    assert kernel_errors(spec, "sm_90") == []
    shape, _, reasons = recognise(spec)
    assert (shape.name if shape else "none") == FOUND[name], reasons
    if shape is None:
        return
    submitted = spec.as_candidate()
    applying = [rule for rule in shape.rules if rules.check(rule, spec, submitted) is None]
    assert applying, {rule: rules.check(rule, spec, submitted) for rule in shape.rules}
    for rule in applying:
        candidate = rules.apply(rule, spec, submitted)
        assert rules.applied(candidate.source) == (rule,)
        for params in sample(candidate, spec, 4):  # the default, the smallest, the largest and a seeded pick
            compile_kernel(candidate.source, spec.kernel_name,
                           {**spec.baseline_params(), **candidate.params, **params}, spec.compiler_options, "sm_90")


def test_a_define_of_the_block_width_counts_only_where_a_restriction_makes_it_the_block_size():
    spec = load_spec(STYLES / "dequant_int8.cu", STYLES / "dequant_int8.yaml")
    assert recognise(spec)[0].name == "elementwise"
    looser = spec.model_validate({**spec.model_dump(), "restrictions": ["block_size_x >= BLOCK_SIZE"]})
    shape, _, reasons = recognise(looser)
    assert shape is None or shape.name != "elementwise"
    assert "not blockIdx.x * blockDim.x + threadIdx.x" in reasons["elementwise"]
