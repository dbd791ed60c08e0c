"""``manage.py mcp_publish --prefix NAME --by USER [--confirm-class] [--tool T ...]``: review + publish imported drafts."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from specs_app.models import ToolSpec, UpstreamTool
from specs_app.services import toolspec_publish
from worker.upstream_sync import upstream_confirm_class


class Command(BaseCommand):
    help = ("Show each imported draft's proposed class with the annotations behind it; with --confirm-class record "
            "USER's confirmation of it; publish. An unconfirmed class is published too, but every call waits for a person.")

    def add_arguments(self, parser):
        parser.add_argument("--prefix", required=True)
        parser.add_argument("--by", required=True, help="the username the confirmation is recorded under")
        parser.add_argument("--confirm-class", action="store_true", help="confirm each draft's side-effect class as it stands")
        parser.add_argument("--tool", action="append", default=[], help="only these upstream tool names (repeatable)")

    def handle(self, *args, prefix, by, confirm_class, tool, **options):
        user = get_user_model().objects.filter(username=by, is_staff=True).first()
        if user is None:
            raise CommandError(f"no staff user {by!r}")
        drafts = UpstreamTool.objects.filter(tool_spec__name__startswith=f"{prefix}.", tool_spec__status=ToolSpec.Status.DRAFT)
        if tool:
            drafts = drafts.filter(upstream_name__in=tool)
        for watch in drafts.select_related("tool_spec").order_by("upstream_name"):
            spec = watch.tool_spec
            self.stdout.write(f"{spec.ref:<40} {spec.side_effect_class:<17} from: {', '.join(watch.proposal_reasons)}")
            if confirm_class:
                upstream_confirm_class(upstream=watch, user=user)
            try:
                toolspec_publish(spec=spec)
            except ValidationError as exc:
                self.stderr.write(f"  not published: {'; '.join(exc.messages)}")
                continue
            note = "class confirmed" if confirm_class else "class NOT confirmed: calls wait for a person"
            self.stdout.write(self.style.SUCCESS(f"  published ({note})"))
