"""Every setting validated at start (issue 31): one declared table, read by settings.py and gunicorn's
configuration, checked by ``manage.py check`` and at each process's entry point.

The subprocess tests run the real entry points with one bad variable each and expect the process
to stop before doing anything, naming that variable (and never echoing a secret's value).
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from docs.gen import settings_source
from tests.conftest import REPO_ROOT
from toolops import settings_table
from toolops.settings_table import BY_NAME, SETTINGS, SettingsInvalid, problems, read_environment

BAD_VALUES = {
    "TOOLOPS_API_RATE": "garbage",          # a rate
    "DB_POOL_MAX_SIZE": "eight",            # an integer
    "TOOLOPS_SWEEP_BATCH": "0",             # an integer below its minimum
    "TOOLOPS_MCP_URL": "127.0.0.1:8001",    # a URL without a scheme
    "REDIS_URL": "http://localhost:6379",   # a URL of the wrong scheme
    "DEBUG": "maybe",                       # a boolean
    "TOOLOPS_LOG_FORMAT": "xml",            # an enum
    "LOG_LEVEL": "LOUD",                    # an enum
    "TOOLOPS_EGRESS_ALLOW": "example.com:80",  # an allow-list entry that is a host name
    "TOOLOPS_MCP_RUN_BUDGETS": "[1, 2]",    # a JSON object
}


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in BY_NAME}
    return {**env, "TOOLOPS_VAR_DIR": os.environ.get("TOOLOPS_VAR_DIR", str(REPO_ROOT / "var")), **extra}


def _manage_check(**extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", "check"], cwd=REPO_ROOT, env=_clean_env(**extra),
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", sorted(BAD_VALUES))
def test_a_bad_value_is_refused_by_the_table_naming_the_variable(name):
    errors = problems({name: BAD_VALUES[name]})
    assert list(errors) == [name]
    assert errors[name].startswith(f"{name}=")


def test_the_defaults_and_good_values_pass():
    good = {"TOOLOPS_API_RATE": "100/s", "DB_POOL_MAX_SIZE": "12", "TOOLOPS_MCP_URL": "https://mcp.example/mcp",
            "REDIS_URL": "redis://127.0.0.1:6379/22", "DEBUG": "false", "TOOLOPS_LOG_FORMAT": "JSON",
            "LOG_LEVEL": "warning", "TOOLOPS_EGRESS_ALLOW": "127.0.0.1:8765,[::1]:9000",
            "TOOLOPS_MCP_RUN_BUDGETS": '{"tool_calls": 5}', "GUNICORN_ACCESSLOG": ""}
    assert problems({}) == {}
    values = read_environment(good)
    assert values["TOOLOPS_API_RATE"] == "100/s" and values["DB_POOL_MAX_SIZE"] == 12
    assert values["DEBUG"] is False and values["TOOLOPS_LOG_FORMAT"] == "json" and values["LOG_LEVEL"] == "WARNING"
    assert values["TOOLOPS_EGRESS_ALLOW"] == ["127.0.0.1:8765", "[::1]:9000"]
    assert values["GUNICORN_ACCESSLOG"] == ""  # empty means "no access log", not the default
    assert read_environment({})["GUNICORN_ACCESSLOG"] == "-"


def test_every_bad_variable_is_named_at_once():
    with pytest.raises(SettingsInvalid) as raised:
        read_environment(BAD_VALUES)
    assert set(raised.value.errors) == set(BAD_VALUES)


def test_a_secret_value_is_never_repeated_in_the_error():
    secret = "tok-very-secret-value"
    errors = problems({"TOOLOPS_TOOL_SECRETS": f'["{secret}"]', "DATABASE_URL": f"nodb://{secret}"})
    assert set(errors) == {"TOOLOPS_TOOL_SECRETS", "DATABASE_URL"}
    assert secret not in " ".join(errors.values())


def test_manage_py_check_passes_with_good_values():
    done = _manage_check(TOOLOPS_API_RATE="10/min", DB_POOL_MAX_SIZE="4", DEBUG="0", TOOLOPS_LOG_FORMAT="json")
    assert done.returncode == 0, done.stderr
    assert "no issues" in done.stdout


@pytest.mark.parametrize("name", ["TOOLOPS_API_RATE", "DB_POOL_MAX_SIZE", "TOOLOPS_MCP_URL", "DEBUG",
                                  "TOOLOPS_LOG_FORMAT"])
def test_manage_py_check_stops_on_a_bad_value_naming_it(name):
    done = _manage_check(**{name: BAD_VALUES[name]})
    assert done.returncode != 0
    assert f"{name}={BAD_VALUES[name]!r}" in done.stderr
    assert "Traceback" not in done.stderr  # a message for an operator, not a stack


def test_importing_the_settings_stops_on_a_bad_rate():
    """Any process that sets Django up (web, MCP, worker, beat) imports these settings first."""
    code = "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='toolops.settings'; django.setup()"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=_clean_env(TOOLOPS_API_RATE="garbage"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and "TOOLOPS_API_RATE='garbage'" in done.stderr


@pytest.mark.parametrize("entry", [["-m", "celery", "-A", "toolops", "worker"],
                                   ["-m", "gunicorn", "-c", "python:toolops.gunicorn_conf", "toolops.wsgi"],
                                   ["-m", "uvicorn", "mcp_server.asgi:app", "--port", "1"]])
def test_each_process_refuses_to_start_on_a_bad_rate(entry):
    done = subprocess.run([sys.executable, *entry], cwd=REPO_ROOT, env=_clean_env(TOOLOPS_API_RATE="garbage"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "TOOLOPS_API_RATE='garbage'" in done.stderr + done.stdout


def test_the_system_check_reports_a_bad_value_held_in_settings(settings):
    from toolops.checks import declared_settings_check

    settings.TOOLOPS_API_RATE = "fast"
    assert [m.obj for m in declared_settings_check()] == ["TOOLOPS_API_RATE"]
    settings.TOOLOPS_API_RATE = "5/min"
    assert declared_settings_check() == []


def test_every_variable_the_settings_modules_read_is_declared():
    read = {s.name for s in settings_source.scanned_settings()}
    assert read, "the scan found nothing: it no longer matches how settings.py reads"
    assert read <= set(BY_NAME), f"declare these in toolops/settings_table.py: {sorted(read - set(BY_NAME))}"


@pytest.mark.parametrize("relative", settings_source.SCANNED)
def test_the_settings_modules_read_the_environment_only_through_the_table(relative):
    tree = ast.parse((REPO_ROOT / relative).read_text(encoding="utf-8"))
    # Reads: os.environ.get(...), os.environ[...], os.getenv(...); not a write such as setdefault.
    direct = [ast.unparse(node) for node in ast.walk(tree)
              if (isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ")
              or (isinstance(node, ast.Call) and ast.unparse(node.func) in ("os.environ.get", "os.getenv"))]
    assert direct == [], f"read these through toolops/settings_table.py: {direct}"


def test_the_table_names_each_variable_once_and_imports_without_django():
    assert len(BY_NAME) == len(SETTINGS)
    done = subprocess.run([sys.executable, "-c", "import sys, toolops.settings_table; "
                           "sys.exit('django' in sys.modules)"], cwd=REPO_ROOT, capture_output=True, timeout=60)
    assert done.returncode == 0
    assert settings_table.__doc__
