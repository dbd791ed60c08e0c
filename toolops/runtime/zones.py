"""IANA time zone names (issue 11): what a Run's ``timezone`` may be.

``zoneinfo`` happily loads ``"localtime"`` (the host's own zone: a digest that then depends on
the machine) and ``"Factory"`` (no real place), and ``available_timezones()`` lists the former.
The list here is the pinned ``tzdata`` package's own IANA ``zones`` file, minus ``Factory``, so
every worker accepts the same names whatever its operating system ships. Stdlib + tzdata only.
"""
from __future__ import annotations

import functools
from importlib import resources

NOT_A_PLACE = frozenset({"Factory", "localtime", "posixrules"})


@functools.lru_cache(maxsize=1)
def iana_zone_names() -> frozenset[str]:
    names = resources.files("tzdata").joinpath("zones").read_text(encoding="utf-8").split()
    return frozenset(names) - NOT_A_PLACE


def is_iana_zone(name: object) -> bool:
    """True for a canonical or backward-compatible IANA zone name such as ``Asia/Shanghai``."""
    return isinstance(name, str) and name in iana_zone_names()
