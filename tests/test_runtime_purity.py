"""The pure core — toolops/runtime (parse, validate, normalize, digest), toolops/model_io (what the
model sees and sends) and toolops/decisions (authorization, policies, retries) — is pure Python:
each of its modules imports in a fresh interpreter without loading Django, DRF or Celery (or
Kombu) — the real packages, nothing faked."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE = ("runtime", "model_io", "decisions")
FORBIDDEN = ("django", "rest_framework", "celery", "kombu", "drf_spectacular", "guardian")
SOURCES = sorted(p for package in CORE for p in (ROOT / "toolops" / package).glob("*.py"))
MODULES = sorted(f"toolops.{p.parent.name}.{p.stem}" for p in SOURCES if p.stem != "__init__")


def test_it_finds_no_forbidden_import_in_the_runtime_source():
    offenders = []
    assert len(MODULES) > 30  # the three packages were found
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            )
            offenders += [f"{path.parent.name}/{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert not offenders, offenders


def _loaded_after_import(module: str) -> list[str]:
    code = (
        f"import sys; import {module}; "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {set(FORBIDDEN)!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return ast.literal_eval(out.stdout.strip())


@pytest.mark.parametrize("module", MODULES)
def test_it_imports_each_runtime_module_alone(module):
    loaded = _loaded_after_import(module)
    assert loaded == [], f"import {module} loaded {loaded}"


def test_the_check_sees_a_module_that_does_load_celery():
    # The probe must be able to fail: the Celery app module loads Celery and Kombu.
    loaded = _loaded_after_import("toolops.celery")
    assert "celery" in loaded and any(m.startswith("kombu") for m in loaded)
