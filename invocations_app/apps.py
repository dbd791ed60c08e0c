from django.apps import AppConfig


class InvocationsAppConfig(AppConfig):
    name = "invocations_app"
    verbose_name = "Runs and invocations"
