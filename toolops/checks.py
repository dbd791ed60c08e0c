"""``manage.py check`` validates the environment against the declared settings (issue 31).

Settings import already refuses a malformed variable (``toolops/settings.py``); this check
reports every declared variable the same way, and the values settings hold now (which tests
and ``override_settings`` may change), so ``check --deploy`` in a release pipeline names them.
"""
from __future__ import annotations

import os

from django.conf import settings
from django.core import checks

from toolops.settings_table import BY_NAME, problems


@checks.register(checks.Tags.compatibility)
def declared_settings_check(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    found = problems(os.environ)
    # Values settings hold as strings, checked as the table would read them from the environment.
    for name in ("TOOLOPS_API_RATE",):
        if name not in found:
            try:
                BY_NAME[name].parse(str(getattr(settings, name)))
            except ValueError as exc:
                found[name] = f"settings.{name}={getattr(settings, name)!r}: {exc}"
    return [checks.Error(message, hint="see docs/generated/settings.md", id="toolops.E031", obj=name)
            for name, message in found.items()]
