"""The children of ``make run``: started in their own process groups, their output prefixed with
their name, all stopped together (issue 31).

Each child runs in a session of its own, so a terminal's Ctrl-C reaches only ``make run``, which
then stops every child's whole group (gunicorn's workers, Celery's pool and beat with them) —
the same on SIGTERM from a process manager. A child still running after the grace period is
killed, so the next start never finds a port taken.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import BinaryIO


def port_in_use(host: str, port: int) -> bool:
    """True when something listens on ``host:port`` (a bind fails even with SO_REUSEADDR, which
    the servers set too, so a socket in TIME_WAIT does not count as taken)."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host.strip("[]"), port))
        except OSError:
            return True
    return False


@dataclass
class Child:
    name: str
    proc: subprocess.Popen


class Children:
    """Start named children whose lines go to ``out`` as ``name | line``."""

    def __init__(self, out: BinaryIO | None = None):
        self.out = out or sys.stdout.buffer
        self.children: list[Child] = []
        self._lock = threading.Lock()
        self._width = 6

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> Child:
        # Unbuffered, so a child's lines arrive as it writes them, not in 8 KiB bursts.
        proc = subprocess.Popen(argv, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        child = Child(name, proc)
        self.children.append(child)
        self._width = max(self._width, len(name))
        threading.Thread(target=self._copy, args=(child,), name=f"output of {name}", daemon=True).start()
        return child

    def _copy(self, child: Child) -> None:
        for line in iter(child.proc.stdout.readline, b""):
            with self._lock:
                self.out.write(f"{child.name:<{self._width}} | ".encode() + line)
                self.out.flush()

    def exited(self) -> Child | None:
        """The first child that has stopped, if any."""
        return next((c for c in self.children if c.proc.poll() is not None), None)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM to every child's process group, then SIGKILL to the groups still alive."""
        for child in self.children:
            _signal_group(child.proc, signal.SIGTERM)
        for child in self.children:
            try:
                child.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                _signal_group(child.proc, signal.SIGKILL)
                child.proc.wait()
            # The group may outlive its leader (a pool process): make sure nothing of it stays.
            _signal_group(child.proc, signal.SIGKILL)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
