"""From a ToolSpec's ``required_capabilities`` and the *normalized* arguments to Requirements.

Each entry names a capability and where its resource, amount and date-times live (JSON
pointers into the normalized arguments). An amount's currency is the entry's ``currency`` (fixed
ISO 4217 code) or ``currency_pointer``, else the ``currency_minor_units`` normalizer that produced
the amount; a ToolSpec that declares none leaves it unknown, and money limits then refuse the call. Nothing else in the arguments is read, so a field
such as ``"role": "admin"`` cannot influence authorization.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping, Sequence

from toolops.decisions.authorization import Requirement
from toolops.runtime.normalizers import MINOR_UNITS, parse_pointer


class RequirementError(ValueError):
    """The ToolSpec's capability declaration cannot be applied (misconfiguration)."""


def resolve_pointer(document: Any, pointer: str) -> tuple[bool, Any]:
    value = document
    for token in parse_pointer(pointer):
        if isinstance(value, dict) and token in value:
            value = value[token]
        elif isinstance(value, list) and token.isdigit() and int(token) < len(value):
            value = value[int(token)]
        else:
            return False, None
    return True, value


def _datetimes(arguments: Any, pointers: Sequence[str]) -> tuple[datetime, ...]:
    out = []
    for pointer in pointers:
        found, value = resolve_pointer(arguments, pointer)
        if found:
            moment = datetime.fromisoformat(str(value))
            if moment.tzinfo is None:
                raise RequirementError(f"{pointer} is not an aware date-time after normalization")
            out.append(moment)
    return tuple(out)


def amount_currency(arguments: Any, amount_pointer: str, normalizers: Sequence[Mapping[str, Any]] | None) -> str | None:
    """The currency of the amount at ``amount_pointer``, as the ToolSpec's ``currency_minor_units``
    normalizer declares it: its fixed ``currency`` option for a normalizer at that pointer, or for
    a ``from_value`` normalizer at ``P`` (amount at ``P/amount_minor``) the ``P/currency`` it wrote.
    None when no normalizer produced the amount: the ToolSpec does not say (never guessed)."""
    for rule in normalizers or ():
        if rule.get("normalizer") != "currency_minor_units":
            continue
        option = (rule.get("options") or {}).get("currency")
        pointer = rule.get("pointer", "")
        if option != "from_value" and pointer == amount_pointer:
            return option if isinstance(option, str) else None
        if option == "from_value" and amount_pointer == f"{pointer}/amount_minor":
            found, value = resolve_pointer(arguments, f"{pointer}/currency")
            return value if found and isinstance(value, str) else None
    return None


def _declared_currency(entry: Mapping[str, Any], arguments: Any, normalizers) -> str | None:
    """The amount's currency: the entry's own ``currency`` (a fixed ISO 4217 code) or
    ``currency_pointer`` (where the call states it), else what the normalizers say."""
    if entry.get("currency") is not None:
        if entry["currency"] not in MINOR_UNITS:
            raise RequirementError(f"currency {entry['currency']!r} of {entry['capability']!r} is not an ISO 4217 code ToolOps knows")
        return entry["currency"]
    if entry.get("currency_pointer"):
        found, value = resolve_pointer(arguments, entry["currency_pointer"])
        return value if found and isinstance(value, str) and value in MINOR_UNITS else None
    return amount_currency(arguments, entry["amount_pointer"], normalizers)


def requirements_for(
    *, declared: Sequence[Mapping[str, Any]], operation_classes: Mapping[str, str], arguments: Any,
    normalizers: Sequence[Mapping[str, Any]] | None = None,
) -> list[Requirement]:
    """Requirements of one call; ``operation_classes`` maps capability name → class; the amount's
    currency comes from the ToolSpec's ``normalizers`` (``amount_currency``).

    Raises ``RequirementError`` for an undeclared capability or a value of the wrong type, so a
    misconfigured ToolSpec denies instead of guessing.
    """
    requirements = []
    for entry in declared:
        name = entry["capability"]
        if name not in operation_classes:
            raise RequirementError(f"capability {name!r} is not defined")
        resource = None
        if entry.get("resource_pointer"):
            found, value = resolve_pointer(arguments, entry["resource_pointer"])
            resource = str(value) if found and value is not None else None
        amount = currency = None
        if entry.get("amount_pointer"):
            currency = _declared_currency(entry, arguments, normalizers)
            found, value = resolve_pointer(arguments, entry["amount_pointer"])
            if found and (not isinstance(value, int) or isinstance(value, bool)):
                raise RequirementError(f"{entry['amount_pointer']} must be integer minor units")
            amount = value if found else None
        requirements.append(Requirement(
            capability=name, operation_class=operation_classes[name], resource=resource, amount=amount, currency=currency,
            datetimes=_datetimes(arguments, entry.get("datetime_pointers") or ()),
        ))
    return requirements


def money_currency(requirements) -> str | None:
    """The currency the call's amounts are in (ISO 4217), when the ToolSpec says where it is."""
    return next((r.currency for r in requirements if r.amount is not None and r.currency), None)
