"""The HTTP executor's outcome mapping against every body shape a hostile remote can send
(issue 11 item 6): classified, never a crash; bad URLs and schemes are permanent, not reached."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest

from worker.executors.by_kind import execute
from worker.executors.context import AttemptContext
from worker.executors.http import _from_response
from worker.executors.http_client import HttpResponse
from tests.hostile_server import JSON_ERRORS
from toolops.decisions.execution import Commit


def _ctx(side_effect_class="read_only", **extra) -> AttemptContext:
    return AttemptContext(invocation_id="i", tool_ref="t@1", side_effect_class=side_effect_class, attempt=1,
                          idempotency_key="k", traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01", timeout_seconds=2,
                          **extra)


def _resp(status, body=b"", content_type="application/json", truncated=False, **headers):
    return HttpResponse(status=status, reason="R", headers={"content-type": content_type, **headers}, body=body,
                        truncated=truncated, hops=["http://x/"])


@pytest.mark.parametrize("kind", sorted(JSON_ERRORS))
@pytest.mark.parametrize("side_effect_class", ["read_only", "write_idempotent", "write_unsafe"])
def test_it_classifies_any_json_error_body(kind, side_effect_class):
    outcome = _from_response({"resource_id_pointer": "/id/deep"}, _resp(500, JSON_ERRORS[kind]), _ctx(side_effect_class))
    assert outcome.failure_class == "transient" and isinstance(outcome.error["message"], str)
    assert outcome.commit == (Commit.NOT_APPLICABLE if side_effect_class == "read_only" else Commit.UNKNOWN)


@pytest.mark.parametrize("kind", sorted(JSON_ERRORS))
def test_it_never_crashes_on_a_success_body_either(kind):
    outcome = _from_response({"resource_id_pointer": "/id"}, _resp(200, JSON_ERRORS[kind]), _ctx())
    assert outcome.ok and outcome.value is not None


@pytest.mark.parametrize("retry_after", ["Wed, 21 Oct 2015 07:28:00 GMT", "-5", "1e9", "99999999999999999999", "", " 7 "])
def test_it_reads_retry_after_defensively(retry_after):
    outcome = _from_response({}, _resp(429, b"{}", **{"retry-after": retry_after}), _ctx())
    assert outcome.failure_class == "rate_limited"
    assert outcome.retry_after_seconds is None or 0 <= outcome.retry_after_seconds <= 86_400


def test_it_rejects_or_truncates_an_oversized_body_as_the_tool_says():
    big = _resp(200, b"x" * 1000, content_type="text/plain", truncated=True)
    kept = _from_response({}, big, _ctx(max_response_bytes=1000))
    assert kept.ok and kept.value["truncated_at_bytes"] == 1000 and kept.detail["response_truncated"]
    refused = _from_response({}, big, _ctx(max_response_bytes=1000, oversize="reject"))
    assert refused.failure_class == "permanent" and refused.error["code"] == "response_too_large"
    # A write that committed stays committed, however large its answer.
    committed = _from_response({}, big, _ctx("write_idempotent", max_response_bytes=1000, oversize="reject"))
    assert committed.ok and committed.commit == Commit.COMMITTED


@pytest.mark.parametrize("url,code", [
    ("file:///etc/passwd", "scheme_refused"), ("gopher://127.0.0.1:70/x", "scheme_refused"),
    ("http://a b/", "bad_url"), ("not a url", "scheme_refused"), (None, "scheme_refused"),
])
@pytest.mark.parametrize("side_effect_class", ["read_only", "write_unsafe"])
def test_it_refuses_bad_urls_and_schemes_as_permanent_and_not_reached(url, code, side_effect_class):
    config = {"kind": "http", "method": "GET", "url": "{url}"}
    outcome = execute(config=config, arguments={"url": url} if url is not None else {}, ctx=_ctx(side_effect_class))
    assert outcome.failure_class == "permanent" and outcome.error["reached"] is False
    assert outcome.error["code"] in (code, "bad_url")
    assert outcome.commit == (Commit.NOT_APPLICABLE if side_effect_class == "read_only" else Commit.NOT_COMMITTED)


def test_it_honours_a_retry_after_given_as_an_http_date():
    later = datetime.now(timezone.utc) + timedelta(seconds=30)
    outcome = _from_response({}, _resp(429, b"{}", **{"retry-after": format_datetime(later, usegmt=True)}), _ctx())
    assert 27 <= outcome.retry_after_seconds <= 30


@pytest.mark.parametrize("header,expected", [("0.25", "0.25"), (" 3 ", "3"), ("-1", None), ("NaN", None), ("1e999999", None), ("", None)])
def test_it_reads_the_cost_only_from_the_header_the_toolspec_names(header, expected):
    named = _from_response({"cost_header": "X-Cost"}, _resp(200, b"{}", **{"x-cost": header}), _ctx())
    assert named.cost == expected
    unnamed = _from_response({}, _resp(200, b"{}", **{"x-cost": header}), _ctx())
    assert unnamed.cost is None  # a server cannot charge a run through a header the ToolSpec never named


def test_it_keeps_bytes_as_bytes_and_json_with_a_nul_as_its_text():
    """Issue 13: a PNG is never decoded into U+FFFD soup, and no body can make recording fail
    (jsonb refuses U+0000), which once left a read retrying for ever."""
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
    image = _from_response({}, _resp(200, png, content_type="image/png"), _ctx())
    assert image.ok and image.value is None and image.binary.data == png and image.binary.media_type == "image/png"
    lying = _from_response({}, _resp(200, png, content_type="text/html"), _ctx())
    assert lying.binary is not None and lying.value is None
    nul = _from_response({}, _resp(200, b'{"a": "x\\u0000y"}'), _ctx())
    assert nul.ok and nul.binary is None and nul.value["text"] == '{"a": "x\\u0000y"}'
