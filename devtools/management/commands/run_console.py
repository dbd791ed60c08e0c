"""`make run`: demo data, then the console + API, the MCP server, a Celery worker and beat, in one terminal.

The web process is the production one — gunicorn with threaded workers, static files by
whitenoise after a collectstatic into ``var/static`` — on whichever database is configured
(the embedded SQLite file included). ``--dev`` runs Django's runserver instead.
"""
from __future__ import annotations

import os
import secrets
import signal
import sys
import time
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from devtools.demo import load_demo
from devtools.processes import Children, port_in_use
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
        parser.add_argument("--verbose", action="store_true",
                            help="the worker's and beat's INFO lines too (each task; default: WARNING, or LOG_LEVEL)")

    def handle(self, *args, addr, no_worker, dev, verbose, **options):
        addresses = demo_addresses(os.environ, addr)
        addr = addresses.pop("addr")
        refuse_taken_ports(addr, addresses)
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
        # Issue 31: each child in its own process group, its lines prefixed with its name, and every
        # one stopped on Ctrl-C or SIGTERM (devtools/processes.py).
        children = Children()
        signal.signal(signal.SIGTERM, _interrupt)
        try:
            self._start(children, python, addr, demo_port, dev=dev, worker=not no_worker,
                        celery_level="INFO" if verbose else os.environ.get("LOG_LEVEL") or "WARNING")
            self._banner(addr, allow, info, token, dev)
            while (stopped := children.exited()) is None:
                time.sleep(0.5)
            self.stderr.write(f"{stopped.name} exited with status {stopped.proc.returncode}: stopping the others")
        except KeyboardInterrupt:
            pass
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not cut the stopping short
                signal.signal(sig, signal.SIG_IGN)
            children.stop()

    def _start(self, children: Children, python: str, addr: str, demo_port: str, *, dev: bool, worker: bool,
               celery_level: str) -> None:
        def env(role: str, **extra: str) -> dict[str, str]:
            return {**os.environ, "TOOLOPS_PROCESS_ROLE": role, **extra}

        if dev:
            children.start("web", [python, "manage.py", "runserver", addr, "--insecure", "--noreload"], env("web"))
        else:
            call_command("collectstatic", interactive=False, verbosity=0)
            children.start("web", [python, "-m", "gunicorn", "-c", "python:toolops.gunicorn_conf", "toolops.wsgi"],
                           env("web", GUNICORN_BIND=addr))
        children.start("demo", [python, "manage.py", "run_demo_services", "--port", demo_port], env("demo"))
        url = urlsplit(settings.TOOLOPS_DEMO_NOTES_MCP_URL)
        # The demo upstream MCP server, requiring the demo credential when one is configured.
        children.start("notes", [python, "-m", "demo_services.notes_mcp", "--host", url.hostname or "127.0.0.1",
                                 "--port", str(url.port or 8766)],
                       env("demo", NOTES_MCP_TOKEN=(settings.TOOLOPS_TOOL_SECRETS or {}).get("NOTES_MCP_TOKEN", "")))
        children.start("mcp", mcp_command(python), env("mcp"))
        if worker:
            # One process for the demo: the worker runs the beat too (-B). Its lifecycle lines
            # ("ready.") show at any level; each task's lines only with --verbose or LOG_LEVEL=INFO.
            children.start("worker", [python, "-m", "celery", "-A", "toolops", "--quiet", "worker", "-B",
                                      f"--loglevel={celery_level}", "--concurrency=2"], env("worker"))

    def _banner(self, addr: str, allow: str, info: dict, token: str, dev: bool) -> None:
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
        self.stdout.write("Ctrl-C (or SIGTERM) stops everything. Each line below starts with its process's name; "
                          "--verbose (or LOG_LEVEL=INFO) shows the worker's task lines too.\n")
        self.stdout.flush()


def _interrupt(signum, frame) -> None:
    """SIGTERM (a process manager's stop) ends `make run` as Ctrl-C does: every child is stopped."""
    raise KeyboardInterrupt


def refuse_taken_ports(addr: str, addresses: dict[str, str]) -> None:
    """Before anything starts (and before the banner): a port `make run` needs that something else
    holds is an error naming the port, instead of a banner followed by "Address already in use"."""
    host, _, port = addr.rpartition(":")
    needed = {("console", host, int(port))}
    for name in ("TOOLOPS_MCP_URL", "TOOLOPS_DEMO_SERVICES_URL", "TOOLOPS_DEMO_NOTES_MCP_URL"):
        url = urlsplit(addresses[name])
        needed.add((name, url.hostname or "127.0.0.1", url.port or (443 if url.scheme == "https" else 80)))
    taken = sorted(f"{port} ({what}, {host})" for what, host, port in needed if port_in_use(host, port))
    if taken:
        raise CommandError(f"port {', '.join(taken)} already in use: stop what holds it, or run on other ports "
                           "(PORT=<n> make run; docs/how-to/demo-ports.md)")
