"""What git keeps: no source file of the project's packages is hidden by .gitignore (an
unanchored pattern once hid control/queues.py, and a clean checkout could not import its URLs)."""
from __future__ import annotations

import shutil
import subprocess

from tests.conftest import PROJECT_PACKAGES, REPO_ROOT, require

SOURCES = [*PROJECT_PACKAGES, "tests", "templates", "docs", "bench", "demo_services", "clients"]


def ignored_by_git(patterns: list[str]) -> list[str]:
    """Untracked files matching ``patterns`` that .gitignore hides (``git status`` never shows them)."""
    require(shutil.which("git") is not None and (REPO_ROOT / ".git").exists(), "a git checkout (git and .git/)")
    return subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "--others", "--ignored", "--exclude-standard",
                           "--", *patterns], capture_output=True, text=True, check=True).stdout.split()


def test_no_source_file_of_the_project_is_ignored_by_git():
    assert ignored_by_git([f"{p}/*.{ext}" for p in SOURCES for ext in ("py", "html")]) == []


def test_the_check_sees_an_ignored_file():
    probe = REPO_ROOT / "control" / "__pycache__" / "probe_ignored.py"  # __pycache__/ is ignored on purpose
    probe.parent.mkdir(exist_ok=True)
    probe.write_text("")
    try:
        assert "control/__pycache__/probe_ignored.py" in ignored_by_git(["control/*.py"])
    finally:
        probe.unlink()
