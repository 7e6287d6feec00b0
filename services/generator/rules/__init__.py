"""The offline rule engine: kforge's generator when no LLM key is configured.

It makes real, deterministic source rewrites, each of which is then verified on a GPU against the submitted
kernel and tuned like any candidate: edits of any kernel (block_size, restrict, unroll, launch_bounds,
vectorize_loops, shuffle_reduction, scan_vectors, shuffle_scan) and restructurings of the kernel shapes its
recognisers find (services/generator/rules/shapes.py: elementwise, atomic accumulations and histograms, row loops,
transposes, window sums, stencils, one point per thread). `check` says whether a rule applies to the current kernel and why not (or
would, in place of an alternative it carries); `apply` makes the rewrite; `applied` reads back which rules a kernel carries; `found` says what the
recognisers see.
"""
from services.generator.rules.catalog import (CATALOG, FOCUS_ORDERS, PLAN_ORDER, RULES, STRUCTURAL, Rule,
                                              in_focus_order)
from services.generator.rules.engine import RuleNotApplicable, applied, apply, check, found, rivals

__all__ = ["CATALOG", "FOCUS_ORDERS", "PLAN_ORDER", "RULES", "STRUCTURAL", "Rule", "RuleNotApplicable", "applied",
           "apply", "check", "found", "in_focus_order", "rivals"]
