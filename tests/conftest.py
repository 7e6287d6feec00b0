"""Fixtures shared by every test: real databases and brokers on loopback, and the GPU gate."""
import io
import os
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

POSTGRES_ADMIN_URL = os.environ.get("KFORGE_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REDIS_TEST_URL = os.environ.get("KFORGE_TEST_REDIS", "redis://127.0.0.1:6379/14")
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
# The gateway answers only the Host names it is told; TestClient and Schemathesis send `testserver`.
os.environ.setdefault("KFORGE_ALLOWED_HOSTS", "testserver,localhost,127.0.0.1,[::1]")


def _has_gpu() -> bool:
    from shared.adapters.device.probe import NoCudaDevice, probe

    try:
        probe(0)
        return True
    except NoCudaDevice:
        return False


HAS_GPU = _has_gpu()


# The tests that start servers, workers and brokers, or use PostgreSQL and Redis, are marked `services`: `make test`
# runs them one after another once the others are done, not on pytest-xdist's workers, as they share Redis's test
# database and its queues, which each flushes, and time workers that a busy machine would starve (a job followed
# for 60 s did not end while NVRTC compiled beside it).
SERVICES = {Path(__file__).parent / "integration", Path(__file__).parent / "attacks"}
SERVICE_FIXTURES = {"postgres_url", "store_url", "redis_url"}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the marks added here
def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA device: run on the GPU machine")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip)
        if SERVICES & set(item.path.parents) or SERVICE_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.services)


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'events.db'}"


@pytest.fixture
def postgres_url():
    """A fresh PostgreSQL database per test, dropped afterwards."""
    name = f"kforge_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    yield url
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request) -> str:
    """Parametrises a test over both databases the event store supports."""
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture
def redis_url() -> str:
    import redis

    client = redis.Redis.from_url(REDIS_TEST_URL)
    client.flushdb()
    yield REDIS_TEST_URL
    client.flushdb()
    client.close()


@pytest.fixture
def vector_add_spec():
    """The vector_add example as a baseline job (the example itself tunes)."""
    from kforge.specfile import load_spec

    spec = load_spec(EXAMPLES / "vector_add.cu", EXAMPLES / "vector_add.yaml")
    return spec.model_validate({**spec.model_dump(), "strategy": {"name": "baseline"}})


@pytest.fixture(scope="session")
def compile_pool():
    """One warm pool of spawned NVRTC processes for the whole run, as a benchmark worker keeps one."""
    from services.benchmark.compile_pool import CompilePool

    with CompilePool(workers=2) as pool:
        yield pool


@pytest.fixture
def sweep_spec(vector_add_spec):
    """vector_add tuned over block sizes 32..1024 in steps of 32 (Kernel Tuner's classic sweep) at a small n."""
    return vector_add_spec.model_validate({
        **vector_add_spec.model_dump(), "sizes": {"n": 1 << 20}, "strategy": {"name": "tune"},
        "tune_params": {"block_size_x": list(range(32, 1025, 32))},
        "benchmark": {**vector_add_spec.benchmark.model_dump(), "timeout_s": 3}})


@pytest.fixture
def store(sqlite_url):
    """A real SQLite event store in the test's own folder."""
    from shared.adapters.eventstore import EventStore

    store = EventStore(sqlite_url)
    yield store
    store.close()


# --- the fault and attack tables: each such test records what it tried and what held, printed after the run ---
# Under pytest-xdist a test runs in a worker process, so a row travels to the terminal in its test's report: it
# waits in _PENDING until the report is made, rides in the report's user_properties, and is tabled where the report
# is logged, which is the one process that prints.
TABLES = {"fault": "faults tried on real Redis, PostgreSQL and worker processes",
          "attack": "attacks tried on this machine's gateway, workers and compiler",
          "cheat": "cheating rewrites served as the model's answer to one_prompt jobs"}
_PENDING: list[tuple[str, tuple[str, str, str]]] = []
_ROWS: dict[str, list[tuple[str, str, str]]] = {kind: [] for kind in TABLES}


def record_fault(fault: str, tried: str, held: str) -> None:
    _PENDING.append(("fault", (fault, tried, held)))


def record_attack(attack: str, tried: str, held: str) -> None:
    """One row of the attack table (tests/attacks): the attack, what was sent, and what held."""
    _PENDING.append(("attack", (attack, tried, held)))


def record_cheat(cheat: str, tried: str, held: str) -> None:
    """One row of the cheat table (tests/gpu/test_cheat_catalogue.py): the answer, its family and expected
    catch, and how its job ended."""
    _PENDING.append(("cheat", (cheat, tried, held)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.user_properties.extend(("kforge_table_row", [kind, *row]) for kind, row in _PENDING)
    _PENDING.clear()


def pytest_runtest_logreport(report):
    for name, value in report.user_properties:
        if name == "kforge_table_row":
            _ROWS[value[0]].append(tuple(value[1:]))


def pytest_terminal_summary(terminalreporter):
    for kind, title in TABLES.items():
        if _ROWS[kind]:
            terminalreporter.write(_table(_ROWS[kind], title, kind))


def _table(rows: list[tuple[str, str, str]], title: str, first: str) -> str:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in (first, "what was tried", "what held"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    console = Console(file=io.StringIO(), width=140, emoji=False, markup=False)
    console.print(table)
    return console.file.getvalue()
