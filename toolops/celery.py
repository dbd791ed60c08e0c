"""The Celery app, configured from Django settings (CELERY_* names).

``celery -A toolops`` finds it here (Celery looks for ``toolops.celery`` when the package has
no ``app``). Django loads it at start-up (``invocations_app.apps``), so the web process sends
with this configuration; ``toolops/__init__.py`` stays empty so the pure core
(``toolops.runtime``, ``model_io``, ``decisions``) imports without Celery or Django.
"""
import logging
import logging.config
import os
import sys

from celery import Celery
from celery.apps import worker as celery_worker_app
from celery.signals import celeryd_init, setup_logging, task_postrun, task_prerun, worker_init
from django.conf import settings
from django.db import close_old_connections
from kombu.exceptions import OperationalError as BrokerOperationalError
from kombu.transport import redis as kombu_redis
import redis

from toolops.logformat import JsonFormatter
from toolops.settings_table import exit_if_invalid

exit_if_invalid(os.environ, "celery")  # before the worker or beat connects anywhere (issue 31)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "toolops.settings")

app = Celery("toolops")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# The default for every thread (``set_as_current`` covers only the importing thread), so
# ``shared_task`` and ``current_app`` resolve to this app in web server threads too.
app.set_default()

logger = logging.getLogger(__name__)

# What a failed publish raises: kombu's wrapper, or the client's own error on the way there.
BROKER_ERRORS = (BrokerOperationalError, redis.exceptions.RedisError, OSError)


def _restore_unacked_unless_collected(restore_unacked):
    """Celery 5.7's worker, on losing its Redis connection, collects the kombu transport and only
    then closes the channel; the channel's close restores unacknowledged messages through a new
    client of that collected transport and raises ``AttributeError`` ('NoneType' object has no
    attribute 'hostname'), which Celery treats as unrecoverable: the worker exits instead of
    reconnecting (found by tests/chaos). Skipping the client-side restore loses nothing: with
    Redis the unacked messages also sit in its unacked hash, restored after the visibility
    timeout, and the outbox sweep (invocations_app/dispatch.py) resends any call left waiting."""

    def restore(self, client=None):
        # The channel's connection may already be gone too (seen under load: 'NoneType' object
        # has no attribute 'client'), or only its client.
        connection = getattr(self.channel, "connection", None)
        if client is None and getattr(connection, "client", None) is None:
            logger.warning("broker connection lost: %s unacknowledged message(s) left to Redis and the sweep",
                           len(self._delivered))
            self._delivered.clear()
            return None
        return restore_unacked(self, client)

    return restore


kombu_redis.QoS.restore_unacked = _restore_unacked_unless_collected(kombu_redis.QoS.restore_unacked)


class BrokerChannelClosed(redis.exceptions.ConnectionError):
    """A Redis channel of a connection Celery already collected was asked for a new client."""


def _connparams_of_a_live_channel(connparams):
    """A task that finishes after the worker lost Redis acknowledges its message on the old channel,
    whose connection Celery has already collected: kombu then reads ``None.client`` and raises
    ``AttributeError``, which is not a connection error, so it escapes ``ack_log_error`` and the
    hub and the worker shuts down (and hangs restoring) instead of reconnecting (found by
    tests/chaos under CPU load). Raised as a Redis connection error it is what it is: Celery logs
    "Couldn't ack" and goes on; the message stays in Redis' unacked hash, and its call is already
    final, so a later redelivery finds nothing to do."""

    def live(self, *args, **kwargs):
        connection = getattr(self, "connection", None)
        if connection is None or getattr(connection, "client", None) is None:
            raise BrokerChannelClosed("the broker connection of this channel was lost and collected")
        return connparams(self, *args, **kwargs)

    return live


kombu_redis.Channel._connparams = _connparams_of_a_live_channel(kombu_redis.Channel._connparams)


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
    it around every task: a fresh PostgreSQL connection each time, docs/explanation/benchmarks.md). A connection
    that raised (the database restarted) is closed here when unusable, and the next task's first
    query health-checks a kept one (``conn_health_checks``), so a restart costs one task's
    attempt at most, never the worker."""
    if task is not None and getattr(task.request, "is_eager", False):
        return  # an eager task runs inside the caller's connection and transaction
    close_old_connections()


@celeryd_init.connect  # sent only in a worker, before setup_logging
def _name_the_worker(**kwargs) -> None:
    os.environ.setdefault("TOOLOPS_PROCESS_ROLE", "worker")  # its log lines' role (toolops/logformat.py)


@celeryd_init.connect  # a worker, before its first warning (the privilege check)
@setup_logging.connect  # a worker or beat, where Celery would install its own handlers
def _log_like_every_process(loglevel=None, **kwargs) -> None:
    """Workers and beat log through settings.LOGGING (format, trace ids, secret filter) instead of
    Celery's own handlers: with a receiver here Celery configures none (issue 31). Python
    warnings become log lines too (as Django does). ``--loglevel`` still sets the level."""
    os.environ.setdefault("TOOLOPS_PROCESS_ROLE", "beat")  # not a worker (named above): the beat
    logging.config.dictConfig(settings.LOGGING)
    logging.captureWarnings(True)
    if loglevel:
        logging.getLogger().setLevel(loglevel)
    # The worker's lifecycle ("ready.", shutdown) stays visible when the rest is at WARNING.
    logging.getLogger("celery.apps.worker").setLevel(logging.INFO)
    if settings.LOGGING["handlers"]["console"]["formatter"] == "json":
        # The worker writes its shutdown notices from signal handlers straight to the terminal
        # (no logging: a lock there could deadlock); write them as JSON lines instead.
        celery_worker_app.safe_say = _say_as_json


_raw_say = celery_worker_app.safe_say


def _say_as_json(msg, f=sys.__stderr__) -> None:
    record = logging.makeLogRecord({"name": "celery.apps.worker", "levelno": logging.WARNING,
                                    "levelname": "WARNING", "msg": msg})
    _raw_say(JsonFormatter().format(record), f)
