"""Semantic normalizers (docs/concepts/admission.md, layer 3): turn relative argument values into explicit ones.

A ToolSpec points fields at registry entries by RFC 6901 JSON pointer (``FieldRule``). Every
normalizer is a pure function of ``(value, NormalizationContext, options)``: it never reads the
real clock, the process timezone or the locale of the machine, so re-running it with the
recorded context (``NormalizationContext.to_record``) reproduces the same arguments and digest.
A value that cannot be normalized is rejected (``NormalizationRejected``), never guessed.

Pure Python on purpose (no Django): the worker, the API and audits all import it.
"""
from __future__ import annotations

import copy
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Callable, Mapping
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

NORMALIZERS_VERSION = "1"

Normalizer = Callable[[Any, "NormalizationContext", Mapping[str, Any]], Any]


# --------------------------------------------------------------------------------------------
# Context, errors, rules
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NormalizationContext:
    """Everything a normalizer may depend on, recorded with the invocation.

    ``clock`` is the aware reference instant ("now" for relative dates), ``timezone`` the Run's
    IANA zone, ``defaults`` top-level argument values filled in when the model omitted them.
    """

    clock: datetime
    timezone: str
    locale: str = "en-US"
    defaults: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.clock, datetime) or self.clock.utcoffset() is None:
            raise ValueError("NormalizationContext.clock must be an aware datetime")
        zone_of(self.timezone)  # fail at construction, not in the middle of a rule
        if not isinstance(self.locale, str) or not self.locale:
            raise ValueError("NormalizationContext.locale must be a non-empty string")
        if not isinstance(self.defaults, Mapping):
            raise ValueError("NormalizationContext.defaults must be a mapping")
        _require_json(dict(self.defaults), "defaults")
        # A private copy: the caller mutating its dict later must not change recorded behaviour.
        object.__setattr__(self, "defaults", copy.deepcopy(dict(self.defaults)))

    def to_record(self) -> dict:
        """JSON-able form stored with the invocation; ``from_record`` is its exact inverse."""
        return {
            "clock": self.clock.isoformat(),
            "timezone": self.timezone,
            "locale": self.locale,
            "defaults": copy.deepcopy(dict(self.defaults)),
            "normalizers_version": NORMALIZERS_VERSION,
        }

    @classmethod
    def from_record(cls, record: dict) -> "NormalizationContext":
        """Rebuild a context from ``to_record`` output (e.g. to re-run normalization in an audit).

        A record written by another normalizers version is refused: its rules may differ, so
        re-running would not reproduce the recorded arguments.
        """
        missing = {"clock", "timezone", "locale", "defaults", "normalizers_version"} - set(record)
        if missing:
            raise ValueError(f"normalization context record lacks {sorted(missing)}")
        if record["normalizers_version"] != NORMALIZERS_VERSION:
            raise ValueError(
                f"normalization context was recorded by normalizers version "
                f"{record['normalizers_version']!r}, this is {NORMALIZERS_VERSION!r}"
            )
        return cls(
            clock=datetime.fromisoformat(record["clock"]),
            timezone=record["timezone"],
            locale=record["locale"],
            defaults=record["defaults"],
        )


class NormalizationRejected(Exception):
    """A value the normalizer cannot turn into an explicit one (→ VALIDATION_REJECTED)."""

    code = "normalization_rejected"

    def __init__(self, *, pointer: str, normalizer: str, reason: str, message: str) -> None:
        super().__init__(message)
        self.pointer = pointer
        self.normalizer = normalizer
        self.reason = reason
        self.message = message

    def as_dict(self) -> dict:
        return {
            "code": self.code,
            "pointer": self.pointer,
            "normalizer": self.normalizer,
            "reason": self.reason,
            "message": self.message,
        }

    def located(self, *, pointer: str | None = None, normalizer: str | None = None):
        """A copy naming where it happened (normalizers themselves do not know the pointer)."""
        return NormalizationRejected(
            pointer=self.pointer if pointer is None else pointer,
            normalizer=self.normalizer if normalizer is None else normalizer,
            reason=self.reason,
            message=self.message,
        )


def _reject(reason: str, message: str) -> NormalizationRejected:
    return NormalizationRejected(pointer="", normalizer="", reason=reason, message=message)


@dataclass(frozen=True)
class FieldRule:
    """Apply registry entry ``normalizer`` with ``options`` to the value at ``pointer``.

    Validated on construction, so a rule that exists is a rule that can run.
    """

    pointer: str
    normalizer: str
    options: Mapping[str, Any] = field(default_factory=dict)
    # Worked out once here rather than on every call: the pointer's tokens, the options with
    # their defaults filled in (read-only, since one rule serves every call).
    tokens: tuple[str, ...] = field(init=False, repr=False, compare=False)
    resolved: Mapping[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.pointer, str):
            raise ValueError("rule pointer must be a string")
        object.__setattr__(self, "tokens", tuple(parse_pointer(self.pointer)))
        if self.normalizer not in REGISTRY:
            raise ValueError(
                f"unknown normalizer {self.normalizer!r}; known: {sorted(REGISTRY)}"
            )
        resolved = resolve_options(self.normalizer, self.options)
        object.__setattr__(self, "resolved", MappingProxyType(copy.deepcopy(resolved)))
        object.__setattr__(self, "options", copy.deepcopy(dict(self.options)))

    @classmethod
    def from_dict(cls, d: dict) -> "FieldRule":
        """``{"pointer", "normalizer", "options"?}`` → FieldRule (``ValueError`` when malformed)."""
        if not isinstance(d, Mapping):
            raise ValueError(f"a rule must be an object, got {type(d).__name__}")
        extra = set(d) - {"pointer", "normalizer", "options"}
        if extra:
            raise ValueError(f"rule has unknown keys {sorted(extra)}")
        for key in ("pointer", "normalizer"):
            if not isinstance(d.get(key), str):
                raise ValueError(f"rule {key!r} must be a string")
        return cls(pointer=d["pointer"], normalizer=d["normalizer"], options=d.get("options", {}))


# --------------------------------------------------------------------------------------------
# Registry and options
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One option a normalizer accepts: its allowed values (compared type-strictly) and default."""

    choices: tuple[Any, ...]
    default: Any = None
    required: bool = False


_BOOL = (False, True)

REGISTRY: dict[str, Normalizer] = {}
_FUNCTIONS: dict[str, Normalizer] = {}  # the bare functions, for rules whose options are resolved
OPTIONS: dict[str, Mapping[str, Option]] = {}


def register(name: str, *, options: Mapping[str, Option] | None = None):
    """Decorator: add a normalizer under ``name``.

    The registry entry validates and defaults the options before calling the function, and
    stamps its name on any rejection.
    """

    def decorate(fn: Normalizer) -> Normalizer:
        if name in REGISTRY:
            raise ValueError(f"normalizer {name!r} is already registered")

        _FUNCTIONS[name] = fn

        def entry(value: Any, ctx: NormalizationContext, opts: Mapping[str, Any]) -> Any:
            resolved = resolve_options(name, opts)
            try:
                return fn(value, ctx, resolved)
            except NormalizationRejected as exc:
                raise exc.located(normalizer=name) from None

        entry.__name__ = entry.__qualname__ = fn.__name__
        entry.__doc__ = fn.__doc__
        OPTIONS[name] = dict(options or {})
        REGISTRY[name] = entry
        return fn

    return decorate


def _is_choice(value: Any, choices: tuple[Any, ...]) -> bool:
    # Type-strict: ``1 == True`` must not make 1 a valid boolean option.
    return any(type(value) is type(c) and value == c for c in choices)


def resolve_options(name: str, options: Any) -> dict[str, Any]:
    """Check ``options`` against the normalizer's declaration and fill in defaults."""
    if not isinstance(options, Mapping):
        raise ValueError(f"options of normalizer {name!r} must be an object")
    specs = OPTIONS.get(name, {})
    unknown = set(options) - set(specs)
    if unknown:
        raise ValueError(
            f"normalizer {name!r} has no option(s) {sorted(unknown)}; accepted: {sorted(specs)}"
        )
    resolved = {}
    for key, spec in specs.items():
        if key not in options:
            if spec.required:
                raise ValueError(f"normalizer {name!r} requires option {key!r}")
            resolved[key] = spec.default
        elif not _is_choice(options[key], spec.choices):
            raise ValueError(
                f"option {key!r} of normalizer {name!r} must be one of {list(spec.choices)}, "
                f"got {options[key]!r}"
            )
        else:
            resolved[key] = options[key]
    return resolved


def check_rules(rules: list[dict]) -> None:
    """Publish-time check of a ToolSpec's rules; ``ValueError`` naming the first bad rule."""
    if not isinstance(rules, list):
        raise ValueError("normalization rules must be a list")
    for index, rule in enumerate(rules):
        try:
            rule if isinstance(rule, FieldRule) else FieldRule.from_dict(rule)
        except ValueError as exc:
            raise ValueError(f"normalization rule #{index}: {exc}") from None


# --------------------------------------------------------------------------------------------
# Applying rules
# --------------------------------------------------------------------------------------------


def normalize_arguments(
    arguments: Any, rules: list[FieldRule] | list[dict], ctx: NormalizationContext
) -> tuple[Any, list[dict]]:
    """Return ``(normalized deep copy, trace)``; ``arguments`` itself is never mutated.

    1. Each ``ctx.defaults`` key absent from a top-level object is filled in (sorted key order),
       traced as ``{"pointer", "normalizer": "default", "input": None, "output": value}``.
    2. Rules run in order; each sees the output of the previous ones. A rule whose pointer does
       not resolve is skipped (presence is the schema's ``required``, not ours).
    3. A value a rule cannot normalize raises ``NormalizationRejected`` carrying the rule's pointer.
    """
    parsed = compile_rules(rules)
    result = _json_copy(arguments)
    trace: list[dict] = []
    _apply_defaults(result, ctx, trace)
    for rule in parsed:
        found, value = _lookup(result, rule.tokens)
        if not found:
            continue
        try:
            output = _FUNCTIONS[rule.normalizer](value, ctx, rule.resolved)
        except NormalizationRejected as exc:
            raise exc.located(pointer=rule.pointer, normalizer=rule.normalizer) from None
        result = _replace(result, rule.tokens, output)
        trace.append(
            {
                "pointer": rule.pointer,
                "normalizer": rule.normalizer,
                "input": _json_copy(value),
                "output": _json_copy(output),
            }
        )
    return result, trace


def compile_rules(rules: list[dict] | list[FieldRule]) -> tuple[FieldRule, ...]:
    """A ToolSpec's rules as ``FieldRule``s (``ValueError`` when malformed)."""
    return tuple(r if isinstance(r, FieldRule) else FieldRule.from_dict(r) for r in rules)


RULES_CACHE_SIZE = 4096
_rules_cache: dict[tuple, tuple[FieldRule, ...]] = {}


def cached_rules(cache_key: tuple, rules: list[dict]) -> tuple[FieldRule, ...]:
    """``compile_rules`` once per ``cache_key`` — a published ToolSpec's name and version, which
    are immutable, as for ``validation.cached_validator``. A full cache is simply emptied:
    compiling a spec's rules again costs microseconds."""
    compiled = _rules_cache.get(cache_key)
    if compiled is None:
        compiled = compile_rules(rules)
        if len(_rules_cache) >= RULES_CACHE_SIZE:
            _rules_cache.clear()
        _rules_cache[cache_key] = compiled
    return compiled


def _json_copy(value: Any) -> Any:
    """Deep copy of a JSON value (what the parser yields): containers copied, scalars shared."""
    if isinstance(value, dict):
        return {key: _json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_copy(item) for item in value]
    if value is None or isinstance(value, (str, int, float)):  # bool is an int
        return value
    return copy.deepcopy(value)


def _apply_defaults(result: Any, ctx: NormalizationContext, trace: list[dict]) -> None:
    if not isinstance(result, dict):
        return  # not an object: the schema layer reports that, defaults have nowhere to go
    for key in sorted(ctx.defaults):
        if key in result:
            continue
        result[key] = copy.deepcopy(ctx.defaults[key])
        trace.append(
            {
                "pointer": "/" + escape_pointer_token(key),
                "normalizer": "default",
                "input": None,
                "output": copy.deepcopy(ctx.defaults[key]),
            }
        )


def parse_pointer(pointer: str) -> list[str]:
    """RFC 6901 pointer → reference tokens (``ValueError`` when malformed)."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise ValueError(f"JSON pointer {pointer!r} must be empty or start with '/'")
    if re.search(r"~(?![01])", pointer):
        raise ValueError(f"JSON pointer {pointer!r} has a '~' not followed by 0 or 1")
    # RFC 6901 §4: decode ~1 before ~0 so that "~01" means "~1", not "/".
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def escape_pointer_token(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]*", re.ASCII)


def _step(container: Any, token: str) -> tuple[bool, Any]:
    if isinstance(container, dict):
        return (token in container, container.get(token))
    if isinstance(container, list) and _ARRAY_INDEX.fullmatch(token):
        index = int(token)
        return (index < len(container), container[index] if index < len(container) else None)
    return (False, None)


def _lookup(document: Any, tokens: Sequence[str]) -> tuple[bool, Any]:
    value = document
    for token in tokens:
        found, value = _step(value, token)
        if not found:
            return (False, None)
    return (True, value)


def _replace(document: Any, tokens: Sequence[str], new: Any) -> Any:
    if not tokens:
        return new
    _, parent = _lookup(document, tokens[:-1])
    key = int(tokens[-1]) if isinstance(parent, list) else tokens[-1]
    parent[key] = new
    return document


def _require_json(value: Any, where: str) -> None:
    """Defaults are recorded as JSON, so only JSON values (string keys, finite floats) fit."""
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: non-finite float is not JSON")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _require_json(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where}: object key {key!r} is not a string")
            _require_json(item, f"{where}.{key}")
        return
    raise ValueError(f"{where}: {type(value).__name__} is not a JSON value")


# --------------------------------------------------------------------------------------------
# Shared text helpers
# --------------------------------------------------------------------------------------------


def zone_of(name: str) -> ZoneInfo:
    """IANA name → ZoneInfo, ``ValueError`` for anything else."""
    if not isinstance(name, str) or not name:
        raise ValueError("timezone must be a non-empty IANA zone name")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown IANA timezone {name!r}") from exc


def _expression(value: Any) -> str | None:
    """Trimmed, whitespace-collapsed, lower-cased ASCII text; None for anything else.

    Non-ASCII is refused outright: case-folding could map look-alikes (e.g. the Kelvin sign)
    onto grammar words, and full-width digits are not what the grammar means by a number.
    """
    if not isinstance(value, str) or not value.isascii():
        return None
    return " ".join(value.split()).lower()


# --------------------------------------------------------------------------------------------
# date
# --------------------------------------------------------------------------------------------

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MAX_RELATIVE = 3660  # ten years of days; bounds "in N days" / "in N weeks" / "N days ago"

_ISO_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)
_WEEKDAY = re.compile(r"(next )?(" + "|".join(_WEEKDAYS) + r")")
_IN_N = re.compile(r"in (\d{1,4}) (day|days|week|weeks)", re.ASCII)
_N_AGO = re.compile(r"(\d{1,4}) (day|days|week|weeks) ago", re.ASCII)
_FIXED_OFFSETS = {"today": 0, "tomorrow": 1, "yesterday": -1}


def today_in_zone(ctx: NormalizationContext) -> date:
    """The calendar date of ``ctx.clock`` in the Run's zone (not the clock's own offset)."""
    return ctx.clock.astimezone(zone_of(ctx.timezone)).date()


def _weekday_date(today: date, weekday: int, is_next: bool) -> date:
    if is_next:
        # "next <day>": strictly after today, 1..7 days ahead.
        return today + timedelta(days=(weekday - today.weekday() - 1) % 7 + 1)
    # bare "<day>": today if today is that day, else the coming one, 0..6 days ahead.
    return today + timedelta(days=(weekday - today.weekday()) % 7)


def _relative_days(count: str, unit: str) -> int | None:
    n = int(count)
    if n > _MAX_RELATIVE:
        return None
    return n * 7 if unit.startswith("week") else n


def parse_date_expression(text: str, today: date) -> date | None:
    """One already-cleaned date expression → date, or None when it is not in the grammar."""
    if m := _ISO_DATE.fullmatch(text):
        try:
            return date(int(m[1]), int(m[2]), int(m[3]))
        except ValueError:
            return None  # well-formed but not a calendar date, e.g. 2026-02-30
    try:
        if text in _FIXED_OFFSETS:
            return today + timedelta(days=_FIXED_OFFSETS[text])
        if m := _WEEKDAY.fullmatch(text):
            return _weekday_date(today, _WEEKDAYS.index(m[2]), bool(m[1]))
        if m := _IN_N.fullmatch(text):
            days = _relative_days(m[1], m[2])
            return None if days is None else today + timedelta(days=days)
        if m := _N_AGO.fullmatch(text):
            days = _relative_days(m[1], m[2])
            return None if days is None else today - timedelta(days=days)
    except OverflowError:
        return None  # beyond year 1..9999
    return None


@register("date")
def normalize_date(value: Any, ctx: NormalizationContext, options: Mapping[str, Any]) -> str:
    """Date expression → ISO ``YYYY-MM-DD``.

    Accepted (case-insensitive, trimmed, internal whitespace collapsed):

    * ``YYYY-MM-DD`` that is a real calendar date — the semantic check for ``format: date``;
    * ``today`` / ``tomorrow`` / ``yesterday`` — "today" is ``ctx.clock`` seen in ``ctx.timezone``;
    * ``<weekday>`` — today if today is that weekday, otherwise the next one (0–6 days ahead);
    * ``next <weekday>`` — the first such day strictly after today (1–7 days ahead), so it only
      differs from the bare weekday when today is that weekday;
    * ``in N day(s)|week(s)`` and ``N day(s)|week(s) ago``, 0 ≤ N ≤ 3660.

    Anything else (including non-strings) → reason ``unrecognized_date``.
    """
    text = _expression(value)
    result = None if text is None else parse_date_expression(text, today_in_zone(ctx))
    if result is None:
        raise _reject("unrecognized_date", f"{value!r} is not a recognized date")
    return result.isoformat()


# --------------------------------------------------------------------------------------------
# datetime
# --------------------------------------------------------------------------------------------

_ISO_DATETIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[t ](\d{2}):(\d{2})(?::(\d{2})(\.\d+)?)?(z|[+-]\d{2}:\d{2})?",
    re.ASCII,
)
_WITH_TIME = re.compile(
    r"(?P<date>.+?) (?:at )?"
    r"(?:(?P<h24>\d{1,2}):(?P<m24>\d{2})|(?P<h12>\d{1,2})(?::(?P<m12>\d{2}))? ?(?P<ampm>am|pm))",
    re.ASCII,
)


def _clock_time(m: re.Match) -> time | None:
    """The time part of ``_WITH_TIME``: 24-hour ``HH:MM`` or 12-hour ``9am`` / ``9:30 pm``."""
    try:
        if m["h24"] is not None:
            return time(int(m["h24"]), int(m["m24"]))
        hour = int(m["h12"])
        if not 1 <= hour <= 12:
            return None
        # 12am is midnight, 12pm is noon.
        return time(hour % 12 + (12 if m["ampm"] == "pm" else 0), int(m["m12"] or 0))
    except ValueError:
        return None


def _offset(text: str) -> timezone:
    if text == "z":
        return timezone.utc
    hours, minutes = int(text[1:3]), int(text[4:6])
    if hours > 23 or minutes > 59:
        raise ValueError(f"bad UTC offset {text!r}")
    sign = -1 if text[0] == "-" else 1
    return timezone(sign * timedelta(hours=hours, minutes=minutes))


def _parse_iso_datetime(m: re.Match) -> tuple[datetime, bool] | None:
    """``(datetime, has_offset)``; fractional seconds are dropped (output is whole seconds)."""
    try:
        naive = datetime(*(int(m[i]) for i in range(1, 6)), int(m[6] or 0))
        if m[8] is None:
            return naive, False
        return naive.replace(tzinfo=_offset(m[8])), True
    except ValueError:
        return None


def resolve_local(naive: datetime, zone: ZoneInfo, *, dst_gap: str, dst_fold: str) -> datetime:
    """A wall-clock time in ``zone`` → aware datetime, applying the DST rules.

    The candidate instants are ``naive - offset`` for the offsets zoneinfo reports with fold=0
    and fold=1; a candidate is valid when converting it back to ``zone`` gives ``naive`` again.

    * one valid candidate: an ordinary time;
    * none valid — a gap (spring forward): ``shift_forward`` reads the time with the offset
      before the transition, which moves it forward by the gap length (02:30 in a 1 h gap →
      03:30 at the new offset); ``reject`` → reason ``nonexistent_local_time``;
    * two valid — a fold (fall back): ``earlier`` is the first occurrence (pre-transition
      offset), ``later`` the second; ``reject`` → reason ``ambiguous_local_time``.
    """
    offsets = {naive.replace(tzinfo=zone, fold=f).utcoffset() for f in (0, 1)}
    candidates = sorted(naive - o for o in offsets)  # earliest instant first (UTC wall times)
    valid = [c for c in candidates if _wall(c, zone) == naive]
    if len(valid) == 1:
        return _in_zone(valid[0], zone)
    if not valid:
        if dst_gap == "reject":
            raise _reject(
                "nonexistent_local_time", f"{naive.isoformat()} does not exist in {zone.key}"
            )
        # Pre-transition offset is the smaller one in a gap, giving the later instant.
        return _in_zone(candidates[-1], zone)
    if dst_fold == "reject":
        raise _reject("ambiguous_local_time", f"{naive.isoformat()} occurs twice in {zone.key}")
    return _in_zone(valid[0] if dst_fold == "earlier" else valid[-1], zone)


def _in_zone(utc_wall: datetime, zone: ZoneInfo) -> datetime:
    return utc_wall.replace(tzinfo=timezone.utc).astimezone(zone)


def _wall(utc_wall: datetime, zone: ZoneInfo) -> datetime:
    return _in_zone(utc_wall, zone).replace(tzinfo=None)


def format_rfc3339(moment: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS±HH:MM`` (never ``Z``, so one instant+zone has one spelling)."""
    total = int(moment.utcoffset().total_seconds())
    if total % 60:
        # Historical local-mean-time offsets (e.g. +08:05:43) have no RFC 3339 spelling.
        raise _reject("unrepresentable_offset", f"UTC offset of {moment} has seconds")
    sign = "-" if total < 0 else "+"
    hours, minutes = divmod(abs(total) // 60, 60)
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T"
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}{sign}{hours:02d}:{minutes:02d}"
    )


def _local_datetime(text: str, ctx: NormalizationContext) -> tuple[datetime, bool] | None:
    """``(datetime, is_instant)`` for a cleaned datetime expression, None if unrecognized."""
    if m := _ISO_DATETIME.fullmatch(text):
        return _parse_iso_datetime(m)
    if m := _WITH_TIME.fullmatch(text):
        day = parse_date_expression(m["date"], today_in_zone(ctx))
        clock_time = _clock_time(m)
        if day is None or clock_time is None:
            return None
        return datetime.combine(day, clock_time), False
    return None


@register(
    "datetime",
    options={
        "dst_gap": Option(("shift_forward", "reject"), default="shift_forward"),
        "dst_fold": Option(("earlier", "later", "reject"), default="earlier"),
    },
)
def normalize_datetime(value: Any, ctx: NormalizationContext, options: Mapping[str, Any]) -> str:
    """Datetime expression → RFC 3339 ``YYYY-MM-DDTHH:MM:SS±HH:MM`` in ``ctx.timezone``.

    Accepted (case-insensitive, trimmed, whitespace collapsed):

    * RFC 3339 with ``Z`` / ``±HH:MM``: the same instant, re-rendered at the Run zone's offset;
    * naive ``YYYY-MM-DD[T| ]HH:MM[:SS]``: a wall-clock time in ``ctx.timezone``;
    * ``<date expression> [at] HH:MM`` or ``<date expression> [at] 9am|9:30pm`` where the date
      expression is anything ``date`` accepts (``tomorrow 09:00``, ``next friday at 5pm``).

    Fractional seconds are truncated. Wall-clock times follow ``resolve_local``'s DST rules
    (options ``dst_gap`` = ``shift_forward`` | ``reject``, ``dst_fold`` = ``earlier`` | ``later``
    | ``reject``). Anything else → reason ``unrecognized_datetime``.
    """
    text = _expression(value)
    parsed = None if text is None else _local_datetime(text, ctx)
    if parsed is None:
        raise _reject("unrecognized_datetime", f"{value!r} is not a recognized date and time")
    moment, is_instant = parsed
    zone = zone_of(ctx.timezone)
    try:
        if is_instant:
            resolved = moment.astimezone(zone)
        else:
            resolved = resolve_local(
                moment, zone, dst_gap=options["dst_gap"], dst_fold=options["dst_fold"]
            )
    except OverflowError:
        raise _reject("unrecognized_datetime", f"{value!r} is out of range") from None
    return format_rfc3339(resolved)


# --------------------------------------------------------------------------------------------
# strings
# --------------------------------------------------------------------------------------------


def _require_string(value: Any) -> str:
    if not isinstance(value, str):
        raise _reject("not_a_string", f"expected a string, got {type(value).__name__}")
    return value


@register(
    "identifier",
    options={
        "trim": Option(_BOOL, default=True),
        "casefold": Option(_BOOL, default=False),
        "collapse_whitespace": Option(_BOOL, default=False),
    },
)
def normalize_identifier(value: Any, ctx: NormalizationContext, options: Mapping[str, Any]) -> str:
    """An identifier string: optionally collapse whitespace runs, trim, casefold (in that order).

    Non-strings → ``not_a_string``; an empty result → ``empty``.
    """
    text = _require_string(value)
    if options["collapse_whitespace"]:
        text = re.sub(r"\s+", " ", text)
    if options["trim"]:
        text = text.strip()
    if options["casefold"]:
        text = text.casefold()
    if not text:
        raise _reject("empty", "identifier is empty")
    return text


@register("trim")
def normalize_trim(value: Any, ctx: NormalizationContext, options: Mapping[str, Any]) -> str:
    """Strip leading and trailing whitespace (``str.strip``); non-strings → ``not_a_string``."""
    return _require_string(value).strip()


@register("casefold")
def normalize_casefold(value: Any, ctx: NormalizationContext, options: Mapping[str, Any]) -> str:
    """``str.casefold`` for caseless comparison; non-strings → ``not_a_string``."""
    return _require_string(value).casefold()


# --------------------------------------------------------------------------------------------
# currency_minor_units
# --------------------------------------------------------------------------------------------

#: ISO 4217 minor-unit exponents (digits after the decimal point).
MINOR_UNITS: dict[str, int] = {
    "AUD": 2, "BHD": 3, "BRL": 2, "CAD": 2, "CHF": 2, "CLP": 0, "CNY": 2, "CZK": 2,
    "DKK": 2, "EUR": 2, "GBP": 2, "HKD": 2, "INR": 2, "ISK": 0, "JOD": 3, "JPY": 0,
    "KRW": 0, "KWD": 3, "MXN": 2, "NOK": 2, "NZD": 2, "OMR": 3, "PLN": 2, "SEK": 2,
    "SGD": 2, "TND": 3, "USD": 2, "VND": 0, "ZAR": 2,
}
# Results must stay exact as JSON numbers (RFC 8785 digests use IEEE-754 doubles).
_MAX_MINOR = 2**53 - 1
_DECIMAL_STRING = re.compile(r"-?\d+(\.\d+)?", re.ASCII)
_MAX_AMOUNT_CHARS = 64


def _exact_amount(value: Any) -> Fraction:
    """A JSON number or plain decimal string → its exact value.

    Floats use their shortest repr (``12.5`` → 12.5, ``0.1 + 0.2`` → 0.30000000000000004) so the
    amount is what the model wrote, not the binary approximation. Strings with grouping
    separators (``"1,234.56"``) or exponents are refused: their meaning depends on locale.
    """
    if isinstance(value, bool):  # bool is an int subclass; True is not an amount
        raise _reject("invalid_amount", "a boolean is not an amount")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _reject("invalid_amount", f"{value!r} is not a finite amount")
        return Fraction(repr(value))
    # The length cap keeps Fraction's digit arithmetic cheap; real amounts are far shorter.
    if isinstance(value, str) and len(value) <= _MAX_AMOUNT_CHARS:
        if _DECIMAL_STRING.fullmatch(value):
            return Fraction(value)
    raise _reject("invalid_amount", f"{value!r} is not a plain decimal amount like \"12.50\"")


def _to_minor(value: Any, currency: str, allow_negative: bool) -> int:
    amount = _exact_amount(value)
    if amount < 0 and not allow_negative:
        raise _reject("negative", f"negative amount {value!r} is not allowed")
    minor = amount * 10 ** MINOR_UNITS[currency]
    if minor.denominator != 1:
        # Numerically exact trailing zeros are fine ("12.00" JPY); real extra digits are not.
        raise _reject(
            "too_many_decimals",
            f"{value!r} has more than {MINOR_UNITS[currency]} decimals for {currency}",
        )
    if abs(minor) > _MAX_MINOR:
        raise _reject("out_of_range", f"{value!r} {currency} is too large")
    return int(minor)


def amount_to_minor(value: Any, currency: str) -> int:
    """A non-negative amount a person typed (``"50"``, ``"12.50"``) → minor units of ``currency``,
    by the same rule as the normalizer (``NormalizationRejected`` with its reason otherwise)."""
    return _to_minor(value, _currency_code(currency), allow_negative=False)


def _currency_code(value: Any) -> str:
    code = value.upper() if isinstance(value, str) and value.isascii() else None
    if code not in MINOR_UNITS:
        raise _reject("unknown_currency", f"unknown currency {value!r}")
    return code


@register(
    "currency_minor_units",
    options={
        "currency": Option(tuple(sorted(MINOR_UNITS)) + ("from_value",), required=True),
        "allow_negative": Option(_BOOL, default=False),
    },
)
def normalize_currency_minor_units(
    value: Any, ctx: NormalizationContext, options: Mapping[str, Any]
) -> Any:
    """Amount → int minor units: ``"12.50"`` USD → 1250, ``12`` JPY → 12, ``"1.234"`` KWD → 1234.

    With option ``currency`` = an ISO 4217 code the value is a number or ``^-?\\d+(\\.\\d+)?$``
    string. With ``currency: "from_value"`` the value is ``{"amount": ..., "currency": "USD"}``
    and becomes ``{"amount_minor": 1250, "currency": "USD"}``. Reasons: ``invalid_amount``,
    ``too_many_decimals``, ``negative`` (unless ``allow_negative``), ``out_of_range`` (beyond
    2**53 - 1 minor units), ``unknown_currency``, ``invalid_amount_object``.
    """
    if options["currency"] != "from_value":
        return _to_minor(value, options["currency"], options["allow_negative"])
    if not isinstance(value, dict) or set(value) != {"amount", "currency"}:
        raise _reject(
            "invalid_amount_object", 'expected exactly {"amount": ..., "currency": "<ISO 4217>"}'
        )
    code = _currency_code(value["currency"])
    return {
        "amount_minor": _to_minor(value["amount"], code, options["allow_negative"]),
        "currency": code,
    }
