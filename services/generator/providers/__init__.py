"""Choosing the provider of a job: the spec's choice, with auto meaning Claude when a key is set."""
from services.generator.providers.base import Provider, ProviderFailed
from shared.adapters.eventstore import EventStore
from shared.adapters.settings import Settings
from shared.domain.events import GeneratorCalled, JobSubmitted
from shared.domain.projections import job_stream
from shared.domain.spec import GeneratorSpec


def provider_for(spec: GeneratorSpec, settings: Settings, store: EventStore,
                 answered_here: list[GeneratorCalled], tenant: str) -> Provider:
    """The job's provider; a replay replays only a job of the same `tenant`, as if another's had no calls."""
    name = spec.provider
    if name == "auto":
        name = "anthropic" if settings.anthropic_api_key else "rules"
    if name == "rules":
        from services.generator.providers.rules import RulesProvider

        return RulesProvider()
    if name == "anthropic":
        from services.generator.providers.claude import ClaudeProvider

        return ClaudeProvider.from_settings(settings, spec)
    from services.generator.providers.replay import ReplayProvider

    replayed = store.read_stream(job_stream(spec.replay_job))
    own = any(isinstance(e, JobSubmitted) and e.tenant == tenant for e in replayed)
    transcript = [e for e in replayed if isinstance(e, GeneratorCalled)] if own else []
    if not transcript:
        raise ProviderFailed(f"generator.replay_job: job {spec.replay_job} has no recorded generator calls to replay")
    return ReplayProvider(spec.replay_job, transcript, answered_here)


__all__ = ["Provider", "ProviderFailed", "provider_for"]
