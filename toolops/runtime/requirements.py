"""From a ToolSpec's ``required_capabilities`` and the *normalized* arguments to Requirements.

Each entry names a capability and where its resource, amount and date-times live (JSON
pointers into the normalized arguments). Nothing else in the arguments is read, so a field
such as ``"role": "admin"`` cannot influence authorization.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping, Sequence

from .authorization import Requirement
from .normalizers import parse_pointer


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


def requirements_for(
    *, declared: Sequence[Mapping[str, Any]], operation_classes: Mapping[str, str], arguments: Any
) -> list[Requirement]:
    """Requirements of one call; ``operation_classes`` maps capability name → class.

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
        amount = None
        if entry.get("amount_pointer"):
            found, value = resolve_pointer(arguments, entry["amount_pointer"])
            if found and (not isinstance(value, int) or isinstance(value, bool)):
                raise RequirementError(f"{entry['amount_pointer']} must be integer minor units")
            amount = value if found else None
        requirements.append(Requirement(
            capability=name, operation_class=operation_classes[name], resource=resource, amount=amount,
            datetimes=_datetimes(arguments, entry.get("datetime_pointers") or ()),
        ))
    return requirements
