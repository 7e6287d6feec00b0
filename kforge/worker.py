"""The Celery app with every service's tasks registered: `celery -A kforge.worker worker -Q planner`.

Importing this registers the tasks and configures the app from the environment (REDIS_URL), through
shared.application.runtime.celery, the one place that configures it; it opens no connection."""
from services.benchmark import tasks as _benchmark_tasks  # noqa: F401  (registers tasks)
from services.generator import tasks as _generator_tasks  # noqa: F401
from services.planner import tasks as _planner_tasks  # noqa: F401
from services.verifier import tasks as _verifier_tasks  # noqa: F401
from services.webhooks import tasks as _webhooks_tasks  # noqa: F401
from shared.application import runtime

app = runtime.celery()
