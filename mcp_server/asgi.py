"""ASGI entry of the MCP front door: ``uvicorn mcp_server.asgi:app --host … --port …``.

Its own process (not mounted in Django's ASGI app, which refuses the lifespan events the MCP
SDK's session manager runs on). Django is set up first so the handlers can use the ORM and
the domain services; see ``mcp_server/``.
"""
import os

import django

from toolops.logformat import route_to_root
from toolops.settings_table import exit_if_invalid

exit_if_invalid(os.environ, "mcp_server.asgi")
os.environ.setdefault("TOOLOPS_PROCESS_ROLE", "mcp")  # its log lines' role (toolops/logformat.py)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "toolops.settings")
django.setup()
# uvicorn's own lines in this process's format (TOOLOPS_LOG_FORMAT), not uvicorn's handler.
route_to_root("uvicorn", "uvicorn.error", "uvicorn.access")

from mcp_server.db import use_persistent_connections  # noqa: E402  (needs the apps loaded above)
from mcp_server.server import build_app  # noqa: E402

use_persistent_connections()
app = build_app()
