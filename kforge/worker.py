"""The Celery app with every service's tasks registered: `celery -A kforge.worker worker -Q planner`.

Importing this configures Celery from the environment (REDIS_URL) but opens no connection."""
from services.benchmark import tasks as _benchmark_tasks  # noqa: F401  (registers tasks)
from services.generator import tasks as _generator_tasks  # noqa: F401
from services.planner import tasks as _planner_tasks  # noqa: F401
from services.verifier import tasks as _verifier_tasks  # noqa: F401
from services.webhooks import tasks as _webhooks_tasks  # noqa: F401
from shared.bus import celery_app, configure_celery
from shared.settings import Settings

app = configure_celery(celery_app, Settings())
