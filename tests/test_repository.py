"""What git keeps: no source file of the project's packages is hidden by .gitignore (an
unanchored pattern once hid control/queues.py, and a clean checkout could not import its URLs)."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import PROJECT_PACKAGES, REPO_ROOT


def test_no_source_file_of_the_project_is_ignored_by_git():
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    paths = [*PROJECT_PACKAGES, "tests", "templates", "docs", "bench", "demo_services", "clients"]
    ignored = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "--others", "--ignored", "--exclude-standard",
                              "--", *[f"{p}/*.py" for p in paths], *[f"{p}/*.html" for p in paths]],
                             capture_output=True, text=True, check=True).stdout.split()
    assert ignored == [], ignored


def test_the_check_sees_an_ignored_file(tmp_path):
    probe = REPO_ROOT / "control" / "__pycache__" / "probe_ignored.py"  # __pycache__/ is ignored on purpose
    probe.parent.mkdir(exist_ok=True)
    probe.write_text("")
    try:
        out = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "--others", "--ignored", "--exclude-standard",
                              "--", "control/*.py"], capture_output=True, text=True, check=True).stdout
        assert "probe_ignored.py" in out
    finally:
        probe.unlink()
