"""ToolOps' project package. Deliberately empty: ``toolops.runtime`` (the pure core) must import
without Django or Celery, so the Celery app lives in ``toolops.celery`` and Django loads it at
start-up (``invocations_app.apps.InvocationsAppConfig.ready``)."""
