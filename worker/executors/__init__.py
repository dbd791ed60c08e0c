"""Executors by kind (``by_kind``: python, http, mcp) with the HTTP and MCP clients they send through."""
