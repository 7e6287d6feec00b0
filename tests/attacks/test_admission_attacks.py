"""Admission attacks on the real gateway (HTTP over a PostgreSQL store), the CLI and the Python API: each
is refused within a small time bound, naming the field, and the gateway still answers afterwards."""
import math
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import kforge
from kforge.api import optimise
from kforge.cli import app as cli_app
from kforge.specfile import SpecError, load_spec
from services.gateway.app import create_app
from shared.adapters.eventstore import EventStore
from shared.adapters.settings import Settings
from shared.application.runtime import Runtime
from shared.domain.spec import KernelSpec
from tests.conftest import record_attack
from tests.fakes import RecordingBus
from tests.report_streams import tune_job

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BOUND_S = 2.0  # every refusal is answered within this, where the attacks took from 10 s to forever


@pytest.fixture
def rt(tmp_path, postgres_url):
    rt = Runtime(settings=Settings(KFORGE_HOME=tmp_path, REDIS_URL=None, DATABASE_URL=None),
                 store=EventStore(postgres_url), bus=RecordingBus())
    yield rt
    rt.store.close()


@pytest.fixture
def client(rt):
    with TestClient(create_app(lambda: rt)) as client:
        yield client


@pytest.fixture
def body() -> dict:
    return load_spec(EXAMPLES / "vector_add.cu", EXAMPLES / "vector_add.yaml").model_dump(mode="json")


def refused(client, body: dict | str, field: str) -> str:
    """Submit `body`; assert a 422 naming `field` within BOUND_S, nothing recorded, the gateway still up."""
    started = time.perf_counter()
    if isinstance(body, str):
        response = client.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
    else:
        response = client.post("/v1/jobs", json=body)
    took = time.perf_counter() - started
    assert response.status_code == 422, response.text
    errors = response.json()["errors"]
    assert any(e["field"] == field or e["field"].startswith((field + ".", field + "[")) for e in errors), errors
    assert took < BOUND_S, took
    assert client.get("/v1/jobs").json() == []
    return f"422 naming {field} in {took * 1000:.0f} ms; nothing recorded; gateway answers"


def tuned(body: dict, **changes) -> dict:
    return {**body, **changes}


# --- arithmetic bombs ----------------------------------------------------------------------------------
@pytest.mark.parametrize("field, bomb", [
    ("args[0].shape", "(((9**64)**64)**64)**64"), ("args[3].value", "9 ** 9 ** 9"),
    ("grid_div_x", "block_size_x ** 9 ** 9"), ("work.bytes", "(10**64)**64"), ("work.flops", "2 * n ** 9"),
    ("restrictions[0]", "9 ** 9 ** 9 > block_size_x"), ("restrictions[0]", "2 ** block_size_x > 0"),
    ("problem_size", "n ** n"),
])
def test_arithmetic_bombs_are_refused(client, body, field, bomb):
    args = [dict(a) for a in body["args"]]
    changes = {"args[0].shape": lambda: args[0].update(shape=[bomb]), "args[3].value": lambda: args[3].update(value=bomb),
               "grid_div_x": lambda: body.update(grid_div_x=[bomb]), "work.bytes": lambda: body.update(work={"bytes": bomb}),
               "work.flops": lambda: body.update(work={"flops": bomb}),
               "restrictions[0]": lambda: body.update(restrictions=[bomb]),
               "problem_size": lambda: body.update(problem_size=[bomb])}
    changes[field]()
    held = refused(client, {**body, "args": args}, field)
    record_attack("arithmetic bomb", f"{field}: {bomb}", held)


def test_a_hundred_thousand_term_expression_is_refused(client, body):
    held = refused(client, tuned(body, work={"bytes": "+".join(["n"] * 100_000)}), "work.bytes")
    record_attack("100k-term expression", "work.bytes: n+n+...+n (100,000 terms)", held)


# --- huge spaces, sizes and timeouts ---------------------------------------------------------------------
def test_a_huge_search_space_is_refused(client, body):
    space = {f"p{i}": list(range(10)) for i in range(7)}
    held = refused(client, tuned(body, tune_params={**space, "block_size_x": [64, 128]}), "tune_params")
    record_attack("huge search space", "7 tune params x 10 values (20M configurations)", held)


def test_a_huge_size_is_refused(client, body):
    held = refused(client, tuned(body, sizes={"n": 2 ** 62}), "sizes.n")
    record_attack("huge size", "sizes: {n: 2**62} (prime search, arrays)", held)


def test_huge_arrays_are_refused(client, body):
    big = tuned(body, sizes={"n": 2 ** 30}, args=[{**a, "shape": ["n", 64]} if a.get("shape") else a
                                                  for a in body["args"]])
    held = refused(client, big, "args")
    record_attack("huge arrays", "3 float32 arrays of n x 64 = 2**36 elements (768 GiB)", held)


@pytest.mark.parametrize("field, change", [
    ("benchmark.timeout_s", lambda b: {"benchmark": {**b["benchmark"], "timeout_s": 86400 * 365}}),
    ("verify.timeout_s", lambda b: {"verify": {**b["verify"], "timeout_s": 86400 * 365}}),
    ("benchmark.search.time_limit_s",
     lambda b: {"benchmark": {**b["benchmark"], "search": {**b["benchmark"]["search"], "time_limit_s": 1e12}}}),
])
def test_huge_timeouts_are_refused(client, body, field, change):
    held = refused(client, {**body, **change(body)}, field)
    record_attack("huge timeout", f"{field}: a year or more", held)


# --- NaN and Infinity in every float field ---------------------------------------------------------------
FLOAT_FIELDS = ["benchmark.timeout_s", "benchmark.ci_target", "benchmark.abandon_factor", "benchmark.atol",
                "benchmark.rtol", "benchmark.search.time_limit_s", "verify.timeout_s", "verify.atol", "verify.rtol",
                "strategy.target_speedup", "strategy.min_improvement", "strategy.reference_ms",
                "generator.temperature", "args.3.value", "params.block_size_x", "tune_params.block_size_x.0",
                "benchmark.search.options.T", "strategy.options.weight"]


def _json_with(body: dict, path: str, literal: str) -> str:
    """The body as JSON text with `literal` (1e999, NaN, Infinity) at `path`, as a client can send it."""
    import json

    marker = "__NON_FINITE__"
    node = body = json.loads(json.dumps(body))
    *parents, last = path.split(".")
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    if last.isdigit():
        node[int(last)] = marker
    else:
        node[last] = marker
    return json.dumps(body).replace(f'"{marker}"', literal)


@pytest.mark.parametrize("literal", ["1e999", "NaN", "-Infinity"])
@pytest.mark.parametrize("path", FLOAT_FIELDS)
def test_non_finite_floats_are_refused_everywhere(client, body, path, literal):
    field = ".".join(f"[{p}]" if p.isdigit() else p for p in path.split(".")).replace(".[", "[")
    field = field.removesuffix("[0]")  # a list item is reported under its list
    held = refused(client, _json_with(body, path, literal), field)
    if path == FLOAT_FIELDS[0] or literal == "1e999":
        record_attack("non-finite float", f"{path}: {literal}", held)


def test_non_finite_floats_in_a_candidate_are_refused(client, body):
    candidate = {"source": body["source"], "params": {"block_size_x": "__X__"}}
    text = _json_with(tuned(body, strategy={"name": "verify", "candidate": candidate}), "verify.atol", "0")
    held = refused(client, text.replace('"__X__"', "1e999"), "strategy.candidate.params")
    record_attack("non-finite float", "strategy.candidate.params.block_size_x: 1e999", held)


# --- identifiers -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("field, change", [
    ("kernel_name", lambda b: {"kernel_name": "vector_add\n"}),
    ("args[0].name", lambda b: {"args": [{**b["args"][0], "name": "c\n"}, *b["args"][1:]]}),
    ("sizes", lambda b: {"sizes": {"n\n": 1024}}),
    ("tune_params", lambda b: {"tune_params": {"block_size_x\n": [64]}}),
    ("params", lambda b: {"params": {"block_size_x\n": 64}}),
    ("block_size_names", lambda b: {"block_size_names": ["block_size_x\n"]}),
    ("strategy.name", lambda b: {"strategy": {"name": "tune\n"}}),
    ("benchmark.arch", lambda b: {"benchmark": {"arch": "sm_90\n"}}),
])
def test_identifiers_with_a_trailing_newline_are_refused(client, body, field, change):
    held = refused(client, {**body, **change(body)}, field)
    record_attack("trailing newline in an identifier", f"{field} ending in \\n", held)


# --- the same limits from the CLI and the Python API ------------------------------------------------------
@pytest.fixture
def embedded(tmp_path, monkeypatch):
    monkeypatch.setenv("KFORGE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    return tmp_path


def test_the_cli_and_python_api_refuse_the_same_limits(embedded, body):
    spec = embedded / "bomb.yaml"
    spec.write_text((EXAMPLES / "vector_add.yaml").read_text().replace("sizes: {n: 67108864}", "sizes: {n: 4611686018427387904}"))
    started = time.perf_counter()
    result = CliRunner().invoke(cli_app, ["tune", str(EXAMPLES / "vector_add.cu"), "--spec", str(spec)])
    assert result.exit_code == 2 and "sizes.n" in result.output and "KFORGE_MAX_SIZE" in result.output, result.output
    with pytest.raises(kforge.KforgeError, match="work.bytes"):
        optimise(KernelSpec.model_validate({**body, "work": {"bytes": "n ** n"}}))
    took = time.perf_counter() - started
    assert took < 2 * BOUND_S
    record_attack("huge size / bomb via CLI and Python API", "sizes.n = 2**62; work.bytes n ** n",
                  f"CLI exit 2 naming sizes.n, KforgeError naming work.bytes, {took * 1000:.0f} ms")


def test_a_yaml_alias_bomb_is_refused_without_expanding(tmp_path):
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
              f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]"
              for i in range(8)]
    spec = tmp_path / "bomb.yaml"
    spec.write_text("\n".join(lines) + "\nkernel_name: *i\n")
    started = time.perf_counter()
    with pytest.raises(SpecError) as info:
        load_spec(EXAMPLES / "vector_add.cu", spec)
    took = time.perf_counter() - started
    assert "alias *a at line 2" in str(info.value) and len(str(info.value)) < 500
    assert took < BOUND_S
    record_attack("YAML alias bomb", "9 levels of 10 aliases (10**9 strings) in a spec file",
                  f"SpecError naming the first alias in {took * 1000:.0f} ms, nothing expanded")


# --- stored specs from before the bounds: the reports degrade, never 500 ---------------------------------
def test_reports_over_a_stored_bomb_degrade_instead_of_failing(client, rt, vector_add_spec):
    bomb = KernelSpec.model_validate({**vector_add_spec.model_dump(), "work": {"bytes": "(10**64)**64"}})
    events = tune_job(vector_add_spec, "bomb1")  # measured as the example; stored with the bomb, as before the bounds
    events[0] = events[0].model_copy(update={"spec": bomb})
    rt.store.append(events[0].stream_id, [e.model_copy(update={"stream_version": None, "position": None})
                                          for e in events], expected_version=0)
    slowest = 0.0
    for url in ("/v1/slow", "/v1/jobs/bomb1/suggestions", "/v1/jobs/bomb1/tracker",
                "/v1/compare?baseline=bomb1&current=bomb1"):
        started = time.perf_counter()
        response = client.get(url)
        slowest = max(slowest, time.perf_counter() - started)
        assert response.status_code == 200, (url, response.text)
    assert slowest < 5 * BOUND_S  # a first report imports scipy; the attack made them 500, not slow
    slow = client.get("/v1/slow", params={"threshold": 1000}).json()
    assert slow[0]["baseline"]["gbps"] is None and slow[0]["baseline"]["median_ms"] > 0
    took = slowest
    record_attack("stored work.bytes bomb (before the bounds)", "work.bytes (10**64)**64 in a stored job",
                  f"/v1/slow, /v1/compare, suggestions, tracker answer 200 without the figure, {took * 1000:.0f} ms")


def test_the_bounds_hold_where_a_limit_is_raised(client, body, rt):
    assert math.prod(len(v) for v in body["tune_params"].values()) <= rt.settings.max_search_space
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 202, response.text  # the example itself is admitted
