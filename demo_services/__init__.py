"""Demo third-party services (calendar, payments, web pages) behind one stdlib HTTP server.

They stand in for external APIs in the quick start and the tests, so nothing here imports Django.
"""
from demo_services.server import make_server, serve

__all__ = ["make_server", "serve"]
