"""Claude through the official Anthropic SDK: one Messages call per prompt.

The SDK's own retries are switched off (max_retries=0) and done here instead, so that every retried
attempt and its cause is recorded with the call rather than hidden inside the client.
"""
import json
import time
from collections.abc import Callable

import anthropic

from services.generator.providers.base import Answer, Prompt, ProviderFailed

MAX_WAIT_S = 60.0
NOT_MESSAGES = "the API answered with something that is not a Messages response"

# USD per million (input, output) tokens by model-name prefix; the first match wins, so the older Opus 4
# and 4.1 names come before "claude-opus-4", which covers 4.5 and later. A model not listed is costed at
# 0.0: its tokens are still recorded, and a visibly missing price is better than a wrong one.
PRICES = (
    ("claude-opus-4-0", 15.0, 75.0), ("claude-opus-4-1", 15.0, 75.0), ("claude-opus-4-2025", 15.0, 75.0),
    ("claude-opus-4", 5.0, 25.0),
    ("claude-sonnet-", 3.0, 15.0), ("claude-3-7-sonnet", 3.0, 15.0), ("claude-3-5-sonnet", 3.0, 15.0),
    ("claude-haiku-4", 1.0, 5.0), ("claude-3-5-haiku", 0.8, 4.0), ("claude-3-haiku", 0.25, 1.25),
)
STATUS_LABELS = {400: "bad request", 401: "authentication failed", 403: "permission denied", 404: "not found",
                 413: "request too large", 429: "rate limited", 529: "overloaded"}


def estimate_cost(model: str, input_tokens: int, output_tokens: int) -> float:
    for prefix, per_input, per_output in PRICES:
        if model.startswith(prefix):
            return (input_tokens * per_input + output_tokens * per_output) / 1e6
    return 0.0


class ClaudeProvider:
    name = "anthropic"

    def __init__(self, *, api_key: str, base_url: str | None = None, model: str, max_tokens: int,
                 temperature: float | None = None, max_retries: int = 4, timeout_s: float = 300.0,
                 sleep: Callable[[float], None] = time.sleep):
        self.model, self.max_tokens, self.temperature = model, max_tokens, temperature
        self.max_retries, self.timeout_s, self.sleep = max_retries, timeout_s, sleep
        # An explicit timeout also keeps the SDK from refusing large max_tokens without streaming.
        self._client = anthropic.Anthropic(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout_s)

    @classmethod
    def from_settings(cls, settings, generator_spec, **kwargs) -> "ClaudeProvider":
        if not settings.anthropic_api_key:
            raise ProviderFailed("no Anthropic API key: set ANTHROPIC_API_KEY, or choose generator.provider rules")
        return cls(api_key=settings.anthropic_api_key, base_url=settings.anthropic_base_url,
                   model=generator_spec.model or settings.llm_model,
                   max_tokens=generator_spec.max_tokens or settings.llm_max_tokens,
                   temperature=generator_spec.temperature, max_retries=settings.llm_max_retries,
                   timeout_s=settings.llm_timeout_s, **kwargs)

    def complete(self, prompt: Prompt) -> Answer:
        # This SDK's messages.create takes no temperature, so it goes in the body, and only when set.
        extra = {"extra_body": {"temperature": self.temperature}} if self.temperature is not None else {}
        attempts: list[str] = []  # one reason per failed attempt, so len(attempts) counts the retries
        while True:
            try:
                response = self._client.messages.create(
                    model=self.model, max_tokens=self.max_tokens, system=prompt.system,
                    messages=[{"role": "user", "content": prompt.text}], **extra)
            except (anthropic.APIStatusError, anthropic.APIConnectionError) as exc:
                reason = self._describe(exc)
                if not _retryable(exc):
                    raise ProviderFailed(reason, attempts=tuple(attempts)) from exc
                if len(attempts) == self.max_retries:
                    attempts.append(reason)
                    tries = f"{len(attempts)} attempts" if len(attempts) > 1 else "1 attempt"
                    raise ProviderFailed(f"gave up after {tries}; the last: {reason}", tuple(attempts)) from exc
                wait, why = _wait(exc, len(attempts))
                attempts.append(f"{reason} ({why})")
                self.sleep(wait)
                continue
            except json.JSONDecodeError as exc:  # what the SDK raises for a body declared JSON that is not
                raise ProviderFailed(f"{NOT_MESSAGES}: the body is not JSON ({exc})", tuple(attempts)) from exc
            except anthropic.APIResponseValidationError as exc:  # raised under strict validation
                raise ProviderFailed(f"{NOT_MESSAGES}: {_short(exc.body)}", tuple(attempts)) from exc
            return self._answer(response, tuple(attempts))

    def close(self) -> None:
        """Close the client's pooled connections (a long-lived worker keeps one provider instead)."""
        self._client.close()

    def _answer(self, response: object, attempts: tuple[str, ...]) -> Answer:
        # Without strict validation the SDK hands back a non-JSON body as a str, and odd JSON as a
        # Message whose fields are None; both are caught here rather than failing later on an attribute.
        if not isinstance(response, anthropic.types.Message):
            raise ProviderFailed(f"{NOT_MESSAGES}: {_short(response)}", attempts=attempts)
        if response.type != "message" or not isinstance(response.content, list):
            shown = json.dumps(response.model_dump(exclude_none=True), default=str)
            raise ProviderFailed(f"{NOT_MESSAGES}: {_short(shown)}", attempts=attempts)
        if response.stop_reason == "max_tokens":
            raise ProviderFailed(f"the answer was cut off at max_tokens {self.max_tokens}: raise "
                                 f"generator.max_tokens (or KFORGE_LLM_MAX_TOKENS)", attempts=attempts)
        if response.stop_reason == "refusal":
            raise ProviderFailed("the model declined to answer (stop_reason refusal)", attempts=attempts)
        text = "".join(block.text for block in response.content if getattr(block, "type", None) == "text")
        if not text.strip():
            raise ProviderFailed("the response has no text", attempts=attempts)
        model = response.model or self.model
        input_tokens = getattr(response.usage, "input_tokens", None) or 0
        output_tokens = getattr(response.usage, "output_tokens", None) or 0
        return Answer(text=text, model=model, input_tokens=input_tokens, output_tokens=output_tokens,
                      cost_usd=estimate_cost(model, input_tokens, output_tokens), attempts=attempts)

    def _describe(self, exc: anthropic.APIError) -> str:
        if isinstance(exc, anthropic.APITimeoutError):
            return f"timed out after {self.timeout_s:g} s"
        if isinstance(exc, anthropic.APIConnectionError):
            return f"could not reach the API: {_short(exc.__cause__ or exc.message)}"
        status = exc.status_code
        label = STATUS_LABELS.get(status, "server error" if status >= 500 else "error")
        reason = f"{status} {label}: {_short(getattr(exc, 'api_message', None) or exc.message)}"
        return f"{reason}; check ANTHROPIC_API_KEY" if status == 401 else reason


def _retryable(exc: anthropic.APIError) -> bool:
    if isinstance(exc, anthropic.APIConnectionError):  # timeouts included
        return True
    return exc.status_code == 429 or exc.status_code >= 500


def _wait(exc: anthropic.APIError, retry: int) -> tuple[float, str]:
    """Seconds before the next attempt: the server's retry-after when it gives one, else 1, 2, 4 s..."""
    header = exc.response.headers.get("retry-after") if isinstance(exc, anthropic.APIStatusError) else None
    try:
        after = float(header) if header is not None else None
    except ValueError:  # an HTTP date: rare enough to fall back on backoff
        after = None
    if after is not None and after >= 0:
        return min(after, MAX_WAIT_S), f"retry-after {min(after, MAX_WAIT_S):g} s"
    wait = min(2.0 ** retry, MAX_WAIT_S)
    return wait, f"backoff {wait:g} s"


def _short(value: object, limit: int = 200) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[:limit] + "..."
