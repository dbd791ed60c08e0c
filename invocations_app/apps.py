from django.apps import AppConfig


class InvocationsAppConfig(AppConfig):
    name = "invocations_app"
    verbose_name = "Runs and invocations"

    def ready(self) -> None:
        # Load the Celery app when Django starts (web, management commands, workers): it becomes
        # every thread's default app, so tasks are sent with the project's broker settings.
        # Imported here rather than in toolops/__init__.py so the pure core imports alone.
        import toolops.celery  # noqa: F401
        from invocations_app.operations import connect_metrics

        connect_metrics()  # decisions counted for /metrics (docs/how-to/operate.md)
        import toolops.checks  # noqa: F401  (manage.py check: the declared settings, issue 31)
