import os

from django.core.wsgi import get_wsgi_application

from toolops.settings_table import exit_if_invalid

exit_if_invalid(os.environ, "toolops.wsgi")
os.environ.setdefault("TOOLOPS_PROCESS_ROLE", "web")  # its log lines' role (toolops/logformat.py)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "toolops.settings")
application = get_wsgi_application()
