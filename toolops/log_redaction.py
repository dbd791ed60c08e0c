"""A logging filter that removes every configured tool secret from log lines.

Installed on the console handler (settings.LOGGING) and on the handlers Celery sets up in
workers (toolops/celery.py). It rewrites the record's message (arguments merged in) and its
formatted traceback, so no handler or formatter downstream can print a credential in any form
the matcher knows (``toolops.model_io.secret_forms``; docs/redaction.md).
"""
from __future__ import annotations

import logging

from django.conf import settings

from toolops.model_io.secret_forms import secret_matcher
from toolops.model_io.tool_messages import REDACTED


def _matcher():
    secrets = getattr(settings, "TOOLOPS_TOOL_SECRETS", {}) or {}
    return secret_matcher(v for v in secrets.values() if isinstance(v, str))


class SecretRedactionFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        matcher = _matcher()
        if matcher is None:
            return True
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken format string is logged as written, still redacted
            message = str(record.msg)
        record.msg, record.args = matcher.sub(message, REDACTED), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = matcher.sub(record.exc_text, REDACTED)
        if record.stack_info:
            record.stack_info = matcher.sub(record.stack_info, REDACTED)
        return True


def install_on_handlers(logger: logging.Logger) -> None:
    """Add the filter to every handler of ``logger`` (once)."""
    for handler in logger.handlers:
        if not any(isinstance(f, SecretRedactionFilter) for f in handler.filters):
            handler.addFilter(SecretRedactionFilter())
