from django.apps import AppConfig


class OAuthConfig(AppConfig):
    name = "oauth"
    verbose_name = "MCP client connections (OAuth)"
    default_auto_field = "django.db.models.BigAutoField"
