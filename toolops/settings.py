"""ToolOps settings: every knob comes from the environment, with embedded defaults.

Defaults give a self-contained console (SQLite file, a filesystem Celery broker under
``var/``). Production sets ``DATABASE_URL`` (PostgreSQL) and ``CELERY_BROKER_URL`` /
``REDIS_URL`` (Redis). A malformed value fails at start-up, loudly, instead of being guessed.
"""
from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import dj_database_url
from csp.constants import NONCE, NONE, SELF, UNSAFE_INLINE
from django.core.exceptions import ImproperlyConfigured

from agent_api.openapi import SCHEMAS as OPENAPI_SCHEMAS
from toolops.settings_table import SettingsInvalid, read_environment

# Issue 31: every variable below is declared once in toolops/settings_table.py (kind, default,
# meaning) and read here through it: a malformed value stops the process now, naming it.
try:
    ENV = read_environment(os.environ)
except SettingsInvalid as exc:
    raise ImproperlyConfigured(str(exc)) from None

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(ENV["TOOLOPS_VAR_DIR"] or BASE_DIR / "var")
VAR_DIR.mkdir(parents=True, exist_ok=True)


def _secret_key() -> str:
    """SECRET_KEY from the environment, else one generated once and kept in var/ (not in git)."""
    if ENV["SECRET_KEY"]:
        return ENV["SECRET_KEY"]
    path = VAR_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = ENV["DEBUG"]
ALLOWED_HOSTS = ENV["ALLOWED_HOSTS"]
CSRF_TRUSTED_ORIGINS = ENV["CSRF_TRUSTED_ORIGINS"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Redoc/Swagger assets served from our own static files, no CDN
    "csp",
    "guardian",
    "specs_app",
    "invocations_app",
    # Rooms with management commands, Celery tasks or signal receivers (docs/architecture.md).
    "worker",
    "webhooks",
    "audit",
    "devtools",
    # Issue 33: the OAuth 2.1 authorization server of the MCP front door (oauth/).
    "oauth2_provider",
    "oauth",
]

MIDDLEWARE = [
    "toolops.middleware.ProbeMiddleware",  # issue 31: /healthz, /readyz before any redirect or host check
    "toolops.middleware.RequestMetricsMiddleware",  # issue 31: request durations for /metrics
    "django.middleware.security.SecurityMiddleware",
    # Static files straight from the WSGI server (gunicorn), compressed and cached; no proxy needed.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "toolops.middleware.TraceContextMiddleware",
    # Every /api/ answer is JSON: unknown paths, outages (503), oversized bodies, crashes.
    "toolops.middleware.ApiProblemMiddleware",
    # A NUL in a page's query string (`?tenant=%00`): 400, before a view hands it to PostgreSQL.
    "toolops.middleware.NulQueryMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
]

ROOT_URLCONF = "toolops.urls"
WSGI_APPLICATION = "toolops.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------
DATABASE_URL = ENV["DATABASE_URL"] or f"sqlite:///{VAR_DIR / 'toolops.sqlite3'}"
_IS_POSTGRES = DATABASE_URL.split(":", 1)[0] in ("postgres", "postgresql", "pgsql", "postgis")
# Web processes on PostgreSQL borrow connections from Django's psycopg pool, bounded per
# process (threads beyond max_size wait up to DB_POOL_TIMEOUT, then get a 503): the database
# sees at most processes × DB_POOL_MAX_SIZE backends, whatever the load. Django requires
# CONN_MAX_AGE=0 with a pool (a connection goes back to the pool after each request).
# Celery workers keep one persistent connection per process instead (toolops/celery.py drops
# the pool there): UNPOOLED_CONN_MAX_AGE seconds, health-checked before each task.
DB_POOL = _IS_POSTGRES and ENV["DB_POOL"]
DB_POOL_OPTIONS = {"min_size": ENV["DB_POOL_MIN_SIZE"], "max_size": ENV["DB_POOL_MAX_SIZE"],
                   "timeout": ENV["DB_POOL_TIMEOUT"]}
# Where no pool is used (workers; web with DB_POOL=0): seconds a connection is kept.
UNPOOLED_CONN_MAX_AGE = ENV["CONN_MAX_AGE"]
if DB_POOL and not 1 <= DB_POOL_OPTIONS["min_size"] <= DB_POOL_OPTIONS["max_size"]:
    raise ImproperlyConfigured("DB_POOL_MIN_SIZE must be >= 1 and <= DB_POOL_MAX_SIZE")
try:
    # Without a pool, persistent connections: a fresh PostgreSQL connection per request/task
    # costs ~4 ms of server CPU (docs/explanation/benchmarks.md); health checks drop dead ones transparently.
    DATABASES = {
        "default": dj_database_url.parse(
            DATABASE_URL, conn_max_age=0 if DB_POOL else UNPOOLED_CONN_MAX_AGE, conn_health_checks=True
        )
    }
except ValueError as exc:
    raise ImproperlyConfigured(f"DATABASE_URL is not a usable database URL: {exc}") from None
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL + a busy timeout let the web process and the embedded worker share the file.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 20, "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
         "transaction_mode": "IMMEDIATE"}
    )
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Django's cursors bind on the client and never prepare; toolops.sql sends its hot
    # INSERT/UPDATE lists as prepared statements, which psycopg allows only when a threshold
    # is set. DB_PREPARE_THRESHOLD=off for a pooler that cannot keep prepared statements
    # (PgBouncer in transaction mode before 1.21): the same SQL then runs unprepared.
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = ENV["DB_PREPARE_THRESHOLD"]
    if DB_POOL:
        DATABASES["default"]["OPTIONS"]["pool"] = dict(DB_POOL_OPTIONS)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Covering (INCLUDE) indexes are a PostgreSQL optimisation; SQLite simply builds the key part.
SILENCED_SYSTEM_CHECKS = [
    "models.W040",
    # Issue 33: the toolkit warns that http redirect URIs are allowed at all; oauth.registration
    # allows them only on loopback hosts (RFC 8252 desktop clients), https everywhere else.
    "oauth2_provider.W008",
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "guardian.backends.ObjectPermissionBackend",
]
ANONYMOUS_USER_NAME = None  # guardian: no anonymous-user row; anonymous users hold nothing

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)
MEDIA_ROOT = VAR_DIR / "media"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # collectstatic writes gzip/brotli siblings; whitenoise serves them with far-future caching.
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Before collectstatic has run (tests, runserver --dev) whitenoise finds files in the apps.
WHITENOISE_USE_FINDERS = (not (STATIC_ROOT / "admin").is_dir() if ENV["WHITENOISE_USE_FINDERS"] is None
                          else ENV["WHITENOISE_USE_FINDERS"])

LOGIN_URL = "admin:login"
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False

# --- Deployment behind a TLS proxy (all off by default: `make run` is plain HTTP) ----------
# docs/how-to/deploy.md lists the values `check --deploy` wants.
SECURE_SSL_REDIRECT = ENV["SECURE_SSL_REDIRECT"]
SECURE_HSTS_SECONDS = ENV["SECURE_HSTS_SECONDS"]
SECURE_HSTS_INCLUDE_SUBDOMAINS = ENV["SECURE_HSTS_INCLUDE_SUBDOMAINS"]
SECURE_HSTS_PRELOAD = ENV["SECURE_HSTS_PRELOAD"]
SESSION_COOKIE_SECURE = ENV["SESSION_COOKIE_SECURE"]
CSRF_COOKIE_SECURE = ENV["CSRF_COOKIE_SECURE"]
# Trust X-Forwarded-Proto only when a proxy that overwrites it sits in front (value: the header's
# WSGI name and the value meaning https, e.g. "HTTP_X_FORWARDED_PROTO,https").
if ENV["SECURE_PROXY_SSL_HEADER"]:
    SECURE_PROXY_SSL_HEADER = ENV["SECURE_PROXY_SSL_HEADER"]
USE_X_FORWARDED_HOST = ENV["USE_X_FORWARDED_HOST"]
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

# Content-Security-Policy (django-csp 4): scripts only from our origin or with the per-response
# nonce the console templates put on their few inline <script>s; inline style attributes are
# allowed (the dashboard's bar widths and colours), nothing is framed, nothing posts elsewhere.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF, NONCE],
        "style-src": [SELF, UNSAFE_INLINE],
        "img-src": [SELF, "data:"],
        "worker-src": [SELF],
        "connect-src": [SELF],
        "font-src": [SELF, "data:"],
        "object-src": [NONE],
        "base-uri": [NONE],
        "frame-ancestors": [NONE],
        "form-action": [SELF],
    },
}

# --- Shared cache: throttles and login attempts, one count across every web process --------
CACHES = {
    # Per process (the dashboard's 15 s payload, see control/dashboard.py).
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "shared": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": ENV["REDIS_URL"],
         "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1}}
        if ENV["REDIS_URL"]
        else {"BACKEND": "django.core.cache.backends.filebased.FileBasedCache", "LOCATION": str(VAR_DIR / "cache")}
    ),
}
# Admin login: at most LOGIN_FAILURES_MAX failed attempts per client address and per username
# within LOGIN_FAILURES_WINDOW seconds; further attempts are refused until the window passes.
LOGIN_FAILURES_MAX = ENV["LOGIN_FAILURES_MAX"]
LOGIN_FAILURES_WINDOW = ENV["LOGIN_FAILURES_WINDOW"]

# --- REST API -------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["agent_api.auth.BearerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["agent_api.parsers.DepthLimitedJSONParser"],
    "EXCEPTION_HANDLER": "agent_api.errors.problem_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": None,
    # Per API token (toolops/throttling.py, TOOLOPS_API_RATE): over it → 429 `rate_limited`.
    "DEFAULT_THROTTLE_CLASSES": ["toolops.throttling.TokenRateThrottle"],
    "UNAUTHENTICATED_USER": None,
    # `?format=` belongs to the API (openai|anthropic|mcp), not to renderer negotiation.
    "URL_FORMAT_OVERRIDE": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "ToolOps API",
    "DESCRIPTION": "The execution boundary for LLM tool calls: proposals in, audited invocations out.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # No badge image from validator.swagger.io: the docs load nothing from outside.
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {"ModelFormatEnum": "toolops.model_io.rendering.FORMATS",
                            "InvocationErrorCodeEnum": "toolops.error_codes.INVOCATION_CHOICES",
                            "ConfirmationStateEnum": "control.approvals_api.STATES",
                            # Tool-message blocks each have a `type` of their own choices: named, not hashed.
                            "FunctionTypeEnum": [("function", "function")],
                            "TextBlockTypeEnum": [("text", "text")],
                            "ContentBlockTypeEnum": [("text", "text"), ("image", "image")],
                            "ToolResultTypeEnum": [("tool_result", "tool_result")]},
    "APPEND_COMPONENTS": {"schemas": OPENAPI_SCHEMAS},
}

# --- Celery ---------------------------------------------------------------------------
REDIS_URL = ENV["REDIS_URL"] or ""
BROKER_DIR = VAR_DIR / "broker"
CELERY_BROKER_URL = ENV["CELERY_BROKER_URL"] or REDIS_URL or "filesystem://"
if CELERY_BROKER_URL == "filesystem://":
    for sub in ("out", "processed", "control"):
        (BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    # The embedded broker: a directory both the web process and the worker can see.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "out"),
        "data_folder_out": str(BROKER_DIR / "out"),
        "processed_folder": str(BROKER_DIR / "processed"),
        # Exchange tables (kombu's default is ./control, i.e. wherever the process started).
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
    }
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
# One queue name per deployment (tests use their own so stale messages never cross runs).
CELERY_TASK_DEFAULT_QUEUE = ENV["TOOLOPS_QUEUE"]
CELERY_TIMEZONE = "UTC"
# Keep our log format (with trace ids) in workers instead of Celery's own.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# A proposal's arguments may be 1 MiB, sent base64-encoded inside a JSON envelope.
DATA_UPLOAD_MAX_MEMORY_SIZE = 4 * 1024 * 1024

# --- ToolOps --------------------------------------------------------------------------
TOOLOPS_PARSER_MAX_BYTES = ENV["TOOLOPS_PARSER_MAX_BYTES"]
TOOLOPS_PARSER_MAX_DEPTH = ENV["TOOLOPS_PARSER_MAX_DEPTH"]
TOOLOPS_MAX_WAIT_SECONDS = ENV["TOOLOPS_MAX_WAIT_SECONDS"]
# Binary results (docs/concepts/results.md: references with an expiry) are served from their result URL this long;
# then the beat's purge (every TOOLOPS_BINARY_PURGE_SECONDS, 300) drops their bytes, at most
# TOOLOPS_BINARY_PURGE_BATCH rows per transaction, and the URL answers 410 result_expired.
TOOLOPS_BINARY_RETENTION_SECONDS = ENV["TOOLOPS_BINARY_RETENTION_SECONDS"]
TOOLOPS_BINARY_PURGE_BATCH = ENV["TOOLOPS_BINARY_PURGE_BATCH"]
# The currency of grant amount limits and approval-policy thresholds saved before they named one
# (docs/reference/approval-policies.md); new ones must name theirs.
TOOLOPS_LEGACY_AMOUNT_CURRENCY = ENV["TOOLOPS_LEGACY_AMOUNT_CURRENCY"]
# Requests per API token ("<n>/<s|min|hour|day>", or "off"), counted in the shared cache.
TOOLOPS_API_RATE = ENV["TOOLOPS_API_RATE"]
# Seconds a web process remembers a verified live API token (by its SHA-256) instead of reading it
# on every request; a revocation made in another process, or a deactivated subject, takes effect
# within this time (api_token_revoke forgets it in its own process at once). 0: read every time.
TOOLOPS_TOKEN_CACHE_SECONDS = ENV["TOOLOPS_TOKEN_CACHE_SECONDS"]
# One proposals POST may carry at most this many OpenAI tool_calls (more → 413, nothing created).
TOOLOPS_MAX_TOOL_CALLS_PER_REQUEST = ENV["TOOLOPS_MAX_TOOL_CALLS_PER_REQUEST"]
# The outbox sweep (invocations_app/dispatch.py, run by the beat every 2 s): a ready call still
# unclaimed after this many seconds gets its execution message again (the first was never
# published or was lost with the broker), at most once per period; so a lost message costs
# at most about one period. At most TOOLOPS_SWEEP_BATCH calls per sweep.
TOOLOPS_SWEEP_SECONDS = ENV["TOOLOPS_SWEEP_SECONDS"]
TOOLOPS_SWEEP_BATCH = ENV["TOOLOPS_SWEEP_BATCH"]
# Seconds a client is told to wait (Retry-After) when the database or the broker is unavailable.
TOOLOPS_OUTAGE_RETRY_AFTER = ENV["TOOLOPS_OUTAGE_RETRY_AFTER"]

# --- MCP front door (mcp_server/, served by `uvicorn mcp_server.asgi:app`) -----------
# Its public URL: the RFC 9728 resource identifier and what `make run` prints.
TOOLOPS_MCP_URL = ENV["TOOLOPS_MCP_URL"]
# Where people (and OAuth-aware clients) find the console that issues API tokens and decides
# confirmations: the protected-resource metadata's authorization server, and the base of the
# confirmation page a URL-mode elicitation points at.
TOOLOPS_CONSOLE_URL = ENV["TOOLOPS_CONSOLE_URL"].rstrip("/")
# A JSON-RPC body carries arguments of up to TOOLOPS_PARSER_MAX_BYTES plus its envelope.
TOOLOPS_MCP_MAX_BODY_BYTES = ENV["TOOLOPS_MCP_MAX_BODY_BYTES"] or TOOLOPS_PARSER_MAX_BYTES + 64 * 1024
# How long a tools/call waits for an admitted call to settle before answering "working".
TOOLOPS_MCP_WAIT_SECONDS = ENV["TOOLOPS_MCP_WAIT_SECONDS"]
# How long a 2025-11-25 ``tasks/result`` waits for a call to become final before asking the
# client to poll ``tasks/get`` (the wait holds one HTTP request open).
TOOLOPS_MCP_TASK_RESULT_WAIT_SECONDS = ENV["TOOLOPS_MCP_TASK_RESULT_WAIT_SECONDS"]
# Threads for the front door's ORM calls (each holds one database connection).
TOOLOPS_MCP_DB_THREADS = ENV["TOOLOPS_MCP_DB_THREADS"]
# Budgets of the runs the front door opens (a JSON object as in POST /api/v1/runs); none by default.
TOOLOPS_MCP_RUN_BUDGETS = ENV["TOOLOPS_MCP_RUN_BUDGETS"]
# Read-only calls that need no confirmation execute in the MCP process itself (the same
# execution service and record as a worker; see docs/reference/mcp.md), at most
# TOOLOPS_MCP_INLINE_MAX at once per process (the rest go to the workers), so slow remotes
# never hold every database thread.
TOOLOPS_MCP_INLINE_READS = ENV["TOOLOPS_MCP_INLINE_READS"]
TOOLOPS_MCP_INLINE_MAX = ENV["TOOLOPS_MCP_INLINE_MAX"] or max(1, TOOLOPS_MCP_DB_THREADS // 2)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"trace": {"()": "toolops.tracelog.TraceIdFilter"},
                # Tool credentials never reach a log line, in any encoding (toolops/log_redaction.py).
                "secrets": {"()": "toolops.log_redaction.SecretRedactionFilter"},
                "pipeline_echo": {"()": "toolops.sql.PipelineAbortedEcho"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s trace_id=%(trace_id)s span_id=%(span_id)s %(message)s"},
        # Issue 31: TOOLOPS_LOG_FORMAT=json, one JSON object per line (toolops/logformat.py).
        "json": {"()": "toolops.logformat.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["trace", "secrets"],
                             "formatter": "json" if ENV["TOOLOPS_LOG_FORMAT"] == "json" else "plain"}},
    "root": {"handlers": ["console"], "level": ENV["LOG_LEVEL"]},
    # The MCP SDK's HTTP client logs every request line at INFO: noise in worker logs.
    "loggers": {"httpx2": {"level": "WARNING"},
                # A failed pipelined INSERT (a concurrent duplicate) is also logged as its echo.
                "psycopg": {"filters": ["pipeline_echo"]}},
}

CELERY_BEAT_SCHEDULE = {
    # The only place confirmations expire (reads never write); a decision on an overdue one is
    # refused either way (confirmations.refuse_if_overdue), and the queue no longer offers it.
    "expire-confirmations": {"task": "invocations.confirmations_expire_due", "schedule": 10.0},
    # Approval policies' escalation: undecided past escalate_after_seconds → the group is told.
    "escalate-confirmations": {"task": "invocations.confirmations_escalate_due", "schedule": 15.0},
    # Retries live in the database (next_attempt_at); this re-enqueues the due ones, recovers
    # attempts whose lease lapsed and sweeps ready calls whose message never arrived.
    "enqueue-due-executions": {"task": "invocations.enqueue_due", "schedule": 2.0},
    "reconcile-unknown-outcomes": {"task": "invocations.reconcile", "schedule": 5.0},
    # The one budget whose end cancels: calls of a run past its wall clock that still wait.
    "runs-wall-clock": {"task": "invocations.runs_wall_clock", "schedule": 5.0},
    # Imported MCP tools: a changed or vanished upstream definition quarantines its ToolSpec.
    "refresh-upstream-definitions": {"task": "specs.upstream_refresh", "schedule": float(ENV["TOOLOPS_UPSTREAM_REFRESH_SECONDS"])},
    # Webhook retries past the broker's countdown cap, and deliveries whose worker died mid-send.
    "deliver-due-webhooks": {"task": "webhooks.deliver_due", "schedule": 5.0},
    # Binary results past TOOLOPS_BINARY_RETENTION_SECONDS lose their bytes (rows and digests stay).
    "purge-expired-binaries": {"task": "invocations.purge_expired_binaries",
                               "schedule": float(ENV["TOOLOPS_BINARY_PURGE_SECONDS"])},
}
# See worker/tasks.py for why: late acks + redelivery on worker loss, and a
# visibility timeout far above any countdown we hand the broker (<= 60 s).
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
if CELERY_BROKER_URL.startswith("redis"):
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
# Celery's Django fixup closes every database connection before and after each task, or
# every CELERY_DB_REUSE_MAX tasks when set: set out of reach, and toolops/celery.py recycles a
# connection as Django does per request, when broken or older than CONN_MAX_AGE (docs/explanation/benchmarks.md:
# a fresh PostgreSQL connection per task is the difference between ~715 and ~220 tasks/s).
CELERY_DB_REUSE_MAX = 2**62

# Escalations (invocations_app/escalations.py) also mail the group's members; needs Django's
# EMAIL_* settings (SMTP) to be configured for this deployment.
TOOLOPS_NOTIFY_BY_EMAIL = ENV["TOOLOPS_NOTIFY_BY_EMAIL"]

TOOLOPS_DEMO_SERVICES_URL = ENV["TOOLOPS_DEMO_SERVICES_URL"]
# An imported MCP tool's executor lists the upstream and compares the live definition with its
# pin before a call, unless this process saw it match within this many seconds (0: before every
# call). The refresh (TOOLOPS_UPSTREAM_REFRESH_SECONDS) quarantines a change for every process.
TOOLOPS_UPSTREAM_PIN_RECHECK_SECONDS = ENV["TOOLOPS_UPSTREAM_PIN_RECHECK_SECONDS"]


# Egress (docs/concepts/admission.md): private/loopback IP:PORT pairs that endpoints fixed in a ToolSpec may reach
# (nothing is open by default, the demo services and the demo notes MCP server neither: `make run`
# adds both addresses for the processes it starts). A model-supplied URL needs a grant
# naming the address instead. The MCP executor, `mcp_import` and the upstream refresh obey it too.
TOOLOPS_EGRESS_ALLOW = ENV["TOOLOPS_EGRESS_ALLOW"]
# Webhook receivers have their own (webhooks/delivery.py): an address opened for a tool is not
# open to a webhook endpoint's URL, nor the other way round.
TOOLOPS_WEBHOOK_EGRESS_ALLOW = ENV["TOOLOPS_WEBHOOK_EGRESS_ALLOW"]
# The HMAC key for remote idempotency keys (toolops/decisions/remote_keys.py); default: derived
# from SECRET_KEY. Changing it changes the keys new calls send; calls in flight keep theirs.
TOOLOPS_REMOTE_KEY_SECRET = ENV["TOOLOPS_REMOTE_KEY_SECRET"]
# Outgoing webhooks (webhooks/delivery.py): attempts per delivery, the first
# retry's delay (doubling after each failure, capped at an hour) and one attempt's deadline.
TOOLOPS_WEBHOOK_MAX_ATTEMPTS = ENV["TOOLOPS_WEBHOOK_MAX_ATTEMPTS"]
TOOLOPS_WEBHOOK_BACKOFF_SECONDS = ENV["TOOLOPS_WEBHOOK_BACKOFF_SECONDS"]
TOOLOPS_WEBHOOK_TIMEOUT_SECONDS = ENV["TOOLOPS_WEBHOOK_TIMEOUT_SECONDS"]


TOOLOPS_DEMO_NOTES_MCP_URL = ENV["TOOLOPS_DEMO_NOTES_MCP_URL"]


def _tool_secrets() -> dict:
    """Credentials executors send to tools; never in a ToolSpec, an event or a tool message."""
    if ENV["TOOLOPS_TOOL_SECRETS"] is not None:
        return ENV["TOOLOPS_TOOL_SECRETS"]
    path = VAR_DIR / "tool_secrets.json"
    if not path.exists():
        path.write_text(json.dumps({"DEMO_CALENDAR_TOKEN": "demo-cal-" + secrets.token_urlsafe(18),
                                    "NOTES_MCP_TOKEN": "demo-notes-" + secrets.token_urlsafe(18)}))
        path.chmod(0o600)
    return json.loads(path.read_text())


TOOLOPS_TOOL_SECRETS = _tool_secrets()
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")


# --- OAuth 2.1 authorization server for MCP clients (issue 33; oauth/) ----------------
# The resources tokens may be bound to (RFC 8707): the MCP server, unless the operator names more.
TOOLOPS_OAUTH_RESOURCES = ENV["TOOLOPS_OAUTH_RESOURCES"] or [TOOLOPS_MCP_URL]
# Dynamic client registrations per client address (shared cache counters, as the API rate).
TOOLOPS_OAUTH_REGISTER_RATE = ENV["TOOLOPS_OAUTH_REGISTER_RATE"]
# Named because a foreign key to a swappable model depends on its setting (the toolkit's own model).
OAUTH2_PROVIDER_APPLICATION_MODEL = "oauth2_provider.Application"
OAUTH2_PROVIDER = {
    "OAUTH2_VALIDATOR_CLASS": "oauth.validator.ToolOpsValidator",
    "ACCESS_TOKEN_GENERATOR": "oauth.tokens.new_access_token",
    "REFRESH_TOKEN_GENERATOR": "oauth.tokens.new_refresh_token",
    "SCOPES": {"mcp": "Call ToolOps tools over MCP as the agent you choose"},
    "DEFAULT_SCOPES": ["mcp"],
    # Short-lived access tokens; refresh tokens rotate, and a reused one revokes its family.
    "ACCESS_TOKEN_EXPIRE_SECONDS": ENV["TOOLOPS_OAUTH_ACCESS_TOKEN_SECONDS"],
    "REFRESH_TOKEN_EXPIRE_SECONDS": ENV["TOOLOPS_OAUTH_REFRESH_TOKEN_SECONDS"],
    "AUTHORIZATION_CODE_EXPIRE_SECONDS": 60,
    "ROTATE_REFRESH_TOKEN": True,
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    "REQUEST_APPROVAL_PROMPT": "force",  # a person consents each time: the agent is chosen there
    # OAuth 2.1: authorization code with PKCE S256 only; tokens stored as their SHA-256.
    "PKCE_REQUIRED": True,
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
    "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
    "COMPLIANT_BCP_RFC9700_ACCESS_TOKEN_TRANSPORT": True,
    "COMPLIANT_BCP_RFC9700_TOKEN_STORAGE": True,
    "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,  # RFC 9207: the redirect names its issuer
    "OAUTH2_RESPONSE_TYPES_SUPPORTED": ["code"],
    "OAUTH2_GRANT_TYPES_SUPPORTED": ["authorization_code", "refresh_token"],
    "OAUTH2_TOKEN_ENDPOINT_AUTH_METHODS_SUPPORTED": ["none", "client_secret_post", "client_secret_basic"],
    # Desktop clients' loopback redirects on any port (RFC 8252), localhost included.
    "ALLOW_LOCALHOST_LOOPBACK": True,
    "DCR_ENABLED": True,
    "DCR_REGISTRATION_PERMISSION_CLASSES": ("oauth2_provider.dcr.AllowAllDCRPermission",),
    "CIMD_ENABLED": True,
    "CIMD_METADATA_FETCHER": "oauth.registration.EgressMetadataFetcher",
}

# --- Issue 31: metrics (docs/how-to/operate.md) -------------------------------------------
# Every process (gunicorn workers, Celery children, the MCP server) writes its counts to files
# in one directory; a scrape of the web's /metrics sums them (prometheus-client multiprocess).
TOOLOPS_METRICS = ENV["TOOLOPS_METRICS"]
TOOLOPS_METRICS_DIR = Path(ENV["PROMETHEUS_MULTIPROC_DIR"] or ENV["TOOLOPS_METRICS_DIR"] or VAR_DIR / "metrics")
TOOLOPS_METRICS_DIR.mkdir(parents=True, exist_ok=True)
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(TOOLOPS_METRICS_DIR))  # read when prometheus_client is imported
# GET /metrics answers only "Authorization: Bearer <this>"; unset, /metrics is a 404.
TOOLOPS_METRICS_TOKEN = ENV["TOOLOPS_METRICS_TOKEN"]
