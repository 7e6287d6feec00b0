"""The prompts the generator sends: one per request kind, written from the job's folded events.

The prose is for an LLM; the same Prompt carries the structured facts for the offline rules. Every prompt
states the answer format (answers.py reads it back) and Kernel Tuner's conventions, which decide how a
rewrite's parameters reach its code: each tune parameter is a -D define, the block is
(block_size_x, block_size_y, block_size_z) and the grid is ceil(problem_size / product of grid_div_x).
"""
from services.generator.providers.base import Attempt, Prompt
from services.generator.retrieval import Example
from shared.domain.events import GenerationRequested
from shared.domain.spec import ArgSpec, KernelSpec
from shared.domain.steps import Optimisation

SYSTEM = ("You are an expert CUDA performance engineer. You make kernels faster while keeping them exactly "
          "correct for every problem size, including sizes that are not multiples of the block size or vector "
          "width. You answer in the format you are asked for, with nothing left out.")

FORMATS = {
    "plan": 'Answer with a ```json block: {"steps": [{"id": "short_snake_case", "description": "one sentence", '
            '"tune_params": {"name": [values]}}]}, in the order to try them.',
    "validate": 'Answer with a ```json block: {"valid": true or false, "reason": "one sentence"}.',
    "breakdown": 'Answer with a ```json block: {"steps": [...]} holding the smaller steps, each like '
                 '{"id", "description", "tune_params"}, or {"steps": []} when the step is small enough.',
    "rewrite": "Answer with the whole rewritten kernel in one ```cuda block (same kernel name, same parameters in "
               "the same order and types), then a ```json block with its \"tune_params\" (every parameter the "
               "code reads as a define, with the values to try), \"params\" (a good default value for each) and, "
               "if each thread no longer handles one element, \"grid_div_x\" (the list of factors dividing the "
               "problem size into blocks, e.g. [\"block_size_x\", \"elements_per_thread\"]) or, if its threads "
               "span other axes than the problem size's, \"problem_size\" (up to three expressions of the sizes); "
               "if the dynamic "
               "shared memory (extern __shared__) a block needs changes, \"smem_args\" ({\"size\": its bytes, "
               "e.g. \"block_size_x * 4\"}, or {\"size\": 0} for none).",
}
FORMATS["replan"] = FORMATS["plan"]


def build(request: GenerationRequested, spec: KernelSpec, opt: Optimisation, examples: list[Example]) -> Prompt:
    current = opt.best.candidate
    history = tuple(_attempts(opt))
    parts = [_task(request, current.source), _facts(spec, opt), _history(history), _examples(examples),
             FORMATS[request.kind]]
    return Prompt(kind=request.kind, system=SYSTEM, text="\n\n".join(p for p in parts if p), spec=spec,
                  current=current, lineage=opt.best.lineage, step=request.step, focus=request.focus, history=history)


def _task(request: GenerationRequested, source: str) -> str:
    step, kernel = request.step, f"```cuda\n{source.rstrip()}\n```"
    if request.kind == "plan":
        return f"Plan the optimisation of this kernel as a list of steps, each a change of its code that can be " \
               f"tuned through parameters (not profiling, not compiler flags).\n\n{kernel}"
    if request.kind == "replan":
        return f"This is the kernel after the steps below. Propose further steps worth trying, or none.\n\n{kernel}"
    if request.kind == "validate":
        return (f"Is this step a real change of the kernel's code whose effect can be tuned through parameters, "
                f"and worth trying on it now? Profiling, compiler flags or host-side changes are not.\n\n"
                f"Step {step.id}: {step.description}\n\n{kernel}")
    if request.kind == "breakdown":
        return f"Should this step be broken down into smaller steps?\n\nStep {step.id}: {step.description}\n\n{kernel}"
    ask = step.prompt_template.replace("{kernel_string}", source.rstrip()) if step.prompt_template else \
        f"Apply this optimisation step to the kernel: {step.description}.\n\n{kernel}"
    focus = f"\n\nThe kernel's performance category is {request.focus}; concentrate on: {step.description}." \
        if request.focus else ""
    params = f"\n\nThe step introduces these tunable parameters: {step.tune_params}." if step.tune_params else ""
    return ask + params + focus


def _arg_fact(arg: ArgSpec) -> str:
    """An argument as the rewrite must treat it; the values an index array holds decide which accesses are safe."""
    values = [f"values in [{arg.range[0]}, {arg.range[1]})" if arg.range else "", "sorted" if arg.sorted else "",
              "fixed data" if arg.data else ""]
    held = f" ({', '.join(v for v in values if v)})" if any(values) else ""
    return f"{arg.name}: {arg.dtype}{list(arg.shape) if arg.shape else ''} {arg.effective_role}{held}"


def _facts(spec: KernelSpec, opt: Optimisation) -> str:
    args = ", ".join(_arg_fact(a) for a in spec.args)
    best = opt.best
    lines = [f"Arguments: {args}. Sizes: {spec.sizes}. Problem size: "
             f"{best.candidate.problem_size or spec.dimensions}.",
             f"Current tunable parameters: {best.candidate.tune_params or spec.tune_params or 'none'}; "
             f"best configuration so far: {best.params}.",
             "Tunable parameters arrive as -D defines; the block is (block_size_x, block_size_y, block_size_z) and "
             "the grid is ceil(problem_size / product of grid_div_x) (default grid_div_x: [block_size_x])."]
    if constants := ", ".join(a.name for a in spec.constants):
        lines.append(f"{constants}: __constant__ arrays of the source, filled by the host before every launch and not "
                     "kernel parameters: keep each one's file-scope declaration, name, type and size.")
    shared = best.candidate.smem_args or spec.smem_args
    if shared is not None:
        lines.append(f"Each block gets {shared.size} bytes of dynamic shared memory (smem_args).")
    if opt.baseline_ms:
        lines.append(f"The submitted kernel takes {opt.baseline_ms:.4f} ms; the best so far {best.time_ms:.4f} ms.")
    return "\n".join(lines)


def _history(history: tuple[Attempt, ...]) -> str:
    if not history:
        return ""
    return "Steps tried so far:\n" + "\n".join(f"- {a.step_id} ({a.description}): {a.outcome}, {a.detail}"
                                               for a in history)


def _examples(examples: list[Example]) -> str:
    if not examples:
        return ""
    shown = [f"- on {e.kernel_name} (similarity {e.similarity:.2f}), {e.description}: {e.old_ms:.4f} -> "
             f"{e.new_ms:.4f} ms. The accepted kernel:\n```cuda\n{e.source.rstrip()}\n```" for e in examples]
    return "Optimisations accepted earlier on similar kernels:\n" + "\n".join(shown)


def _attempts(opt: Optimisation):
    for record in opt.steps:
        if not record.finished:
            continue
        if record.status == "accepted":
            detail = f"{record.old_ms:.4f} -> {record.new_ms:.4f} ms"
        else:
            detail = record.reason
        yield Attempt(step_id=record.step.id, description=record.step.description, outcome=record.status,
                      detail=detail, source=record.candidate.source if record.candidate else None)
