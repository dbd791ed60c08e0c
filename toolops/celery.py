"""The Celery app, configured from Django settings (CELERY_* names).

``celery -A toolops`` finds it here (Celery looks for ``toolops.celery`` when the package has
no ``app``). Django loads it at start-up (``invocations_app.apps``), so the web process sends
with this configuration; ``toolops/__init__.py`` stays empty so the pure core
(``toolops.runtime``) imports without Celery or Django.
"""
import os

from celery import Celery
from celery.signals import after_setup_logger, after_setup_task_logger, task_postrun, task_prerun
from django.db import close_old_connections

from toolops.log_redaction import install_on_handlers

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "toolops.settings")

app = Celery("toolops")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# The default for every thread (``set_as_current`` covers only the importing thread), so
# ``shared_task`` and ``current_app`` resolve to this app in web server threads too.
app.set_default()


@task_prerun.connect
@task_postrun.connect
def _recycle_db_connections(task=None, **kwargs) -> None:
    """Treat a task like a Django request: keep the connection unless it is broken or older
    than ``CONN_MAX_AGE`` (Celery's own fixup, switched off by ``CELERY_DB_REUSE_MAX``, closes
    it around every task: a fresh PostgreSQL connection each time, BASELINES.md)."""
    if task is not None and getattr(task.request, "is_eager", False):
        return  # an eager task runs inside the caller's connection and transaction
    close_old_connections()


@after_setup_logger.connect
@after_setup_task_logger.connect
def _redact_secrets_in_worker_logs(logger=None, **kwargs) -> None:
    """Celery replaces the root handlers in workers: put the secret filter on its handlers too."""
    install_on_handlers(logger)
