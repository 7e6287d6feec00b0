"""Verifier: proves a candidate kernel matches the original on seeded inputs before it may be benchmarked.
Its tasks are named `verifier.*` and routed to the `verifier` queue."""
