"""Replay: answer with what a provider answered in an earlier job, for deterministic re-runs.

Answers are matched by request kind, step id and occurrence (the second rewrite of step s gets the second
recorded one), not by prompt text: prompts quote timings and earlier optimisations, which differ between
runs even when the conversation is the same."""
from services.generator.providers.base import Answer, Prompt, ProviderFailed
from shared.domain.events import GeneratorCalled


class ReplayProvider:
    name = "replay"

    def __init__(self, job_id: str, transcript: list[GeneratorCalled], answered_here: list[GeneratorCalled]):
        self.job_id = job_id
        self.transcript = [c for c in transcript if c.error is None]
        self.answered_here = answered_here

    def complete(self, prompt: Prompt) -> Answer:
        step_id = prompt.step.id if prompt.step else None
        key = (prompt.kind, step_id)
        occurrence = sum((c.kind, c.step_id) == key for c in self.answered_here if c.error is None)
        recorded = [c for c in self.transcript if (c.kind, c.step_id) == key]
        if occurrence >= len(recorded):
            what = f"{prompt.kind} of step {step_id}" if step_id else prompt.kind
            raise ProviderFailed(f"the transcript of job {self.job_id} holds {len(recorded)} answer(s) to {what}; "
                                 f"this is request {occurrence + 1}")
        call = recorded[occurrence]
        return Answer(text=call.response, model=f"{call.provider}:{call.model}", input_tokens=call.input_tokens,
                      output_tokens=call.output_tokens)
