"""toolops/runtime is pure Python: no Django, DRF or Celery, checked on the source and at import."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

RUNTIME = Path(__file__).resolve().parent.parent / "toolops" / "runtime"
FORBIDDEN = ("django", "rest_framework", "celery", "kombu", "drf_spectacular", "guardian")


def test_it_finds_no_forbidden_import_in_the_runtime_source():
    offenders = []
    for path in sorted(RUNTIME.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            )
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert not offenders, offenders


def test_it_imports_the_runtime_without_loading_django():
    modules = [f"toolops.runtime.{p.stem}" for p in RUNTIME.glob("*.py") if p.stem != "__init__"]
    code = (
        "import importlib, sys, types\n"
        # Import the runtime package without running toolops/__init__ (which loads Celery).
        f"pkg = types.ModuleType('toolops'); pkg.__path__ = [{str(RUNTIME.parent)!r}]; sys.modules['toolops'] = pkg\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"runtime import pulled in: {out}"
