"""``TOOLOPS_LOG_FORMAT=json``: one JSON object per line, from every process (issue 31).

In-process tests drive the console handler of settings.LOGGING (the one every Django process and,
through the ``setup_logging`` receiver, every Celery process uses); subprocess tests start a real
Celery worker with beat, gunicorn and the MCP server in JSON mode and parse everything they print.
"""
from __future__ import annotations

import copy
import io
import json
import logging
import logging.config
import os
import signal
import subprocess
import sys
import time

import pytest
import requests
from opentelemetry.sdk.trace import TracerProvider

from tests.conftest import REPO_ROOT
from tests.servers import free_port, gunicorn_server, wait_for
from toolops.logformat import FIELDS, invocation_scope
from toolops.tracelog import trace_scope

SECRET = "sk-live-do-not-log-7f3a9c"


@pytest.fixture
def json_log(settings):
    """A logger whose only handler is settings.LOGGING's console handler in the json format,
    writing into a buffer; yields (logger, read_lines)."""
    settings.TOOLOPS_TOOL_SECRETS = {"CAL_TOKEN": SECRET}
    config = copy.deepcopy(settings.LOGGING)
    config["handlers"]["console"]["formatter"] = "json"
    config["handlers"]["console"]["stream"] = buffer = io.StringIO()
    config["root"] = {"handlers": [], "level": "INFO"}
    config["loggers"] = {"toolops.test_json": {"handlers": ["console"], "level": "INFO", "propagate": False}}
    config["disable_existing_loggers"] = False
    logging.config.dictConfig(config)
    try:
        yield logging.getLogger("toolops.test_json"), lambda: [json.loads(line) for line in buffer.getvalue().splitlines()]
    finally:
        logging.config.dictConfig(settings.LOGGING)


def test_a_line_is_one_json_object_with_the_fields(json_log, monkeypatch):
    log, lines = json_log
    monkeypatch.setenv("TOOLOPS_PROCESS_ROLE", "worker")
    with trace_scope("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"), invocation_scope("inv_123"):
        log.info("attempt %s sent", 1)
    (line,) = lines()
    assert line["message"] == "attempt 1 sent"
    assert line["level"] == "info" and line["logger"] == "toolops.test_json" and line["role"] == "worker"
    assert line["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736" and line["span_id"] == "00f067aa0ba902b7"
    assert line["invocation_id"] == "inv_123"
    assert line["timestamp"].endswith("Z")
    assert set(line) <= set(FIELDS)


def test_ids_come_from_the_current_opentelemetry_span_when_no_trace_scope(json_log):
    log, lines = json_log
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("Attempt") as span:
        log.warning("inside a span")
    log.warning("outside")
    inside, outside = lines()
    context = span.get_span_context()
    assert inside["trace_id"] == format(context.trace_id, "032x") and inside["span_id"] == format(context.span_id, "016x")
    assert "trace_id" not in outside and "invocation_id" not in outside


def test_an_invocation_id_passed_as_extra_is_kept_and_other_extras_are_not(json_log):
    log, lines = json_log
    log.info("settled", extra={"invocation_id": "inv_9", "arguments": {"card": "4111"}, "headers": "x"})
    (line,) = lines()
    assert line["invocation_id"] == "inv_9"
    assert "arguments" not in line and "4111" not in json.dumps(line)


def test_a_secret_never_appears_in_a_message_or_a_traceback(json_log):
    log, lines = json_log
    log.warning("calling with token %s", SECRET)
    try:
        raise RuntimeError(f"remote refused {SECRET}")
    except RuntimeError:
        log.exception("attempt failed for %s", {"Authorization": f"Bearer {SECRET}"})
    warning, error = lines()
    assert SECRET not in json.dumps([warning, error])
    assert "RuntimeError" in error["exception"] and error["level"] == "error"


def test_the_text_format_stays_the_default(settings):
    assert settings.LOGGING["handlers"]["console"]["formatter"] == "plain"


# --------------------------------------------------------------------------- real processes

def _json_env(tmp_path, **extra: str) -> dict[str, str]:
    """No TOOLOPS_PROCESS_ROLE: each entry point names its own role."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "TOOLOPS_PROCESS_ROLE")}
    return {**env, "TOOLOPS_VAR_DIR": str(tmp_path), "TOOLOPS_QUEUE": f"json-logs-{os.getpid()}",
            "TOOLOPS_LOG_FORMAT": "json", "TOOLOPS_TOOL_SECRETS": json.dumps({"CAL_TOKEN": SECRET}), **extra}


def _parse_every_line(output: str, role: str) -> list[dict]:
    lines = [line for line in output.splitlines() if line.strip()]
    assert lines, "the process printed nothing"
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            pytest.fail(f"not a JSON line: {line!r}")
    for entry in parsed:
        assert {"timestamp", "level", "logger", "message"} <= set(entry), entry
        assert entry["role"] == role, entry
    assert SECRET not in output
    return parsed


def _stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    return out


def test_a_celery_worker_with_beat_prints_only_json_lines(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", "toolops", "--quiet", "worker", "-B",
                             "--loglevel=INFO", "--concurrency=1"], cwd=REPO_ROOT, env=_json_env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(12)  # long enough for the worker to be ready and the beat to send its 2-second task
    entries = _parse_every_line(_stop(proc), "worker")
    messages = [e["message"] for e in entries]
    assert any(m.endswith(" ready.") for m in messages), messages
    assert any(e["logger"] == "celery.beat" for e in entries), messages


def test_a_celery_beat_prints_only_json_lines_as_the_beat(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", "toolops", "--quiet", "beat", "--loglevel=INFO",
                             "--schedule", str(tmp_path / "beat-schedule")], cwd=REPO_ROOT, env=_json_env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(15)  # start-up on a loaded machine, then the 2-second task a few times
    entries = _parse_every_line(_stop(proc), "beat")
    assert any("Sending due task" in e["message"] for e in entries), entries


def test_gunicorn_and_the_django_app_print_only_json_lines(tmp_path):
    env = _json_env(tmp_path, GUNICORN_ACCESSLOG="-")
    with gunicorn_server(env) as server:
        requests.get(server.url + "/api/v1/tools", timeout=10)
        requests.get(server.url + "/api/v1/no-such-page", timeout=10)
        time.sleep(0.5)
        output = server.output()
    entries = _parse_every_line(output, "web")
    assert any(e["logger"] == "gunicorn.access" and "/api/v1/tools" in e["message"] for e in entries), entries
    assert any(e["logger"] == "gunicorn.error" for e in entries), entries


def test_the_mcp_server_prints_only_json_lines(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "mcp_server.asgi:app", "--port", str(port),
                             "--log-level", "info"], cwd=REPO_ROOT, env=_json_env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def answers() -> bool:
        try:
            requests.get(f"http://127.0.0.1:{port}/mcp", timeout=2)
            return True
        except requests.RequestException:
            assert proc.poll() is None, proc.stdout.read()
            return False

    try:
        wait_for(answers, timeout=60, what="the MCP server")
    finally:
        output = _stop(proc)
    entries = _parse_every_line(output, "mcp")
    assert any(e["logger"].startswith("uvicorn") for e in entries), entries
