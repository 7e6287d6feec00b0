"""Generator: rewrites a kernel for a planned step (Anthropic Claude, or the offline rule engine), recording
every prompt and answer as events. Its tasks are named `generator.*` and routed to the `generator` queue."""
