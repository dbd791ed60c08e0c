"""axe-core in the browser tests (issue 32): a page passes with no serious or critical violation.

axe-core's script comes from the pinned ``axe-playwright-python`` package (it bundles
``axe.min.js``, MPL-2.0, in the wheel); it is injected with Playwright's ``evaluate``, which the
console's Content-Security-Policy does not apply to.
"""
from __future__ import annotations

from axe_playwright_python.sync_playwright import Axe

BLOCKING = ("serious", "critical")
_AXE = Axe()


def blocking_violations(page) -> list[str]:
    """The serious and critical axe violations of ``page`` as it is now, one line each."""
    results = _AXE.run(page)
    return [f"{v['id']} ({v['impact']}): {v['help']} — " + "; ".join(n["target"][0] if isinstance(n["target"][0], str)
                                                                    else str(n["target"]) for n in v["nodes"][:5])
            for v in results.response["violations"] if v.get("impact") in BLOCKING]


def assert_accessible(page, name: str) -> None:
    found = blocking_violations(page)
    assert not found, f"{name} ({page.url}): " + "\n".join(found)
