"""The tools' configured credentials (``TOOLOPS_TOOL_SECRETS``): the executors send them, and
everything a model or a person reads is checked for them (``invocations_app.tool_messages``)."""
from __future__ import annotations

from django.conf import settings


def tool_secrets() -> dict[str, str]:
    return dict(getattr(settings, "TOOLOPS_TOOL_SECRETS", {}) or {})


def secret_values() -> list[str]:
    """Every configured tool credential (for redaction).

    All of them, not only those this tool sends: a hostile remote may echo any credential it
    ever saw, and redacting a value that is absent costs nothing.
    """
    return [v for v in tool_secrets().values() if isinstance(v, str) and v]
