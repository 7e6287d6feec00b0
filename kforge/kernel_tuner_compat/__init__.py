"""Kernel Tuner scripts on kforge: `from kforge import tune_kernel` (or `import kforge as kernel_tuner`) in place
of Kernel Tuner's import, and the script's tune_kernel call runs as a kforge tune job with the same arguments
and returns results and env as Kernel Tuner does (README, "Kernel Tuner scripts").

- space.py: tune_params and restrictions, and excluding configurations from kforge's search
- arguments.py: the arguments and answer as the spec's args, their arrays as .npy data
- options.py: the other arguments read with Kernel Tuner's meaning, or refused with the fix
- cache.py: Kernel Tuner's cache file, read to resume and written as configurations are measured
- results.py: the job's outcomes as Kernel Tuner's results and env
- tuning.py: tune_kernel itself
"""
from kforge.kernel_tuner_compat.space import DropInError
from kforge.kernel_tuner_compat.tuning import tune_kernel

__all__ = ["DropInError", "tune_kernel"]
