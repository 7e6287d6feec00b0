"""Whether a rule applies to the current kernel, and the candidate that applying it gives.

The engine keeps no state: the rules a kernel carries are read from the header comment every rewrite starts
with (`// kforge rules: restrict, vectorize`), so it works under any strategy and from any point of a job.
Elementwise features are rendered afresh from the submitted kernel with every feature carried, then the
textual edits carried are re-applied on top, in their order: the rules compose in any order and a kernel
rewritten twice the same way is the same text.
"""
from services.generator.rules import textual
from services.generator.rules.catalog import RULES, Rule
from services.generator.rules.cuda_text import normalised, rules_in_header, with_header, without_header
from services.generator.rules.elementwise import Elementwise, NotElementwise, model, render, vectorize_reason
from shared.spec import CandidateSpec, KernelSpec, ParamValue

TEXTUAL = {
    "block_size": (textual.block_size_reason, textual.block_size_edit),
    "restrict": (textual.restrict_reason, textual.restrict_edit),
    "unroll": (textual.unroll_reason, textual.unroll_edit),
    "launch_bounds": (textual.launch_bounds_reason, textual.launch_bounds_edit),
}


class RuleNotApplicable(ValueError):
    """apply() was asked for a rule that check() refuses; the message says why."""


def applied(source: str) -> tuple[str, ...]:
    """The rules a kernel carries, as its header lists them (none for a kernel without one)."""
    return rules_in_header(source)


def check(rule_id: str, spec: KernelSpec, current: CandidateSpec) -> str | None:
    """None when the rule applies to `current` (a rewrite of `spec`'s kernel), else the reason it does not."""
    rule = RULES.get(rule_id)
    if rule is None:
        return f"no offline rule is named {rule_id}; the rules are {', '.join(RULES)}"
    carried = applied(current.source)
    if rule_id in carried:
        return f"the current kernel already carries {rule_id}"
    name = rule.parameter_name(spec)
    if name is not None and name in _space(spec, current):
        return f"{name} is already a tune parameter of the current kernel"
    try:
        if rule.elementwise:
            return _elementwise_reason(rule, spec, current, carried)
        reason, _ = TEXTUAL[rule_id]
        return reason(without_header(current.source), spec)
    except NotElementwise as exc:
        return f"{rule_id} takes elementwise kernels, and this one is not: {exc}"
    except ValueError as exc:  # the source could not be read: no kernel definition, unbalanced brackets
        return str(exc)


def apply(rule_id: str, spec: KernelSpec, current: CandidateSpec) -> CandidateSpec:
    """`current` rewritten by the rule, with its header, tune space, default configuration and geometry."""
    reason = check(rule_id, spec, current)
    if reason is not None:
        raise RuleNotApplicable(f"rule {rule_id} does not apply: {reason}")
    rule = RULES[rule_id]
    rules = (*applied(current.source), rule_id)
    if rule.elementwise:
        source, grid_div_x = _rebuild(spec, model(spec), rules), _grid_div_x(spec, rules)
    else:
        _, edit = TEXTUAL[rule_id]
        source, grid_div_x = edit(without_header(current.source), spec), current.grid_div_x
    space = {**_space(spec, current), **rule.tune_params(spec)}
    return CandidateSpec(source=with_header(source, rules), kernel_name=current.kernel_name,
                         params=_default_configuration(spec, current, space, rule), tune_params=space,
                         restrictions=current.restrictions, grid_div_x=grid_div_x, grid_div_y=current.grid_div_y,
                         grid_div_z=current.grid_div_z, smem_args=current.smem_args)


def _space(spec: KernelSpec, current: CandidateSpec) -> dict[str, list[ParamValue]]:
    return dict(current.tune_params if current.tune_params is not None else spec.tune_params)


def _elementwise_reason(rule: Rule, spec: KernelSpec, current: CandidateSpec, carried: tuple[str, ...]) -> str | None:
    kernel = model(spec)
    if rule.id == "vectorize":
        reason = vectorize_reason(kernel)
        if reason is not None:
            return reason
    if normalised(_rebuild(spec, kernel, carried)) != normalised(current.source):
        return ("the current kernel is neither the submitted one nor an offline-rules rewrite of it, so the rules "
                "cannot re-render it")
    return None


def _rebuild(spec: KernelSpec, kernel: Elementwise, rules: tuple[str, ...]) -> str:
    """The submitted kernel with `rules` applied: elementwise features rendered, then textual edits in order."""
    features = [rule_id for rule_id in rules if RULES[rule_id].elementwise]
    source = render(kernel, "elements_per_thread" in features, "vectorize" in features) if features else spec.source
    for rule_id in rules:
        if rule_id in TEXTUAL:
            reason, edit = TEXTUAL[rule_id]
            if reason(source, spec) is None:
                source = edit(source, spec)
    return source


def _grid_div_x(spec: KernelSpec, rules: tuple[str, ...]) -> list[str | int]:
    """One block per block_size_x threads, each handling elements_per_thread iterations of four-element
    vectors: the grid then covers the problem once."""
    return [spec.block_size_names[0], *(["elements_per_thread"] if "elements_per_thread" in rules else []),
            *([4] if "vectorize" in rules else [])]


def _default_configuration(spec: KernelSpec, current: CandidateSpec, space: dict[str, list[ParamValue]],
                           rule: Rule) -> dict[str, ParamValue]:
    """A value for every tune parameter: the current one, else the spec's, else the rule's default, else the
    first, whichever is in the space first; parameters outside the space keep their current values."""
    params = dict(current.params)
    for name, values in space.items():
        choices = (current.params.get(name), spec.params.get(name),
                   rule.default if name == rule.parameter_name(spec) else None, values[0])
        params[name] = next(choice for choice in choices if choice in values)
    return params

