"""ToolOps-Signature: HMAC-SHA256 over "<t>.<body>", checked inside a replay window; backoff doubles."""
from __future__ import annotations

import hashlib
import hmac

from toolops.decisions.webhooks import REPLAY_WINDOW_SECONDS, webhook_retry_delay, webhook_signature, webhook_signature_valid

BODY = b'{"type":"confirmation.requested"}'


def test_it_signs_timestamp_dot_body_as_documented():
    expected = hmac.new(b"s3cret", b"1700000000." + BODY, hashlib.sha256).hexdigest()
    assert webhook_signature("s3cret", 1700000000, BODY) == f"t=1700000000,v1={expected}"


def test_it_accepts_a_fresh_signature():
    header = webhook_signature("s3cret", 1700000000, BODY)
    assert webhook_signature_valid("s3cret", header, BODY, now=1700000000 + 10) == (True, "")


def test_it_refuses_an_altered_body_a_wrong_secret_and_a_replay():
    header = webhook_signature("s3cret", 1700000000, BODY)
    assert webhook_signature_valid("s3cret", header, BODY + b" ", now=1700000000)[0] is False
    assert webhook_signature_valid("other", header, BODY, now=1700000000)[0] is False
    late = webhook_signature_valid("s3cret", header, BODY, now=1700000000 + REPLAY_WINDOW_SECONDS + 1)
    assert late == (False, "timestamp outside the replay window")
    assert webhook_signature_valid("s3cret", "v1=abc", BODY, now=1700000000) == (False, "malformed signature header")


def test_it_accepts_any_of_several_v1_entries_while_a_secret_rotates():
    new = webhook_signature("new", 1700000000, BODY).split(",")[1]
    old = webhook_signature("old", 1700000000, BODY).split(",")[1]
    assert webhook_signature_valid("old", f"t=1700000000,{new},{old}", BODY, now=1700000000)[0] is True


def test_it_doubles_the_retry_delay_up_to_its_cap():
    assert [webhook_retry_delay(n, base_seconds=10) for n in (1, 2, 3, 4)] == [10, 20, 40, 80]
    assert webhook_retry_delay(20, base_seconds=10, max_seconds=3600) == 3600
