"""Every kind of event reads as a line in a terminal (`kforge events`, the progress of `kforge tune`)."""
import types
from datetime import UTC, datetime
from typing import Union, get_args, get_origin
from uuid import uuid4

import pytest
from pydantic import BaseModel

from kforge.render import describe
from shared.events import EVENTS
from shared.spec import CandidateSpec, KernelSpec

PLAIN = {str: "x", int: 1, float: 1.0, bool: False, datetime: datetime(2025, 1, 1, tzinfo=UTC)}
TIED = {"KernelsCompared": {"speedup": 1.0}}  # a comparison without a speedup is one with an error


def _value(annotation, spec: KernelSpec):
    """The least value of a field's type: None where it may be, empty collections, one of each plain type."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        return None if type(None) in args else _value(args[0], spec)
    if origin is tuple:
        return tuple(_value(a, spec) for a in args)
    if origin in (list, dict):
        return origin()
    if annotation is KernelSpec:
        return spec
    if annotation is CandidateSpec:
        return CandidateSpec(source=spec.source)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _minimal(annotation, spec)
    return uuid4() if annotation.__name__ == "UUID" else PLAIN[annotation]


def _minimal(cls: type[BaseModel], spec: KernelSpec, **fields):
    required = {name: _value(f.annotation, spec) for name, f in cls.model_fields.items() if f.is_required()}
    return cls(**{**required, **fields})


@pytest.mark.parametrize("event_type", EVENTS.types.values(), ids=lambda t: t.__name__)
def test_every_event_type_has_a_description(event_type, vector_add_spec):
    event = _minimal(event_type, vector_add_spec, stream_id="job-1", **TIED.get(event_type.__name__, {}))
    assert describe(event).strip()
