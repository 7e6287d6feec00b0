"""Planner: the process manager that decides each job's next step from the job's events alone."""
