"""Gateway: the HTTP API (FastAPI) for submitting jobs and reading them back."""
