"""Log lines never carry a tool credential in any form the matcher knows (toolops/log_redaction.py)."""
from __future__ import annotations

import base64
import io
import logging

from tests.hostile_server import disguised_encodings
from toolops.log_redaction import SecretRedactionFilter, install_on_handlers
from toolops.model_io.secret_forms import encoded_variants

SECRET = "log-secret-9fK2mQ7xLp4Z"


def _logger(stream: io.StringIO) -> logging.Logger:
    logger = logging.getLogger(f"test.redaction.{id(stream)}")
    logger.propagate = False
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    install_on_handlers(logger)
    return logger


def _logging_forms(settings, forms) -> tuple[logging.Logger, io.StringIO]:
    """A logger with the filter, ``SECRET`` configured, and one warning logged per form."""
    settings.TOOLOPS_TOOL_SECRETS = {"X": SECRET}
    stream = io.StringIO()
    logger = _logger(stream)
    for form in forms:
        logger.warning("remote said %s.", form)
    return logger, stream


def test_it_redacts_every_encoding_in_messages_arguments_and_tracebacks(settings):
    logger, stream = _logging_forms(settings, encoded_variants(SECRET).values())
    logger.info("blob " + base64.b64encode(b"Authorization: Bearer " + SECRET.encode() + b"\r\n").decode())
    try:
        raise ValueError(f"boom {SECRET.upper()}")
    except ValueError:
        logger.exception("failed")
    out = stream.getvalue()
    assert out.count("[REDACTED]") >= len(encoded_variants(SECRET)) + 2
    for form in encoded_variants(SECRET).values():
        assert form not in out


def test_it_redacts_a_disguised_credential(settings):
    """Issue 29: base32, nested encodings, HTML entities, separators, fullwidth (docs/redaction.md)."""
    _, stream = _logging_forms(settings, disguised_encodings(SECRET).values())
    assert stream.getvalue().count("[REDACTED]") == len(disguised_encodings(SECRET)), stream.getvalue()
    window = 16
    assert not [f for f in disguised_encodings(SECRET).values()
                if any(f[i:i + window] in stream.getvalue() for i in range(len(f) - window + 1))]


def test_it_installs_once_per_handler(settings):
    stream = io.StringIO()
    logger = _logger(stream)
    install_on_handlers(logger)
    assert sum(isinstance(f, SecretRedactionFilter) for f in logger.handlers[0].filters) == 1
