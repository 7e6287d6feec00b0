"""ClaudeProvider through the real Anthropic SDK against a scripted Messages API on loopback: what is sent,
what comes back, and how each way a call can fail becomes a recorded reason (no network, no real sleeping)."""
import pytest

from services.generator import answers
from services.generator.answers import MalformedAnswer
from services.generator.providers.base import Prompt, ProviderFailed
from services.generator.providers.claude import NOT_MESSAGES, ClaudeProvider, estimate_cost
from shared.adapters.settings import Settings
from shared.domain.spec import GeneratorSpec
from tests.messages_api import MessagesAPI, messages_api  # noqa: F401 (the fixture)

KEY = "sk-ant-test-0123"
MODEL = "claude-sonnet-4-6"  # not one the SDK warns is deprecated
SYSTEM = "You optimise CUDA kernels. Answer with a ```cuda block and a ```json block."

REWRITE = """Each thread now handles two elements, which halves the grid.

```cuda
extern "C" __global__ void vector_add(float *c, const float *a, const float *b, int n) {
    int i = (blockIdx.x * block_size_x + threadIdx.x) * 2;
    if (i < n) c[i] = a[i] + b[i];
    if (i + 1 < n) c[i + 1] = a[i + 1] + b[i + 1];
}
```

```json
{"tune_params": {"block_size_x": [128, 256, 512]}, "grid_div_x": ["block_size_x", 2]}
```
"""


@pytest.fixture
def prompt(vector_add_spec) -> Prompt:
    return Prompt(kind="rewrite", system=SYSTEM,
                  text=f"Rewrite this kernel so each thread handles two elements:\n\n{vector_add_spec.source}",
                  spec=vector_add_spec, current=vector_add_spec.as_candidate())


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def providers():
    """Every provider a test builds, closed afterwards so no pooled connection outlives the test."""
    made: list[ClaudeProvider] = []
    yield made
    for provider in made:
        provider.close()


@pytest.fixture
def make(messages_api, sleeps, providers):
    """A provider aimed at the local server, recording its waits instead of sleeping."""
    def make(**overrides) -> ClaudeProvider:
        kwargs = dict(api_key=KEY, base_url=messages_api.url, model=MODEL, max_tokens=4096, temperature=None,
                      max_retries=3, timeout_s=5.0, sleep=sleeps.append)
        providers.append(ClaudeProvider(**{**kwargs, **overrides}))
        return providers[-1]
    return make


def sent_key(headers: dict[str, str]) -> str | None:
    # SDK 2.12 sends the key as "Authorization: Bearer <key>"; earlier versions sent it as x-api-key.
    if "x-api-key" in headers:
        return headers["x-api-key"]
    auth = headers.get("authorization", "")
    return auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None


# --- a good answer ------------------------------------------------------------------------------------------
def test_good_answer_parses_and_reports_tokens_cost_and_model(messages_api, make, prompt, sleeps):
    messages_api.answer(REWRITE, model="claude-sonnet-4-5-20250929", input_tokens=1200, output_tokens=400)

    answer = make().complete(prompt)

    assert answer.text == REWRITE
    assert answer.model == "claude-sonnet-4-5-20250929"
    assert (answer.input_tokens, answer.output_tokens) == (1200, 400)
    assert answer.cost_usd == pytest.approx((1200 * 3 + 400 * 15) / 1e6)
    assert answer.attempts == () and sleeps == []
    rewrite = answers.parse("rewrite", answer.text)
    assert "(blockIdx.x * block_size_x + threadIdx.x) * 2" in rewrite.source
    assert rewrite.settings == {"tune_params": {"block_size_x": [128, 256, 512]}, "grid_div_x": ["block_size_x", 2]}


def test_request_carries_prompt_model_max_tokens_and_key_without_temperature(messages_api, make, prompt):
    messages_api.answer(REWRITE)

    make().complete(prompt)

    [request] = messages_api.requests
    assert request.path == "/v1/messages"
    assert request.body["model"] == MODEL
    assert request.body["max_tokens"] == 4096
    assert request.body["system"] == SYSTEM
    assert request.body["messages"] == [{"role": "user", "content": prompt.text}]
    assert "__global__ void vector_add" in request.body["messages"][0]["content"]
    assert "temperature" not in request.body
    assert sent_key(request.headers) == KEY


def test_temperature_is_sent_when_set(messages_api, make, prompt):
    messages_api.answer(REWRITE)

    make(temperature=0.2).complete(prompt)

    assert messages_api.requests[0].body["temperature"] == 0.2


def test_from_settings_takes_the_spec_over_the_settings(messages_api, prompt, sleeps, providers):
    settings = Settings(ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=messages_api.url, KFORGE_LLM_MODEL="claude-haiku-4-5",
                        KFORGE_LLM_MAX_TOKENS=2048, KFORGE_LLM_MAX_RETRIES=1)
    messages_api.answer(REWRITE)
    messages_api.answer(REWRITE)

    providers.append(ClaudeProvider.from_settings(settings, GeneratorSpec(), sleep=sleeps.append))
    providers.append(ClaudeProvider.from_settings(
        settings, GeneratorSpec(model="claude-opus-4-6", max_tokens=16000, temperature=0.7), sleep=sleeps.append))
    for provider in providers:
        provider.complete(prompt)

    defaults, chosen = (r.body for r in messages_api.requests)
    assert (defaults["model"], defaults["max_tokens"], "temperature" in defaults) == ("claude-haiku-4-5", 2048, False)
    assert (chosen["model"], chosen["max_tokens"], chosen["temperature"]) == ("claude-opus-4-6", 16000, 0.7)
    assert all(sent_key(r.headers) == KEY for r in messages_api.requests)


def test_from_settings_without_a_key_names_the_variable():
    with pytest.raises(ProviderFailed, match="ANTHROPIC_API_KEY"):
        ClaudeProvider.from_settings(Settings(ANTHROPIC_API_KEY=None), GeneratorSpec())


def test_cost_table_by_model_family():
    assert estimate_cost("claude-opus-4-5-20251101", 1_000_000, 1_000_000) == 30.0
    assert estimate_cost("claude-opus-4-1-20250805", 1_000_000, 0) == 15.0
    assert estimate_cost("claude-opus-4-20250514", 0, 1_000_000) == 75.0
    assert estimate_cost("claude-haiku-4-5", 1_000_000, 1_000_000) == 6.0
    assert estimate_cost("claude-3-5-haiku-latest", 1_000_000, 1_000_000) == pytest.approx(4.8)
    assert estimate_cost("some-local-model", 1_000_000, 1_000_000) == 0.0


# --- retries ------------------------------------------------------------------------------------------------
def test_rate_limit_is_retried_after_the_servers_retry_after(messages_api, make, prompt, sleeps):
    messages_api.rate_limited(retry_after=2, message="per-minute rate limit exceeded")
    messages_api.answer(REWRITE)

    answer = make().complete(prompt)

    assert answer.text == REWRITE
    assert sleeps == [2.0]
    assert answer.attempts == ("429 rate limited: per-minute rate limit exceeded (retry-after 2 s)",)
    assert len(messages_api.requests) == 2


def test_retry_after_is_capped(messages_api, make, prompt, sleeps):
    messages_api.rate_limited(retry_after=900)
    messages_api.answer(REWRITE)

    answer = make().complete(prompt)

    assert sleeps == [60.0]
    assert answer.attempts[0].endswith("(retry-after 60 s)")


@pytest.mark.parametrize("failure, reason", [("overloaded", "529 overloaded: Overloaded"),
                                             ("server_error", "500 server error: Internal server error")])
def test_overload_and_server_errors_are_retried_with_backoff(messages_api, make, prompt, sleeps, failure, reason):
    getattr(messages_api, failure)()
    getattr(messages_api, failure)()
    messages_api.answer(REWRITE)

    answer = make().complete(prompt)

    assert answer.text == REWRITE
    assert sleeps == [1.0, 2.0]
    assert answer.attempts == (f"{reason} (backoff 1 s)", f"{reason} (backoff 2 s)")


def test_exhausted_retries_fail_with_every_attempt(messages_api, make, prompt, sleeps):
    for _ in range(3):
        messages_api.overloaded()

    with pytest.raises(ProviderFailed, match="gave up after 3 attempts; the last: 529 overloaded") as failed:
        make(max_retries=2).complete(prompt)

    assert len(failed.value.attempts) == 3
    assert all(a.startswith("529 overloaded") for a in failed.value.attempts)
    assert sleeps == [1.0, 2.0]
    assert len(messages_api.requests) == 3


def test_timeouts_are_retried_then_reported(messages_api, make, prompt, sleeps):
    messages_api.stalled(2.0)
    messages_api.stalled(2.0)

    with pytest.raises(ProviderFailed, match="gave up after 2 attempts; the last: timed out after 0.3 s") as failed:
        make(timeout_s=0.3, max_retries=1).complete(prompt)

    assert failed.value.attempts == ("timed out after 0.3 s (backoff 1 s)", "timed out after 0.3 s")
    assert sleeps == [1.0]


def test_an_unreachable_server_is_retried_then_reported(prompt, sleeps, providers):
    closed = MessagesAPI()
    url = closed.url
    closed.close()  # nothing listens on its port any more

    provider = ClaudeProvider(api_key=KEY, base_url=url, model=MODEL, max_tokens=1024, max_retries=1,
                              timeout_s=5.0, sleep=sleeps.append)
    providers.append(provider)
    with pytest.raises(ProviderFailed, match="could not reach the API") as failed:
        provider.complete(prompt)

    assert len(failed.value.attempts) == 2 and sleeps == [1.0]


# --- failures that are not retried --------------------------------------------------------------------------
def test_unauthorized_names_the_key_variable_and_is_not_retried(messages_api, make, prompt, sleeps):
    messages_api.unauthorized("invalid x-api-key")
    messages_api.answer(REWRITE)  # must stay unread

    with pytest.raises(ProviderFailed) as failed:
        make().complete(prompt)

    assert str(failed.value) == "401 authentication failed: invalid x-api-key; check ANTHROPIC_API_KEY"
    assert failed.value.attempts == ()
    assert sleeps == [] and len(messages_api.requests) == 1


def test_a_failure_after_retries_keeps_the_earlier_attempts(messages_api, make, prompt):
    messages_api.overloaded()
    messages_api.reply(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                        "message": "max_tokens: 999999 > 64000"}})

    with pytest.raises(ProviderFailed, match=r"^400 bad request: max_tokens: 999999 > 64000$") as failed:
        make().complete(prompt)

    assert failed.value.attempts == ("529 overloaded: Overloaded (backoff 1 s)",)


@pytest.mark.parametrize("script, shown", [
    # text/html: the SDK hands the body back as a str instead of raising
    (lambda api: api.not_json(), "<html><body>502 Bad Gateway</body></html>"),
    # declared JSON but not: the SDK lets json.JSONDecodeError escape
    (lambda api: api.not_json("{truncated", content_type="application/json"), "the body is not JSON (Expecting"),
    # JSON, but not a Message: the SDK builds a Message whose fields are all None
    (lambda api: api.reply(200, {"ok": True}), '{"ok": true}'),
], ids=["html", "broken-json", "json-not-a-message"])
def test_a_body_that_is_not_a_messages_response_fails_clearly(messages_api, make, prompt, sleeps, script, shown):
    script(messages_api)

    with pytest.raises(ProviderFailed) as failed:
        make().complete(prompt)

    assert str(failed.value).startswith(f"{NOT_MESSAGES}: ")
    assert shown in str(failed.value)
    assert sleeps == [] and len(messages_api.requests) == 1


def test_an_answer_cut_off_at_max_tokens_fails(messages_api, make, prompt):
    messages_api.cut_off(REWRITE[:120])

    with pytest.raises(ProviderFailed, match="cut off at max_tokens 4096: raise generator.max_tokens"):
        make().complete(prompt)


def test_an_answer_without_content_fails(messages_api, make, prompt):
    messages_api.empty()

    with pytest.raises(ProviderFailed, match="^the response has no text$"):
        make().complete(prompt)


def test_a_refusal_fails_rather_than_reaching_the_parser(messages_api, make, prompt):
    messages_api.message([{"type": "text", "text": "I can't help with that."}], stop_reason="refusal")

    with pytest.raises(ProviderFailed, match="declined to answer"):
        make().complete(prompt)


# --- answers the provider returns but the parser refuses ----------------------------------------------------
def test_prose_without_a_code_block_is_returned_and_refused_by_the_parser(messages_api, make, prompt):
    prose = "I would unroll the loop by two and use float4 loads, which should help bandwidth."
    messages_api.answer(prose)

    answer = make().complete(prompt)

    assert answer.text == prose
    with pytest.raises(MalformedAnswer, match="no ```cuda block"):
        answers.parse("rewrite", answer.text)


def test_a_malformed_json_block_is_refused_by_the_parser(messages_api, make, prompt):
    broken = REWRITE.replace('"grid_div_x": ["block_size_x", 2]}', '"grid_div_x": ["block_size_x", 2]')
    messages_api.answer(broken)

    answer = make().complete(prompt)

    with pytest.raises(MalformedAnswer, match="the ```json block is not valid JSON"):
        answers.parse("rewrite", answer.text)
