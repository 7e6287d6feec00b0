"""Read a kernel submission from a .cu file plus a YAML spec, with errors that name the field and the fix."""
from pathlib import Path

import yaml
from pydantic import ValidationError

from shared.adapters.array_files import ArrayFileError, array_file, array_file_errors
from shared.adapters.settings import Settings
from shared.domain.errors import FieldError, field_errors
from shared.domain.spec import KernelSpec


class SpecError(Exception):
    def __init__(self, where: str, errors: list[FieldError]):
        super().__init__(f"{where}: " + "; ".join(map(str, errors)))
        self.where, self.errors = where, errors


def spec_path_for(kernel: Path) -> Path | None:
    for suffix in (".yaml", ".yml"):
        if (candidate := kernel.with_suffix(suffix)).exists():
            return candidate
    return None


def load_spec(kernel: Path | None, spec: Path | None) -> KernelSpec:
    """The spec from `spec` (default: the .yaml beside `kernel`), with its source read from `kernel`,
    or from the spec's `source_file` (relative to the spec) when no kernel file is given; `data` and
    `answer` files, relative to the spec too, are checked and recorded with their sha256."""
    if kernel is not None and not kernel.is_file():
        raise SpecError(str(kernel), [FieldError("KERNEL", f"{kernel} does not exist: give the path of a .cu file")])
    if spec is None:
        spec = spec_path_for(kernel) if kernel else None
        if spec is None:
            raise SpecError(str(kernel), [FieldError("--spec", f"no spec given and none beside {kernel}: pass "
                                                     f"--spec SPEC.yaml or create {kernel.with_suffix('.yaml')}")])
    data = _read_yaml(spec)
    source_file = data.pop("source_file", None)
    if kernel is not None:
        data["source"] = _read_text(kernel, "KERNEL")
    elif source_file is not None:
        data["source"] = _read_text(spec.parent / str(source_file), "source_file")
    _record_array_files(data, spec)
    try:
        loaded = KernelSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(str(spec), field_errors(exc.errors())) from None
    if errors := array_file_errors(loaded):
        raise SpecError(str(spec), errors)
    return loaded


def _record_array_files(data: dict, spec: Path) -> None:
    """Each argument's `data` and `answer` path, relative to the spec file, becomes the file's absolute path and
    the sha256 of its bytes: the job uses exactly this content, or is refused where the file has changed."""
    errors, max_bytes = [], Settings().max_array_bytes
    args = data.get("args")
    for i, arg in enumerate(args if isinstance(args, list) else []):
        for field in ("data", "answer"):
            if isinstance(arg, dict) and isinstance(arg.get(field), str):
                try:
                    arg[field] = array_file(spec.parent / arg[field], max_bytes).model_dump()
                except ArrayFileError as exc:
                    errors.append(FieldError(f"args[{i}].{field}", str(exc)))
    if errors:
        raise SpecError(str(spec), errors)


def _read_yaml(path: Path) -> dict:
    try:
        data = _without_aliases(path, path.read_text())
    except FileNotFoundError:
        raise SpecError(str(path), [FieldError("--spec", f"{path} does not exist")]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError(str(path), [FieldError("", f"not valid YAML{where}: {getattr(exc, 'problem', exc)}")]) from None
    if not isinstance(data, dict):
        raise SpecError(str(path), [FieldError("", "the spec must be a mapping of fields (kernel_name: ..., args: ...)")])
    return data


def _without_aliases(path: Path, text: str) -> object:
    """The document, refused if it uses an alias (*name): a few lines of nested aliases expand to gigabytes
    (a "billion laughs"), in the loaded data and in any error that shows it. Specs write values out."""
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            mark = event.start_mark
            raise SpecError(str(path), [FieldError("", f"YAML alias *{event.anchor} at line {mark.line + 1}, column "
                                                       f"{mark.column + 1}: a spec may not use anchors and aliases; "
                                                       "write the value out")])
    return yaml.safe_load(text)


def _read_text(path: Path, field: str) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise SpecError(str(path), [FieldError(field, f"cannot read {path}: {exc.strerror}")]) from None
