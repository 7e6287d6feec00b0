"""Reports rebuilt from events: pure folds over a job's events (or several jobs'), rebuildable at any time.
Nothing here reads the store, sends on the bus or touches the filesystem: callers hand in the events.

`tracker` (PerformanceTracker), `results` (what a job delivered), `comparison` (two runs), `suggestions`
(what to try next), `profile` (where the time went), `deliveries` (a job's webhooks), `search_space` (what
tuning searched), `files` and `plots` (what a job leaves behind). `shared.application.report_queries` reads them from the
store for the CLI, the Python API and the gateway; `kforge.job_files` writes a job's files."""
