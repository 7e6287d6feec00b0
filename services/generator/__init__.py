"""The generator service: rewrites kernels through a provider (Claude, the offline rules, or a replay)."""
