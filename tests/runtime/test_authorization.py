"""Authorization (docs/concepts/admission.md): a pure decision over grant snapshots — no DB, no Django."""
from __future__ import annotations

import inspect
import itertools
import json
import random
from datetime import datetime, timedelta, timezone

import pytest

from toolops.decisions.authorization import (
    OPERATION_CLASSES,
    AuthContext,
    Decision,
    Effect,
    GrantSnapshot,
    Limits,
    Requirement,
    Usage,
    authorize,
    normalize_path,
    scope_matches,
)

NOW = datetime(2026, 7, 19, 6, 0, tzinfo=timezone.utc)
UTC_8 = timezone(timedelta(hours=8))
TOOL = "calendar.create_event@1"
CAP = "calendar.write"


def grant(**kw) -> GrantSnapshot:
    base = dict(
        grant_id="g1", capability=CAP, operation_class="create", tenant="acme", subject_id="alice",
        scope_kind="any", scope_values=(), effect="allow", tool_refs=(TOOL,), limits=Limits(),
        expires_at=None, revoked_at=None,
    )
    return GrantSnapshot(**{**base, **kw})


def req(**kw) -> Requirement:
    return Requirement(**{"capability": CAP, "operation_class": "create", "resource": "primary", **kw})


def ctx(**kw) -> AuthContext:
    return AuthContext(**{"tenant": "acme", "subject_id": "alice", "tool_ref": TOOL, "now": NOW, **kw})


def decide(grants, requirements=None, **ctx_kw) -> Decision:
    return authorize(requirements=[req()] if requirements is None else requirements, grants=grants, ctx=ctx(**ctx_kw))


def codes(decision: Decision) -> list[str]:
    return [r.code for r in decision.reasons]


# --- operation classes -------------------------------------------------------------------------


@pytest.mark.parametrize(("granted", "needed"), list(itertools.product(OPERATION_CLASSES, repeat=2)))
def test_it_keeps_the_four_operation_classes_apart(granted, needed):
    decision = decide([grant(operation_class=granted)], [req(operation_class=needed)])
    if granted == needed:
        assert decision.effect is Effect.ALLOW
        assert codes(decision) == ["grant_matched"]
    else:
        assert decision.effect is Effect.DENY
        assert "operation_mismatch" in codes(decision)
        assert decision.used_grants == ()


def test_it_ignores_grants_of_another_capability():
    decision = decide([grant(capability="calendar.read", operation_class="read")])
    assert decision.effect is Effect.DENY
    assert codes(decision) == ["no_grant"]


# --- scopes ------------------------------------------------------------------------------------

REPORTS = ("/data/reports",)
EXAMPLE = ("example.com",)

SCOPE_TABLE = [
    # kind, values, resource, matched, failure code
    ("any", (), None, True, None),
    ("any", (), "whatever", True, None),
    ("exact", ("primary", "work"), "primary", True, None),
    ("exact", ("primary", "work"), "work", True, None),
    ("exact", ("primary", "work"), "Primary", False, "scope_mismatch"),
    ("exact", ("primary", "work"), "primary ", False, "scope_mismatch"),
    ("exact", ("primary", "work"), None, False, "scope_mismatch"),
    ("path_prefix", REPORTS, "/data/reports", True, None),
    ("path_prefix", REPORTS, "/data/reports/", True, None),
    ("path_prefix", REPORTS, "/data/reports/2026/q3.csv", True, None),
    ("path_prefix", REPORTS, "/data/./reports//x", True, None),
    ("path_prefix", REPORTS, "/data/reports/a/../b", True, None),  # stays inside: fine
    ("path_prefix", ("/data/reports/",), "/data/reports/x", True, None),
    ("path_prefix", ("/",), "/etc/passwd", True, None),
    ("path_prefix", REPORTS, "/data/reports-old/x", False, "scope_mismatch"),
    ("path_prefix", REPORTS, "/data/report", False, "scope_mismatch"),
    ("path_prefix", REPORTS, "/DATA/reports/x", False, "scope_mismatch"),
    ("path_prefix", REPORTS, None, False, "scope_mismatch"),
    ("path_prefix", ("relative/prefix",), "/relative/prefix/x", False, "scope_mismatch"),
    ("domain_suffix", EXAMPLE, "example.com", True, None),
    ("domain_suffix", EXAMPLE, "https://example.com/path?q=1", True, None),
    ("domain_suffix", EXAMPLE, "https://api.example.com:8443/v1", True, None),
    ("domain_suffix", EXAMPLE, "HTTPS://API.EXAMPLE.COM/", True, None),
    ("domain_suffix", EXAMPLE, "https://example.com./", True, None),
    ("domain_suffix", EXAMPLE, "api.example.com.", True, None),
    ("domain_suffix", ("Example.COM.",), "https://www.example.com", True, None),
    ("domain_suffix", (".example.com",), "https://example.com", True, None),
    ("domain_suffix", EXAMPLE, "https://evil.com@example.com/", True, None),  # userinfo, host example.com
    ("domain_suffix", EXAMPLE, "https://example.com@evil.com/", False, "scope_mismatch"),
    ("domain_suffix", EXAMPLE, "https://example.com:pw@evil.com/", False, "scope_mismatch"),
    ("domain_suffix", EXAMPLE, "https://evil-example.com/", False, "scope_mismatch"),
    ("domain_suffix", EXAMPLE, "https://example.com.evil.com/", False, "scope_mismatch"),
    ("domain_suffix", EXAMPLE, "https://notexample.com/", False, "scope_mismatch"),
    ("domain_suffix", EXAMPLE, "https://evil.com\\@example.com/", False, "scope_mismatch"),
    ("domain_suffix", EXAMPLE, "https://evil.com%2f@example.com/", True, None),
    ("domain_suffix", EXAMPLE, "https://example.com%2eevil.com/", False, "scope_mismatch"),
    ("domain_suffix", EXAMPLE, "https://exa mple.com/", False, "scope_mismatch"),
    ("domain_suffix", EXAMPLE, "https://example.com:99999/", False, "scope_mismatch"),
    ("domain_suffix", EXAMPLE, "file:///etc/passwd", False, "scope_mismatch"),
    ("domain_suffix", EXAMPLE, "", False, "scope_mismatch"),
    ("domain_suffix", EXAMPLE, None, False, "scope_mismatch"),
    ("domain_suffix", ("xn--bcher-kva.example",), "https://bücher.example/", True, None),
    ("domain_suffix", ("bücher.example",), "https://shop.xn--bcher-kva.example/", True, None),
    ("domain_suffix", ("BÜCHER.example",), "https://Bücher.example/", True, None),
    ("domain_suffix", ("3.4",), "https://1.2.3.4/", False, "scope_mismatch"),
    ("domain_suffix", ("1.2.3.4",), "https://1.2.3.4/", True, None),
    ("glob", ("reports-*.csv",), "reports-2026.csv", True, None),
    ("glob", ("reports-*.csv",), "Reports-2026.csv", False, "scope_mismatch"),
    ("glob", ("reports-?.csv", "*.txt"), "notes.txt", True, None),
    ("glob", ("reports-*.csv",), "reports-2026.csv.exe", False, "scope_mismatch"),
    ("glob", ("*",), None, False, "scope_mismatch"),
    ("no_such_kind", ("*",), "x", False, "invalid_scope"),
]


@pytest.mark.parametrize(("kind", "values", "resource", "matched", "failure"), SCOPE_TABLE)
def test_it_matches_each_scope_kind(kind, values, resource, matched, failure):
    assert scope_matches(kind, values, resource) == (matched, failure)


@pytest.mark.parametrize(
    ("kind", "values", "resource", "matched", "failure"), [r for r in SCOPE_TABLE if r[0] != "no_such_kind"]
)
def test_it_applies_the_scope_inside_authorize(kind, values, resource, matched, failure):
    decision = decide([grant(scope_kind=kind, scope_values=values)], [req(resource=resource)])
    assert decision.effect is (Effect.ALLOW if matched else Effect.DENY)
    if failure:
        assert failure in codes(decision)


ESCAPES = [
    ("/data/reports/../secrets", "path_escape"),
    ("/data/reports/%2e%2e/secrets", "path_escape"),
    ("/data/reports/%2E%2E/secrets", "path_escape"),
    ("/data/reports/..%2fsecrets", "path_escape"),
    ("/data/reports/..%2Fsecrets", "path_escape"),
    ("/data/reports/%252e%252e/secrets", "path_escape"),
    ("/data/reports/%25252e%25252e/secrets", "path_escape"),  # three rounds: still decoded
    ("/data/reports/%2525252e%2525252e/secrets", "path_escape"),  # four rounds: refused
    ("/data/reports/../../../../etc/passwd", "path_escape"),
    ("/data/reports\\..\\secrets", "path_escape"),
    ("/data/reports/..\\..\\etc", "path_escape"),
    ("/data/reports/%5c..%5csecrets", "path_escape"),
    ("../data/reports/x", "path_escape"),
    ("/data/reports/x\x00.csv", "path_escape"),
    ("/data/reports/x%00.csv", "path_escape"),
    ("/data/reports/%ff", "path_escape"),  # not UTF-8 once decoded
    ("/etc/passwd", "scope_mismatch"),
    # Relative paths are never under an absolute prefix: there is no working directory to join.
    ("data/reports/x", "scope_mismatch"),
    ("/data/reports-old/x", "scope_mismatch"),
]


@pytest.mark.parametrize(("resource", "code"), ESCAPES)
def test_it_denies_every_path_prefix_escape(resource, code):
    assert scope_matches("path_prefix", REPORTS, resource) == (False, code)
    decision = decide([grant(scope_kind="path_prefix", scope_values=REPORTS)], [req(resource=resource)])
    assert decision.effect is Effect.DENY
    assert code in codes(decision)


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("/", "/"),
        ("/a/./b//c/", "/a/b/c"),
        ("/a/b/..", "/a"),
        ("/a/b/../..", "/"),
        ("/a\\b", "/a/b"),
        ("/a%2fb", "/a/b"),
        ("/caf%C3%A9", "/café"),
        ("/%252e", "/"),
        ("/..", None),
        ("/a/../..", None),
        ("/%2e%2e/x", None),
        ("a/b", None),
        ("", None),
        ("/a\x00", None),
        ("/%ff", None),
        ("/%25252525", None),  # still changing after three rounds
        ("/%252525", "/%"),  # three rounds are enough
    ],
)
def test_it_normalizes_paths_lexically(raw, normalized):
    assert normalize_path(raw) == normalized


# --- limits ------------------------------------------------------------------------------------

HOUR = 3600
WINDOW = {"max_amount_per_window": 5000, "amount_window_seconds": 86400}
NEXT_HOUR = {"time_range_min_seconds": 0, "time_range_max_seconds": HOUR}


def at(**delta) -> dict:
    """Requirement kwargs: one datetime argument at NOW + delta."""
    return {"datetimes": (NOW + timedelta(**delta),)}


LIMIT_TABLE = [
    # limits, requirement kwargs, usage, allowed, code when denied
    ({"calls_per_minute": 5}, {}, Usage(calls_last_minute=4), True, None),
    ({"calls_per_minute": 5}, {}, Usage(calls_last_minute=5), False, "rate_limited"),
    ({"calls_per_minute": 0}, {}, Usage(), False, "rate_limited"),
    ({"calls_per_run": 3}, {}, Usage(calls_this_run=2), True, None),
    ({"calls_per_run": 3}, {}, Usage(calls_this_run=3), False, "run_call_limit"),
    ({"max_amount_per_call": 1000}, {"amount": 1000}, Usage(), True, None),
    ({"max_amount_per_call": 1000}, {"amount": 1001}, Usage(), False, "amount_over_call_limit"),
    ({"max_amount_per_call": 1000}, {"amount": None}, Usage(), False, "amount_unknown"),
    (WINDOW, {"amount": 1000}, Usage(amount_in_window=4000), True, None),
    (WINDOW, {"amount": 1000}, Usage(amount_in_window=4001), False, "amount_over_window_limit"),
    (WINDOW, {"amount": 0}, Usage(amount_in_window=5000), True, None),
    (WINDOW, {"amount": 1}, Usage(amount_in_window=5000), False, "amount_over_window_limit"),
    (WINDOW, {"amount": None}, Usage(), False, "amount_unknown"),
    (NEXT_HOUR, at(seconds=0), Usage(), True, None),
    (NEXT_HOUR, at(seconds=HOUR), Usage(), True, None),
    (NEXT_HOUR, at(seconds=HOUR + 1), Usage(), False, "time_out_of_range"),
    (NEXT_HOUR, at(seconds=-1), Usage(), False, "time_out_of_range"),
    # One datetime out of range is enough, however many others are fine.
    (NEXT_HOUR, {"datetimes": (NOW, NOW - timedelta(microseconds=1))}, Usage(), False, "time_out_of_range"),
    ({"time_range_min_seconds": -60}, at(seconds=-60), Usage(), True, None),
    ({"time_range_min_seconds": -60}, at(seconds=-61), Usage(), False, "time_out_of_range"),
    # Same instant in another zone: compared as instants, not wall-clock text.
    (NEXT_HOUR, {"datetimes": ((NOW + timedelta(seconds=HOUR)).astimezone(UTC_8),)}, Usage(), True, None),
    ({"time_range_max_seconds": 0}, {}, Usage(), True, None),  # no datetimes in the call: nothing to bound
]


@pytest.mark.parametrize(("limits", "req_kw", "usage", "allowed", "code"), LIMIT_TABLE)
def test_it_enforces_every_limit_at_its_boundary(limits, req_kw, usage, allowed, code):
    decision = decide([grant(limits=Limits.from_dict(limits))], [req(**req_kw)], usage={"g1": usage})
    assert decision.effect is (Effect.ALLOW if allowed else Effect.DENY)
    assert (code in codes(decision)) if code else codes(decision) == ["grant_matched"]


def test_it_reads_missing_usage_as_zero():
    decision = decide([grant(limits=Limits(calls_per_run=1))], usage={"other": Usage(calls_this_run=9)})
    assert decision.effect is Effect.ALLOW


def test_it_uses_another_grant_when_one_is_over_its_limit():
    limited = grant(grant_id="a", limits=Limits(calls_per_minute=1))
    spare = grant(grant_id="b")
    decision = decide([limited, spare], usage={"a": Usage(calls_last_minute=1)})
    assert decision.effect is Effect.ALLOW
    assert [g.grant_id for g in decision.used_grants] == ["b"]
    assert [(r.code, r.grant_id) for r in decision.reasons] == [("rate_limited", "a"), ("grant_matched", "b")]


def test_it_round_trips_limits_and_refuses_unknown_keys():
    limits = Limits(max_amount_per_call=10, time_range_min_seconds=-5)
    assert limits.to_dict() == {"max_amount_per_call": 10, "time_range_min_seconds": -5}
    assert Limits.from_dict(limits.to_dict()) == limits
    assert Limits.from_dict(None) == Limits()
    with pytest.raises(ValueError, match="max_amount"):
        Limits.from_dict({"max_amount": 10})


@pytest.mark.parametrize(
    "bad",
    [
        {"calls_per_minute": True},
        {"calls_per_minute": 1.5},
        {"calls_per_run": -1},
        {"max_amount_per_window": 10},  # window length missing
        {"max_amount_per_window": 10, "amount_window_seconds": 0},
        {"time_range_min_seconds": 10, "time_range_max_seconds": 5},
    ],
)
def test_it_refuses_malformed_limits(bad):
    with pytest.raises(ValueError):
        Limits.from_dict(bad)


# --- grant lifecycle, tenant, subject, tool pins ------------------------------------------------


@pytest.mark.parametrize(
    ("expires_at", "allowed"),
    [
        (None, True),
        (NOW + timedelta(microseconds=1), True),
        (NOW, False),  # expiring exactly now is expired
        (NOW - timedelta(seconds=1), False),
    ],
)
def test_it_treats_expiry_as_exclusive(expires_at, allowed):
    decision = decide([grant(expires_at=expires_at)])
    assert decision.effect is (Effect.ALLOW if allowed else Effect.DENY)
    assert ("grant_expired" in codes(decision)) is not allowed


@pytest.mark.parametrize("revoked_at", [NOW - timedelta(days=1), NOW, NOW + timedelta(days=1)])
def test_it_never_matches_a_revoked_grant(revoked_at):
    decision = decide([grant(revoked_at=revoked_at)])
    assert decision.effect is Effect.DENY
    assert "grant_revoked" in codes(decision)


def test_it_does_not_even_consider_another_tenants_grant():
    decision = decide([grant(grant_id="globex-secret", tenant="globex")])
    assert decision.effect is Effect.DENY
    assert [(r.code, r.grant_id) for r in decision.reasons] == [("no_grant", None)]
    assert "globex" not in json.dumps(decision.to_dict())


def test_it_denies_another_subjects_grant():
    decision = decide([grant(subject_id="bob")])
    assert decision.effect is Effect.DENY
    assert codes(decision) == ["wrong_subject", "no_grant"]
    assert [r["code"] for r in decision.public_reasons()] == ["no_grant"]


def test_it_lets_a_tenant_wide_grant_cover_every_subject():
    for subject in ("alice", "bob"):
        assert decide([grant(subject_id=None)], subject_id=subject).effect is Effect.ALLOW


@pytest.mark.parametrize(
    ("tool_refs", "calling", "allowed"),
    [
        (("calendar.create_event@1",), "calendar.create_event@1", True),
        (("calendar.create_event@1",), "calendar.create_event@2", False),
        (("calendar.create_event@1", "calendar.create_event@2"), "calendar.create_event@2", True),
        (("calendar.create_event@1",), "calendar.create_event@10", False),
        (("calendar.create_event@1",), "calendar.create_event", False),
        ((), "calendar.create_event@7", True),  # unpinned grant: any version
    ],
)
def test_it_honours_tool_version_pins(tool_refs, calling, allowed):
    decision = decide([grant(tool_refs=tool_refs)], tool_ref=calling)
    assert decision.effect is (Effect.ALLOW if allowed else Effect.DENY)
    assert ("tool_version_not_pinned" in codes(decision)) is not allowed


def test_it_reports_every_failure_of_every_grant():
    stale = grant(grant_id="a", revoked_at=NOW, expires_at=NOW, tool_refs=("other@1",))
    narrow = grant(grant_id="b", scope_kind="exact", scope_values=("work",))
    decision = decide([narrow, stale])
    assert [(r.code, r.grant_id) for r in decision.reasons] == [
        ("grant_revoked", "a"), ("grant_expired", "a"), ("tool_version_not_pinned", "a"), ("scope_mismatch", "b"),
    ]


# --- combining effects -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        ("allow", "allow", Effect.ALLOW),
        ("allow", "confirm", Effect.CONFIRM),
        ("confirm", "allow", Effect.CONFIRM),
        ("confirm", "confirm", Effect.CONFIRM),
        ("allow", None, Effect.DENY),
        (None, "allow", Effect.DENY),
        ("confirm", None, Effect.DENY),
        (None, None, Effect.DENY),
    ],
)
def test_it_lets_deny_beat_confirm_beat_allow_across_requirements(first, second, expected):
    grants = []
    if first:
        grants.append(grant(grant_id="cal", effect=first))
    if second:
        grants.append(grant(grant_id="mail", capability="mail.send", effect=second, scope_kind="domain_suffix",
                            scope_values=EXAMPLE))
    requirements = [req(), req(capability="mail.send", resource="team@example.com")]
    decision = decide(grants, requirements)
    assert decision.effect is expected
    confirmations = [r for r in decision.reasons if r.code == "confirmation_required"]
    if expected is Effect.CONFIRM:
        confirming = [g for g, effect in (("cal", first), ("mail", second)) if effect == "confirm"]
        assert [r.grant_id for r in confirmations] == confirming
        assert [g.grant_id for g in decision.used_grants] == ["cal", "mail"]
    else:
        assert confirmations == []
    if expected is Effect.DENY:
        assert decision.used_grants == ()
        assert "no_grant" in codes(decision)


@pytest.mark.parametrize("ids", [("a", "b"), ("b", "a")])
def test_it_prefers_an_allow_grant_over_a_confirm_grant(ids):
    confirm_id, allow_id = ids
    decision = decide([grant(grant_id=confirm_id, effect="confirm"), grant(grant_id=allow_id, effect="allow")])
    assert decision.effect is Effect.ALLOW
    assert [g.grant_id for g in decision.used_grants] == [allow_id]
    assert "confirmation_required" not in codes(decision)


def test_it_denies_when_one_of_two_requirements_is_unmet():
    decision = decide([grant()], [req(), req(operation_class="delete")])
    assert decision.effect is Effect.DENY
    assert codes(decision) == ["grant_matched", "operation_mismatch"]


def test_it_denies_a_tool_that_names_no_requirement():
    decision = decide([grant()], [])
    assert decision.effect is Effect.DENY
    assert codes(decision) == ["no_requirements"]


# --- identity comes from the caller, never from the arguments ------------------------------------


def requirement_from(arguments: dict) -> Requirement:
    """What the caller does: follow the ToolSpec's resource pointer (/calendar_id), nothing else."""
    return req(resource=arguments["calendar_id"])


def test_it_ignores_identity_claims_in_the_arguments():
    plain = {"calendar_id": "primary", "title": "Pack passport"}
    claiming = {**plain, "role": "admin", "as_user": "root", "subject": "root", "tenant": "globex"}
    grants = [grant(scope_kind="exact", scope_values=("primary",)), grant(grant_id="root", subject_id="root")]
    for subject in ("alice", "mallory"):
        a = authorize(requirements=[requirement_from(plain)], grants=grants, ctx=ctx(subject_id=subject))
        b = authorize(requirements=[requirement_from(claiming)], grants=grants, ctx=ctx(subject_id=subject))
        assert a == b
    assert b.effect is Effect.DENY  # mallory stays mallory, whatever the arguments say


def test_it_has_no_way_to_receive_arguments():
    assert list(inspect.signature(authorize).parameters) == ["requirements", "grants", "ctx"]


# --- determinism and records ---------------------------------------------------------------------


def test_it_decides_the_same_way_whatever_the_grant_order():
    grants = [
        grant(grant_id="e", effect="confirm"),
        grant(grant_id="c", subject_id="bob"),
        grant(grant_id="a", expires_at=NOW),
        grant(grant_id="d", scope_kind="exact", scope_values=("work",)),
        grant(grant_id="b", limits=Limits(calls_per_run=1)),
        grant(grant_id="z", tenant="globex"),
    ]
    usage = {"b": Usage(calls_this_run=1)}
    first = decide(grants, usage=usage)
    for seed in range(20):
        shuffled = grants[:]
        random.Random(seed).shuffle(shuffled)
        again = decide(shuffled, usage=usage)
        assert again == first
        assert json.dumps(again.to_dict()) == json.dumps(first.to_dict())
    assert first.effect is Effect.CONFIRM
    assert [r.grant_id for r in first.reasons] == ["a", "b", "c", "d", "e", "e"]


def test_it_serializes_the_decision_and_the_snapshot():
    g = grant(
        scope_kind="path_prefix", scope_values=REPORTS, effect="confirm",
        limits=Limits(max_amount_per_call=500), expires_at=NOW + timedelta(days=1),
    )
    decision = decide([g], [req(resource="/data/reports/x", amount=100)])
    record = json.loads(json.dumps(decision.to_dict()))
    assert record["effect"] == "confirm"
    assert record["used_grant_ids"] == ["g1"]
    assert record["used_grants"][0]["limits"] == {"max_amount_per_call": 500}
    assert [r["code"] for r in record["reasons"]] == ["grant_matched", "confirmation_required"]
    assert "used_grants" not in decision.to_dict(include_grants=False)
    assert GrantSnapshot.from_dict(record["used_grants"][0]) == g


def test_it_keeps_other_subjects_grants_out_of_public_reasons():
    secret = "/vault/bob-only"
    bobs = grant(grant_id="bob-grant-7", subject_id="bob", scope_kind="path_prefix", scope_values=(secret,),
                 limits=Limits(max_amount_per_call=987654))
    globex = grant(grant_id="globex-grant-9", tenant="globex", subject_id="alice", scope_kind="path_prefix",
                   scope_values=("/globex/data",))
    mine = grant(grant_id="alice-grant-1", scope_kind="path_prefix", scope_values=("/home/alice",))
    decision = decide([bobs, globex, mine], [req(resource=secret + "/x", amount=1)])
    assert decision.effect is Effect.DENY
    public = json.dumps(decision.public_reasons())
    for leak in (secret, "bob", "987654", "globex", "grant-", "/home/alice"):
        assert leak not in public
    assert [r["code"] for r in decision.public_reasons()] == ["scope_mismatch"]
    assert all(set(r) == {"code", "capability", "message"} for r in decision.public_reasons())


def test_it_folds_duplicate_public_reasons():
    decision = decide([grant(grant_id=i, expires_at=NOW) for i in ("a", "b", "c")])
    assert [r["code"] for r in decision.public_reasons()] == ["grant_expired"]


# --- malformed inputs fail loudly --------------------------------------------------------------

NAIVE = datetime(2026, 7, 19, 6, 0)


@pytest.mark.parametrize(
    "bad",
    [
        {"operation_class": "write"},
        {"scope_kind": "regex"},
        {"effect": "deny"},
        {"expires_at": NAIVE},
        {"revoked_at": NAIVE},
        {"scope_values": ["/data"]},
        {"limits": {"calls_per_run": 1}},
    ],
)
def test_it_refuses_a_malformed_grant(bad):
    with pytest.raises(ValueError):
        grant(**bad)


@pytest.mark.parametrize(
    "bad", [{"operation_class": "write"}, {"amount": -1}, {"amount": True}, {"datetimes": (NAIVE,)}]
)
def test_it_refuses_a_malformed_requirement(bad):
    with pytest.raises(ValueError):
        req(**bad)


def test_it_refuses_a_naive_clock():
    with pytest.raises(ValueError):
        ctx(now=NAIVE)
