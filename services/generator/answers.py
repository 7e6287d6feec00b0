"""What a provider's answer must look like, and reading it back.

Every provider (Claude, the rules, a replay) answers in the same text format, so one parser decides what
an answer says and every way it can be wrong is a recorded reason rather than a crash:
- plan, replan, breakdown: a ```json block {"steps": [{"id", "description", "tune_params"}...]};
- validate: a ```json block {"valid": true|false, "reason": "..."};
- rewrite: a ```cuda block holding the whole kernel, then a ```json block with the kernel's "tune_params"
  and, when it changes them, "params" (its default configuration), "restrictions", "problem_size",
  "grid_div_x/y/z" and "smem_args".
"""
import json
import re
from dataclasses import dataclass

from pydantic import ValidationError

from shared.domain.spec import CandidateSpec, TuningStep

BLOCK = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\r?\n(.*?)```", re.DOTALL)
CODE_LANGUAGES = ("cuda", "cu", "c++", "cpp", "c", "")
REWRITE_FIELDS = ("tune_params", "params", "restrictions", "problem_size", "grid_div_x", "grid_div_y", "grid_div_z",
                  "smem_args")


class MalformedAnswer(ValueError):
    """The answer does not say what was asked, in the agreed format; the message says what is missing."""


@dataclass(frozen=True)
class Plan:
    steps: list[TuningStep]


@dataclass(frozen=True)
class Verdict:
    valid: bool
    reason: str


@dataclass(frozen=True)
class Rewrite:
    source: str
    settings: dict  # the json block's REWRITE_FIELDS that were given


def parse(kind: str, text: str) -> Plan | Verdict | Rewrite:
    if kind in ("plan", "replan", "breakdown"):
        return _plan(_json_block(text))
    if kind == "validate":
        return _verdict(_json_block(text))
    if kind == "rewrite":
        return _rewrite(text)
    raise ValueError(f"no answer format for request kind {kind!r}")


def _blocks(text: str) -> list[tuple[str, str]]:
    return [(lang.lower(), body) for lang, body in BLOCK.findall(text)]


def _json_block(text: str, required: bool = True) -> dict | None:
    blocks = [body for lang, body in _blocks(text) if lang == "json"]
    if not blocks:
        if required:
            raise MalformedAnswer("the answer has no ```json block")
        return None
    try:
        value = json.loads(blocks[-1])
    except json.JSONDecodeError as exc:
        raise MalformedAnswer(f"the ```json block is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise MalformedAnswer(f"the ```json block holds a {type(value).__name__}, not an object")
    return value


def _plan(value: dict) -> Plan:
    steps = value.get("steps")
    if not isinstance(steps, list):
        raise MalformedAnswer('the ```json block has no "steps" list')
    try:
        return Plan([TuningStep.model_validate(step) for step in steps])
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise MalformedAnswer(f"a planned step is not a valid step ({where}: {first['msg']})") from None


def _verdict(value: dict) -> Verdict:
    if not isinstance(value.get("valid"), bool):
        raise MalformedAnswer('the ```json block has no boolean "valid"')
    return Verdict(valid=value["valid"], reason=str(value.get("reason", "")))


def _rewrite(text: str) -> Rewrite:
    code = [body for lang, body in _blocks(text) if lang in CODE_LANGUAGES and "__global__" in body]
    if not code:
        raise MalformedAnswer("the answer has no ```cuda block holding a __global__ kernel")
    settings = _json_block(text, required=False) or {}
    unknown = sorted(set(settings) - set(REWRITE_FIELDS))
    if unknown:
        raise MalformedAnswer(f"the ```json block has unknown fields {', '.join(unknown)}; "
                              f"it takes {', '.join(REWRITE_FIELDS)}")
    return Rewrite(source=code[-1].strip() + "\n", settings=settings)


# --- writing answers (the rules provider and tests answer in the format they are read in) ---------------
def plan_text(steps: list[TuningStep], note: str = "") -> str:
    body = {"steps": [s.model_dump(include={"id", "description", "tune_params", "skip_evaluation"}) for s in steps]}
    return f"{note}\n\n```json\n{json.dumps(body, indent=2)}\n```\n".lstrip()


def verdict_text(valid: bool, reason: str) -> str:
    return f"```json\n{json.dumps({'valid': valid, 'reason': reason})}\n```\n"


def rewrite_text(candidate: CandidateSpec, note: str = "") -> str:
    """Every setting stated, empty and null ones too: the generator takes what an answer leaves out from the best
    kernel so far, and a rewrite that replaces an alternative (row_in_shared for row_in_registers) must not inherit
    that kernel's restrictions or shared memory."""
    settings = candidate.model_dump(include=set(REWRITE_FIELDS))
    return (f"{note}\n\n```cuda\n{candidate.source.rstrip()}\n```\n\n"
            f"```json\n{json.dumps(settings, indent=2)}\n```\n").lstrip()
