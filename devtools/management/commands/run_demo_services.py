"""`manage.py run_demo_services`: the demo calendar, payments and web APIs on one port, until Ctrl-C."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from demo_services.server import serve


class Command(BaseCommand):
    help = "Run the demo third-party services (calendar, payments, web, fault control) until Ctrl-C/SIGTERM."
    # It plays an external system: Django's checks are irrelevant to it and must not stop it starting.
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8765)
        parser.add_argument("--data-dir", type=Path, default=None, help="default: VAR_DIR/demo_services")
        parser.add_argument("--quiet", action="store_true", help="do not log each request to stderr")

    def handle(self, *args, host, port, data_dir, quiet, **options):
        data_dir = data_dir or settings.VAR_DIR / "demo_services"

        def ready(base_url: str) -> None:
            self.stdout.write(self.style.SUCCESS(f"Demo services listening on {base_url}"))
            self.stdout.write(f"data: {data_dir}   health: {base_url}/_control/health   Ctrl-C stops.")
            self.stdout.flush()  # callers (and tests) wait for this line on a pipe

        try:
            serve(host, port, data_dir, on_ready=ready, log_requests=not quiet)
        except OSError as exc:
            raise CommandError(f"cannot listen on {host}:{port}: {exc}") from exc
