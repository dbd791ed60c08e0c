"""The reference pages generated from the code (docs/gen/): complete, described, and built strictly.

Error codes come from ``toolops/error_codes.py`` and settings from the declared settings
(``docs/gen/settings_source.py``), so a code or a setting added without its description fails
here — and ``make docs`` refuses to build the page.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from docs.gen import reference, settings_source
from docs.gen.state_diagram import state_diagram_svg
from tests.conftest import PROJECT_PACKAGES, REPO_ROOT
from toolops import error_codes
from toolops.runtime.states import ALL_EDGES


def test_every_error_code_has_a_meaning_and_an_action():
    assert reference.undescribed_codes() == [], "describe these codes in toolops/error_codes.py"


def test_a_code_without_a_description_stops_the_errors_page(monkeypatch):
    monkeypatch.setitem(error_codes.HTTP, "brand_new_code", error_codes.ErrorCode("brand_new_code", 400, "", ""))
    with pytest.raises(reference.MissingDescription, match="brand_new_code"):
        reference.errors_page()


def _rows(section: str) -> list[str]:
    return re.findall(r"^\| `([a-z0-9_]+)` \|", section, flags=re.MULTILINE)


def test_the_errors_page_lists_every_code_once_per_surface():
    page = reference.errors_page()
    api, recorded, people = re.split(r"\n## (?:Recorded outcomes|Decisions by people)\n", page)
    for part, table in ((api, error_codes.HTTP), (recorded, error_codes.INVOCATION), (people, error_codes.CONSOLE)):
        assert sorted(_rows(part)) == sorted(table)


def test_a_shared_decision_code_reads_the_same_in_both_tables():
    page = reference.errors_page()
    for entry in error_codes.DECISIONS:
        row = f"| `{entry.code}` | {entry.status} | {entry.meaning} | {entry.action} |"
        assert page.count(row) == 2, row


def test_every_setting_the_code_reads_is_on_the_settings_page():
    page = reference.settings_page()
    for name in {s.name for s in settings_source.scanned_settings()}:
        assert f"| `{name}` |" in page, name


def test_every_setting_has_a_meaning():
    missing = [s.name for s in settings_source.declared_settings() if not s.meaning.strip()]
    assert not missing, f"settings without a meaning: {missing}"


def test_every_project_command_is_documented_with_its_help():
    from django.core.management import get_commands

    ours = {name for name, app in get_commands().items() if app in PROJECT_PACKAGES}
    assert ours == set(reference.COMMANDS), "add the command to docs/gen/reference.py COMMANDS"
    page = reference.commands_page()
    for name in reference.COMMANDS:
        assert f"## `{name}`" in page and f"usage: manage.py {name}" in page


def test_the_http_api_page_covers_every_operation_of_the_schema():
    schema = reference.openapi_schema()
    page = reference.api_page(schema)
    for path, item in schema["paths"].items():
        for method in item:
            if method in reference.METHODS:
                assert f"### `{method.upper()} {path}`" in page


def test_the_state_diagram_draws_every_edge_and_nothing_else():
    drawn = set(re.findall(r"<title>([A-Z_]+) → ([A-Z_]+)</title>", state_diagram_svg()))
    assert drawn == {(src.value, dst.value) for src, dst in ALL_EDGES}


def test_the_site_builds_strictly_and_offline():
    """``make docs``' two steps: a broken link, a missing anchor or a page left out fails."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    subprocess.run([sys.executable, "docs/gen/generate.py"], cwd=REPO_ROOT, env=env, check=True,
                   capture_output=True, timeout=300)
    site = REPO_ROOT / "var" / "site-test"
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                           cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    assert (site / "generated" / "errors.html").is_file() and (site / "getting-started.html").is_file()
    # The tour is included from the README, not copied.
    assert "weather-get_forecast_v1" in (site / "getting-started.html").read_text(encoding="utf-8")
