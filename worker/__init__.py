"""The worker: what a Celery worker does with a released call — claim it, run an attempt through the
executor of its kind, record the outcome, retry or recover — plus the beat sweeps, imported
MCP servers' sync and support's re-sends. Celery tasks (``tasks``) stay thin: fetch, call, done."""
