"""Runtime dependencies only in production (issue 31): every module of the service imports only the
standard library, the project, or a distribution requirements.txt lists; and requirements.txt holds
none of the test tools.

``devtools`` (``make run``, the demo loader) and ``demo_services`` are held to the same rule: both are
installed apps or ``python -m`` modules of the deployed service (``manage.py load_demo``,
``run_demo_services``), not test code, so nothing they import may come from requirements-dev.txt.
"""
from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys

from tests.conftest import REPO_ROOT

SERVICE_PACKAGES = ("toolops", "specs_app", "invocations_app", "agent_api", "control", "mcp_server", "oauth", "worker",
                    "webhooks", "audit", "devtools", "demo_services")
TEST_TOOLS = ("pytest", "playwright", "schemathesis", "hypothesis")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _listed(path: str) -> set[str]:
    names = set()
    for line in (REPO_ROOT / path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.add(_canonical(re.split(r"[\[=<>~!; ]", line, maxsplit=1)[0]))
    return names


def _service_modules():
    for package in SERVICE_PACKAGES:
        yield from sorted((REPO_ROOT / package).rglob("*.py"))


def _imported_top_names(path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_requirements_txt_holds_no_test_tool():
    assert _listed("requirements.txt").isdisjoint(TEST_TOOLS)


def test_every_service_module_imports_only_stdlib_the_project_or_runtime_requirements():
    runtime = _listed("requirements.txt")
    distributions = importlib.metadata.packages_distributions()
    offending = {}
    for path in _service_modules():
        for name in _imported_top_names(path):
            if name in sys.stdlib_module_names or name in SERVICE_PACKAGES:
                continue
            providers = {_canonical(d) for d in distributions.get(name, [])}
            if not providers & runtime:
                offending.setdefault(name, []).append(str(path.relative_to(REPO_ROOT)))
    assert offending == {}, f"imported but not in requirements.txt (module: files): {offending}"


def test_the_service_imports_with_the_dev_only_distributions_hidden():
    """Every service module imports in a process where each top-level name that only a distribution
    of requirements-dev.txt provides (pytest, hypothesis, playwright, openai…) cannot be imported —
    what a virtualenv built from requirements.txt alone would give it."""
    dev_only = sorted(_listed("requirements-dev.txt") - _listed("requirements.txt"))
    modules = [".".join(p.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__")
               for p in _service_modules()]
    code = f"""
import importlib, importlib.abc, importlib.metadata, os, re, sys
dev_only = {dev_only!r}
hidden = {{name for name, dists in importlib.metadata.packages_distributions().items()
          if all(re.sub(r"[-_.]+", "-", d).lower() in dev_only for d in dists)}}
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in hidden:
            raise ModuleNotFoundError(f"{{fullname}} is dev-only (requirements-dev.txt)", name=fullname)
sys.meta_path.insert(0, Hide())
os.environ["DJANGO_SETTINGS_MODULE"] = "toolops.settings"
import django
django.setup()
failed = []
for module in {modules!r}:
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in hidden:
            failed.append(f"{{module}}: {{exc}}")
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
