"""``manage.py mcp_import URL --prefix NAME [--credential secret:NAME] [--tenant SLUG]``: draft ToolSpecs from an MCP server."""
from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from specs_app.models import Tenant
from worker.upstream_sync import UpstreamUnavailable, upstream_import


class Command(BaseCommand):
    help = "Read an MCP server's tools/list and create DRAFT ToolSpecs pinned to each definition's digest."

    def add_arguments(self, parser):
        parser.add_argument("url", help="the server's streamable HTTP endpoint, e.g. http://127.0.0.1:8766/mcp")
        parser.add_argument("--prefix", required=True, help="ToolSpec names become PREFIX.<upstream tool name>")
        parser.add_argument("--credential", default="", help='"secret:NAME" from TOOLOPS_TOOL_SECRETS, sent as a bearer token')
        parser.add_argument("--tenant", default="", metavar="SLUG",
                            help="the tenant that owns the drafts (listed to it only); default: global, every tenant")
        parser.add_argument("--lookup", action="append", default=[], metavar="TOOL=LOOKUP_TOOL",
                            help="name the upstream tool that finds TOOL's effect by idempotency key (repeatable)")

    def handle(self, *args, url, prefix, credential, lookup, tenant, **options):
        owner = None
        if tenant:
            owner = Tenant.objects.filter(slug=tenant).first()
            if owner is None:
                raise CommandError(f"no tenant {tenant!r}")
        lookups = {}
        for pair in lookup:
            tool, sep, finder = pair.partition("=")
            if not sep:
                raise CommandError(f"--lookup wants TOOL=LOOKUP_TOOL, got {pair!r}")
            lookups[tool] = finder
        try:
            report = upstream_import(url=url, prefix=prefix, credential=credential, lookups=lookups, tenant=owner)
        except (UpstreamUnavailable, ValidationError) as exc:
            raise CommandError(str(exc)) from None
        for spec in report.created:
            pin = spec.upstream
            self.stdout.write(f"draft {spec.ref:<40} class {spec.side_effect_class:<17} "
                              f"confirmation {'required' if (spec.confirmation_policy or {}).get('required') else 'by grant':<9} "
                              f"sha256 {pin.pinned_sha256[:16]}…")
        for name in report.unchanged:
            self.stdout.write(f"unchanged {name} (already pinned)")
        for name, why in report.skipped.items():
            self.stderr.write(f"skipped {name}: {why}")
        self.stdout.write(self.style.SUCCESS(
            f"{len(report.created)} draft(s); review the class of each in the console and publish."))
