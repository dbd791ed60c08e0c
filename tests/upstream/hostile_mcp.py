"""A hostile legacy MCP upstream for the executor's protocol-fault tests: a real threaded HTTP
server on 127.0.0.1:0 (``tests.hostile_server``'s, with MCP routes) speaking the 2025-11-25 streamable HTTP protocol (``initialize``,
``Mcp-Session-Id``, a DELETE to end the session) well enough for the official SDK client, and
breaking it where a test says so — faults the demo notes server (the SDK's own server) cannot
produce: a cut event stream, an unparseable body, 202 to a request, a paginator that never ends.

It advertises the demo notes server's tools (``demo_services.notes_mcp.BASE_DEFINITIONS``), so
ToolOps imports and pins them as it would the real thing. Every MCP request is logged.
"""
from __future__ import annotations

import itertools
import json

from demo_services.notes_mcp import BASE_DEFINITIONS, IDEMPOTENCY_META_KEY
from tests import hostile_server

PROTOCOL_VERSION = "2025-11-25"
TOOLS = [{"name": name, "description": d["description"], "inputSchema": d["input_schema"],
          "outputSchema": d["output_schema"], "annotations": d["annotations"]} for name, d in sorted(BASE_DEFINITIONS.items())]

# What ``tools/call`` answers (``server.faults[tool]``, default "ok"):
CALL_FAULTS = (
    "ok",             # the tool's result (a create is kept by its idempotency key, which find_by_key finds)
    "http_500",       # 500, a plain-text body
    "http_429",       # 429, a plain-text body
    "sse_cut",        # 200 text/event-stream, half an event, then the connection closes
    "json_garbage",   # 200 application/json that does not parse
    "sse_garbage",    # 200 text/event-stream whose event data does not parse
    "accepted",       # 202 Accepted, no body
    "text_plain",     # 200 text/plain
    "rpc_error",      # 200 application/json: the server's own JSON-RPC error (``server.rpc_error``)
    "rpc_error_sse",  # the same error as an event of a 200 text/event-stream
    "rpc_error_400",  # the same error as the body of a 400
    # the tool's result, written one byte a second, framed as ``hostile_server.TRICKLE_SHAPES``:
    *(f"trickle_{shape}" for shape in hostile_server.TRICKLE_SHAPES),
)
# How ``tools/list`` pages (``server.listing``):
LISTINGS = (
    "one_page",       # every tool, no cursor
    "same_cursor",    # every page says nextCursor "again"
    "endless",        # page N says nextCursor "pN+1", forever
    "fat_pages",      # ``server.fat_pages`` pages of ``server.fat_page_bytes`` bytes each (padding in a description)
)


class Handler(hostile_server.Handler):
    server: "HostileMCP"

    def do_GET(self):  # no standalone event stream: the spec lets a server refuse it
        self._send(405, b"", "text/plain")

    def do_DELETE(self):
        self.server.note({"http": "DELETE", "session": self.headers.get("Mcp-Session-Id")})
        self._send(self.server.delete_status, b"", "text/plain")

    def do_POST(self):
        message = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        method, request_id = message.get("method"), message.get("id")
        self.server.note({"http": "POST", "method": method, "params": message.get("params"),
                          "session": self.headers.get("Mcp-Session-Id")})
        if request_id is None:  # a notification (or a response): accepted, nothing to answer
            return self._send(202, b"", "text/plain")
        if method == "server/discover":  # a legacy server knows no discover: the client falls back to initialize
            return self._rpc_error(request_id, -32601, "Method not found")
        if method == "initialize":
            session = f"s-{next(self.server.sessions)}"
            return self._result(request_id, {"protocolVersion": PROTOCOL_VERSION, "capabilities": {"tools": {}},
                                             "serverInfo": {"name": "hostile-legacy", "version": "1"}},
                                **{"Mcp-Session-Id": session})
        if method == "tools/list":
            return self._result(request_id, self.server.page((message.get("params") or {}).get("cursor")))
        if method == "tools/call":
            return self._call(request_id, message.get("params") or {})
        return self._rpc_error(request_id, -32601, "Method not found")

    def _call(self, request_id, params: dict) -> None:
        value = self.server.perform(params)  # every call is performed, whatever its answer will be
        fault = self.server.faults.get(params.get("name"), "ok")
        result = {"content": [{"type": "text", "text": json.dumps(value)}], "structuredContent": value, "isError": False}
        if fault == "ok":
            return self._result(request_id, result)
        if fault.startswith("trickle_"):
            body = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode()
            return hostile_server.trickle(self, body, shape=fault[len("trickle_"):], content_type="application/json")
        if fault in ("http_500", "http_429"):
            return self._send(int(fault[5:]), b"upstream trouble", "text/plain")
        if fault == "sse_cut":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            half = b'event: message\ndata: {"jsonrpc":"2.0","id":' + json.dumps(request_id).encode() + b',"res'
            self.wfile.write(b"%x\r\n%s\r\n" % (len(half), half))
            self.wfile.flush()
            self.close_connection = True  # no last chunk: the body ends mid-event
            return None
        if fault == "json_garbage":
            return self._send(200, b'{"jsonrpc": "2.0", "id": ' + json.dumps(request_id).encode() + b', "result": {', "application/json")
        if fault == "sse_garbage":
            return self._send(200, b"event: message\ndata: {this is not json\n\n", "text/event-stream")
        if fault == "accepted":
            return self._send(202, b"", "text/plain")
        if fault == "text_plain":
            return self._send(200, b"note created", "text/plain")
        code, text = self.server.rpc_error
        error = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": text}}
        if fault == "rpc_error_sse":
            return self._send(200, b"event: message\ndata: " + json.dumps(error).encode() + b"\n\n", "text/event-stream")
        return self._send(400 if fault == "rpc_error_400" else 200, json.dumps(error).encode(), "application/json")

    def _result(self, request_id, result: dict, **headers: str) -> None:
        self._send(200, json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode(), "application/json",
                   **headers)

    def _rpc_error(self, request_id, code: int, message: str) -> None:
        body = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
        self._send(200, json.dumps(body).encode(), "application/json")


class HostileMCP(hostile_server.HostileServer):
    """Used as a context manager: serving inside the ``with``, closed after it."""

    def __init__(self) -> None:
        super().__init__()
        self.RequestHandlerClass = Handler  # before it serves: every request gets the MCP routes
        self.sessions = itertools.count(1)
        self.reset()

    def __enter__(self) -> "HostileMCP":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def reset(self) -> None:
        with self.lock:
            self.log: list[dict] = []
            self.notes: dict[str, dict] = {}  # idempotency key → the note its create made
        self.faults: dict[str, str] = {}
        self.delete_status, self.listing = 405, "one_page"
        self.rpc_error = (-32602, "Invalid params")
        self.fat_pages, self.fat_page_bytes = 1, 0

    def forget_requests(self) -> None:
        with self.lock:
            self.log = []

    def note(self, entry: dict) -> None:
        with self.lock:
            self.log.append(entry)

    def perform(self, params: dict) -> dict:
        arguments, key = params.get("arguments") or {}, (params.get("_meta") or {}).get(IDEMPOTENCY_META_KEY)
        with self.lock:
            if params.get("name") == "notes.create":
                note = self.notes.get(key) or {"id": f"note_{len(self.notes) + 1}", "title": str(arguments.get("title", "")),
                                               "body": str(arguments.get("body", ""))}
                self.notes[key or note["id"]] = note
                return {"note": note, "replayed": False}
            if params.get("name") == "notes.find_by_key":
                note = self.notes.get(str(arguments.get("idempotency_key")))
                return {"found": True, "note": note} if note else {"found": False}
            return {"notes": list(self.notes.values())} if params.get("name") == "notes.search" else {"deleted": False}

    def page(self, cursor: str | None) -> dict:
        if self.listing == "one_page":
            return {"tools": TOOLS}
        if self.listing == "same_cursor":
            return {"tools": TOOLS if cursor is None else [], "nextCursor": "again"}
        number = int(cursor[1:]) if cursor else 1
        if self.listing == "endless":
            return {"tools": TOOLS if number == 1 else [], "nextCursor": f"p{number + 1}"}
        padded = [{**TOOLS[0], "name": f"pad.{number}", "description": "x" * self.fat_page_bytes}]
        return {"tools": (TOOLS if number == 1 else []) + padded,
                **({"nextCursor": f"p{number + 1}"} if number < self.fat_pages else {})}

    def calls(self) -> list[dict]:
        with self.lock:
            return [entry for entry in self.log if entry.get("method") == "tools/call"]

    def deletes(self) -> int:
        with self.lock:
            return sum(1 for entry in self.log if entry["http"] == "DELETE")

    def listings(self) -> int:
        with self.lock:
            return sum(1 for entry in self.log if entry.get("method") == "tools/list")

    @property
    def url(self) -> str:
        return f"{self.base}/mcp"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"  # as the egress allow-list names it
