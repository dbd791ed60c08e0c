"""``manage.py grant_tool REF... --subject TENANT/NAME --by USER --reason WHY [--effect confirm]``."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management.base import BaseCommand, CommandError

from specs_app.models import Capability, Subject, ToolSpec
from specs_app.services import grant_create
from toolops.model_io.rendering import ToolNameError, parse_tool_ref


class Command(BaseCommand):
    help = "Grant a subject the capabilities published tool versions need (scope: any), pinned to those versions; audited."

    def add_arguments(self, parser):
        parser.add_argument("refs", nargs="+", metavar="NAME@VERSION")
        parser.add_argument("--subject", required=True, help="TENANT_SLUG/SUBJECT_NAME")
        parser.add_argument("--by", required=True, help="a user allowed to manage grants of the tenant")
        parser.add_argument("--reason", required=True)
        parser.add_argument("--effect", choices=["allow", "confirm"], default="allow")

    def handle(self, *args, refs, subject, by, reason, effect, **options):
        tenant_slug, _, name = subject.partition("/")
        who = Subject.objects.filter(tenant__slug=tenant_slug, name=name).select_related("tenant").first()
        user = get_user_model().objects.filter(username=by).first()
        if who is None or user is None:
            raise CommandError(f"no subject {subject!r}" if who is None else f"no user {by!r}")
        for ref in refs:
            try:
                spec = ToolSpec.objects.get(name=parse_tool_ref(ref)[0], version=parse_tool_ref(ref)[1], status=ToolSpec.Status.PUBLISHED)
            except (ToolNameError, ToolSpec.DoesNotExist):
                raise CommandError(f"{ref} is not a published tool version") from None
            for entry in spec.required_capabilities or []:
                try:
                    grant_create(user=user, capability=Capability.objects.get(name=entry["capability"]), tenant=who.tenant,
                                 subject=who, scope_kind="any", scope_values=[], limits={}, effect=effect,
                                 tool_refs=[spec.ref], expires_at=None, reason=reason)
                except (PermissionDenied, ValidationError) as exc:
                    raise CommandError(f"{ref}: {exc}") from None
                self.stdout.write(f"granted {entry['capability']} ({effect}) on {spec.ref} to {subject}")
