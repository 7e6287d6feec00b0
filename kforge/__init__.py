"""kforge: submit a CUDA kernel, get back a faster, tunable, proven-correct version with its history.

This package is what people run: the CLI (`kforge.cli`), the Python API (`kforge.api`, re-exported here)
and the worker entry point (`kforge.worker`, every service's Celery tasks). The adapters they all use, the
event store and the bus with Celery's configuration, are built from settings in `shared/runtime.py`;
`kforge.worker` also configures Celery when imported, as `celery -A kforge.worker` needs a configured app
before any task builds a runtime. The services in `services/` never import each other.
"""
__version__ = "0.1.0"

from kforge.api import (KforgeError, cancel, compare, export, make_kernel_tunable, profile, slow_kernels,  # noqa: E402
                        suggestions, tracker)

__all__ = ["KforgeError", "cancel", "compare", "export", "make_kernel_tunable", "profile", "slow_kernels", "suggestions",
           "tracker"]
