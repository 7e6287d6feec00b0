"""kforge: submit a CUDA kernel, get back a faster, tunable, proven-correct version with its history.

This package is what people run: the CLI (`kforge.cli`), the Python API (`kforge.api`, re-exported here)
and the worker entry point (`kforge.worker`, every service's Celery tasks). It is not where the parts are put
together: the adapters they all use, the event store and the bus on Celery's app with its configuration, are
made from settings in one place, `shared/application/runtime.py` (`kforge.worker` takes its configured Celery app from
there when imported, as `celery -A kforge.worker` needs one before any task builds a runtime). The services
in `services/` never import each other.
"""
__version__ = "0.1.0"

from kforge.api import (KforgeError, cancel, compare, export, make_kernel_tunable, profile, slow_kernels,  # noqa: E402
                        suggestions, tracker)
from kforge.kernel_tuner_compat import DropInError, tune_kernel  # noqa: E402  (Kernel Tuner's tune_kernel, on kforge)

__all__ = ["DropInError", "KforgeError", "cancel", "compare", "export", "make_kernel_tunable", "profile", "slow_kernels",
           "suggestions", "tracker", "tune_kernel"]
