"""The client is typed: mypy finds nothing in it, and sees the answers' types where it is used."""
from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_mypy_checks_the_client_and_its_typed_use():
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--ignore-missing-imports", "--no-incremental", "clients/python/toolops_client",
         "tests/client/typed_usage.py"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
