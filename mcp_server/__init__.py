"""The MCP front door: ToolOps' tools served over the Model Context Protocol (streamable HTTP).

A front door like ``agent_api``: it authenticates, maps MCP requests onto the domain services
(``run_create``, ``model_call_create``, ``proposal_admit``, the recorded tool messages,
``invocation_cancel``) and serializes their answers; it never calls the REST API over HTTP.
It runs as its own ASGI process (``uvicorn mcp_server.asgi:app``) because Django's ASGI
handler refuses the lifespan events the MCP SDK's session manager needs.

Modules: ``db`` (ORM calls from async handlers), ``identity`` (bearer tokens), ``runs``
(session/run/day → Run), ``calls`` (tools/list and tools/call on the services), ``tasks`` (a call
waiting for a person as an MCP task), ``elicitation`` (… or as a URL-mode elicitation with a
sealed request state), ``server`` (the SDK wiring, the raw-body capture and the ASGI app).
"""
