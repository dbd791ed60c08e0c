"""One live ``make run`` (embedded defaults: gunicorn, the Celery worker, the demo tools) for the
client's tests, with the demo agent token and a personal token for the demo admin (an approver)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT
from tests.servers import NOT_EMBEDDED, make_run
from toolops_client import ToolOps

ISSUE_PERSONAL_TOKEN = (
    "from django.contrib.auth import get_user_model\n"
    "from specs_app.services import personal_token_issue\n"
    "print(personal_token_issue(user=get_user_model().objects.get(username='admin'), label='client tests')[1])\n"
)


@pytest.fixture(scope="session")
def server():
    with make_run() as run:
        env = {k: v for k, v in os.environ.items() if k not in NOT_EMBEDDED}
        env["TOOLOPS_VAR_DIR"] = str(run.var)
        issued = subprocess.run([sys.executable, "manage.py", "shell", "-c", ISSUE_PERSONAL_TOKEN], cwd=REPO_ROOT,
                                env=env, capture_output=True, text=True, timeout=120, check=True)
        run.approver_token = issued.stdout.strip().splitlines()[-1]
        yield run


@pytest.fixture
def client(server):
    with ToolOps(server.url, server.token()) as c:
        yield c


@pytest.fixture
def approver(server):
    with ToolOps(server.url, server.approver_token) as c:
        yield c
