"""Write the generated reference pages into docs/generated/ (``make docs`` runs this first).

Nothing here is committed: each build regenerates the pages from the code — error codes from
``toolops/error_codes.py``, settings from the declared settings (``docs/gen/settings_source.py``),
management commands from their ``--help``, the HTTP API from the OpenAPI schema, the lifecycle
diagram from the state table. Offline and quick (a few seconds): no server, no database query.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "generated"


def main() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "toolops.settings")
    os.environ["COLUMNS"] = "100"  # argparse wraps --help to the terminal: the same width everywhere
    import django

    django.setup()
    from docs.gen import reference
    from docs.gen.state_diagram import state_diagram_svg

    OUT.mkdir(exist_ok=True)
    schema = reference.openapi_schema()
    pages = {
        "errors.md": reference.errors_page(),
        "settings.md": reference.settings_page(),
        "commands.md": reference.commands_page(),
        "http-api.md": reference.api_page(schema),
        "openapi.json": json.dumps(schema, indent=2, sort_keys=False) + "\n",
        "states.svg": state_diagram_svg(),
    }
    for name, text in pages.items():
        (OUT / name).write_text(text, encoding="utf-8")
    print(f"docs/gen: wrote {', '.join(pages)} into {OUT.relative_to(ROOT)}/")


if __name__ == "__main__":
    main()
