"""Reports rebuilt from events: pure folds over a job's events (or several jobs'), rebuildable at any time.

`tracker` (PerformanceTracker), `results` (what a job delivered), `comparison` (two runs), `suggestions`
(what to try next), `profile` (where the time went), `files` and `plots` (what a job leaves behind);
`queries` reads them from the store for the CLI, the Python API and the gateway."""
