"""What a model pays to read a tool message: bytes (and tokens, where a tokenizer runs) of the demo
tools' messages, marked per string as before issue 34 and marked once per message now.

    .venv/bin/python bench/tool_message_size.py

Pure core only (``toolops.model_io``; no database, no broker). Each demo tool's result is the
value its executor hands over — the calendar event and the transfer the demo HTTP services
answer, the weather of the in-process tool, a small fetched page, a notes search of the MCP demo
(with its ``outputSchema``) — encoded by ``encode_result`` with the rule the service uses
(``FreeTextRule``: ids, enum members and formatted values are not marked) and rendered in each
format (OpenAI, Anthropic, MCP: text + ``structuredContent``).

*Before* is the same message with the earlier marking rebuilt from it: every marked string
replaced by ``{"untrusted_data": {"note": …, "source": "tool_output", "text": …}}`` (or, where an
``outputSchema`` types the value, by ``<untrusted_data source="tool_output">…</untrusted_data>``
inside the string) and the configured pointer named. *After* is what the service stores and
serves. Tokens are counted with a Hugging Face ``tokenizers`` file named by
``BENCH_TOKENIZER_JSON`` (e.g. the ``tokenizer.json`` older ``anthropic`` wheels shipped), else
with ``tiktoken`` (``o200k_base``) when it is installed and its encoding file is at hand
(``TIKTOKEN_CACHE_DIR``); otherwise the line says so.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from demo_services.notes_mcp import BASE_DEFINITIONS  # noqa: E402
from toolops.model_io.free_text import FreeTextRule  # noqa: E402
from toolops.model_io.tool_messages import (  # noqa: E402
    FORMATS, UNTRUSTED_NOTE, UNTRUSTED_SOURCE, ResultPolicy, ToolResult, canonical_bytes, encode_result,
    message_bytes, parse_pointer, render,
)

SMOKE = os.environ.get("BENCH_SMOKE") == "1"
INVOCATION_ID = "0b8f3f6e-3c1a-4d3e-9b7a-5f2d8c1e4a90"
PAGE = ("<html><head><title>Harbour timetable</title></head><body><h1>Ferries</h1>"
        "<p>Ferries cross twice an hour from 06:00; the last one leaves at 23:40.</p></body></html>")
NOTES = [{"id": f"note_{i}", "title": title, "body": body} for i, (title, body) in enumerate([
    ("Renew passport", "Book an appointment before the summer"), ("Buy milk", "2 l, semi-skimmed"),
    ("Call the plumber", "The kitchen tap drips again"), ("Quarterly report", "Draft due on Friday"),
    ("Dentist", "Tuesday 09:30, bring the insurance card"),
])]

# (tool, value, untrusted pointers as the service sets them, output schema)
CASES = [
    ("calendar.create_event@1", {"id": "evt_3f9a1c2d", "calendar_id": "primary", "title": "Team sync",
                                 "start": "2026-07-21T09:00:00+08:00", "duration_minutes": 30,
                                 "created_at": "2026-07-20T08:12:31Z"}, ("",), None),
    ("payments.create_transfer@1", {"id": "pay_7c1e5b", "to_account": "acct_4411", "amount_minor": 2500,
                                    "currency": "EUR", "memo": "June invoice 2026-06", "status": "completed",
                                    "client_reference": "inv-0b8f3f6e", "created_at": "2026-07-20T08:12:31Z"},
     ("",), None),
    ("weather.get_forecast@1", {"city": "Lisbon", "date": "2026-07-21", "condition": "light rain",
                                "high_c": 24, "low_c": 16}, (), None),
    ("web.fetch@1", {"content_type": "text/html; charset=utf-8", "text": PAGE}, ("",), None),
    ("notes.search@1", {"notes": NOTES}, ("",), BASE_DEFINITIONS["notes.search"]["output_schema"]),
]


def _earlier_marking(payload: dict, configured: tuple[str, ...], inline: bool) -> dict:
    """The payload as the per-string marking wrote it: each named string wrapped in place."""
    old = json.loads(json.dumps(payload))
    where = "result" if old["ok"] else "error"
    for pointer in old.pop("untrusted_fields", []):
        tokens = parse_pointer(pointer)
        holder, key = (old, where) if not tokens else (_resolve(old[where], tokens[:-1]), tokens[-1])
        index = int(key) if isinstance(holder, list) else key
        holder[index] = _wrapped(holder[index], inline)
    old.pop("untrusted_note", None)
    if configured and old != payload:
        old["untrusted_fields"] = sorted(configured)
        if inline:
            old["untrusted_note"] = UNTRUSTED_NOTE
    return old


def _wrapped(node, inline: bool):
    if isinstance(node, str):
        if inline:
            return f'<untrusted_data source="{UNTRUSTED_SOURCE}">{node}</untrusted_data>'
        return {"untrusted_data": {"note": UNTRUSTED_NOTE, "source": UNTRUSTED_SOURCE, "text": node}}
    if isinstance(node, list):
        return [_wrapped(item, inline) for item in node]
    if isinstance(node, dict):
        return {k: _wrapped(v, inline) for k, v in node.items()}
    return node


def _resolve(node, tokens):
    for token in tokens:
        node = node[int(token)] if isinstance(node, list) else node[token]
    return node


def _tokenizer():
    path = os.environ.get("BENCH_TOKENIZER_JSON")
    if path:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(path)
        print(f"tokens: {path}")
        return lambda text: tokenizer.encode(text).ids
    try:
        import tiktoken
        return tiktoken.get_encoding("o200k_base").encode
    except Exception as exc:  # not installed, or its encoding file cannot be fetched here
        print(f"tokens: not counted ({type(exc).__name__}: no o200k_base encoding at hand)")
        return None


class _Encoded:
    """An EncodedResult-shaped holder for a rebuilt payload, so ``render`` takes it."""

    def __init__(self, payload: dict) -> None:
        self.payload, self.payload_bytes, self.image = payload, canonical_bytes(payload), None


def main() -> None:
    count_tokens = _tokenizer()
    policy = ResultPolicy()
    totals = {fmt: [0, 0, 0, 0] for fmt in FORMATS}
    print(f"{'tool':28} {'format':9} {'before B':>9} {'after B':>8} {'saved':>6}"
          + (f" {'before tok':>10} {'after tok':>9}" if count_tokens else ""))
    for tool, value, pointers, schema in CASES[:2] if SMOKE else CASES:
        encoded = encode_result(ToolResult(status="ok", value=value, untrusted_text_pointers=pointers),
                                policy=policy, invocation_id=INVOCATION_ID, tool_ref=tool,
                                free_text=FreeTextRule(schema))
        assert encoded.payload["result"] == value, "the result keeps the tool's own shape"
        before = _Encoded(_earlier_marking(encoded.payload, pointers, inline=schema is not None))
        for fmt in FORMATS:
            new = message_bytes(render(fmt, encoded, tool_call_id="call_1", is_error=False))
            old = message_bytes(render(fmt, before, tool_call_id="call_1", is_error=False))
            line = f"{tool:28} {fmt:9} {len(old):9} {len(new):8} {1 - len(new) / len(old):6.0%}"
            sums = totals[fmt]
            sums[0] += len(old)
            sums[1] += len(new)
            if count_tokens:
                old_t, new_t = len(count_tokens(old.decode())), len(count_tokens(new.decode()))
                sums[2] += old_t
                sums[3] += new_t
                line += f" {old_t:10} {new_t:9}"
            print(line)
    for fmt, (old, new, old_t, new_t) in totals.items():
        print(f"{'all demo tools':28} {fmt:9} {old:9} {new:8} {1 - new / old:6.0%}"
              + (f" {old_t:10} {new_t:9}" if count_tokens else ""))


if __name__ == "__main__":
    main()
