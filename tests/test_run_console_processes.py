"""`make run`'s processes (issue 31): every child's lines carry its name, the worker's background
chatter stays at WARNING, SIGTERM to `make` stops every child and frees every port, and a port that
is already taken stops `make run` before its banner, naming the port."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from devtools.processes import port_in_use
from tests.conftest import REPO_ROOT
from tests.servers import MAKE_RUN_OFFSETS, free_port_with_neighbours, make_run, wait_for


def _descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        out = subprocess.run(["pgrep", "-P", str(todo.pop())], capture_output=True, text=True).stdout.split()
        for child in map(int, out):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_make_run_prefixes_lines_quiets_the_worker_and_stops_everything_on_sigterm():
    with make_run(worker=True) as run:
        time.sleep(8)  # the beat sends a task every 2 s: at INFO that would be several lines by now
        output = run.output()
        ports = [run.port, *(run.port + offset for offset in MAKE_RUN_OFFSETS)]
        processes = _descendants(run.proc.pid)
        assert len(processes) >= 6, processes  # run_console, web (+ its workers), demo, notes, mcp, worker

        banner_end = output.index("Ctrl-C (or SIGTERM) stops everything")
        child_lines = [line for line in output[banner_end:].splitlines()[1:] if line.strip()]
        assert child_lines, output
        names = {m.group(1) for line in child_lines if (m := re.match(r"^(\w+) +\| ", line))}
        assert all(re.match(r"^\w+ +\| ", line) for line in child_lines), child_lines
        assert "worker" in names and "web" in names, names
        assert any(re.match(r"^worker +\| .* ready\.", line) for line in child_lines), child_lines
        assert not [line for line in child_lines if "Sending due task" in line or "succeeded in" in line], child_lines

        os.kill(run.proc.pid, signal.SIGTERM)  # `make` itself, as a process manager stops it
        run.proc.wait(timeout=60)
        wait_for(lambda: not any(_alive(pid) for pid in processes), timeout=30, what="every child stopped")
        assert not [port for port in ports if port_in_use("127.0.0.1", port)]


def test_a_taken_port_stops_make_run_before_its_banner_naming_the_port(tmp_path):
    port = free_port_with_neighbours()
    env = {**os.environ, "TOOLOPS_VAR_DIR": str(tmp_path), "PORT": str(port)}
    for name in ("TOOLOPS_MCP_URL", "TOOLOPS_DEMO_SERVICES_URL", "TOOLOPS_DEMO_NOTES_MCP_URL", "TOOLOPS_CONSOLE_URL"):
        env.pop(name, None)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port + 1))  # the MCP server's port
        holder.listen()
        done = subprocess.run([sys.executable, "manage.py", "run_console"], cwd=REPO_ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert f"port {port + 1} (TOOLOPS_MCP_URL" in done.stderr and "already in use" in done.stderr
    assert "ToolOps console:" not in done.stdout + done.stderr
    assert not (tmp_path / "demo_token").exists()  # it stopped before doing anything
