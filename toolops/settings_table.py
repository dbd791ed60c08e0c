"""Every setting ToolOps reads from its environment, declared once: name, kind, default, meaning.

``toolops/settings.py`` and ``toolops/gunicorn_conf.py`` read their environment only through
``read_environment`` (so a value is parsed the way the table says, or the process does not
start), ``manage.py check`` runs the same validation (``toolops/checks.py``), and the settings
reference page is generated from this table (``docs/gen/settings_source.py``). Pure Python: no
Django, so gunicorn's configuration and the docs read it without setting Django up.

A malformed value stops the process at start-up with one message naming every bad variable —
never a 500 at run time. A secret's value is never repeated in that message.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from toolops.decisions.egress import openers_from_allowlist


class SettingsInvalid(ValueError):
    """One or more environment variables hold a value the table refuses; ``errors`` maps each name
    to why."""

    def __init__(self, errors: dict[str, str]):
        self.errors = errors
        super().__init__("invalid settings in the environment: " + "; ".join(errors.values()))


@dataclass(frozen=True)
class Kind:
    """How a raw environment string becomes a value: ``parse`` raises ValueError with a reason."""

    label: str  # a word for the reader of the reference page
    parse: Callable[[str], Any]


def _integer(minimum: int | None = None) -> Kind:
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError("not an integer") from None
        if minimum is not None and value < minimum:
            raise ValueError(f"must be {minimum} or more")
        return value
    return Kind("integer" if minimum is None else f"integer ≥ {minimum}", parse)


def _boolean(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ValueError("not a boolean (use 1/0, true/false)")


def _choice(*options: str, fold=str.lower) -> Kind:
    def parse(raw: str) -> str:
        value = fold(raw.strip())
        if value not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return value
    return Kind(" | ".join(options), parse)


def _url(*schemes: str) -> Kind:
    def parse(raw: str) -> str:
        parts = urlsplit(raw.strip())
        if parts.scheme not in schemes or not (parts.netloc or parts.scheme in ("unix", "filesystem", "memory")):
            raise ValueError(f"not a {'/'.join(schemes)} URL")
        try:
            parts.port  # noqa: B018 - a non-numeric port raises here
        except ValueError:
            raise ValueError("its port is not a number") from None
        return raw.strip()
    return Kind(f"URL ({', '.join(schemes)})", parse)


def _comma_list(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


def _allowlist(raw: str) -> list[str]:
    """``IP:PORT`` entries (``[v6]:PORT``); a host name, a URL or a bad port is refused."""
    entries = _comma_list(raw)
    openers_from_allowlist(entries)  # raises ValueError naming the entry
    return entries


def _json_object(raw: str) -> dict:
    try:
        value = json.loads(raw)
    except ValueError:
        raise ValueError("not JSON (give a JSON object)") from None
    if not isinstance(value, dict):
        raise ValueError("must be a JSON object")
    return value


RATE_PERIODS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600,
                "d": 86400, "day": 86400}


def parse_rate(rate: str) -> tuple[int, int] | None:
    """``"<n>/<period>"`` → (requests, seconds per window); ``off`` (or empty) → None."""
    if rate.strip() in ("", "off"):
        return None
    count, _, period = rate.strip().partition("/")
    if not count.isdigit() or int(count) < 1 or period not in RATE_PERIODS:
        raise ValueError("use <n>/<s|min|hour|day> (n ≥ 1) or off")
    return int(count), RATE_PERIODS[period]


def _rate(raw: str) -> str:
    parse_rate(raw)
    return raw.strip()


def _prepare_threshold(raw: str) -> int | None:
    if raw.strip().lower() in ("off", "none"):
        return None
    return _integer(0).parse(raw)


def _currency(raw: str) -> str:
    code = raw.strip().upper()
    if not re.fullmatch(r"[A-Z]{3}", code):
        raise ValueError("not an ISO 4217 currency code (three letters)")
    return code


def _proxy_ssl_header(raw: str) -> tuple[str, str] | None:
    name, _, value = raw.partition(",")
    if not name.startswith("HTTP_") or not value:
        raise ValueError("must look like 'HTTP_X_FORWARDED_PROTO,https'")
    return name, value


def _database_url(raw: str) -> str:
    import dj_database_url  # a plain-Python parser; imported here so the table imports with stdlib alone

    try:
        dj_database_url.parse(raw)
    except ValueError as exc:
        raise ValueError(f"not a usable database URL ({exc})") from None
    return raw


def _bind(raw: str) -> str:
    host, _, port = raw.rpartition(":")
    if not (raw.startswith("unix:") or (host and port.isdigit() and 0 < int(port) < 65536)):
        raise ValueError("give HOST:PORT or unix:PATH")
    return raw


def _port(raw: str) -> int:
    value = _integer(1).parse(raw)
    if value > 65535:
        raise ValueError("not a TCP port (1–65535)")
    return value


INTEGER, SECONDS, COUNT = _integer(), _integer(0), _integer(1)
BOOLEAN = Kind("boolean", _boolean)
STRING = Kind("string", str.strip)
LIST = Kind("comma-separated list", _comma_list)
HTTP_URL = _url("http", "https")
REDIS_URL_KIND = _url("redis", "rediss", "unix")
LOG_LEVEL = _choice("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", fold=str.upper)
# Every process ToolOps runs names itself in its log lines (set by each launcher).
PROCESS_ROLES = ("web", "worker", "beat", "mcp", "demo", "console", "cli")


@dataclass(frozen=True)
class Setting:
    name: str
    kind: Kind
    default: str | None  # written as in the environment; None: unset (settings.py says what then)
    meaning: str
    shown_default: str | None = None  # the reference page's default when it is not `default` itself
    secret: bool = False  # the value is never repeated in an error
    empty_is_unset: bool = True  # False: an empty value means "none" (GUNICORN_ACCESSLOG=)

    def parse(self, raw: str | None) -> Any:
        if raw is None or (raw == "" and self.empty_is_unset):
            return None if self.default is None else self.kind.parse(self.default)
        return self.kind.parse(raw)

    @property
    def default_text(self) -> str:
        if self.shown_default is not None:
            return self.shown_default
        return "unset" if self.default is None else (self.default or "empty")


def _s(name, kind, default, meaning, **extra) -> Setting:
    return Setting(name, kind, default, meaning, **extra)


SETTINGS: tuple[Setting, ...] = (
    # --- Django and security
    _s("SECRET_KEY", STRING, None, "Django's signing key (sessions, decision links). 50+ random characters in "
       "production.", shown_default="generated once into var/secret_key", secret=True),
    _s("DEBUG", BOOLEAN, "0", "Django's debug mode: never on in production."),
    _s("ALLOWED_HOSTS", LIST, "localhost,127.0.0.1,[::1],testserver", "Host names the web process answers for "
       "(list the MCP server's host too)."),
    _s("CSRF_TRUSTED_ORIGINS", LIST, "", "Origins (`https://host`) trusted for the console's forms behind a proxy."),
    _s("SECURE_SSL_REDIRECT", BOOLEAN, "0", "Redirect plain HTTP to HTTPS."),
    _s("SECURE_HSTS_SECONDS", SECONDS, "0", "`Strict-Transport-Security` max-age in seconds (0: no header)."),
    _s("SECURE_HSTS_INCLUDE_SUBDOMAINS", BOOLEAN, "0", "HSTS `includeSubDomains`."),
    _s("SECURE_HSTS_PRELOAD", BOOLEAN, "0", "HSTS `preload`."),
    _s("SESSION_COOKIE_SECURE", BOOLEAN, "0", "Send the session cookie over HTTPS only."),
    _s("CSRF_COOKIE_SECURE", BOOLEAN, "0", "Send the CSRF cookie over HTTPS only."),
    _s("SECURE_PROXY_SSL_HEADER", Kind("header,value", _proxy_ssl_header), None, "Trust this header as 'the request "
       "was HTTPS' (`HTTP_X_FORWARDED_PROTO,https`), only behind a proxy that overwrites it."),
    _s("USE_X_FORWARDED_HOST", BOOLEAN, "0", "Take the host from the proxy's `X-Forwarded-Host`."),
    _s("WHITENOISE_USE_FINDERS", BOOLEAN, None, "Serve static files from the apps instead of `collectstatic`'s "
       "output.", shown_default="1 until collectstatic has run"),
    _s("LOGIN_FAILURES_MAX", COUNT, "10", "Console login: failed attempts allowed per client address and per "
       "username within `LOGIN_FAILURES_WINDOW`."),
    _s("LOGIN_FAILURES_WINDOW", COUNT, "900", "Seconds over which login failures are counted."),
    # --- Storage, database and broker
    _s("TOOLOPS_VAR_DIR", STRING, None, "Directory for the embedded database, broker, generated keys and static "
       "files.", shown_default="var/ in the checkout"),
    _s("DATABASE_URL", Kind("database URL", _database_url), None, "The database (`postgres://user@host:5432/db` in "
       "production).", shown_default="sqlite:///var/toolops.sqlite3", secret=True),
    _s("DB_POOL", BOOLEAN, "1", "PostgreSQL only: web processes borrow connections from a psycopg pool."),
    _s("DB_POOL_MIN_SIZE", COUNT, "2", "Connections a web process's pool keeps open."),
    _s("DB_POOL_MAX_SIZE", COUNT, "8", "Most connections per web process (keep ≥ `GUNICORN_THREADS`)."),
    _s("DB_POOL_TIMEOUT", COUNT, "10", "Seconds a request waits for a pooled connection before a 503."),
    _s("CONN_MAX_AGE", SECONDS, "600", "Seconds an unpooled connection (workers; web with `DB_POOL=0`) is kept."),
    _s("DB_PREPARE_THRESHOLD", Kind("integer or off", _prepare_threshold), "5", "psycopg's prepare threshold; `off` "
       "for a pooler that cannot keep prepared statements (PgBouncer in transaction mode before 1.21)."),
    _s("REDIS_URL", REDIS_URL_KIND, None, "Redis for the grant-limit counters, rate limits and login-failure "
       "counts, and the broker when `CELERY_BROKER_URL` is unset.", shown_default="unset: a file cache under "
       "var/cache", secret=True),
    _s("CELERY_BROKER_URL", _url("redis", "rediss", "amqp", "amqps", "filesystem", "memory"), None, "Celery's "
       "broker.", shown_default="$REDIS_URL, else filesystem:// under var/broker", secret=True),
    _s("TOOLOPS_QUEUE", STRING, "toolops", "The Celery queue name of this deployment."),
    # --- Logs
    _s("LOG_LEVEL", LOG_LEVEL, "INFO", "Level of the root logger in every process."),
    _s("TOOLOPS_LOG_FORMAT", _choice("text", "json"), "text", "`json`: one JSON object per line (timestamp, level, "
       "logger, message, process role, trace and span ids, invocation id) for a log collector; `text`: one "
       "readable line."),
    _s("TOOLOPS_PROCESS_ROLE", _choice(*PROCESS_ROLES), None, "The process's role in its log lines; each "
       "launcher (Procfile, `make run`) sets it.", shown_default="unset: cli"),
    # --- Admission and the agent API
    _s("TOOLOPS_API_RATE", Kind("rate", _rate), "6000/min", "Requests per API or personal token per window "
       "(`<n>/<s|min|hour|day>`, or `off`), one count across the agent API, the Approvals API and the MCP front "
       "door; over it `429 rate_limited`."),
    _s("TOOLOPS_TOKEN_CACHE_SECONDS", SECONDS, "5", "Seconds a web process remembers a verified API token; a "
       "revocation elsewhere takes effect within this time (0: read every time)."),
    _s("TOOLOPS_PARSER_MAX_BYTES", COUNT, "1048576", "Largest arguments the strict parser accepts, in bytes."),
    _s("TOOLOPS_PARSER_MAX_DEPTH", COUNT, "64", "Deepest nesting the strict parser accepts."),
    _s("TOOLOPS_MAX_WAIT_SECONDS", SECONDS, "30", "Cap on a request's `?wait=`."),
    _s("TOOLOPS_MAX_TOOL_CALLS_PER_REQUEST", COUNT, "64", "OpenAI `tool_calls` in one proposals POST; more → "
       "`413 too_many_tool_calls`."),
    _s("TOOLOPS_OUTAGE_RETRY_AFTER", COUNT, "5", "`Retry-After` seconds on a `503 service_unavailable`."),
    _s("TOOLOPS_LEGACY_AMOUNT_CURRENCY", Kind("currency code", _currency), "EUR", "Currency of grant amount limits "
       "and approval-policy thresholds saved before they named one."),
    # --- Execution, outbox and retention
    _s("TOOLOPS_SWEEP_SECONDS", COUNT, "10", "A ready call unclaimed this long gets its execution message again."),
    _s("TOOLOPS_SWEEP_BATCH", COUNT, "500", "Most calls one outbox sweep re-sends."),
    _s("TOOLOPS_BINARY_RETENTION_SECONDS", COUNT, "86400", "Seconds a binary result's bytes are kept and served."),
    _s("TOOLOPS_BINARY_PURGE_SECONDS", COUNT, "300", "How often the beat purges expired binary results."),
    _s("TOOLOPS_BINARY_PURGE_BATCH", COUNT, "500", "Rows per purge transaction."),
    _s("TOOLOPS_TOOL_SECRETS", Kind("JSON object", _json_object), None, "Credentials executors send to tools "
       "(`\"secret:NAME\"` in a ToolSpec); never shown to models, events or logs.",
       shown_default="demo values generated into var/tool_secrets.json", secret=True),
    _s("TOOLOPS_REMOTE_KEY_SECRET", STRING, "", "HMAC key of the idempotency keys sent to remotes.",
       shown_default="derived from SECRET_KEY", secret=True),
    _s("TOOLOPS_EGRESS_ALLOW", Kind("IP:PORT list", _allowlist), "", "Private or loopback `IP:PORT` "
       "(`[v6]:PORT`) that ToolSpec endpoints and imported MCP upstreams may reach; a host name is refused."),
    _s("TOOLOPS_WEBHOOK_EGRESS_ALLOW", Kind("IP:PORT list", _allowlist), "", "The same for webhook receivers, a "
       "list of its own."),
    _s("TOOLOPS_WEBHOOK_MAX_ATTEMPTS", COUNT, "8", "Attempts per webhook delivery."),
    _s("TOOLOPS_WEBHOOK_BACKOFF_SECONDS", COUNT, "10", "First webhook retry's delay (doubling, capped at an hour)."),
    _s("TOOLOPS_WEBHOOK_TIMEOUT_SECONDS", COUNT, "10", "One webhook attempt's deadline in seconds."),
    _s("TOOLOPS_NOTIFY_BY_EMAIL", BOOLEAN, "0", "Escalations also mail the group's members (needs Django's "
       "`EMAIL_*` settings)."),
    _s("TOOLOPS_UPSTREAM_REFRESH_SECONDS", COUNT, "60", "How often the beat compares imported MCP tools with their "
       "upstream (a change quarantines the ToolSpec)."),
    _s("TOOLOPS_UPSTREAM_PIN_RECHECK_SECONDS", SECONDS, "5", "An imported tool's executor re-lists the upstream "
       "before a call unless it saw the pin match within this many seconds."),
    # --- MCP front door and console URLs
    _s("TOOLOPS_MCP_URL", HTTP_URL, "http://127.0.0.1:8001/mcp", "Public URL of the MCP server (its RFC 9728 "
       "resource identifier)."),
    _s("TOOLOPS_CONSOLE_URL", HTTP_URL, "http://127.0.0.1:8000", "Public URL of the console (decision links, "
       "confirmation pages, MCP metadata)."),
    _s("TOOLOPS_MCP_MAX_BODY_BYTES", COUNT, None, "Largest JSON-RPC body the MCP server reads.",
       shown_default="TOOLOPS_PARSER_MAX_BYTES + 65536"),
    _s("TOOLOPS_MCP_WAIT_SECONDS", SECONDS, "30", "How long a `tools/call` waits for a call to settle before "
       "answering \"working\"."),
    _s("TOOLOPS_MCP_TASK_RESULT_WAIT_SECONDS", SECONDS, "60", "How long `tasks/result` waits before asking the "
       "client to poll."),
    _s("TOOLOPS_MCP_DB_THREADS", COUNT, "16", "Threads (each with a database connection) for the MCP server's ORM "
       "calls."),
    _s("TOOLOPS_MCP_RUN_BUDGETS", Kind("JSON object", _json_object), "{}", "Budgets of the runs the MCP front door "
       "opens (as in `POST /api/v1/runs`)."),
    _s("TOOLOPS_MCP_INLINE_READS", BOOLEAN, "1", "Read-only calls needing no confirmation run in the MCP process."),
    _s("TOOLOPS_MCP_INLINE_MAX", COUNT, None, "Most inline reads at once per MCP process.",
       shown_default="TOOLOPS_MCP_DB_THREADS / 2"),
    _s("TOOLOPS_DEMO_SERVICES_URL", HTTP_URL, "http://127.0.0.1:8765", "Where the demo services listen."),
    _s("TOOLOPS_DEMO_NOTES_MCP_URL", HTTP_URL, "http://127.0.0.1:8766/mcp", "Where the demo notes MCP server "
       "listens."),
    # --- The web server (toolops/gunicorn_conf.py)
    _s("GUNICORN_BIND", Kind("HOST:PORT", _bind), None, "Where gunicorn listens.", shown_default="$HOST:$PORT"),
    _s("HOST", STRING, "0.0.0.0", "gunicorn's host when `GUNICORN_BIND` is unset."),
    _s("PORT", Kind("TCP port", _port), "8000", "gunicorn's port when `GUNICORN_BIND` is unset; `make run`'s console "
       "port (the others follow)."),
    _s("WEB_CONCURRENCY", COUNT, "2", "gunicorn worker processes (about one per core)."),
    _s("GUNICORN_THREADS", COUNT, "4", "Threads per gunicorn worker."),
    _s("GUNICORN_BACKLOG", COUNT, "2048", "Connections waiting to be accepted."),
    _s("GUNICORN_TIMEOUT", COUNT, "60", "Seconds before a silent gunicorn worker is restarted."),
    _s("GUNICORN_MAX_REQUESTS", SECONDS, "20000", "Requests before a gunicorn worker is recycled (0: never)."),
    _s("GUNICORN_ACCESSLOG", STRING, "-", "gunicorn's access log (`-`: standard output; empty: none).",
       empty_is_unset=False),
    _s("FORWARDED_ALLOW_IPS", STRING, "127.0.0.1", "Proxies whose `X-Forwarded-*` gunicorn trusts."),
    _s("GUNICORN_CONTROL_SOCKET", STRING, None, "Path of gunicorn's control socket; unset: none."),
    # --- Metrics (docs/how-to/operate.md)
    _s("TOOLOPS_METRICS", BOOLEAN, "1", "Count for `/metrics` (prometheus-client, multiprocess); `0`: count nothing."),
    _s("TOOLOPS_METRICS_DIR", STRING, None, "Directory every process writes its metric files to (one per "
       "deployment host; empty it when the whole deployment restarts).", shown_default="var/metrics"),
    _s("PROMETHEUS_MULTIPROC_DIR", STRING, None, "prometheus-client's own name for the same directory; wins over "
       "`TOOLOPS_METRICS_DIR`.", shown_default="$TOOLOPS_METRICS_DIR"),
    _s("TOOLOPS_METRICS_TOKEN", STRING, "", "`GET /metrics` answers only `Authorization: Bearer <this>`; unset: "
       "`/metrics` is a 404.", secret=True),
    # --- OAuth 2.1 for MCP clients (docs/reference/oauth.md)
    _s("TOOLOPS_OAUTH_RESOURCES", LIST, "", "Resources (RFC 8707) a token may be bound to.",
       shown_default="$TOOLOPS_MCP_URL"),
    _s("TOOLOPS_OAUTH_REGISTER_RATE", Kind("rate", _rate), "30/hour", "Dynamic client registrations per client "
       "address per window (`<n>/<s|min|hour|day>`)."),
    _s("TOOLOPS_OAUTH_ACCESS_TOKEN_SECONDS", COUNT, "900", "Lifetime of an OAuth access token, in seconds."),
    _s("TOOLOPS_OAUTH_REFRESH_TOKEN_SECONDS", COUNT, "2592000", "Lifetime of an OAuth refresh token, in seconds "
       "(rotated at each use)."),
    # --- Tracing (the OpenTelemetry SDK reads these standard variables too)
    _s("OTEL_EXPORTER_OTLP_ENDPOINT", HTTP_URL, None, "OTLP/HTTP collector for the spans; unset: no export."),
    _s("OTEL_SERVICE_NAME", STRING, "toolops", "`service.name` of the exported spans."),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


def problems(environ: Mapping[str, str]) -> dict[str, str]:
    """Each declared variable whose value in ``environ`` is refused, with a message naming it."""
    errors: dict[str, str] = {}
    for setting in SETTINGS:
        raw = environ.get(setting.name)
        try:
            setting.parse(raw)
        except ValueError as exc:
            shown = "(value hidden: a secret)" if setting.secret else repr(raw)
            errors[setting.name] = f"{setting.name}={shown}: {exc}"
    return errors


def read_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    """Every declared setting's value (its default when unset); SettingsInvalid naming every bad one."""
    errors = problems(environ)
    if errors:
        raise SettingsInvalid(errors)
    return {s.name: s.parse(environ.get(s.name)) for s in SETTINGS}


def exit_if_invalid(environ: Mapping[str, str], program: str) -> None:
    """At a process's entry point (manage.py, the WSGI/ASGI apps, Celery): a bad variable ends the
    process with exit status 1 and one line per variable, instead of a traceback or a later 500."""
    errors = problems(environ)
    if errors:
        lines = "\n".join(f"  {message}" for message in errors.values())
        raise SystemExit(f"{program}: refusing to start, invalid settings in the environment "
                         f"(docs/generated/settings.md):\n{lines}")
