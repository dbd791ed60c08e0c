"""Where the settings reference page gets its rows: the one place settings are declared.

The page generator (``docs/gen/reference.py: settings_page``) needs, per setting, an object with
these attributes — nothing more:

    name        the environment variable, e.g. ``DB_POOL_MAX_SIZE``
    type        a word for the reader: ``integer``, ``boolean``, ``string``, ``URL``, ``list``, ``JSON``…
    default     the default as text (``8``, ``unset``, ``$REDIS_URL``…)
    meaning     what it does, one or two sentences (Markdown allowed)
    validation  optional: what is refused at start-up (empty when nothing beyond the type)

``declared_settings()`` is the only function the generator and the tests call: it returns the rows
of the declared table, ``toolops/settings_table.py`` (the one ``toolops/settings.py`` and
``toolops/gunicorn_conf.py`` read their environment through). ``scanned_settings()`` reads the
source of those two files for every variable they read (through the table, ``ENV["X"]``, or
directly, ``os.environ.get("X")``), so a test can check that none is missing from the table.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("toolops/settings.py", "toolops/gunicorn_conf.py")


class SettingDoc(NamedTuple):
    name: str
    type: str
    default: str
    meaning: str
    validation: str = ""


def declared_settings() -> list[SettingDoc]:
    """Every setting, in the order the reader should meet them (the table's order)."""
    from toolops.settings_table import SETTINGS

    return [SettingDoc(s.name, s.kind.label, s.default_text, s.meaning) for s in SETTINGS]


# --------------------------------------------------------------------------- the source scan

_READERS = {"env_int": "integer", "env_bool": "boolean"}


def scanned_settings() -> list[SettingDoc]:
    """Every environment variable the settings modules read, first default seen (by ``ast``)."""
    found: dict[str, SettingDoc] = {}
    for relative in SCANNED:
        source = (ROOT / relative).read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            read = _env_read(node, source)
            if read and read.name not in found:
                found[read.name] = read
    return sorted(found.values(), key=lambda s: s.name)


def _env_read(node: ast.AST, source: str) -> SettingDoc | None:
    """``ENV["X"]``, ``os.environ.get("X", d)``, ``os.environ["X"]``, ``env_int("X", d)``, ``env_bool("X", d)``."""
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("os.environ", "ENV"):
        key = node.slice
        return _doc(key, None, "string", source) if isinstance(key, ast.Constant) else None
    if not isinstance(node, ast.Call) or not node.args or not isinstance(node.args[0], ast.Constant):
        return None
    func = ast.unparse(node.func)
    if func == "os.environ.get":
        return _doc(node.args[0], node.args[1] if len(node.args) > 1 else None, "string", source)
    if func in _READERS:
        return _doc(node.args[0], node.args[1] if len(node.args) > 1 else None, _READERS[func], source)
    return None


def _doc(key: ast.Constant, default: ast.AST | None, kind: str, source: str) -> SettingDoc | None:
    if not isinstance(key.value, str):
        return None
    if default is None:
        shown = "unset"
    elif isinstance(default, ast.Constant) and isinstance(default.value, bool):
        shown = "1" if default.value else "0"  # how booleans are written in the environment
    elif isinstance(default, ast.Constant):
        shown = "empty" if default.value == "" else str(default.value)
    else:
        shown = ast.get_source_segment(source, default) or ast.unparse(default)
    return SettingDoc(key.value, kind, shown, "")
