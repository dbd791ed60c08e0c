from django.core.management.base import BaseCommand

from devtools.demo import load_demo


class Command(BaseCommand):
    help = "Create the demo tenant, agent subject + API token, admin user and demo ToolSpecs (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("--token", help="install this exact API token for the demo agent (kept if present)")
        parser.add_argument("--admin-password", help="password for the 'admin' superuser (default on creation: admin)")

    def handle(self, *args, token=None, admin_password=None, **options):
        info = load_demo(token=token, admin_password=admin_password)
        self.stdout.write(self.style.SUCCESS(f"demo tenant '{info['tenant']}', subject {info['subject']}"))
        self.stdout.write(f"admin login: {info['admin']}")
        if info["token"]:
            self.stdout.write(f"API token: {info['token']}")
        else:
            self.stdout.write("API token: (already issued earlier; issue a new one in the console if it is lost)")
