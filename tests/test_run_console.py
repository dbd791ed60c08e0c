"""`make run`'s web process is gunicorn + whitenoise, and it works on the embedded defaults
(a SQLite file and the filesystem broker in a fresh var/ directory), with DEBUG off."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import requests

from tests.conftest import REPO_ROOT
from tests.servers import free_port, make_run, wait_for


def test_make_runs_web_process_is_gunicorn_serving_static_files_on_sqlite():
    var = Path(tempfile.mkdtemp(prefix="toolops-run-"))
    port, demo_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "DB_POOL", "CONN_MAX_AGE", "TOOLOPS_WEBHOOK_EGRESS_ALLOW")}
    env.update(TOOLOPS_VAR_DIR=str(var), DEBUG="0", TOOLOPS_DEMO_SERVICES_URL=f"http://127.0.0.1:{demo_port}")
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=REPO_ROOT, env=env, check=True)
    log = var / "run_console.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "manage.py", "run_console", "--no-worker", "--addr", f"127.0.0.1:{port}"],
                                cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            assert proc.poll() is None, log.read_text()
            try:
                return requests.get(base + "/login/", timeout=2).status_code == 200
            except requests.RequestException:
                return False

        wait_for(up, timeout=180, what="run_console")  # Django starts slowly on a loaded 2-core machine
        assert "gunicorn" in log.read_text()
        css = requests.get(base + "/static/admin/css/base.css", timeout=5)
        assert css.status_code == 200 and css.headers["Content-Type"].startswith("text/css")
        assert (var / "static" / "admin" / "css" / "base.css").exists()  # collected at start
        login = requests.get(base + "/login/", timeout=5)
        assert "script-src 'self'" in login.headers["Content-Security-Policy"]
        token = (var / "demo_token").read_text().strip()
        tools = requests.get(base + "/api/v1/tools", headers={"Authorization": f"Bearer {token}"}, timeout=5)
        assert tools.status_code == 200 and tools.json()["tools"]
        # Nothing is open by default: make run opens the demo services' address (and the demo notes
        # MCP server's) for every process it starts — the web process, the MCP server, the demo servers.
        demo = f"127.0.0.1:{demo_port}"
        assert "egress allow-list: " in log.read_text() and demo in log.read_text()
        assert "webhook egress allow-list: empty" in log.read_text()  # the demo's addresses are opened for tools only
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert len(children) >= 4, children
        for pid in children:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            [allow] = [e.decode() for e in environ if e.startswith(b"TOOLOPS_EGRESS_ALLOW=")]
            assert demo in allow.split("=", 1)[1].split(","), (pid, allow)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()



def test_make_run_serves_the_console_on_PORT_and_moves_every_demo_address_with_it():
    with make_run(worker=False) as run:
        port = run.port
        printed = run.output()
        for url in (f"http://127.0.0.1:{port}/", f"http://127.0.0.1:{port + 1}/mcp", f"http://127.0.0.1:{port + 765}",
                    f"http://127.0.0.1:{port + 766}/mcp"):
            assert url in printed, (url, printed)
        wait_for(lambda: run.answers(f"http://127.0.0.1:{port + 765}/"), timeout=30, what="the demo services")
        wait_for(lambda: run.answers(f"http://127.0.0.1:{port + 766}/_control/notes"), timeout=30,
                 what="the demo MCP server")
        metadata_url = f"http://127.0.0.1:{port + 1}/.well-known/oauth-protected-resource/mcp"
        wait_for(lambda: run.answers(metadata_url), timeout=30, what="the MCP server")
        metadata = requests.get(metadata_url, timeout=5).json()
        assert metadata["resource"] == f"http://127.0.0.1:{port + 1}/mcp"
        assert [u.rstrip("/") for u in metadata["authorization_servers"]] == [f"http://127.0.0.1:{port}"]
