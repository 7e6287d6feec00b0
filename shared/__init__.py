"""What kforge's services share, by role. Services never import each other; everything they exchange is here.

- `shared.domain`: the language of a job, pure: the spec, events, messages, the folds over events
  (projections, steps, reports) and the rules numbers follow (expressions, dtypes, inputs, tolerances).
- `shared.adapters`: where a process meets the world: the event store, the bus and the broker, settings, the
  GPU (device), the inputs kernels get, the records of which process owns a job, files and webhook addresses.
- `shared.application`: what every entry point shares, built on the two: the runtime that builds a process's
  adapters from its settings, admitting, following and cancelling jobs, answering requests, reading reports,
  profiling tasks.

Imports run one way: application uses adapters and domain, adapters use domain, domain uses neither.
"""
