"""Wake-ups for ``tools/call`` handlers waiting for an invocation to settle.

A trigger (migrations 0012 and 0016) announces every committed change of an invocation to a
state that answers a waiting call (final, or OUTCOME_UNKNOWN) on PostgreSQL's
``toolops_invocation_state`` channel. One connection per MCP process LISTENs and
sets the events of the handlers waiting for that invocation, so a call the worker finished is
answered at once, not at the next tick of a polling loop. The handler still re-reads the row
after each wake-up (the notification says only "something changed") and, as a safety net,
at least every ``FALLBACK_SECONDS``; without a listener (another database, a lost connection
while it reconnects) it polls as before.
"""
from __future__ import annotations

import logging
import threading

import anyio
from django.conf import settings
from django.db import connection

logger = logging.getLogger(__name__)

CHANNEL = "toolops_invocation_state"
FALLBACK_SECONDS = 0.25


class Wakeups:
    """Events of waiting handlers by invocation id. Set on the event loop (the listener); armed
    there or, for a call just admitted, from the database thread that admitted it (``lock``)."""

    def __init__(self) -> None:
        self.waiters: dict[str, set[anyio.Event]] = {}
        self.listening = False
        self.lock = threading.Lock()

    def arm(self, invocation_id, event: anyio.Event | None = None) -> anyio.Event:
        """An event set by the next state change of ``invocation_id`` (arm before reading the row).
        ``event``: one made on the event loop, armed here from a database thread."""
        event = event or anyio.Event()
        with self.lock:
            self.waiters.setdefault(str(invocation_id), set()).add(event)
        return event

    def disarm(self, invocation_id, event: anyio.Event) -> None:
        with self.lock:
            events = self.waiters.get(str(invocation_id))
            if events is not None:
                events.discard(event)
                if not events:
                    del self.waiters[str(invocation_id)]

    def _wake(self, invocation_id: str) -> None:
        with self.lock:
            events = tuple(self.waiters.get(invocation_id, ()))
        for event in events:
            event.set()

    async def listen(self) -> None:
        """LISTEN until cancelled, reconnecting after a failure."""
        if connection.vendor != "postgresql":
            return
        import psycopg

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(_conninfo(), autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self.listening = True
                    async for note in conn.notifies():
                        self._wake(note.payload)
            except Exception as exc:  # noqa: BLE001 - logged; the handlers poll meanwhile
                logger.warning("invocation wake-ups lost (%s); polling until reconnected", type(exc).__name__)
            finally:
                self.listening = False
                with self.lock:  # anyone who missed a change re-reads now
                    events = [event for armed in self.waiters.values() for event in armed]
                for event in events:
                    event.set()
            await anyio.sleep(1)


def _conninfo() -> str:
    from psycopg.conninfo import make_conninfo

    db = settings.DATABASES["default"]
    params = {"dbname": db.get("NAME"), "user": db.get("USER"), "password": db.get("PASSWORD"),
              "host": db.get("HOST"), "port": str(db.get("PORT") or "")}
    return make_conninfo(**{k: v for k, v in params.items() if v})


WAKEUPS = Wakeups()
