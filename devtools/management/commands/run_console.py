"""`make run`: demo data, then the console + API, the MCP server, a Celery worker and beat, in one terminal.

The web process is the production one — gunicorn with threaded workers, static files by
whitenoise after a collectstatic into ``var/static`` — on whichever database is configured
(the embedded SQLite file included). ``--dev`` runs Django's runserver instead.
"""
from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from devtools.demo import load_demo
from worker.egress_net import allow_with


# `make run` on another port: PORT moves the console, and every other address the demo listens on
# keeps its distance from it, so PORT=8000 gives exactly the defaults (8001, 8765, 8766).
DEMO_PORT_OFFSETS = {"TOOLOPS_MCP_URL": ("http://127.0.0.1:{port}/mcp", 1),
                     "TOOLOPS_DEMO_SERVICES_URL": ("http://127.0.0.1:{port}", 765),
                     "TOOLOPS_DEMO_NOTES_MCP_URL": ("http://127.0.0.1:{port}/mcp", 766)}


def demo_addresses(environ: dict[str, str], addr: str | None = None) -> dict[str, str]:
    """Where ``make run`` listens: ``addr`` (the console) and the URLs of the other processes.

    The console's port is ``--addr``'s, else ``PORT``, else 8000; the MCP server and the two
    demo servers follow it at fixed offsets. A URL variable set explicitly wins over the derived one."""
    addr = addr or f"127.0.0.1:{environ.get('PORT') or '8000'}"
    host, _, raw = addr.rpartition(":")
    highest = 65535 - max(offset for _, offset in DEMO_PORT_OFFSETS.values())
    if not (host and raw.isdigit() and 0 < int(raw) <= highest):
        raise CommandError(f"console address {addr!r}: give HOST:PORT with a port from 1 to {highest} "
                           "(the demo also listens on PORT+1, PORT+765 and PORT+766)")
    port = int(raw)
    urls = {name: environ.get(name) or template.format(port=port + offset)
            for name, (template, offset) in DEMO_PORT_OFFSETS.items()}
    console = (environ.get("TOOLOPS_CONSOLE_URL") or f"http://{addr}").rstrip("/")
    return {"addr": addr, "TOOLOPS_CONSOLE_URL": console, **urls}


def mcp_command(python: str) -> list[str]:
    """``uvicorn mcp_server.asgi:app`` on the host and port of TOOLOPS_MCP_URL (one source of truth:
    the URL is also the RFC 9728 resource identifier the server announces)."""
    url = urlsplit(settings.TOOLOPS_MCP_URL)
    host, port = url.hostname or "127.0.0.1", str(url.port or (443 if url.scheme == "https" else 80))
    return [python, "-m", "uvicorn", "mcp_server.asgi:app", "--host", host, "--port", port, "--log-level", "warning"]


def demo_egress_allow() -> str:
    """``TOOLOPS_EGRESS_ALLOW`` for the processes ``make run`` starts: the operator's own entries
    plus, explicitly, the demo notes MCP server's address (the demo imports it, the worker calls
    it) and the demo services' address (the demo ToolSpecs' fixed endpoints, called by the worker
    and by the MCP server's inline reads). Both are loopback, so refused by default; nothing
    else is opened."""
    return ",".join(allow_with(settings.TOOLOPS_EGRESS_ALLOW, settings.TOOLOPS_DEMO_NOTES_MCP_URL,
                               settings.TOOLOPS_DEMO_SERVICES_URL))


class Command(BaseCommand):
    help = "Load the demo data and run the web console/API, the MCP server, the demo services, a Celery worker and beat until Ctrl-C."

    def add_arguments(self, parser):
        parser.add_argument("--addr", help="where the console listens (default 127.0.0.1:$PORT, PORT defaulting to 8000)")
        parser.add_argument("--no-worker", action="store_true", help="run only the web process")
        parser.add_argument("--dev", action="store_true", help="Django's runserver instead of gunicorn (development only)")

    def handle(self, *args, addr, no_worker, dev, **options):
        addresses = demo_addresses(os.environ, addr)
        addr = addresses.pop("addr")
        # Before the demo data (its grants pin the demo services' address) and before any child
        # process starts (each reads these from its environment).
        for name, url in addresses.items():
            os.environ[name] = url
            setattr(settings, name, url)
        token_file = settings.VAR_DIR / "demo_token"
        if not token_file.exists():
            token_file.write_text("tko_demo_" + secrets.token_urlsafe(24))
            token_file.chmod(0o600)
        token = token_file.read_text().strip()
        info = load_demo(token=token)
        python = sys.executable
        # Every process started below inherits it (each builds its env from os.environ): the web
        # process (the console's import, support resends), the MCP server (inline reads), the worker
        # (calls, refresh). This process's own settings get it too, for anything it runs itself.
        os.environ["TOOLOPS_EGRESS_ALLOW"] = allow = demo_egress_allow()
        settings.TOOLOPS_EGRESS_ALLOW = allow.split(",") if allow else []
        demo_port = settings.TOOLOPS_DEMO_SERVICES_URL.rsplit(":", 1)[-1].strip("/")
        if dev:
            web = subprocess.Popen([python, "manage.py", "runserver", addr, "--insecure", "--noreload"])
        else:
            call_command("collectstatic", interactive=False, verbosity=0)
            web = subprocess.Popen(
                [python, "-m", "gunicorn", "-c", "python:toolops.gunicorn_conf", "toolops.wsgi"],
                env={**os.environ, "GUNICORN_BIND": addr},
            )
        procs = [
            web,
            subprocess.Popen([python, "manage.py", "run_demo_services", "--port", demo_port]),
            self._notes_mcp(python),
            subprocess.Popen(mcp_command(python)),
        ]
        if not no_worker:
            procs.append(subprocess.Popen(
                [python, "-m", "celery", "-A", "toolops", "worker", "-B", "--loglevel=INFO", "--concurrency=2"]
            ))
        self.stdout.write(self.style.SUCCESS(f"\nToolOps console:  http://{addr}/"))
        self.stdout.write(f"API docs:         http://{addr}/api/docs/")
        self.stdout.write(f"console URL:      {settings.TOOLOPS_CONSOLE_URL} (TOOLOPS_CONSOLE_URL, in links and MCP metadata)")
        self.stdout.write(f"MCP server:       {settings.TOOLOPS_MCP_URL} (Authorization: Bearer <the API token>)")
        self.stdout.write(f"demo services:    {settings.TOOLOPS_DEMO_SERVICES_URL} (calendar, payments, web pages)")
        self.stdout.write(f"demo MCP server:  {settings.TOOLOPS_DEMO_NOTES_MCP_URL} (notes; govern it: docs, "
                          "tutorials/mcp-server.md)")
        self.stdout.write(f"egress allow-list: {allow} (TOOLOPS_EGRESS_ALLOW, for the demo's processes only; nothing "
                          "is open by default)")
        self.stdout.write(f"webhook egress allow-list: {','.join(settings.TOOLOPS_WEBHOOK_EGRESS_ALLOW) or 'empty'} "
                          "(TOOLOPS_WEBHOOK_EGRESS_ALLOW, as you set it: the tools' list above opens nothing to webhooks)")
        self.stdout.write(f"admin login:      {info['admin']} / admin (change it: manage.py changepassword admin)")
        self.stdout.write(f"demo API token:   {token}")
        self.stdout.write(f"broker:           {settings.CELERY_BROKER_URL}   database: {settings.DATABASES['default']['ENGINE']}")
        self.stdout.write(f"web server:       {'runserver (--dev)' if dev else 'gunicorn (toolops/gunicorn_conf.py)'}")
        self.stdout.write("PORT=<n> make run moves the console to n and the others to n+1, n+765, n+766.")
        self.stdout.write("Ctrl-C stops everything.\n")
        try:
            while all(p.poll() is None for p in procs):
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
            for p in procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()

    @staticmethod
    def _notes_mcp(python: str) -> subprocess.Popen:
        """The demo upstream MCP server, requiring the demo credential when one is configured."""
        url = urlsplit(settings.TOOLOPS_DEMO_NOTES_MCP_URL)
        env = {**os.environ, "NOTES_MCP_TOKEN": (settings.TOOLOPS_TOOL_SECRETS or {}).get("NOTES_MCP_TOKEN", "")}
        return subprocess.Popen([python, "-m", "demo_services.notes_mcp", "--host", url.hostname or "127.0.0.1",
                                 "--port", str(url.port or 8766)], env=env)
