"""kforge: submit a CUDA kernel, get back a faster, tunable, proven-correct version with its history.

This package is the composition root: it wires the services in `services/` to the adapters in
`shared/` for the CLI and for worker processes. The services themselves never import each other.
"""
__version__ = "0.1.0"

from kforge.api import (KforgeError, cancel, compare, export, make_kernel_tunable, profile, slow_kernels,  # noqa: E402
                        suggestions, tracker)

__all__ = ["KforgeError", "cancel", "compare", "export", "make_kernel_tunable", "profile", "slow_kernels", "suggestions",
           "tracker"]
