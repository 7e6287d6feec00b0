"""The web pages in headless Chromium, against the real app served by uvicorn over a real embedded runtime:
the job list, the job page's figures and plots, live progress from events appended while the page is open,
cancelling, asking for the API key when the server has keys, and the API's docs. The browser reaches nothing
but the server: every page must work with no network. Screenshots go to each test's tmp dir, their paths
printed."""
import re
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import uvicorn
from playwright.sync_api import Page, expect, sync_playwright

from services.gateway.app import create_app
from shared.adapters.eventstore import EventStore
from shared.adapters.settings import Settings
from shared.application import runtime
from shared.domain.events import Event
from tests.report_streams import JobStream, grid_tune_job, rewrite_job, spec_with, tune_job

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip(f"the web page tests drive Debian's Chromium, and {CHROMIUM} is missing", allow_module_level=True)


CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
LOOPBACK = {"127.0.0.1", "localhost"}
expect.set_options(timeout=10_000)


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def serve(tmp_path):
    """Starts the gateway over a fresh embedded runtime with these API keys; returns its runtime and address."""
    started = []

    def start(api_keys: str = "", admin_api_keys: str = ""):
        rt = runtime.build(Settings(KFORGE_HOME=tmp_path, REDIS_URL=None, DATABASE_URL=None, KFORGE_API_KEYS=api_keys,
                                    KFORGE_ADMIN_API_KEYS=admin_api_keys))
        runtime.install(rt)  # the in-process tasks a cancel sets off read the runtime from here
        server = _Server(create_app(lambda: rt))
        started.append((rt, server))
        return rt, server.start()

    yield start
    for rt, server in started:
        server.stop()
        rt.store.close()
    runtime.install(None)


@pytest.fixture
def page(browser) -> Iterator[Page]:
    """A fresh browser profile per test (no stored API key) with no network but the server's: a request
    elsewhere (a CDN's script, a web font) is refused and fails the test, as does an uncaught script error."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, timezone_id="UTC")
    elsewhere = []

    def loopback_only(route):
        if urlsplit(route.request.url).hostname in LOOPBACK:
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort("internetdisconnected")

    context.route("**/*", loopback_only)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(error))
    yield page
    context.close()
    assert not errors, f"the page threw: {errors}"
    assert not elsewhere, f"the page asked for more than the server: {elsewhere}"


@pytest.fixture
def screenshot(page, tmp_path, capsys):
    """Saves the page as it looks under the test's tmp dir and prints where, even with output captured."""

    def take(name: str) -> Path:
        path = tmp_path / f"{name}.png"
        page.screenshot(path=path, full_page=True)
        with capsys.disabled():
            print(f"\nscreenshot: {path}")
        return path

    return take


class _Server(uvicorn.Server):
    """uvicorn in a thread on a free loopback port."""

    def __init__(self, app):
        # A streaming response of an unfinished job never ends by itself: shutdown cuts it after a second.
        super().__init__(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1))
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.thread = threading.Thread(target=self.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def start(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        return f"http://127.0.0.1:{self.socket.getsockname()[1]}"

    def stop(self) -> None:
        self.should_exit = True
        self.thread.join(10)
        self.socket.close()


def _append(store: EventStore, events: list[Event]) -> None:
    """Stores events a JobStream built, numbered by the store as a worker's appends would be."""
    stream = events[0].stream_id
    store.append(stream, [e.model_copy(update={"stream_version": None, "position": None}) for e in events],
                 expected_version=len(store.read_stream(stream)))


def _finished_jobs(store: EventStore, spec) -> None:
    _append(store, tune_job(spec, "aaaa1", run="nightly"))
    _append(store, rewrite_job(spec, "cccc3"))


def _live_job(store: EventStore, spec, job_id: str = "live1") -> JobStream:
    """A tuning job that has just been submitted; the test adds the rest while the page watches."""
    job = JobStream(job_id, spec_with(spec, strategy={"name": "tune"}, tune_params={"block_size_x": [128, 256]}),
                    start=datetime.now(UTC))
    _append(store, job.events)
    return job


def test_job_list_shows_jobs_and_links_to_their_pages(serve, page, vector_add_spec):
    rt, url = serve()
    _finished_jobs(rt.store, vector_add_spec)

    page.goto(url + "/")

    rows = page.locator("#jobs tbody tr")
    expect(rows).to_have_count(2)
    # newest first, with the figures of GET /v1/jobs
    expect(rows.nth(0).locator("td").first).to_have_text("cccc3")
    expect(rows.nth(1).locator("td")).to_have_text(
        ["aaaa1", "vector_add", "tune", "nightly", "completed", "1.0000", "0.8000", "1.25×", "2026-11-01 09:00:01"])
    expect(page.locator("#empty")).to_be_hidden()
    # a job submitted meanwhile appears at the next refresh
    _live_job(rt.store, vector_add_spec)
    expect(rows).to_have_count(3)
    expect(rows.nth(0).locator(".badge")).to_have_text("submitted")

    rows.nth(1).get_by_role("link", name="cccc3").click()

    expect(page).to_have_url(url + "/jobs/cccc3")
    expect(page.locator("#job-id")).to_have_text("cccc3")
    expect(page.locator("#status")).to_have_text("completed")
    # the pages are no part of the API's schema
    assert {"/", "/jobs/{job_id}"}.isdisjoint(httpx.get(url + "/openapi.json").json()["paths"])


def test_job_page_shows_figures_both_plots_and_the_whole_history(serve, page, screenshot, vector_add_spec):
    rt, url = serve()
    _finished_jobs(rt.store, vector_add_spec)

    page.goto(url + "/jobs/cccc3")

    expect(page.locator("#status")).to_have_text("completed")
    expect(page.locator("#cancel")).to_be_hidden()
    summary = page.locator("#summary")
    for fact in ("vector_add", "explicit", "NVIDIA H100 80GB HBM3", "1.0000", "done"):
        expect(summary).to_contain_text(fact)
    log = page.locator("#log li")
    expect(log).to_have_count(len(rewrite_job(vector_add_spec, "cccc3")) + 1)  # every event, then the end
    expect(log.last).to_have_text(re.compile("job completed"))
    expect(page.locator("#log")).to_contain_text("StepAccepted")
    # every step with its speedup and the interval it was kept on, and why the others were not kept
    steps = page.locator("#steps tbody tr")
    expect(steps).to_have_count(2)
    expect(steps.nth(0).locator("td")).to_have_text(
        ["elements_per_thread", "accepted", "1.0000", "0.5000", "2.000× [1.960, 2.040]", ""])
    expect(steps.nth(1)).to_contain_text("slower than the best so far (step elements_per_thread): 0.962x")
    expect(page.locator("#no-steps")).to_be_hidden()
    assert 'id="steps"' in _expect_svg_plot(page, "history")  # a bar per step tried
    assert _panels(_expect_svg_plot(page, "landscape")) == ["block_size_x", "elements_per_thread"]
    screenshot("rewriting-job-page")


def test_job_page_of_a_search_shows_it_converging_and_its_landscape(serve, page, screenshot, vector_add_spec):
    rt, url = serve()
    _append(rt.store, grid_tune_job(vector_add_spec, "grid1"))

    page.goto(url + "/jobs/grid1")

    expect(page.locator("#status")).to_have_text("completed")
    history = _expect_svg_plot(page, "history")
    assert 'id="convergence"' in history and "best so far: 0.6860 ms from configuration 13" in history
    landscape = _expect_svg_plot(page, "landscape")
    assert _panels(landscape) == ["block_size_x", "elements_per_thread", "unroll"] and 'id="heatmap"' in landscape
    for plot in ("history", "landscape"):  # drawn at a readable size, not squeezed
        assert page.locator(f"#{plot}").bounding_box()["width"] >= 440
    screenshot("search-job-page")


def test_api_docs_render_with_no_network(serve, page, screenshot):
    _, url = serve()

    page.goto(f"{url}/docs")

    # Swagger UI, from files the server itself serves, lists every operation: the plots' among them
    expect(page.get_by_text("Submit a CUDA kernel; get back a faster")).to_be_visible()
    paths = page.locator(".opblock-summary-path")
    expect(paths.filter(has_text="/v1/jobs/{job_id}/plots/{plot}.svg")).to_be_visible()
    operations = [op for methods in httpx.get(url + "/openapi.json").json()["paths"].values() for op in methods]
    expect(paths).to_have_count(len(operations))
    screenshot("api-docs")


def test_job_page_of_an_unknown_job_says_so(serve, page):
    _, url = serve()

    page.goto(url + "/jobs/nope")

    expect(page.locator("#error")).to_have_text("Could not read job nope: 404: no job nope")
    expect(page.locator("#status")).to_have_text("unknown")


def test_live_progress_follows_events_until_the_job_ends(serve, page, vector_add_spec):
    rt, url = serve()
    job = _live_job(rt.store, vector_add_spec)

    page.goto(url + "/jobs/live1")

    expect(page.locator("#status")).to_have_text("submitted")
    expect(page.locator("#cancel")).to_be_visible()
    expect(page.locator("#live")).to_be_visible()
    log = page.locator("#log")
    expect(log.locator("li")).to_have_count(1)
    _expect_svg_plot(page, "landscape")
    first_plot = page.locator("#landscape").get_attribute("src")

    seen = len(job.events)
    job.baseline([1.0, 1.02, 0.99])
    _append(rt.store, job.events[seen:])

    expect(log).to_contain_text("BaselineMeasured")
    expect(log).to_contain_text("median ms 1")
    expect(page.locator("#status")).to_have_text("benchmarking")
    expect(page.locator("#summary")).to_contain_text("NVIDIA H100 80GB HBM3")

    seen = len(job.events)
    job.tune("submitted", {128: [1.2, 1.2, 1.2], 256: [0.8, 0.81, 0.79]}, baseline_ms=1.0)
    job.complete("block_size_x=256 is 1.25x faster")
    _append(rt.store, job.events[seen:])

    expect(page.locator("#status")).to_have_text("completed")
    expect(log.locator("li")).to_have_count(len(job.events) + 1)
    expect(log.locator("li").last).to_have_text(re.compile("job completed"))  # the stream's `end` arrived
    expect(page.locator("#live")).to_be_hidden()
    expect(page.locator("#cancel")).to_be_hidden()
    expect(page.locator("#summary")).to_contain_text("1.25x faster")
    # the end redraws the plots with the tuning that happened meanwhile
    expect(page.locator("#landscape")).not_to_have_attribute("src", first_plot)
    _expect_svg_plot(page, "landscape")


def test_cancel_button_cancels_an_unfinished_job(serve, page, vector_add_spec):
    rt, url = serve()
    _live_job(rt.store, vector_add_spec)
    page.goto(url + "/jobs/live1")
    expect(page.locator("#status")).to_have_text("submitted")

    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("#cancel").click()

    expect(page.locator("#status")).to_have_text("cancelled")
    expect(page.locator("#cancel")).to_be_hidden()
    expect(page.locator("#log")).to_contain_text("JobCancelled")
    expect(page.locator("#log li").last).to_have_text(re.compile("job cancelled"))
    expect(page.locator("#summary")).to_contain_text("cancelled from the web page")


def test_asks_for_the_api_key_when_the_server_has_keys(serve, page, vector_add_spec):
    rt, url = serve(api_keys="key-one", admin_api_keys="key-two")  # an admin key sees the local tenant's jobs
    _finished_jobs(rt.store, vector_add_spec)

    page.goto(url + "/")

    form = page.locator("form.key-form")
    expect(form).to_contain_text("needs an API key")
    expect(page.locator("#jobs tbody tr")).to_have_count(0)
    form.locator("input").fill("wrong")
    form.locator("input").press("Enter")
    expect(form).to_contain_text("refused that API key")
    form.locator("input").fill("key-two")
    form.get_by_role("button", name="Use key").click()

    expect(page.locator("#jobs tbody tr")).to_have_count(2)
    expect(form).to_have_count(0)
    # the key is kept: the job page's calls, plots and stream included, need no asking again
    page.get_by_role("link", name="cccc3").click()
    expect(page.locator("#log li").last).to_have_text(re.compile("job completed"))
    _expect_svg_plot(page, "history")
    expect(page.locator("form.key-form")).to_have_count(0)


def _expect_svg_plot(page: Page, plot: str) -> str:
    """The plot is an image that loaded, made from the SVG that the API served; returns that SVG."""
    img = page.locator(f"#{plot}")
    expect(img).to_have_attribute("src", re.compile("^blob:"))
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=img.element_handle())
    blob = img.evaluate("async img => { const b = await (await fetch(img.src)).blob(); "
                        "return {type: b.type, text: await b.text()}; }")
    assert blob["type"] == "image/svg+xml" and "<svg" in blob["text"]
    return blob["text"]


def _panels(svg: str) -> list[str]:
    """The landscape's panels, one per tune parameter, by the ids of their groups."""
    return re.findall(r'<g id="panel-(\w+)">', svg)

