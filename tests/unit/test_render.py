"""Every kind of event reads as a line in a terminal (`kforge events`, the progress of `kforge tune`)."""
import types
from datetime import UTC, datetime
from typing import Union, get_args, get_origin
from uuid import uuid4

import pytest
from pydantic import BaseModel

from kforge.render import describe
from shared.domain.events import EVENTS
from shared.domain.spec import CandidateSpec, KernelSpec

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


def test_a_tolerance_the_references_spread_widened_is_shown_and_a_default_one_is_not():
    from shared.domain.events import BaselineMeasured, CandidateVerified, Tolerance, TrialPassed

    default = Tolerance(output="c", atol=1e-4, rtol=1e-4, reason="the float32 default: the reference repeats itself "
                                                                 "exactly")
    widened = [Tolerance(output="total", atol=atol, rtol=9.8e-4, spread=atol / 4,
                         reason=f"the reference differs from itself by up to {atol / 4:g} over 3 runs: atol 4 x that")
               for atol in (3.0, 4.0)]
    common = dict(stream_id="job-1", request_id=uuid4(), device="H100", params={}, grid=(1, 1, 1), block=(1, 1, 1),
                  samples_ms=[0.5], median_ms=0.5)
    assert describe(BaselineMeasured(**common, tolerances=[default])) == "0.5000 ms median of 1 on H100"
    assert describe(BaselineMeasured(**common, tolerances=widened[:1])) == (
        "0.5000 ms median of 1 on H100; total within atol 3 + rtol 0.00098 x |ref|, as the reference differs from "
        "itself by up to 0.75 over 3 runs: atol 4 x that")
    trials = [TrialPassed(label=f"t{i}", sizes={"n": 4}, seed=i, max_abs_error=0.5, max_rel_error=0.0,
                          tolerances=[t]) for i, t in enumerate(widened)]
    verified = CandidateVerified(stream_id="job-1", request_id=uuid4(), candidate_id="c", device="H100",
                                 trials=trials, max_abs_error=0.5, max_rel_error=0.0)
    assert describe(verified).endswith("; total within atol 4 + rtol 0.00098 x |ref|, as the reference differs from "
                                       "itself by up to 1 over 3 runs: atol 4 x that")  # the widest of its trials


LOG = "kernel.cu(4): error: expected a \";\"\n      a[i] = b[i+1];\n"


def test_a_compilers_log_and_reason_are_printed_verbatim_by_tune():
    from rich.console import Console

    from kforge import cli
    from shared.domain.events import CandidateRejected

    console = Console(width=80, record=True, highlight=False)
    cli._Follower(console, verbose=False).show(CandidateRejected(
        stream_id="job-1", stream_version=7, request_id=uuid4(), candidate_id="c", check="compile",
        reason="a[i] = b[i+1]; does not compile", log=LOG))
    printed = console.export_text()
    assert "compile: a[i] = b[i+1]; does not compile" in printed
    assert "a[i] = b[i+1];" in printed.split("NVRTC log")[1]


def test_show_lists_a_jobs_facts_verbatim_within_80_columns():
    from rich.console import Console

    from kforge.render import job_facts
    from shared.domain.projections import JobView

    console = Console(width=80, record=True)
    console.print(job_facts(JobView(job_id="0dac12345678", status="failed", failed_stage="compile",
                                    failure="a[i] = b[i+1]; [bold]x[/bold]")))
    text = console.export_text()
    lines = text.splitlines()
    assert [line.split()[:2] for line in lines[:2]] == [["job", "0dac12345678"], ["kernel", "?"]]
    assert "compile: a[i] = b[i+1]; [bold]x[/bold]" in text
    assert all(len(line) <= 80 for line in lines)


def test_jobs_table_keeps_full_ids_within_80_columns_and_adds_columns_when_wide():
    from rich.console import Console

    from kforge.render import WIDE_JOBS, jobs_table
    from shared.domain.projections import JobView

    jobs = [JobView(job_id=f"{i:012x}", run="a-long-run-name-of-nightly-builds", status="benchmarking",
                    device="NVIDIA H100 80GB HBM3", replay=True, baseline_ms=0.2994) for i in range(3)]
    for width in (80, WIDE_JOBS):
        console = Console(width=width, record=True)
        console.print(jobs_table(jobs, width))
        text = console.export_text()
        assert all(len(line) <= width for line in text.splitlines())
        assert all(job.job_id in text for job in jobs)
        assert ("0.2994" in text and "H100" in text) == (width == WIDE_JOBS)
