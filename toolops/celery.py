"""The Celery app, configured from Django settings (CELERY_* names)."""
import logging
import os

from celery import Celery
from celery.signals import task_postrun, task_prerun, worker_init
from django.conf import settings
from django.db import close_old_connections

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "toolops.settings")

app = Celery("toolops")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

logger = logging.getLogger(__name__)


def databases_use_persistent_connections(databases: dict, *, conn_max_age: int) -> None:
    """A worker process runs one task at a time: a pool of connections per process buys it
    nothing, and giving the connection back after every task costs a pool round trip and a
    health check. Drop the pool and keep one connection for ``conn_max_age`` seconds instead
    (in place: Django's connection wrappers hold these very dicts)."""
    for db in databases.values():
        if db.get("OPTIONS", {}).pop("pool", None) is not None:
            db["CONN_MAX_AGE"] = conn_max_age


@worker_init.connect
def _worker_keeps_its_connection(**kwargs) -> None:
    # Sent once in the worker's main process, before its child processes fork.
    databases_use_persistent_connections(settings.DATABASES, conn_max_age=settings.UNPOOLED_CONN_MAX_AGE)
    logger.info("worker database connections: one per process, kept %s s (no pool)", settings.UNPOOLED_CONN_MAX_AGE)


@task_prerun.connect
@task_postrun.connect
def _recycle_db_connections(task=None, **kwargs) -> None:
    """Treat a task like a Django request: keep the connection unless it is broken or older
    than ``CONN_MAX_AGE`` (Celery's own fixup, switched off by ``CELERY_DB_REUSE_MAX``, closes
    it around every task: a fresh PostgreSQL connection each time, BASELINES.md). A connection
    that raised (the database restarted) is closed here when unusable, and the next task's first
    query health-checks a kept one (``conn_health_checks``), so a restart costs one task's
    attempt at most, never the worker."""
    if task is not None and getattr(task.request, "is_eager", False):
        return  # an eager task runs inside the caller's connection and transaction
    close_old_connections()
