"""One process list (issue 31): the Procfile names every long-running process the deployment guide
starts — web, worker, beat, mcp — with the same command, and nothing else."""
from __future__ import annotations

import re

from tests.conftest import REPO_ROOT


def _procfile() -> dict[str, str]:
    entries = {}
    for line in (REPO_ROOT / "Procfile").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, command = line.partition(":")
            entries[name.strip()] = command.strip()
    return entries


def _documented() -> dict[str, str]:
    """The guide's process block: ``.venv/bin/python -m … # <type>: what it is``."""
    text = (REPO_ROOT / "docs" / "how-to" / "deploy.md").read_text()
    block = text.split("## The processes", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    found = {}
    for line in block.splitlines():
        match = re.match(r"^\.venv/bin/(python -m \S.*?)\s+# (\w+): ", line)
        if match:
            found[match.group(2)] = match.group(1)
    return found


def test_the_procfile_and_the_deployment_guide_list_the_same_processes():
    assert set(_procfile()) == set(_documented()) == {"web", "worker", "beat", "mcp"}


def test_each_procfile_line_runs_the_documented_command():
    procfile = _procfile()
    for name, command in _documented().items():
        assert command in procfile[name], (name, command, procfile[name])


def test_the_readme_sends_production_readers_to_that_guide():
    assert "docs/how-to/deploy.md" in (REPO_ROOT / "README.md").read_text()
