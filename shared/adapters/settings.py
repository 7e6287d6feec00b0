"""Settings from the environment. With none set, kforge runs embedded: one process, SQLite under
KFORGE_HOME, Celery tasks executed in-process. REDIS_URL and DATABASE_URL switch to separate services."""
import base64
import ipaddress
import os
import secrets
from functools import cached_property
from pathlib import Path

from pydantic import Field, field_validator, model_validator
from typing import Annotated

from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    home: Path = Field(Path.home() / ".kforge", validation_alias="KFORGE_HOME")
    database_url_override: str | None = Field(None, validation_alias="DATABASE_URL")
    redis_url: str | None = Field(None, validation_alias="REDIS_URL")
    gpus: Annotated[list[str], NoDecode] = Field(["0"], validation_alias="KFORGE_GPUS", description="GPU ids with a benchmark worker")
    default_arch: str = Field("sm_90", validation_alias="KFORGE_DEFAULT_ARCH",
                              description="NVRTC target when no device is present to ask")

    # The generator: Claude through the official SDK when a key is set, otherwise the offline rules.
    anthropic_api_key: str | None = Field(None, validation_alias="ANTHROPIC_API_KEY", repr=False)
    anthropic_base_url: str | None = Field(None, validation_alias="ANTHROPIC_BASE_URL",
                                           description="another Messages API endpoint (a proxy, a local server)")
    llm_model: str = Field("claude-sonnet-4-6", validation_alias="KFORGE_LLM_MODEL")
    llm_max_tokens: int = Field(8192, ge=256, validation_alias="KFORGE_LLM_MAX_TOKENS")
    llm_max_retries: int = Field(4, ge=0, le=20, validation_alias="KFORGE_LLM_MAX_RETRIES",
                                 description="retries of a call refused for rate limits, overload or a server error")
    llm_timeout_s: float = Field(300.0, gt=0, validation_alias="KFORGE_LLM_TIMEOUT_S")

    # The gateway. API keys: none configured means an open gateway (embedded, a trusted network).
    api_keys: Annotated[list[str], NoDecode] = Field([], validation_alias="KFORGE_API_KEYS", repr=False,
                                                     description="keys accepted in the X-API-Key header")
    max_request_bytes: int = Field(1 << 20, ge=1024, validation_alias="KFORGE_MAX_REQUEST_BYTES",
                                   description="larger request bodies are refused with 413")
    max_open_jobs: int = Field(1000, ge=1, validation_alias="KFORGE_MAX_OPEN_JOBS",
                               description="submissions beyond this many unfinished jobs are refused with 429")
    admission_compiles: int = Field(
        default_factory=lambda: os.cpu_count() or 2, ge=1, le=1024, validation_alias="KFORGE_ADMISSION_COMPILES",
        description="submitted kernels this process compiles for admission at once; a submission that finds none "
                    "free within 10 s is refused with 429 (a flood of compile bombs then holds this many CPUs "
                    "and compile_memory_mb each, not a thread's worth per request)")

    # Webhooks: signed with KFORGE_WEBHOOK_SECRET (whsec_...; one is made under KFORGE_HOME when unset).
    webhook_secret_override: str | None = Field(None, validation_alias="KFORGE_WEBHOOK_SECRET", repr=False)
    webhook_allowed_networks: Annotated[list[str], NoDecode] = Field(
        [], validation_alias="KFORGE_WEBHOOK_ALLOWED_NETWORKS",
        description="private, loopback or link-local networks webhooks may still go to, e.g. 127.0.0.0/8")
    webhook_retry_delays_s: Annotated[list[float], NoDecode] = Field(
        [5, 300, 1800, 7200, 18000], validation_alias="KFORGE_WEBHOOK_RETRY_DELAYS_S",
        description="waits before each retry of a failed delivery (each below the visibility timeout)")
    webhook_timeout_s: float = Field(
        10.0, gt=0, allow_inf_nan=False, validation_alias="KFORGE_WEBHOOK_TIMEOUT_S",
        description="deadline of one delivery attempt: connecting, sending and the whole answer")

    # The compile sandbox (shared/adapters/device/compiler.py): every NVRTC compile runs in a child process under these.
    compile_timeout_s: float = Field(60.0, gt=0, le=3600, allow_inf_nan=False,
                                     validation_alias="KFORGE_COMPILE_TIMEOUT_S", description="wall-clock limit of one compile; the compiler is killed past it")
    compile_cpu_s: int = Field(60, ge=1, le=3600, validation_alias="KFORGE_COMPILE_CPU_S",
                               description="CPU seconds one compile may use")
    compile_memory_mb: int = Field(4096, ge=512, le=1 << 20, validation_alias="KFORGE_COMPILE_MEMORY_MB",
                                   description="address space of a compiler process, in MiB")
    compile_log_chars: int = Field(65536, ge=1024, le=16 << 20, validation_alias="KFORGE_COMPILE_LOG_CHARS",
                                   description="the most of a compiler log kept in an event")

    # The verifier's GPU process keeps each trial's inputs and reference outputs on the device for the job's
    # next candidates, within this share of device memory (oldest trials evicted first).
    verify_cache_fraction: float = Field(0.25, ge=0, le=0.9, allow_inf_nan=False,
                                         validation_alias="KFORGE_VERIFY_CACHE_FRACTION",
                                         description="share of device memory for cached verification trials")

    # compute-sanitizer as a gate of verified candidates (services/verifier/sanitizer.py): one small launch per check.
    compute_sanitizer: str | None = Field(None, validation_alias="KFORGE_COMPUTE_SANITIZER",
                                          description="the compute-sanitizer to use; default: found on PATH, "
                                                      "under /usr/local/cuda*/bin or in the nvidia pip packages")
    sanitizer_timeout_s: float = Field(120.0, gt=0, le=3600, allow_inf_nan=False,
                                       validation_alias="KFORGE_SANITIZER_TIMEOUT_S",
                                       description="wall-clock limit of one sanitizer check; past it the check "
                                                   "is recorded as timeout and does not reject")
    sanitizer_elements: int = Field(4096, ge=1, le=1 << 24, validation_alias="KFORGE_SANITIZER_ELEMENTS",
                                    description="the sanitised trial's sizes are halved until no array holds more "
                                                "elements than this, then made one less")

    # Admission limits: checked when a job is submitted, by the gateway, the CLI and the Python API alike.
    max_size: int = Field(1 << 34, ge=1, validation_alias="KFORGE_MAX_SIZE",
                          description="the largest value of a size variable (sizes.*)")
    max_array_bytes: int = Field(32 << 30, ge=1, validation_alias="KFORGE_MAX_ARRAY_BYTES",
                                 description="the most bytes a job's array arguments may take together")
    max_search_space: int = Field(100_000, ge=1, validation_alias="KFORGE_MAX_SEARCH_SPACE",
                                  description="the most configurations a tune_params space may have (the product "
                                              "of its lists' lengths)")
    max_benchmark_timeout_s: float = Field(600.0, gt=0, allow_inf_nan=False,
                                           validation_alias="KFORGE_MAX_BENCHMARK_TIMEOUT_S",
                                           description="the largest benchmark.timeout_s accepted")
    max_verify_timeout_s: float = Field(600.0, gt=0, allow_inf_nan=False, validation_alias="KFORGE_MAX_VERIFY_TIMEOUT_S",
                                        description="the largest verify.timeout_s accepted")
    max_search_time_s: float = Field(4 * 3600.0, gt=0, allow_inf_nan=False, validation_alias="KFORGE_MAX_SEARCH_TIME_S",
                                     description="the largest benchmark.search.time_limit_s accepted")

    # Gateway hardening and tenancy.
    admin_api_keys: Annotated[list[str], NoDecode] = Field(
        [], validation_alias="KFORGE_ADMIN_API_KEYS", repr=False,
        description="keys that are accepted too and see every tenant's jobs")
    max_open_jobs_per_key: int = Field(100, ge=1, validation_alias="KFORGE_MAX_OPEN_JOBS_PER_KEY",
                                       description="a key's submissions beyond this many of its unfinished jobs "
                                                   "are refused with 429")
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        ["localhost", "127.0.0.1", "[::1]"], validation_alias="KFORGE_ALLOWED_HOSTS",
        description="Host header names (any port) the gateway answers; * answers any: refusing others stops "
                    "DNS rebinding")
    sse_max_streams: int = Field(256, ge=1, validation_alias="KFORGE_SSE_MAX_STREAMS",
                                 description="live event streams one gateway process holds open at once")
    sse_max_streams_per_key: int = Field(16, ge=1, validation_alias="KFORGE_SSE_MAX_STREAMS_PER_KEY",
                                         description="live event streams one API key holds open at once")

    # A worker task that raises what its handler did not expect is tried again this many times, then its
    # request is answered with TaskFailed and the job ends (shared/application/worker_task.py).
    task_retries: int = Field(2, ge=0, le=20, validation_alias="KFORGE_TASK_RETRIES",
                              description="retries of a worker task that raised unexpectedly")
    stall_timeout_s: float = Field(1800.0, gt=0, allow_inf_nan=False, validation_alias="KFORGE_STALL_TIMEOUT_S",
                                   description="`kforge tune` and the Python API stop following a job that "
                                               "recorded no event for this long; embedded, they cancel it too")

    # The broker hands a task that was delivered but never acknowledged (its worker died) to another
    # worker after this long, so it must exceed the longest task and the longest webhook retry delay.
    visibility_timeout_s: float = Field(6 * 3600, gt=0, validation_alias="KFORGE_VISIBILITY_TIMEOUT_S")
    recovery_interval_s: float = Field(30.0, gt=0, validation_alias="KFORGE_RECOVERY_INTERVAL_S",
                                       description="how often a planner worker looks for lost messages")

    @field_validator("gpus", "api_keys", "webhook_allowed_networks", "webhook_retry_delays_s", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return [g.strip() for g in value.split(",") if g.strip()] if isinstance(value, str) else value

    # Defined after _split, so pydantic runs it first and it sees the variable as it was set.
    @field_validator("api_keys", "admin_api_keys", "allowed_hosts", mode="before")
    @classmethod
    def _listed(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        listed = [item.strip() for item in value.split(",") if item.strip()]
        if value.strip() and not listed:  # "," would otherwise open a gateway its operator meant to lock
            raise ValueError(f"{value!r} lists nothing: give comma-separated values, or leave it unset")
        return listed

    @field_validator("webhook_secret_override")
    @classmethod
    def _whsec(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                base64.b64decode(value.removeprefix("whsec_"), validate=True)
            except ValueError:
                raise ValueError("KFORGE_WEBHOOK_SECRET must be whsec_ followed by base64, e.g. "
                                 f"{_new_webhook_secret()}") from None
        return value

    @field_validator("webhook_allowed_networks")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for network in value:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ValueError(f"KFORGE_WEBHOOK_ALLOWED_NETWORKS: {network!r} is not a network such as "
                                 "127.0.0.0/8 or ::1/128") from None
        return value

    @model_validator(mode="after")
    def _retries_within_visibility(self) -> "Settings":
        """A retry waits (Celery's countdown) in a worker that holds its message unacknowledged: past the
        visibility timeout the broker hands the message to another worker as if the first had died."""
        longest = max(self.webhook_retry_delays_s, default=0.0)
        if longest >= self.visibility_timeout_s:
            raise ValueError(f"KFORGE_WEBHOOK_RETRY_DELAYS_S holds {longest:g} s, not below "
                             f"KFORGE_VISIBILITY_TIMEOUT_S ({self.visibility_timeout_s:g} s): shorten the delay or "
                             "raise the timeout")
        return self

    @cached_property
    def database_url(self) -> str:
        if self.database_url_override:
            return self.database_url_override
        self.home.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{self.home / 'kforge.db'}"

    @property
    def compile_cache(self) -> Path:
        """Where benchmark workers keep compiled kernels, by content hash."""
        return self.home / "compile-cache"

    @cached_property
    def webhook_secret(self) -> str:
        """The Standard Webhooks signing secret: configured, or made once and kept under KFORGE_HOME."""
        if self.webhook_secret_override:
            return self.webhook_secret_override
        path = self.home / "webhook-secret"
        self.home.mkdir(parents=True, exist_ok=True)
        try:  # exclusive creation: two processes starting together agree on one secret
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return path.read_text().strip()
        with os.fdopen(fd, "w") as file:
            file.write(_new_webhook_secret())
        return path.read_text().strip()

    @property
    def embedded(self) -> bool:
        return self.redis_url is None


def _new_webhook_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
