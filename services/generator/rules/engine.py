"""Whether a rule applies to the current kernel, and the candidate that applying it gives.

The engine keeps no state: the rules a kernel carries are read from the header comment every rewrite starts
with (`// kforge rules: restrict, vectorize`), so it works under any strategy and from any point of a job.
A rendered rule restructures the kernel of a shape a recogniser found in the *submitted* kernel
(services/generator/rules/shapes.py): the shape's features carried are printed afresh from that model, then the
textual edits carried are re-applied on top, in their order. So the rules compose in any order, and a kernel
rewritten twice the same way is the same text. Of alternatives (catalog.py) a kernel carries one: the first
applied, or, where the caller asks for `replacing`, the one asked for in place of those it carries (the kernel
rebuilt without them, then rewritten), so that a planner can try each alternative from the same parent.
"""
import dataclasses
import itertools
import re

from services.generator.rules import batching, loops, scan, scan_vectors, textual, tree
from services.generator.rules.catalog import RULES, Rule
from services.generator.rules.cuda_text import (find_kernel, mask, normalised, rules_in_header, with_header,
                                                without_header)
from services.generator.rules.partition import partition
from services.generator.rules.shape import Layout, Shape
from services.generator.rules.shapes import offering, reading, recognise
from shared.domain.spec import CandidateSpec, KernelSpec, ParamValue

TEXTUAL = {
    "block_size": (textual.block_size_reason, textual.block_size_edit),
    "restrict": (textual.restrict_reason, textual.restrict_edit),
    "unroll": (textual.unroll_reason, textual.unroll_edit),
    "launch_bounds": (textual.launch_bounds_reason, textual.launch_bounds_edit),
    "vectorize_loops": (loops.vectorize_loops_reason, loops.vectorize_loops_edit),
    "batch_loads": (batching.batch_loads_reason, batching.batch_loads_edit),
    "shuffle_reduction": (tree.shuffle_reduction_reason, tree.shuffle_reduction_edit),
    "scan_vectors": (scan_vectors.scan_vectors_reason, scan_vectors.scan_vectors_edit),
    "shuffle_scan": (scan.shuffle_scan_reason, scan.shuffle_scan_edit),
}


MAX_BLOCK_THREADS = 1024  # every CUDA device since compute capability 2.0


class RuleNotApplicable(ValueError):
    """apply() was asked for a rule that check() refuses; the message says why."""


def applied(source: str) -> tuple[str, ...]:
    """The rules a kernel carries, as its header lists them (none for a kernel without one)."""
    return rules_in_header(source)


def found(spec: KernelSpec) -> str:
    """What the recognisers see in the submitted kernel, in a sentence."""
    try:
        shape, _, _ = recognise(spec)
    except ValueError as exc:
        return f"The recognisers could not read the kernel: {exc}."
    if shape is None:
        return "The recognisers found no shape they restructure."
    return f"The recognisers found {shape.kind}."


def rivals(rule_id: str, current: CandidateSpec) -> tuple[str, ...]:
    """The alternatives of the rule that `current` carries: the rules it would replace."""
    carried = applied(current.source)
    return tuple(other for other in RULES[rule_id].alternatives if other in carried) if rule_id in RULES else ()


def check(rule_id: str, spec: KernelSpec, current: CandidateSpec, replacing: bool = False) -> str | None:
    """None when the rule applies to `current` (a rewrite of `spec`'s kernel), else the reason it does not; with
    `replacing`, in place of the alternatives `current` carries."""
    rule = RULES.get(rule_id)
    if rule is None:
        return f"no offline rule is named {rule_id}; the rules are {', '.join(RULES)}"
    carried = applied(current.source)
    if rule_id in carried:
        return f"the current kernel already carries {rule_id}"
    if rival := rivals(rule_id, current):
        if not replacing:
            return f"the current kernel carries {rival[0]}, which does the work of {rule_id} another way"
        parent = _without(spec, current, rival)
        return parent if isinstance(parent, str) else check(rule_id, spec, parent)
    name = rule.parameter_name(spec)
    blocks = partition(spec.source, spec)
    if name is not None and name in blocks.widths:
        return (f"the kernel writes one result per block ({blocks.describe()}) from the elements its blocks take by "
                f"block size: another {name} gives each result other elements, so {name} stays "
                f"{spec.baseline_params().get(name)}")
    if name is not None and name in _space(spec, current):
        return f"{name} is already a tune parameter of the current kernel"
    try:
        if rule.rendered:
            reason = _rendered_reason(rule, spec, current, carried)
            if reason is None and blocks.outputs and not rule.keeps_grid:  # a rendering that launches another grid
                return (f"the kernel writes one result per block ({blocks.describe()}); {rule_id} would spread the "
                        f"elements over the blocks differently and give each result other elements")
            return reason
        reason, _ = TEXTUAL[rule_id]
        return reason(without_header(current.source), spec)
    except ValueError as exc:  # the source could not be read: no kernel definition, unbalanced brackets
        return str(exc)


def apply(rule_id: str, spec: KernelSpec, current: CandidateSpec, replacing: bool = False) -> CandidateSpec:
    """`current` rewritten by the rule, with its header, tune space, default configuration and geometry; with
    `replacing`, in place of the alternatives `current` carries."""
    if replacing and (rival := rivals(rule_id, current)):
        parent = _without(spec, current, rival)
        if isinstance(parent, str):
            raise RuleNotApplicable(f"rule {rule_id} does not apply: {parent}")
        return apply(rule_id, spec, parent)
    reason = check(rule_id, spec, current)
    if reason is not None:
        raise RuleNotApplicable(f"rule {rule_id} does not apply: {reason}")
    rule = RULES[rule_id]
    rules = (*applied(current.source), rule_id)
    layout = Layout()
    if rule.rendered:
        source, layout, rules = _rebuild(spec, rules)
    else:
        _, edit = TEXTUAL[rule_id]
        source = edit(without_header(current.source), spec)
        # A carried rule whose code the edit replaced (unroll's pragma on the tree shuffle_reduction rewrites;
        # review, helper-98) leaves as a rebuild's would.
        masked = mask(source)
        rules = tuple(r for r in rules if r == rule_id or (name := RULES[r].parameter_name(spec)) is None or
                      re.search(rf"\b{re.escape(name)}\b", masked))
    # A carried rule the rebuild no longer took leaves with its tune parameter (which would tune nothing).
    gone = {RULES[r].parameter_name(spec) for r in applied(current.source) if r not in rules} - {None} \
        - set(spec.tune_params)
    if gone:
        current = current.model_copy(update={
            "params": {name: value for name, value in current.params.items() if name not in gone},
            "tune_params": {name: values for name, values in _space(spec, current).items() if name not in gone}})
    space = {**_space(spec, current), **rule.tune_params(spec), **layout.tune_params}
    space.update(_pinned(spec, space))
    restrictions = list(current.restrictions if current.restrictions is not None else spec.restrictions)
    restrictions += [r for r in (*rule.restrictions_for(spec), *layout.restrictions, *_bounded(spec, rule, space),
                                 *_within_a_block(spec, rule, space)) if r not in restrictions]
    divisors = {axis: layout.grid_div.get(axis, getattr(current, f"grid_div_{axis}")) for axis in "xyz"}
    shared = {"size": layout.smem} if layout.smem else current.smem_args
    candidate = CandidateSpec(source=with_header(source, rules), kernel_name=current.kernel_name, params={},
                              tune_params=space, restrictions=restrictions, smem_args=shared,
                              problem_size=layout.problem_size or current.problem_size,
                              **{f"grid_div_{axis}": divisors[axis] for axis in "xyz"})
    params = _default_configuration(spec, current, candidate, rule, layout)
    return candidate.model_copy(update={"params": params})


def _without(spec: KernelSpec, current: CandidateSpec, dropped: tuple[str, ...]) -> CandidateSpec | str:
    """The submitted kernel rewritten by the rules `current` carries, in its order, less `dropped` (and any that
    applied only after them); or why the rules cannot rebuild `current` (an LLM's rewrite that kept the header)."""
    if (why := _not_ours(spec, current, applied(current.source))) is not None:
        return why
    parent = spec.as_candidate()
    for rule_id in applied(current.source):
        if rule_id not in dropped and check(rule_id, spec, parent) is None:
            parent = apply(rule_id, spec, parent)
    return parent


def _bounded(spec: KernelSpec, rule: Rule, space: dict[str, list[ParamValue]]) -> tuple[str, ...]:
    """A rendering's blocks within the submitted kernel's own `__launch_bounds__(N)`, which it keeps: a block of
    more threads would not launch. Nothing to add for a textual rule (it keeps the block) or a bound not a number."""
    bound = re.search(r"__launch_bounds__\s*\(\s*(\d+)\s*[,)]", find_kernel(spec.source, spec.kernel_name).declaration)
    if not rule.rendered or bound is None:
        return ()
    blocks = [name for name in spec.block_size_names if name in space or name in spec.baseline_params()]
    return (f"{' * '.join(blocks)} <= {bound.group(1)}",)


def _within_a_block(spec: KernelSpec, rule: Rule, space: dict[str, list[ParamValue]]) -> tuple[str, ...]:
    """A tuned block width times the block's other sizes within the 1,024 threads a block may have: block_size
    offers widths up to 1,024 whatever the block's height."""
    if rule.id != "block_size":
        return ()
    baseline = spec.baseline_params()
    others = [name if name in space else str(baseline.get(name, 1)) for name in spec.block_size_names[1:]]
    others = [other for other in others if other != "1"]
    return (f"{' * '.join([spec.block_size_names[0], *others])} <= {MAX_BLOCK_THREADS}",) if others else ()


def _pinned(spec: KernelSpec, space: dict[str, list[ParamValue]]) -> dict[str, list[ParamValue]]:
    """The block sizes a kernel with per-block results must keep (services/generator/rules/partition.py), each at
    the submitted kernel's value: the verifier compares every configuration with the submitted kernel as it
    ran, and another block size gives each per-block result other elements."""
    baseline = spec.baseline_params()
    return {name: [baseline[name]] for name in partition(spec.source, spec).widths if name in space}


def _space(spec: KernelSpec, current: CandidateSpec) -> dict[str, list[ParamValue]]:
    return dict(current.tune_params if current.tune_params is not None else spec.tune_params)


def _rendered_reason(rule: Rule, spec: KernelSpec, current: CandidateSpec, carried: tuple[str, ...]) -> str | None:
    shape, model, reasons = recognise(spec)
    if shape is None or rule.id not in shape.rules:
        shapes = offering(rule.id)
        why = "; ".join(dict.fromkeys(reasons.get(s.name) or _refusal(s, shape, spec) for s in shapes))
        found = f" (it is {shape.kind})" if shape is not None and shape.kind not in why else ""
        return f"{rule.id} takes {' or '.join(s.kind for s in shapes)}, and this one is not: {why}{found}"
    reason = shape.reason(rule.id, model, reading(spec))
    if reason is not None:
        return reason
    return _not_ours(spec, current, carried)


def _not_ours(spec: KernelSpec, current: CandidateSpec, carried: tuple[str, ...]) -> str | None:
    """None when `current` is the submitted kernel or what the rules it names give, else why the rules cannot
    rebuild it (an LLM's rewrite that kept the header, say)."""
    if normalised(_rebuild(spec, carried)[0]) != normalised(current.source):
        return ("the current kernel is neither the submitted one nor an offline-rules rewrite of it, so the rules "
                "cannot re-render it")
    return None


def _refusal(offered: Shape, found: Shape, spec: KernelSpec) -> str:
    """Why a shape after the one found refuses the kernel; when it would take it too, the shape found wins."""
    try:
        offered.recognise(reading(spec))
    except ValueError as exc:
        return str(exc)
    rules = found.rules
    return f"it is {found.kind}, which {' and '.join([', '.join(rules[:-1]), rules[-1]] if len(rules) > 1 else rules)} " \
           f"restructure{'' if len(rules) > 1 else 's'}"


def _rebuild(spec: KernelSpec, rules: tuple[str, ...]) -> tuple[str, Layout, tuple[str, ...]]:
    """The submitted kernel with `rules` applied: the shape's features rendered, then textual edits in order; and
    the rules that took, in order (a textual edit of the submitted loops that a rendering replaced takes no more:
    batch_loads on a row loop that warp_per_row strides, say)."""
    features = tuple(rule_id for rule_id in rules if RULES[rule_id].rendered)
    source, layout = spec.source, Layout()
    if features:
        shape, model, _ = recognise(spec)
        read = reading(spec)
        source, layout = shape.render(model, features, read)
        # A reading launched otherwise than submitted (a grid-stride nest read as one point per thread, a flat
        # index as its coordinates) is rendered for its own points and grid, along the axes the rendering leaves
        # alone.
        regridded = {axis: getattr(read, f"grid_div_{axis}") for axis in "xyz"
                     if getattr(read, f"grid_div_{axis}") != getattr(spec, f"grid_div_{axis}")}
        relaunched = read.problem_size if read.problem_size != spec.problem_size else None
        layout = dataclasses.replace(layout, grid_div={**regridded, **layout.grid_div},
                                     problem_size=layout.problem_size or relaunched)
    taken = list(features)
    for rule_id in rules:
        if rule_id in TEXTUAL:
            reason, edit = TEXTUAL[rule_id]
            if reason(source, spec) is None:
                source = edit(source, spec)
                taken.append(rule_id)
    return source, layout, tuple(rule_id for rule_id in rules if rule_id in taken)


def _default_configuration(spec: KernelSpec, current: CandidateSpec, candidate: CandidateSpec, rule: Rule,
                           layout: Layout) -> dict[str, ParamValue]:
    """A value for every tune parameter: the current one, else the rendering's default, else the spec's, else
    the rule's default, else the first, whichever is in the space first; parameters outside the space keep
    their current values. When that misses a restriction, the first configuration of the space that meets
    them all."""
    params = dict(current.params)
    space = candidate.tune_params
    for name, values in space.items():
        choices = (current.params.get(name), layout.defaults.get(name), spec.params.get(name),
                   rule.default if name == rule.parameter_name(spec) else None, values[0])
        params[name] = next(choice for choice in choices if choice in values)
    launched = spec.for_candidate(candidate)
    if launched.restrictions_hold(params):
        return params
    names = list(space)
    for values in itertools.product(*space.values()):
        config = {**params, **dict(zip(names, values))}
        if launched.restrictions_hold(config):
            return config
    return params
