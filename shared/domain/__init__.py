"""kforge's domain: what a job is and what happened to it, as values and pure functions, importing neither
shared.adapters nor shared.application. Nothing here talks to a database, the bus, the network or the GPU, or
writes anything. Two reads of the world remain, each named where it happens: a new event is stamped with the
clock (events.py), and the compile policy reads the CUDA toolkit's own headers to vet what a source may include
(compile_policy.py)."""
