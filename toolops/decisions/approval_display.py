"""What an approver reads: arguments, limits, risk and the interpretation trail, in words.

Pure functions over a ToolSpec's declarations and an invocation's record (no Django). A value is
shown by what it *means*, and what it means comes from the ToolSpec only, never from a field's
name:

* a field a ``currency_minor_units`` normalizer produced is money: ``{"amount_minor": 1250,
  "currency": "EUR"}`` (option ``currency: "from_value"``) or ``1250`` (option ``currency:
  "EUR"``) reads ``12.50 EUR``;
* a field a ``datetime`` normalizer produced reads ``2026-12-02 09:00 +08:00 (Asia/Shanghai)``
  — the run's zone is named only when the value's offset is that zone's offset at that instant;
  a ``date`` field reads ``2026-12-02 (Wednesday)``;
* an input-schema property may say so itself with ``"x-toolops-kind": "money" | "datetime" |
  "date"`` (for tools whose values arrive already explicit); money annotated so is the
  ``{"amount_minor", "currency"}`` object.

Grant amount limits and approval-policy thresholds name their currency (``"currency": "EUR"``
beside the minor-unit amounts) and are shown in it: ``max 500.00 EUR per call``, ``up to 10.00
EUR: runs without a person``. When the call is in another currency the line says so (the grant
cannot cover it). A record written before limits had a currency is shown in the call's currency,
marked as such.
"""
from __future__ import annotations

import json
from datetime import date, datetime
from typing import Any, Mapping
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from toolops.runtime.digest import canonical_json
from toolops.runtime.normalizers import MINOR_UNITS, escape_pointer_token

KINDS = ("money", "datetime", "date")
_NORMALIZER_KINDS = {"currency_minor_units": "money", "datetime": "datetime", "date": "date"}


def field_kinds(*, input_schema: Mapping | None, normalizers: list | None) -> dict[str, dict]:
    """``{pointer: {"kind", "currency"?}}`` for every field the ToolSpec declares a meaning for.

    Normalizer rules win over schema annotations at the same pointer (they produced the value).
    """
    kinds: dict[str, dict] = {}
    _schema_kinds(input_schema or {}, "", kinds)
    for rule in normalizers or []:
        kind = _NORMALIZER_KINDS.get(rule.get("normalizer"))
        if kind is None:
            continue
        info = {"kind": kind}
        currency = (rule.get("options") or {}).get("currency")
        if kind == "money" and currency and currency != "from_value":
            info["currency"] = currency
        kinds[rule["pointer"]] = info
    return kinds


def _schema_kinds(schema: Mapping, pointer: str, out: dict) -> None:
    kind = schema.get("x-toolops-kind") if isinstance(schema, Mapping) else None
    if kind in KINDS and pointer:
        out[pointer] = {"kind": kind}
    for name, sub in (schema.get("properties") or {}).items() if isinstance(schema, Mapping) else ():
        if isinstance(sub, Mapping):
            _schema_kinds(sub, f"{pointer}/{escape_pointer_token(name)}", out)


def format_money(minor: int, currency: str) -> str:
    """``1250, "EUR"`` → ``12.50 EUR``; ``5000000, "JPY"`` → ``5,000,000 JPY``."""
    exponent = MINOR_UNITS.get(currency, 2)
    sign = "-" if minor < 0 else ""
    whole, frac = divmod(abs(minor), 10 ** exponent)
    text = f"{whole:,}" + (f".{frac:0{exponent}d}" if exponent else "")
    return f"{sign}{text} {currency}"


def money_of(value: Any, info: Mapping) -> tuple[int, str] | None:
    """``(minor units, currency)`` of a money value, or None when it is not one."""
    if isinstance(value, Mapping) and set(value) == {"amount_minor", "currency"}:
        minor, currency = value["amount_minor"], value["currency"]
    else:
        minor, currency = value, info.get("currency")
    if isinstance(minor, bool) or not isinstance(minor, int) or not isinstance(currency, str):
        return None
    return minor, currency


def format_datetime(text: str, zone_name: str | None) -> str:
    """``2026-12-02T09:00:00+08:00`` → ``2026-12-02 09:00 +08:00 (Asia/Shanghai)``.

    The zone is named only when it is the value's zone at that instant; text that is not an
    aware RFC 3339 datetime is returned as written (never guessed).
    """
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return str(text)
    if moment.utcoffset() is None:
        return f"{text} (no zone)"
    offset = moment.strftime("%z")
    offset = "UTC" if offset == "+0000" else f"{offset[:3]}:{offset[3:]}"
    clock = moment.strftime("%Y-%m-%d %H:%M") + (f":{moment:%S}" if moment.second else "")
    named = ""
    if zone_name:
        try:
            if moment.astimezone(ZoneInfo(zone_name)).utcoffset() == moment.utcoffset():
                named = f" ({zone_name})"
        except (ZoneInfoNotFoundError, ValueError):
            pass
    return f"{clock} {offset}{named}"


def format_date(text: str) -> str:
    try:
        return f"{text} ({date.fromisoformat(text):%A})"
    except (TypeError, ValueError):
        return str(text)


def format_value(value: Any, info: Mapping | None, *, zone_name: str | None = None) -> str:
    """One value as the approver reads it; JSON text when the ToolSpec declares no meaning."""
    kind = (info or {}).get("kind")
    if kind == "money":
        money = money_of(value, info or {})
        if money is not None:
            return format_money(*money)
    if kind == "datetime" and isinstance(value, str):
        return format_datetime(value, zone_name)
    if kind == "date" and isinstance(value, str):
        return format_date(value)
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def arguments_display(arguments: Any, kinds: Mapping[str, Mapping], *, zone_name: str | None = None) -> list[dict]:
    """One line per top-level argument: ``{"field", "pointer", "kind", "text", "value"}``.

    An object argument whose own fields have declared meanings is shown as ``key: text`` pairs.
    """
    if not isinstance(arguments, Mapping):
        return [{"field": "", "pointer": "", "kind": "", "text": format_value(arguments, None), "value": arguments}]
    lines = []
    for key in sorted(arguments):
        pointer = f"/{escape_pointer_token(key)}"
        value = arguments[key]
        info = kinds.get(pointer)
        if info is None and isinstance(value, Mapping) and any(p.startswith(pointer + "/") for p in kinds):
            text = ", ".join(
                f"{k}: {format_value(v, kinds.get(f'{pointer}/{escape_pointer_token(k)}'), zone_name=zone_name)}"
                for k, v in sorted(value.items())
            )
        else:
            text = format_value(value, info, zone_name=zone_name)
        lines.append({"field": key, "pointer": pointer, "kind": (info or {}).get("kind", ""), "text": text, "value": value})
    return lines


def call_currency(arguments: Any, kinds: Mapping[str, Mapping]) -> str | None:
    """The currency of the call's first money field (grant amount limits are in its minor units)."""
    for pointer, info in sorted(kinds.items()):
        if info.get("kind") != "money":
            continue
        found, value = _lookup(arguments, pointer)
        money = money_of(value, info) if found else None
        if money is not None:
            return money[1]
    return None


def _lookup(document: Any, pointer: str) -> tuple[bool, Any]:
    for token in pointer.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        if not isinstance(document, Mapping) or token not in document:
            return False, None
        document = document[token]
    return True, document


def _duration(seconds: int) -> str:
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def _amount_words(minor: int, own: str | None, call: str | None) -> str:
    """An amount limit in major units of its own currency (else, for an old record, the call's)."""
    if own:
        return format_money(minor, own)
    if call:
        return f"{format_money(minor, call)} (no currency stated: read in the call's)"
    return f"{minor:,} minor units (no currency stated)"


def _other_currency(own: str | None, call: str | None) -> list[str]:
    if own and call and own != call:
        return [f"in {own}: this call is in {call}, so these amounts cannot cover it"]
    return []


def limits_display(limits: Mapping | None, *, currency: str | None) -> list[str]:
    """A grant's limits in words, amounts in major units of the limits' own currency:
    ``max 500.00 EUR per call``; ``currency`` is the call's."""
    limits = limits or {}
    own = limits.get("currency")

    def amount(minor: int) -> str:
        return _amount_words(minor, own, currency)

    out = []
    if limits.get("max_amount_per_call") is not None:
        out.append(f"max {amount(limits['max_amount_per_call'])} per call")
    if limits.get("max_amount_per_window") is not None:
        out.append(f"max {amount(limits['max_amount_per_window'])} per {_duration(limits['amount_window_seconds'])}")
    if limits.get("calls_per_minute") is not None:
        out.append(f"at most {limits['calls_per_minute']} calls a minute")
    if limits.get("calls_per_run") is not None:
        out.append(f"at most {limits['calls_per_run']} calls per run")
    lo, hi = limits.get("time_range_min_seconds"), limits.get("time_range_max_seconds")
    if lo is not None or hi is not None:
        out.append("times between " + _relative(lo, "any time") + " and " + _relative(hi, "any time"))
    if limits.get("max_amount_per_call") is not None or limits.get("max_amount_per_window") is not None:
        out += _other_currency(own, currency)
    return out


_TIER_WORDS = {"allow": "runs without a person", "deny": "denied"}


def policy_display(policy: Mapping | None, *, currency: str | None) -> list[str]:
    """An approval policy's thresholds in words, in major units of the policy's currency:
    ``up to 10.00 EUR: runs without a person``, ``above 500.00 EUR: 2 approvers``."""
    policy = policy or {}
    own = policy.get("currency")
    out, below = [], None
    for tier in policy.get("thresholds") or []:
        effect = tier.get("effect", "")
        words = _TIER_WORDS.get(effect) or f"{tier.get('approvals', 1)} approver(s)"
        if tier.get("up_to") is not None:
            out.append(f"up to {_amount_words(tier['up_to'], own, currency)}: {words}")
            below = tier["up_to"]
        else:
            out.append(f"above {_amount_words(below, own, currency)}: {words}" if below is not None else f"any amount: {words}")
    if out:
        top = policy["thresholds"][-1]
        if top.get("up_to") is not None:
            out.append(f"above {_amount_words(top['up_to'], own, currency)}: denied")
        out += _other_currency(own, currency)
    if policy.get("edits") == "second_person_always":
        out.append("an approver's edit always needs a second approver")
    return out


def _relative(seconds: int | None, unbounded: str) -> str:
    if seconds is None:
        return unbounded
    if seconds == 0:
        return "now"
    return f"now + {_duration(seconds)}" if seconds > 0 else f"now − {_duration(-seconds)}"


def scope_display(scope_kind: str, scope_values: list | None) -> str:
    if scope_kind == "any":
        return "any resource"
    values = ", ".join(str(v) for v in scope_values or [])
    return f"{scope_kind.replace('_', ' ')}: {values}" if values else scope_kind


def why_display(*, authorization: Mapping | None, confirmation_policy: Mapping | None, currency: str | None) -> dict:
    """Why a person decides this call: the grants that said ``confirm`` (with their limits in the
    call's units) and/or the ToolSpec's own rule.

    ``{"decision", "text", "grants": [{"grant_id", "capability", "effect", "scope", "limits",
    "policy", "text"}], "tool_rule"}``.
    """
    authorization = authorization or {}
    grants = []
    for g in authorization.get("capabilities") or []:
        limits = limits_display(g.get("limits"), currency=currency)
        policy = policy_display(g.get("approval_policy"), currency=currency)
        scope = scope_display(g.get("scope_kind", ""), g.get("scope_values"))
        effect = g.get("effect", "")
        verb = "requires a person's confirmation" if effect == "confirm" else "allows it"
        text = f"grant {str(g.get('grant_id', ''))[:8]} on {g.get('capability', '')} ({scope}) {verb}"
        text += f"; {', '.join(limits)}" if limits else ""
        text += f"; policy: {', '.join(policy)}" if policy else ""
        grants.append({"grant_id": g.get("grant_id"), "capability": g.get("capability"), "effect": effect,
                       "scope": scope, "limits": limits, "policy": policy, "text": text})
    tool_rule = ""
    if (confirmation_policy or {}).get("required"):
        tool_rule = "the tool's ToolSpec requires a person to confirm every call"
    reasons = [g["text"] for g in grants if g["effect"] == "confirm"] + ([tool_rule] if tool_rule else [])
    if not reasons and authorization.get("decision") == "confirm":
        reasons = ["the tool's definition is not yet confirmed by an admin, so a person decides each call"]
    return {"decision": authorization.get("decision", ""), "text": "; ".join(reasons),
            "reasons": reasons, "grants": grants, "tool_rule": tool_rule}


_RISK = {
    "read_only": ("reads only", "nothing to undo: the tool changes nothing"),
    "write_idempotent": ("changes data; repeatable with its idempotency key",
                         "cannot be undone by ToolOps: undoing needs a compensating call the tool supports"),
    "write_unsafe": ("changes data; NOT idempotent",
                     "cannot be undone by ToolOps: undoing needs a compensating call the tool supports"),
}


def risk_display(*, side_effect_class: str, idempotency_key: str = "", has_lookup: bool = False) -> dict:
    """The risk line: side-effect class, what a retry does, whether it can be undone."""
    effect, undo = _RISK.get(side_effect_class, (side_effect_class, "unknown"))
    if side_effect_class == "write_idempotent":
        idempotency = f"a retry re-sends the same key {idempotency_key} and cannot repeat the effect"
    elif side_effect_class == "write_unsafe":
        idempotency = "no idempotency guarantee: an unclear outcome is " + (
            "looked up by its client reference, never re-sent" if has_lookup else "left to a person, never re-sent")
    else:
        idempotency = "safe to repeat"
    return {"side_effect_class": side_effect_class, "effect": effect, "idempotency": idempotency, "undo": undo,
            "text": f"{effect} · {idempotency} · {undo}"}


def interpretation_display(*, raw: bytes, context: Mapping | None, trace: list | None,
                           kinds: Mapping[str, Mapping]) -> dict:
    """What the model wrote → what it became, and the clock, zone and locale that decided it.

    ``{"raw_text", "context": {"clock", "timezone", "locale"}, "context_text", "steps": [{"pointer",
    "normalizer", "input", "output", "changed", "input_text", "output_text", "text"}]}``.
    """
    context = context or {}
    zone = context.get("timezone")
    steps = []
    for step in trace or []:
        info = kinds.get(step.get("pointer", ""))
        written = step.get("input")
        became = format_value(step.get("output"), info, zone_name=zone)
        source = "(absent; default filled in)" if step.get("normalizer") == "default" else json.dumps(written, ensure_ascii=False)
        steps.append({"pointer": step.get("pointer", ""), "normalizer": step.get("normalizer", ""), "input": written,
                      "output": step.get("output"), "changed": written != step.get("output"),
                      "input_text": source, "output_text": became,
                      "text": f"{step.get('pointer', '')}: {source} → {became}"})
    clock = context.get("clock", "")
    clock_text = format_datetime(clock, zone) if clock else "—"
    return {"raw_text": raw.decode("utf-8", "backslashreplace"),
            "context": {"clock": clock, "timezone": zone or "", "locale": context.get("locale", "")},
            "context_text": f"clock {clock_text} · zone {zone or '—'} · locale {context.get('locale') or '—'}",
            "steps": steps}


def arguments_difference(before: Any, after: Any, kinds: Mapping[str, Mapping], *, zone_name: str | None = None) -> list[dict]:
    """Top-level fields that differ: ``{"field", "before", "after"}`` (texts; "—" for absent)."""
    before = before if isinstance(before, Mapping) else {}
    after = after if isinstance(after, Mapping) else {}
    show = {line["field"]: line["text"] for line in arguments_display(before, kinds, zone_name=zone_name)}
    now = {line["field"]: line["text"] for line in arguments_display(after, kinds, zone_name=zone_name)}
    return [{"field": key, "before": show.get(key, "—"), "after": now.get(key, "—")}
            for key in sorted(set(before) | set(after)) if before.get(key) != after.get(key)]


# --- the edit form ------------------------------------------------------------------------------


def minor_to_decimal(minor: int, currency: str) -> str:
    """``1250, "EUR"`` → ``"12.50"`` (the input form a ``currency_minor_units`` normalizer reads)."""
    exponent = MINOR_UNITS.get(currency, 2)
    whole, frac = divmod(abs(minor), 10 ** exponent)
    return ("-" if minor < 0 else "") + str(whole) + (f".{frac:0{exponent}d}" if exponent else "")


def input_shape(arguments: Any, kinds: Mapping[str, Mapping]) -> Any:
    """Normalized arguments written back in the shape the input schema accepts, so an edit starts
    from what the approver saw: money as a decimal string (``{"amount": "12.50", "currency":
    "EUR"}`` for a ``from_value`` field); every other normalizer's output is already valid input."""
    if not isinstance(arguments, Mapping):
        return arguments
    out = json.loads(json.dumps(arguments))
    for pointer, info in kinds.items():
        if info.get("kind") != "money":
            continue
        found, value = _lookup(out, pointer)
        money = money_of(value, info) if found else None
        if money is None:
            continue
        decimal = minor_to_decimal(*money)
        replacement = {"amount": decimal, "currency": money[1]} if isinstance(value, Mapping) else decimal
        tokens = pointer.split("/")[1:]
        parent = out
        for token in tokens[:-1]:
            parent = parent[token.replace("~1", "/").replace("~0", "~")]
        parent[tokens[-1].replace("~1", "/").replace("~0", "~")] = replacement
    return out


def _widget(schema: Mapping) -> str:
    if schema.get("enum"):
        return "select"
    types = schema.get("type")
    types = types if isinstance(types, list) else [types]
    if types == ["integer"]:
        return "integer"
    if types == ["number"]:
        return "number"
    if types == ["boolean"]:
        return "boolean"
    if "string" in types:  # ["string", "number"] amounts stay text: "12.50" is what the model may write
        return "textarea" if (schema.get("maxLength") or 0) > 200 else "text"
    return "json"


def edit_form_fields(*, input_schema: Mapping | None, kinds: Mapping[str, Mapping], values: Any) -> list[dict]:
    """One form field per input-schema property (one level into objects): ``{"name", "label",
    "widget" (text | textarea | integer | number | boolean | select | json), "value", "choices",
    "required", "help"}``. ``name`` is the property's JSON pointer; ``value`` the text to show."""
    schema = input_schema or {}
    values = values if isinstance(values, Mapping) else {}
    fields: list[dict] = []
    _form_fields(schema, "", values, set(schema.get("required") or []), kinds, fields)
    return fields


def _form_fields(schema: Mapping, prefix: str, values: Mapping, required: set, kinds: Mapping, out: list) -> None:
    properties = schema.get("properties") or {}
    # Required fields first, then by name (a stored schema's key order is not the author's).
    for name in sorted(properties, key=lambda n: (n not in required, n)):
        sub = properties[name]
        if not isinstance(sub, Mapping):
            continue
        pointer = f"{prefix}/{escape_pointer_token(name)}"
        value = values.get(name)
        if sub.get("type") == "object" and sub.get("properties") and not prefix:
            _form_fields(sub, pointer, value if isinstance(value, Mapping) else {}, set(sub.get("required") or []), kinds, out)
            continue
        widget = _widget(sub)
        if value is None:
            text = ""
        elif widget in ("json", "select") or not isinstance(value, str):
            text = json.dumps(value, ensure_ascii=False)  # a select's option values are JSON too
        else:
            text = value
        kind = (kinds.get(pointer) or {}).get("kind", "")
        if not kind and (kinds.get(prefix) or {}).get("kind") == "money":
            # the {"amount", "currency"} input a from_value money normalizer defines
            kind = {"amount": "money", "currency": "currency"}.get(name, "")
        out.append({
            "name": pointer, "label": pointer.lstrip("/").replace("/", " · "), "widget": widget, "value": text,
            "choices": [{"value": json.dumps(c, ensure_ascii=False), "label": c if isinstance(c, str) else json.dumps(c)}
                        for c in sub.get("enum") or []],
            "required": name in required, "help": _help(sub, kind),
        })


def _help(schema: Mapping, kind: str) -> str:
    parts = []
    if kind == "money":
        parts.append("money: a decimal amount in major units, e.g. 12.50")
    elif kind == "currency":
        parts.append("ISO 4217 currency code")
    elif kind == "datetime":
        parts.append("date and time with its offset, e.g. 2026-12-02T09:00:00+08:00")
    elif kind == "date":
        parts.append("a date, e.g. 2026-12-02")
    if schema.get("description"):
        parts.append(str(schema["description"]))
    for key, word in (("minimum", "min"), ("maximum", "max"), ("maxLength", "max length")):
        if key in schema:
            parts.append(f"{word} {schema[key]}")
    return "; ".join(parts)


class FormError(ValueError):
    """A form value that cannot become JSON of its field's type (shown beside the field)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def canonical_text(value: Any) -> str:
    """The JCS text of a JSON value (what the form's arguments are re-parsed from)."""
    return canonical_json(value).decode("utf-8")


def arguments_from_form(fields: list[dict], posted: Mapping[str, str]) -> dict:
    """The edited arguments from posted ``{pointer: text}``: empty optional fields are left out,
    integers / numbers / booleans / JSON fields parsed, everything else kept as the text typed —
    the schema, not this function, decides whether it is valid."""
    out: dict = {}
    for field in fields:
        text = posted.get(field["name"], "")
        if text == "" and field["widget"] not in ("text", "textarea"):
            continue
        if text == "" and not field["required"]:
            continue
        widget = field["widget"]
        try:
            if widget in ("integer", "number", "boolean", "json", "select"):
                value = json.loads(text)
            else:
                value = text
        except ValueError:
            raise FormError(field["name"], f"not a valid {widget} value: {text!r}") from None
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in field["name"].split("/")[1:]]
        target = out
        for token in tokens[:-1]:
            target = target.setdefault(token, {})
        target[tokens[-1]] = value
    return out

