"""Turn pydantic validation errors into (field, message-with-fix) pairs for people, not tracebacks."""
import difflib
import re
from dataclasses import dataclass

from pydantic import BaseModel

from shared.domain.spec import ArgSpec, BenchmarkSpec, KernelSpec, StrategySpec

_FIELD_PREFIX = re.compile(r"^(?P<field>[A-Za-z_][\w\.\[\]]*): (?P<message>.+)$", re.S)
_MODELS: list[type[BaseModel]] = [KernelSpec, ArgSpec, BenchmarkSpec, StrategySpec]


@dataclass(frozen=True)
class FieldError:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


def field_errors(raw_errors: list) -> list[FieldError]:
    """`raw_errors` as pydantic's `ValidationError.errors()` gives them."""
    errors = []
    for error in raw_errors:
        loc = tuple(error["loc"])
        message = error["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
        field = _dotted(loc)
        if error["type"] == "value_error" and (match := _FIELD_PREFIX.match(message)):
            # Whole-model checks name the field themselves ("args[0].shape: ...").
            field = _join(field, match["field"])
            message = match["message"]
        errors.append(FieldError(field, _with_fix(error, message)))
    return errors


def _with_fix(error: dict, message: str) -> str:
    kind = error["type"]
    if kind == "missing":
        return "required: add this field"
    if kind == "extra_forbidden":
        name = str(error["loc"][-1])
        known = {f for model in _MODELS for f in model.model_fields}
        close = difflib.get_close_matches(name, known, n=1)
        return "unknown field: remove it" + (f" (did you mean {close[0]!r}?)" if close else "")
    if kind.endswith(("_type", "_parsing")):
        return f"{message} (got {error.get('input')!r})"
    return message


def _dotted(loc: tuple[str | int, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _join(outer: str, inner: str) -> str:
    return f"{outer}.{inner}" if outer else inner
