"""gunicorn settings for the web process (``gunicorn -c python:toolops.gunicorn_conf toolops.wsgi``).

Threaded workers (gthread): each process serves ``GUNICORN_THREADS`` requests at once and
borrows PostgreSQL connections from its own psycopg pool (``DB_POOL_MAX_SIZE``, settings.py),
so the database sees at most ``WEB_CONCURRENCY × DB_POOL_MAX_SIZE`` web connections. Keep
``DB_POOL_MAX_SIZE >= GUNICORN_THREADS`` so a request never waits for a connection.

Sizing (bench/load.py prints the server's CPU per request): an API request is CPU-bound —
~2–4 ms of Python against ~1–2 ms waiting on PostgreSQL and Redis — and the GIL keeps one
process to one core, so processes are what scale: about one per core (``WEB_CONCURRENCY``, 2
for the 2-core reference machine; a fixed default, not ``cpu_count()``, so the database's
connection bound stays what the settings say on a large host). Threads cover the waits, and
each one more costs CPU in GIL hand-offs: with 64 clients on 2 cores, 8 threads a process
spent 3.7–3.8 ms of CPU per request and admitted 184–189 proposals/s, 4 threads 3.4 ms and
210/s, 2 threads 3.1 ms and 238/s. 4 is the default because a ``?wait=`` poll sleeps in its
thread for up to ``TOOLOPS_MAX_WAIT_SECONDS``: a deployment whose agents wait a lot raises
``GUNICORN_THREADS``. Idle keep-alive connections wait in gthread's poller, not in a thread,
so ``keepalive`` costs no thread.
"""
import os

from toolops.settings_table import exit_if_invalid, read_environment

# Issue 31: read through the declared settings (toolops/settings_table.py); a bad value stops
# gunicorn before it binds, naming the variable.
exit_if_invalid(os.environ, "gunicorn")
ENV = read_environment(os.environ)

os.environ.setdefault("TOOLOPS_PROCESS_ROLE", "web")  # gunicorn's own lines' role (toolops/logformat.py)
bind = ENV["GUNICORN_BIND"] or f"{ENV['HOST']}:{ENV['PORT']}"
workers = ENV["WEB_CONCURRENCY"]
worker_class = "gthread"
threads = ENV["GUNICORN_THREADS"]
# Connections waiting to be accepted: runserver's 10 reset bursts of concurrent clients.
backlog = ENV["GUNICORN_BACKLOG"]
# Above the longest legitimate request (?wait= is capped at TOOLOPS_MAX_WAIT_SECONDS, 30 s).
timeout = ENV["GUNICORN_TIMEOUT"]
graceful_timeout = 30
keepalive = 5
# Recycle workers now and then (jittered so they do not restart together).
max_requests = ENV["GUNICORN_MAX_REQUESTS"]
max_requests_jitter = max_requests // 10
accesslog = ENV["GUNICORN_ACCESSLOG"] or None
errorlog = "-"
if ENV["TOOLOPS_LOG_FORMAT"] == "json":  # gunicorn's own lines as JSON too (its handlers use "generic")
    logconfig_dict = {
        "formatters": {"generic": {"()": "toolops.logformat.JsonFormatter"}},
        # Not also through the root handler Django installs in each worker: once per line.
        "loggers": {name: {"level": "INFO", "handlers": [handler], "propagate": False}
                    for name, handler in (("gunicorn.error", "error_console"), ("gunicorn.access", "console"))},
    }
# The proxy in front sets X-Forwarded-*; Django trusts them only via SECURE_PROXY_SSL_HEADER.
forwarded_allow_ips = ENV["FORWARDED_ALLOW_IPS"]
# gunicorn's runtime control socket defaults to one path per user (~/.gunicorn/gunicorn.ctl):
# several servers on one host (tests, benches, instances) would take it from each other.
# Off unless a path is given.
control_socket_disable = not ENV["GUNICORN_CONTROL_SOCKET"]
if not control_socket_disable:
    control_socket = ENV["GUNICORN_CONTROL_SOCKET"]


def child_exit(server, worker):
    """Issue 31: a worker's metric files stay (its counts still add up in /metrics); this marks
    it dead for prometheus-client's live gauges (toolops/metrics.py)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
