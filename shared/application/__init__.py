"""The application layer: what the CLI, the Python API, the gateway and the workers share, composed from the
domain and the adapters: the runtime that builds a process's adapters, admitting and submitting jobs,
following and cancelling them, the request/answer protocol of the workers, the reports read from the store,
and the profile of each task."""
