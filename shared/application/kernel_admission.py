"""The submitted kernel, checked at admission: compiled once, with the parameters the baseline uses, for the
virtual target of its arch (no GPU needed), in the compile sandbox like every compile of a submitted source.
A kernel that does not compile, or whose parameters do not fit `args`, is refused before anything is recorded,
whatever the strategy: a tuning would otherwise launch it with the wrong arguments, and a compile error would
surface only once a worker reached it. One compile costs about 50 ms (0.4 s when the sandbox starts)."""
from shared.adapters.device.compiler import CompileLimits, parameter_types
from shared.adapters.device.nvrtc import CompileError
from shared.domain.errors import FieldError
from shared.domain.signature import mismatches
from shared.domain.spec import KernelSpec

LOG_LINES = 10  # error lines of NVRTC's log quoted in the refusal; the first usually names the cause


def kernel_errors(spec: KernelSpec, default_arch: str, limits: CompileLimits | None = None) -> list[FieldError]:
    """Every way the submitted kernel cannot run as `spec` describes it, each naming the field and the fix."""
    arch = spec.benchmark.arch or default_arch
    try:
        types = parameter_types(spec.source, spec.kernel_name, spec.baseline_params(), spec.compiler_options, arch,
                                limits)
    except CompileError as exc:
        return [FieldError("source", f"{exc}{_quoted(exc.log)}; fix the kernel (it is compiled with params as "
                                     "-D defines and with compiler_options)")]
    return [FieldError(m.field, f"{m.what}: {m.fix}") for m in mismatches(spec.args, types)]


def _quoted(log: str) -> str:
    errors = [line.strip() for line in log.splitlines() if "error:" in line]
    if not errors:
        return ""
    more = f" (and {len(errors) - LOG_LINES} more)" if len(errors) > LOG_LINES else ""
    return ": " + " | ".join(errors[:LOG_LINES]) + more
