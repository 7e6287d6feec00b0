"""The offline rules as a provider: every request kind answered by the rule engine, in the same text format
an LLM answers in, so the planner, the transcript and replays cannot tell the difference.

Nothing is remembered between calls: which rules the current kernel carries, and which were tried already,
are read from the header comment of the current source and of the sources in the prompt's history. A rule not
tried yet whose alternative the current kernel carries (row_in_shared where row_in_registers was kept) is
applied in place of it, so each alternative is tried from the same parent and the faster one kept.
"""
from services.generator import rules
from services.generator.answers import plan_text, rewrite_text, verdict_text
from services.generator.providers.base import Answer, Prompt, ProviderFailed
from shared.domain.spec import CandidateSpec, TuningStep

MODEL = "kforge-rules"


class RulesProvider:
    name = "rules"

    def complete(self, prompt: Prompt) -> Answer:
        if prompt.kind in ("plan", "replan"):
            text = self._plan(prompt)
        elif prompt.kind == "validate":
            text = self._validate(prompt)
        elif prompt.kind == "breakdown":
            text = plan_text([], note="The offline rules are atomic: there is nothing to break down.")
        elif prompt.kind == "rewrite":
            text = self._rewrite(prompt)
        else:
            raise ProviderFailed(f"the offline rules answer plan, replan, validate, breakdown and rewrite, "
                                 f"not {prompt.kind!r}")
        return Answer(text=text, model=MODEL)

    def _plan(self, prompt: Prompt) -> str:
        candidates = _untried(prompt)
        steps = [TuningStep(id=rule.id, description=rule.description, tune_params=rule.tune_params(prompt.spec))
                 for rule in candidates]
        order = f"{prompt.focus.upper()} order" if prompt.focus else "the plan's order (restructuring first)"
        note = (f"{rules.found(prompt.spec)} Offline rules that apply to the current kernel and were not tried yet, "
                f"in {order}." if steps else
                "No offline rule is left that applies to the current kernel and was not tried yet.")
        return plan_text(steps, note=note)

    def _validate(self, prompt: Prompt) -> str:
        step_id = _step_id(prompt)
        if step_id not in rules.RULES:
            return verdict_text(False, f"no offline rule implements step {step_id}; the rules are: "
                                       f"{', '.join(rules.RULES)}; set ANTHROPIC_API_KEY to let Claude try it")
        reason = rules.check(step_id, prompt.spec, prompt.current, replacing=True)
        if reason is not None:
            return verdict_text(False, reason)
        return verdict_text(True, f"the rule applies: {rules.RULES[step_id].description}")

    def _rewrite(self, prompt: Prompt) -> str:
        step_id = _step_id(prompt)
        if step_id in rules.RULES:
            candidate, applied = _apply(prompt, step_id), [step_id]
        elif step_id == "one_prompt":
            candidate, applied = prompt.current, []
            for rule in rules.in_focus_order(None):
                if rules.check(rule.id, prompt.spec, candidate) is None:
                    candidate = rules.apply(rule.id, prompt.spec, candidate)
                    applied.append(rule.id)
            if not applied:
                raise ProviderFailed(f"no offline rule applies to the current kernel: {_reasons(prompt)}")
        else:
            untried = _untried(prompt)
            if not untried:
                raise ProviderFailed(f"no offline rule is left that applies to the current kernel and was not tried "
                                     f"yet: {_reasons(prompt)}")
            candidate, applied = _apply(prompt, untried[0].id), [untried[0].id]
        # one_prompt applies rules without replacing: none it applied has a rival the current kernel carries
        replaced = tuple(rival for rule_id in applied for rival in rules.rivals(rule_id, prompt.current))
        plural = "s" if len(applied) > 1 else ""
        instead = f" in place of {', '.join(replaced)}, which does the same work another way" if replaced else ""
        kept = rules.applied(candidate.source)
        if lost := [r for r in rules.applied(prompt.current.source) if r not in replaced and r not in kept]:
            instead += f" ({', '.join(lost)} applied only after {', '.join(replaced)}, and is left out)"
        return rewrite_text(candidate, note=f"Applied the offline rule{plural} {', '.join(applied)}{instead}.")


def _step_id(prompt: Prompt) -> str:
    if prompt.step is None:
        raise ProviderFailed(f"a {prompt.kind} request needs a step, and this one has none")
    return prompt.step.id


def _apply(prompt: Prompt, rule_id: str) -> CandidateSpec:
    try:
        return rules.apply(rule_id, prompt.spec, prompt.current, replacing=True)
    except rules.RuleNotApplicable as exc:
        raise ProviderFailed(str(exc)) from None


def _untried(prompt: Prompt) -> list[rules.Rule]:
    """The rules that apply to the current kernel, in the prompt's focus order, less those tried before."""
    tried = set()
    for attempt in prompt.history:
        if attempt.step_id in rules.RULES:
            tried.add(attempt.step_id)
        if attempt.source:
            tried.update(rules.applied(attempt.source))
    try:
        order = rules.in_focus_order(prompt.focus)
    except ValueError as exc:
        raise ProviderFailed(str(exc)) from None
    return [rule for rule in order
            if rule.id not in tried and rules.check(rule.id, prompt.spec, prompt.current, replacing=True) is None]


def _reasons(prompt: Prompt) -> str:
    def reason(rule_id: str) -> str:
        return rules.check(rule_id, prompt.spec, prompt.current, replacing=True) or "tried already"
    return "; ".join(f"{rule.id}: {reason(rule.id)}" for rule in rules.CATALOG)
