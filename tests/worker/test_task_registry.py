"""Every task name the code sends or the beat schedules is registered in a worker: a task module
that Celery's autodiscovery (``<app>.tasks``) does not find would leave its messages unconsumed."""
from __future__ import annotations

from django.conf import settings

from invocations_app.dispatch import EXECUTE_TASK, WEBHOOK_DELIVER_TASK
from toolops.celery import app
from worker.upstream_sync import REFRESH_TASK


def test_every_sent_or_scheduled_task_is_registered():
    app.loader.import_default_modules()  # what a worker imports at start
    registered = {name for name in app.tasks if not name.startswith("celery.")}
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    sent = {EXECUTE_TASK, WEBHOOK_DELIVER_TASK, REFRESH_TASK}
    assert scheduled | sent <= registered, sorted((scheduled | sent) - registered)
    assert REFRESH_TASK in scheduled  # the schedule is read, so the check can fail
