"""Settings from the environment. With none set, kforge runs embedded: one process, SQLite under
KFORGE_HOME, Celery tasks executed in-process. REDIS_URL and DATABASE_URL switch to separate services."""
from functools import cached_property
from pathlib import Path

from pydantic import Field, field_validator
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

    @field_validator("gpus", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return [g.strip() for g in value.split(",") if g.strip()] if isinstance(value, str) else value

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

    @property
    def embedded(self) -> bool:
        return self.redis_url is None
