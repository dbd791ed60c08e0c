from django.apps import AppConfig


class SpecsAppConfig(AppConfig):
    name = "specs_app"
    verbose_name = "Tools, tenants and identities"
