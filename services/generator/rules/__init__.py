"""The offline rule engine: kforge's generator when no LLM key is configured.

It makes real, deterministic source rewrites (block_size, restrict, elements_per_thread, vectorize, unroll,
launch_bounds), each of which is then verified on a GPU against the submitted kernel and tuned like any
candidate. `check` says whether a rule applies to the current kernel and why not; `apply` makes the rewrite;
`applied` reads back which rules a kernel carries.
"""
from services.generator.rules.catalog import CATALOG, FOCUS_ORDERS, RULES, Rule, in_focus_order
from services.generator.rules.engine import RuleNotApplicable, applied, apply, check

__all__ = ["CATALOG", "FOCUS_ORDERS", "RULES", "Rule", "RuleNotApplicable", "applied", "apply", "check",
           "in_focus_order"]
