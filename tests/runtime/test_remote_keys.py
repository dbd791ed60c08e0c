"""Remote idempotency keys (docs/concepts/execution.md): deterministic, per tenant and tool, never the raw key."""
from __future__ import annotations

import pytest

from toolops.decisions.remote_keys import remote_key
from toolops.runtime.zones import is_iana_zone

S = b"server-secret"


def test_it_is_deterministic_and_never_the_raw_key():
    a = remote_key(secret=S, tenant_id="t1", tool_ref="calendar.create_event@1", key="req-42")
    assert a == remote_key(secret=S, tenant_id="t1", tool_ref="calendar.create_event@1", key="req-42")
    assert "req-42" not in a and a.startswith("tk1-") and len(a) == 68 and a.isascii()


def test_it_separates_tenants_tools_versions_and_secrets():
    base = dict(secret=S, tenant_id="t1", tool_ref="calendar.create_event@1", key="req-42")
    variants = [dict(base, tenant_id="t2"), dict(base, tool_ref="calendar.create_event@2"), dict(base, key="req-43"),
                dict(base, secret=b"other")]
    keys = {remote_key(**base)} | {remote_key(**v) for v in variants}
    assert len(keys) == 5


def test_it_cannot_be_confused_by_separators():
    assert remote_key(secret=S, tenant_id="a|b", tool_ref="c", key="d") != remote_key(secret=S, tenant_id="a", tool_ref="b|c", key="d")


def test_it_refuses_empty_parts():
    with pytest.raises(ValueError):
        remote_key(secret=b"", tenant_id="t", tool_ref="x@1", key="k")
    with pytest.raises(ValueError):
        remote_key(secret=S, tenant_id="", tool_ref="x@1", key="k")


@pytest.mark.parametrize("name,ok", [
    ("Asia/Shanghai", True), ("UTC", True), ("Etc/GMT-8", True), ("America/Argentina/Buenos_Aires", True),
    ("localtime", False), ("Factory", False), ("UTC+8", False), ("GMT+08:00", False), ("+08:00", False),
    ("../../etc/passwd", False), ("asia/shanghai", False), ("", False), (None, False), ("posixrules", False),
])
def test_it_accepts_only_iana_zone_names(name, ok):
    assert is_iana_zone(name) is ok
